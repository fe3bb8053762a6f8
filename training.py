"""
What training needs besides the model: the orders its sequences are read in, and the EMA of its weights.
"""
import torch

ORDER_MODES = ('mixed', 'l2r', 'random', 'fixed_random', 'block_random')


def make_fixed_order(mode, block_size, order_block, generator=None):
    """The one order used for a whole run by 'fixed_random' and 'block_random', else None."""
    if mode == 'fixed_random':
        return torch.randperm(block_size, generator=generator)
    if mode == 'block_random':
        # random within consecutive blocks of order_block tokens, blocks left to right
        key = torch.arange(block_size) // order_block + torch.rand(block_size, generator=generator, dtype=torch.float64)
        return key.argsort()
    return None


def sample_orders(mode, batch_size, seq_len, generator=None, random_ratio=0.9, fixed_order=None):
    """One order (a permutation of 0..seq_len-1) per row, (batch_size, seq_len), on the CPU."""
    identity = torch.arange(seq_len).expand(batch_size, seq_len)
    if mode == 'l2r':
        return identity.clone()
    if mode in ('fixed_random', 'block_random'):
        return fixed_order[:seq_len].expand(batch_size, seq_len).clone()
    # argsort of i.i.d. uniforms is a uniform permutation; float64 makes ties vanishingly rare
    random = torch.rand(batch_size, seq_len, generator=generator, dtype=torch.float64).argsort(dim=1)
    if mode == 'random':
        return random
    if mode != 'mixed':
        raise ValueError(f'unknown order mode {mode!r}, expected one of {ORDER_MODES}')
    l2r_rows = torch.rand(batch_size, 1, generator=generator) >= random_ratio
    return torch.where(l2r_rows, identity, random)


def make_ema(model, decay):
    """EMA with the warm-up rule decay_n = min(decay, (1 + n) / (10 + n)) at the n-th update.

    The average starts from the current weights (update 0 copies them), like the authors' EMA.
    """
    def ema_update(averaged, current, n):
        d = torch.clamp((1.0 + n) / (10.0 + n), max=decay)
        torch._foreach_lerp_(averaged, current, 1.0 - d)

    ema = torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=ema_update)
    ema.update_parameters(model)
    return ema
