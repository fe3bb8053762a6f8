"""
What training needs besides the model: the orders a decoder reads its sequences in, the masks the
encoder sees them through, and the EMA of the weights.
"""
import itertools
import math
from fractions import Fraction

import torch

from aogpt.scoring import chunk_gap, encoder_l2r_logprobs, gap_orders, left_gap_logprobs, order_logprobs
from configurator import fail, parse_number, rank

ORDER_MODES = ('mixed', 'l2r', 'random', 'fixed_random', 'block_random')
# the families a 'mixed' run draws each row's order from, in the order a row's uniform picks them (random first:
# the paper's mix, random_ratio r, is {'random': r, 'l2r': 1 - r} and draws exactly as it always did)
ORDER_FAMILIES = ('random', 'l2r', 'fim')


def paper_mix(random_ratio):
    return {'random': random_ratio, 'l2r': 1 - random_ratio, 'fim': 0.0}


MIX_EXAMPLE = 'l2r:0.1,fim:0.4,random:0.5'


def parse_mix(text, flag='--order_mix'):
    """A mix as {family: share}, e.g. 'l2r:0.1,fim:0.4,random:0.5'; ValueError naming the problem and flag."""
    example = f'e.g. {flag}={MIX_EXAMPLE}' if flag == '--order_mix' else f'a mix is e.g. {MIX_EXAMPLE}'
    mix = {}
    for item in text.split(','):
        family, _, share = item.strip().partition(':')
        if family not in ORDER_FAMILIES:
            raise ValueError(f"{flag}: {family!r} is not an order family (one of {', '.join(ORDER_FAMILIES)}); "
                             f'{example}')
        if family in mix:
            raise ValueError(f'{flag} names {family} twice; {example}')
        try:
            mix[family] = parse_number(share.strip())
        except ValueError as e:
            raise ValueError(f'{flag}: the share of {family} must be a number, got {share!r} ({e}); {example}') from None
        if not 0 <= mix[family] <= 1:  # nan too
            raise ValueError(f'{flag}: the share of {family} must be in [0, 1], got {share}; {example}')
    if abs(sum(mix.values()) - 1) > 1e-6:
        raise ValueError(f'{flag}: the shares must sum to 1, got {sum(mix.values()):g} ({text}); {example}')
    return {family: mix.get(family, 0.0) for family in ORDER_FAMILIES}


STAGES_EXAMPLE = 'l2r:0.5,fim:0.5@0/l2r:0.5,fim:0.5@300/l2r:0.1,fim:0.4,random:0.5@600'


def knot_place(knot, max_iters, example):
    """Where a knot MIX@ITER of --order_stages is written, in iterations (a Fraction: ITER, or ITER% of max_iters);
    ValueError naming the problem, and the character a number cannot hold."""
    _, at, when = knot.rpartition('@')
    reason = ''
    try:
        number = parse_number(when.strip().removesuffix('%'), int) if at else -1
    except ValueError as e:
        number, reason = -1, f': {e}'
    if number < 0:
        raise ValueError(f'--order_stages: {knot!r} is not MIX@ITERATION (an iteration is a whole number, or a whole '
                         f'percentage of max_iters such as 50%){reason}; {example}')
    return Fraction(number * max_iters, 100) if when.strip().endswith('%') else Fraction(number)


def parse_stages(text, max_iters):
    """--order_stages as [(iteration, mix)]: knots MIX@ITER separated by '/', ITER an iteration or a percentage of
    max_iters (e.g. @50%), the first at iteration 0, the iterations never decreasing; ValueError naming the problem.
    A percentage rounds half up, and a knot written after the one before it comes at least one iteration after it, so
    that no stage is skipped at few iterations (two knots at one iteration are a step: the earlier is never used)."""
    example = f'e.g. --order_stages={STAGES_EXAMPLE}'
    stages, before = [], None  # before: the place the previous knot was written at, in iterations (a Fraction)
    for knot in (k.strip() for k in text.split('/')):
        place = knot_place(knot, max_iters, example)
        iteration = math.floor(place + Fraction(1, 2))
        if before is not None and place > before:
            iteration = max(iteration, stages[-1][0] + 1)
            if iteration > max_iters >= math.ceil(place):
                raise ValueError(f'--order_stages: at max_iters={max_iters} the knot {knot!r} has no iteration of its '
                                 f'own after the one before it: train for more iterations, give fewer stages, or '
                                 f'write their iterations (@N)')
        stages.append((iteration, parse_mix(knot.rpartition('@')[0], '--order_stages')))
        before = place
    iterations = [i for i, _ in stages]
    if iterations[0] != 0:
        raise ValueError(f'--order_stages: the first stage must be at iteration 0, got {iterations[0]}; {example}')
    back = next((b for a, b in zip(iterations, iterations[1:]) if b < a), None)
    if back is not None:
        raise ValueError(f'--order_stages: the iterations must not go back, got {back} after a later one; {example}')
    return stages


def mix_stages(mix, curriculum_iters=0):
    """The stages of a fixed mix, reached linearly from all left to right over curriculum_iters (--order_curriculum)."""
    if not curriculum_iters:
        return [(0, mix)]
    return [(0, {family: float(family == 'l2r') for family in ORDER_FAMILIES}), (curriculum_iters, mix)]


def shares_at(stages, iteration):
    """The shares of the order families at an iteration: linear between the stages around it, the last stage's
    after it; of two stages at one iteration, the later holds from there (a step)."""
    before = [(i, mix) for i, mix in stages if i <= iteration][-1]
    after = next(((i, mix) for i, mix in stages if i > iteration), None)
    if after is None:
        return before[1]
    w = (iteration - before[0]) / (after[0] - before[0])
    return {family: (1 - w) * before[1][family] + w * after[1][family] for family in ORDER_FAMILIES}


def run_stages(config):
    """The stages of order families (see parse_stages) a run's settings (train.py's config) trained a decoder on;
    None for one of the other order modes, or the encoder. A checkpoint that records no settings is the authors':
    the paper's mix."""
    if config.get('order', 'mixed') != 'mixed' or config.get('architecture') == 'encoder':
        return None
    if config.get('order_stages'):
        return parse_stages(config['order_stages'], config.get('max_iters', 0))
    mix = parse_mix(config['order_mix']) if config.get('order_mix') else paper_mix(config.get('random_ratio', 0.9))
    return mix_stages(mix, config.get('order_curriculum', 0))


ORDER_FLAGS = ('order_mix', 'order_curriculum', 'order_stages', 'fim_max_span')  # the orders of a mixed run


def dropped_order_flags(config, overridden, is_encoder):
    """The ORDER_FLAGS a config file set for a mixed run that the command line's --order or --architecture makes
    another kind of run (the little-data config's mix, say, with --order=l2r): they do not apply, and train.py drops
    them with a note. A run that is not mixed refuses them where they were typed, or where nothing overrode the file."""
    mixed = config['order'] == 'mixed' and not is_encoder
    given = [k for k in ORDER_FLAGS if k in overridden and config[k]]  # '' and 0 are the defaults: not given
    if mixed or not given:
        return []
    chosen = {'order', 'architecture'} & overridden.flags
    typed = [k for k in given if k in overridden.flags]
    if typed or not chosen:
        if is_encoder:  # its honest equivalent, masks of spans, is not built
            fail(f'the encoder trains on random masks (its NELBO), not on a mix of orders: drop '
                 f'--{(typed or given)[0]}')
        fail(f"--{(typed or given)[0]} sets the orders of a mixed run: add --order=mixed "
             f"(got --order={config['order']})")
    return given


def order_settings(config, overridden, is_encoder):
    """The stages of a mixed run (mixed_stages), once the order settings that do not apply (dropped_order_flags) are
    reset in config to their defaults, with a note."""
    for key in dropped_order_flags(config, overridden, is_encoder):
        config[key] = type(config[key])()
        if rank() == 0:
            print(f"note: --{key} of a config file sets a mixed run's orders, not used by this run: dropped")
    return mixed_stages(config, overridden)


def learning_rate_at(it, learning_rate, warmup_iters, lr_decay_iters, min_lr):
    """The authors' schedule: linear warmup from 0 at the first iteration, then cosine down to min_lr."""
    if it < warmup_iters:
        return learning_rate * it / warmup_iters
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


def check_orders(config, overridden, stages):
    """The order settings of a decoder's mixed run that go together, once its stages are read (order_stages)."""
    if config['order_curriculum'] > config['max_iters']:
        fail(f"--order_curriculum={config['order_curriculum']} is longer than training (--max_iters="
             f"{config['max_iters']}): the mix would never be reached; use at most max_iters")
    if 'fim_max_span' in overridden and stages is not None and not any(mix['fim'] for _, mix in stages):
        fail(f"--fim_max_span sets the spans of FIM orders, but the mix has none: add fim to "
             f"--{'order_stages' if config['order_stages'] else 'order_mix'}, e.g. --order_mix=l2r:0.5,fim:0.5")


def mixed_stages(config, overridden):
    """The stages of a 'mixed' run's order families (parse_stages): --order_stages, or --order_mix (or the paper's two
    from random_ratio) reached over --order_curriculum; None for the other modes. A flag's shares replace a config
    file's; two settings that both give the shares are refused."""
    if config['order'] != 'mixed' or config['architecture'] == 'encoder':
        return None
    from_flags = bool({'order_mix', 'order_stages'} & overridden.flags)
    given = lambda *keys: [k for k in keys if k in overridden and (k in overridden.flags or not from_flags)]
    if config['order_stages']:
        extra = given('order_mix', 'random_ratio', 'order_curriculum')
        if extra:
            fail(f'--order_stages gives the shares of every stage: drop --{extra[0]}')
        try:
            stages = parse_stages(config['order_stages'], config['max_iters'])
        except ValueError as e:
            fail(e)
        if stages[-1][0] > config['max_iters']:
            fail(f"--order_stages reaches its last stage at iteration {stages[-1][0]}, after training ends "
                 f"(--max_iters={config['max_iters']}): end the stages by max_iters")
        return stages
    if not config['order_mix']:
        return mix_stages(paper_mix(config['random_ratio']), config['order_curriculum'])
    if given('random_ratio'):
        ratio = config['random_ratio']
        fail(f"--order_mix={config['order_mix']} and --random_ratio={ratio} both give the shares: drop --random_ratio "
             f"(its mix is random:{ratio:g},l2r:{1 - ratio:g})")
    try:
        return mix_stages(parse_mix(config['order_mix']), config['order_curriculum'])
    except ValueError as e:
        fail(e)


def run_mix(config):
    """The shares of order families a run ended its training on (its last stage); None as run_stages."""
    stages = run_stages(config)
    return None if stages is None else stages[-1][1]


def describe_mix(mix):
    return ', '.join(f'{share:.0%} {family}' for family, share in mix.items() if share)


def describe_orders(config):
    """A run's training orders in words, e.g. '10% l2r, 40% fim, 50% random' (model cards, sample.py)."""
    if config.get('architecture') == 'encoder':
        return 'random masks (the NELBO)'
    if config.get('fim_rate'):
        return f"l2r on windows rearranged at FIM rate {config['fim_rate']:g} (PSM and SPM, half each): a FIM GPT"
    stages = run_stages(config)
    if stages is None:
        return config.get('order', 'mixed')
    span = config.get('fim_max_span', 0)
    spans = f', spans of up to {span} tokens' if any(mix['fim'] for _, mix in stages) and span else ''
    if config.get('order_stages'):
        return 'in stages: ' + '; then '.join(f'{describe_mix(mix)} at iteration {i:,}' for i, mix in stages) + spans
    curriculum = config.get('order_curriculum', 0)
    return describe_mix(stages[-1][1]) + spans + \
        (f', reached linearly from all l2r over {curriculum:,} iterations' if curriculum else '')


def make_fixed_order(mode, block_size, order_block, generator=None):
    """The one order used for a whole run by 'fixed_random' and 'block_random', else None."""
    if mode == 'fixed_random':
        return torch.randperm(block_size, generator=generator)
    if mode == 'block_random':
        # random within consecutive blocks of order_block tokens, blocks left to right
        key = torch.arange(block_size) // order_block + torch.rand(block_size, generator=generator, dtype=torch.float64)
        return key.argsort()
    return None


def fim_orders(batch_size, seq_len, generator=None, max_span=0):
    """Fill-in-the-middle orders, (batch_size, seq_len): a span of uniform length 1..max_span (0: seq_len) at a
    uniform place, read after the rest of the row, each part left to right: how eval_ppl.py --gaps reads a gap."""
    length = torch.randint(1, (max_span or seq_len) + 1, (batch_size, 1), generator=generator)
    start = (torch.rand(batch_size, 1, generator=generator, dtype=torch.float64) * (seq_len - length + 1)).long()
    positions = torch.arange(seq_len)
    in_span = (positions >= start) & (positions < start + length)
    return (positions + seq_len * in_span).argsort(dim=1)  # the rest's keys below the span's, each part in order


def sample_orders(mode, batch_size, seq_len, generator=None, mix=None, fixed_order=None, fim_max_span=0):
    """One order (a permutation of 0..seq_len-1) per row, (batch_size, seq_len), on the CPU. 'mixed' draws each
    row's family by mix ({family: share}; None: the paper's 90% random, 10% left to right)."""
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
    shares = [(mix or paper_mix(0.9)).get(family, 0.0) for family in ORDER_FAMILIES]
    u = torch.rand(batch_size, 1, generator=generator)
    family = sum(u >= edge for edge in itertools.accumulate(shares[:-1]))  # 0 random, 1 l2r, 2 fim
    orders = torch.where(family == 1, identity, random)
    if shares[2] > 0:  # drawn only then, so that a mix without FIM draws as the paper's always did
        orders = torch.where(family == 2, fim_orders(batch_size, seq_len, generator, fim_max_span), orders)
    return orders


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


def hide_inputs(batch_size, seq_len, share, generator=None):
    """Input masking, a regularizer of a GPT trained on repeated data: which tokens (B, T) a training batch hides from
    the decoder's inputs, each with probability `share`. Their targets stay; a hidden token reads as [None]."""
    return torch.rand(batch_size, seq_len, generator=generator) < share


def training_inputs(model, x, mode, generator=None, mix=None, fixed_order=None, mask_eps=1e-3, fim_max_span=0,
                    hide=0.0):
    """The model's arguments for a training batch x (B, T), the new ones on the CPU: a decoder's orders in
    `mode` (sample_orders), and with hide > 0 the inputs it hides (hide_inputs); the encoder's masks and weights:
    its NELBO (sample_masks), or for mode 'l2r' its left-to-right loss at one position per row (l2r_cuts)."""
    B, T = x.shape
    if not model.config.is_encoder:
        orders = sample_orders(mode, B, T, generator, mix, fixed_order, fim_max_span)
        return (x, orders, hide_inputs(B, T, hide, generator)) if hide else (x, orders)
    if mode == 'l2r':
        return x, *l2r_cuts(B, T, generator)
    return x, *sample_masks(B, T, generator, mask_eps)


def mean_loss(model, inputs, ctx, max_logits):
    """The mean loss (a float) of a batch of the model's arguments (B, T) each, from forwards over groups of rows
    whose logits hold at most max_logits entries: an evaluation's memory stays bounded at any vocabulary (16 x 1,024
    rows of GPT-2's 50,304 ids are 3.3 GB in float32). Every row weighs the same, as in one forward."""
    B, T = inputs[0].shape
    rows = max(1, max_logits // (T * model.config.vocab_size))

    def loss_of(group):
        with ctx:
            return model(*group)[1].item()
    if rows >= B:
        return loss_of(inputs)
    return sum(loss_of([t[i:i + rows] for t in inputs]) * len(inputs[0][i:i + rows]) for i in range(0, B, rows)) / B


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


# -----------------------------------------------------------------------------
# what an evaluation during training reads

GAP_SEED = 1337  # eval_ppl.py's default --seed: every run hides the same tokens of the same chunks
GAP_MAX_TOKENS = 32768  # slots per forward of the gap scoring, as eval_ppl.py's default --max_tokens


def val_half(tokens, half):
    """A val split's tokens, or with keep_best one half: 'select' its first (best.pt is chosen there), 'report' its
    second (what is reported, as eval_ppl.py --half=report reads it)."""
    if not half:
        return tokens
    return tokens[:len(tokens) // 2] if half == 'select' else tokens[len(tokens) // 2:]


@torch.no_grad()
def gap_losses(model, chunks, settings, ctx, group, stopped):
    """The val NLL per gap token of each eval_gaps setting given the rest of its chunk, as eval_ppl.py --gaps
    reads it: a decoder's gap after the rest, left to right ('gap l2r'), and from the left side only ('_left', from
    one left-to-right reading of the chunks for every setting); the encoder's gap revealed left to right ('revealed
    l2r'). Read `group` chunks at a time; None as soon as stopped() says so."""
    l2r = None
    if not model.config.is_encoder:
        l2r = left_to_right(model, chunks, ctx, group, stopped)
        if l2r is None:
            return None
    out = {}
    for kind, size in settings:
        gaps = [chunk_gap(x, kind, size, GAP_SEED) for x in chunks]
        both = gap_logprob(model, chunks, gaps, ctx, group, stopped)
        if both is None:
            return None
        name, tokens = f'val_gap_{kind}{size:g}', sum(len(g) for g in gaps)
        out[name] = -both / tokens
        if l2r is not None:
            out[name + '_left'] = -left_gap_logprobs(l2r, gaps).sum().item() / tokens
    return out


def gap_logprob(model, chunks, gaps, ctx, group, stopped):
    """The summed log p of the chunks' gaps given the rest: a decoder's rest read first, then the gap left to right
    (the rows of a group whose gaps are as long in one forward); the encoder's gap revealed left to right. None as
    soon as stopped() says so."""
    n, total = chunks.size(1), 0.0
    for at in range(0, len(chunks), group):
        if stopped():
            return None
        x, gap = chunks[at:at + group], gaps[at:at + group]
        if model.config.is_encoder:
            total += encoder_l2r_logprobs(model, x, GAP_MAX_TOKENS, ctx, gaps=gap)[0].double().sum().item()
            continue
        for L in sorted({len(g) for g in gap}):
            rows = [i for i, g in enumerate(gap) if len(g) == L]
            orders = torch.stack([gap_orders(n, gap[i], 0, 0)[0] for i in rows])
            with ctx:
                total += order_logprobs(model, x[rows], orders, n - L, GAP_MAX_TOKENS).double().sum().item()
    return total


def left_to_right(model, chunks, ctx, group, stopped):
    """log p(x_i | x_<i) of every token of every chunk (N, n) under a decoder, group chunks a forward where they fit
    GAP_MAX_TOKENS; None as soon as stopped() says so."""
    N, n = chunks.shape
    out = []
    for at in range(0, N, group):
        if stopped():
            return None
        x = chunks[at:at + group]
        with ctx:
            out.append(order_logprobs(model, x, torch.arange(n).expand(len(x), -1), 0, GAP_MAX_TOKENS))
    return torch.cat(out)


def describe_losses(losses):
    """An evaluation's readings in one line: the EMA losses, then the gaps and keep_best's selection half."""
    fixed = f" | fixed order train {losses['train_fixed']:.4f} val {losses['val_fixed']:.4f}" \
        if 'val_fixed' in losses else ''
    return (f"EMA loss l2r train {losses['train_l2r']:.4f} val {losses['val_l2r']:.4f} | "
            f"any-order train {losses['train_ao']:.4f} val {losses['val_ao']:.4f}" + fixed +
            ''.join(f" | {key[4:]} {value:.4f}" for key, value in losses.items() if key.startswith('val_gap')) +
            ''.join(f" | {key.replace('_', ' ')} {value:.4f}" for key, value in losses.items()
                    if key.startswith('select')))
