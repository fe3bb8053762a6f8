"""
What training needs besides the model: the orders a decoder reads its sequences in, the masks the
encoder sees them through, and the EMA of the weights.
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


def sample_masks(batch_size, seq_len, generator=None, eps=1e-3):
    """The encoder's NELBO batch: (mask, weights), both (batch_size, seq_len), on the CPU.

    Row b gets a masking level t_b, antithetic over the batch (t_b = (u + b / batch_size) mod 1, one
    uniform u, squeezed into [eps, 1)), and hides each position with probability t_b; weights = 1/t_b,
    so MDM's loss is the continuous-time NELBO of the log-linear schedule (MDLM).
    """
    u = torch.rand(1, generator=generator, dtype=torch.float64)
    t = (u + torch.arange(batch_size, dtype=torch.float64) / batch_size) % 1
    t = (eps + (1 - eps) * t).unsqueeze(1)
    mask = torch.rand(batch_size, seq_len, generator=generator, dtype=torch.float64) < t
    return mask, (1 / t).float().expand(batch_size, seq_len)


def l2r_cuts(batch_size, seq_len, generator=None):
    """The encoder's left-to-right loss, one position per row: (mask, weights) hiding positions i_b..seq_len-1
    of row b (i_b uniform) with weight seq_len at i_b, so MDM's loss is an unbiased estimate of the mean
    -log p(x_i | x_<i)."""
    cut = torch.randint(seq_len, (batch_size, 1), generator=generator)
    positions = torch.arange(seq_len)
    return positions >= cut, torch.where(positions == cut, float(seq_len), 0.0)


def training_inputs(model, x, mode, generator=None, random_ratio=0.9, fixed_order=None, mask_eps=1e-3):
    """The model's arguments for a training batch x (B, T), the new ones on the CPU: a decoder's orders in
    `mode` (sample_orders); the encoder's masks and weights: its NELBO (sample_masks), or for mode 'l2r'
    its left-to-right loss at one position per row (l2r_cuts)."""
    B, T = x.shape
    if not model.config.is_encoder:
        return x, sample_orders(mode, B, T, generator, random_ratio, fixed_order)
    if mode == 'l2r':
        return x, *l2r_cuts(B, T, generator)
    return x, *sample_masks(B, T, generator, mask_eps)


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
