"""
Sample from a trained AO-GPT with a KV cache, in any order, many tokens per step.

    python sample.py --out_dir=out-shakespeare-char                      # random order, one token per step
    python sample.py --out_dir=out-shakespeare-char --order=l2r --start="ROMEO:"
    python sample.py --out_dir=out-shakespeare-char --order=confidence --steps=16
    python sample.py --out_dir=out-shakespeare-char --infill="ROMEO: [MASK:20] my lord, [MASK:20]."

The masked positions are decoded in `steps` steps (`schedule` says how many per step); all the
tokens of a step are sampled independently from the same context, the tokens decoded before it.
order: 'random', 'l2r' (plain autoregressive decoding) or 'confidence' (each step scores every
masked position in one cached pass and decodes the most confident ones, by highest max-probability
or lowest entropy, see `confidence`). start: a prefix (or FILE:path); infill: a template whose
`mask_token` markers are generated ([MASK] is one token, [MASK:5] five) around the known text.
init_from: 'resume' (out_dir/ckpt.pt), the path of a checkpoint (ours or the authors' format), or
a Hugging Face Hub file hf:owner/repo/path. Character-level checkpoints carry their vocabulary.
Tokens are drawn by inverse CDF in float64 (sample_dtype); top_p_mode='authors' is the authors'
top-p (the token that crosses top_p is dropped), and the step sizes truncate as theirs do.
"""
import math
import re

import torch
from tqdm import tqdm

from common import (autocast, check_device, checkpoint_path, default_device, default_dtype, load_tokenizer,
                    read_checkpoint, token_count)
from configurator import check_settings, fail, one_of, optional_int
from model import KVCache, decode_step

# -----------------------------------------------------------------------------
init_from = 'resume'  # 'resume' (out_dir/ckpt.pt), a path, or hf:owner/repo/path
out_dir = 'out-shakespeare-char'
use_ema = True  # the EMA weights, as evaluated during training (the raw ones if there are none)
start = ''  # a prefix, or FILE:path to read it from
infill = ''  # a template such as "The [MASK] sat on the [MASK:5]."; not with start
mask_token = '[MASK]'
max_new_tokens = None  # tokens after start; None fills the block
num_samples = 3
steps = None  # decoding steps; None: one token per step
schedule = 'linear'  # 'linear' or 'cosine'
order = 'random'  # 'random', 'l2r' or 'confidence'
confidence = 'maxprob'  # order=confidence decodes the highest 'maxprob' or the lowest 'entropy' first
temperature = 1.0  # 0: greedy
top_k = None  # sample from the top_k most likely tokens only
top_p = 1.0  # nucleus sampling: the smallest set of tokens with this much probability
top_p_mode = 'nucleus'  # 'nucleus' keeps the token that crosses top_p, 'authors' drops it (their sampler)
sample_dtype = 'float64'  # precision of the sampling probabilities and CDF: 'float64' or 'float32'
seed = 1337
device = default_device()
dtype = default_dtype()
compile = False
# -----------------------------------------------------------------------------
SCHEDULES = ('linear', 'cosine')
ORDERS = ('random', 'l2r', 'confidence')
CONFIDENCES = ('maxprob', 'entropy')
TOP_P_MODES = ('nucleus', 'authors')
SAMPLE_DTYPES = ('float64', 'float32')


def step_sizes(n, steps, schedule='linear'):
    """Tokens decoded at each step, counted as the authors' sampler does: by step i, n_i =
    max(int(n * (1 - t_i)), n_{i-1} + 1) tokens, truncated, with the masking time t going from 1 to 0
    in float32: linspace(1, 0, steps + 1), or cos(pi/2 * (1 - linspace(1, 0, steps + 1))) for cosine."""
    t = torch.linspace(1, 0, steps + 1, dtype=torch.float32)
    if schedule == 'cosine':
        t = torch.cos((1 - t) * math.pi * 0.5)
    reached = (n * (1 - t[1:])).long().tolist()
    reached[-1] = n  # float32 cos(pi/2) is not quite 0; the last step always ends the sample
    sizes, done = [], 0
    for r in reached:
        r = max(r, done + 1)
        sizes.append(r - done)
        done = r
    return sizes


def filter_probs(logits, temperature=1.0, top_k=None, top_p=1.0, top_p_mode='nucleus', dtype=torch.float64):
    """Sampling probabilities in dtype from logits (..., V): temperature, then top_k, then top_p.

    top_p_mode 'nucleus' keeps the smallest set of most likely tokens holding top_p of the mass
    (the token that crosses top_p stays); 'authors' keeps those whose cumulative probability is at
    most top_p (the crossing token goes, the most likely one always stays), as the authors' sampler.
    """
    logits = logits.to(dtype) / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    probs = logits.softmax(-1)
    if top_p < 1.0:
        sorted_probs, index = probs.sort(-1, descending=True)
        cumulative = sorted_probs.cumsum(-1)
        if top_p_mode == 'nucleus':  # drop a token when the more likely ones already hold top_p
            drop = cumulative - sorted_probs >= top_p
        else:
            drop = cumulative > top_p
            drop[..., 0] = False
        probs = torch.zeros_like(probs).scatter(-1, index, sorted_probs.masked_fill(drop, 0.0))
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def inverse_cdf(probs, u):
    """The token drawn by each uniform of u (..., k) in [0, 1) from probs (..., V): (..., k).

    In float64 every token's interval of the CDF is as wide as its probability; in float32 the CDF
    near 1 moves in steps of 6e-8, so tokens below that get an empty interval or a whole step.
    """
    cdf = probs.cumsum(-1)
    u = u.to(cdf.dtype) * cdf[..., -1:]
    return torch.searchsorted(cdf, u, right=True).clamp(max=cdf.size(-1) - 1)


def sample_tokens(logits, temperature, top_k, top_p, generator, top_p_mode='nucleus', dtype=torch.float64):
    """One token per row of logits (..., V), each drawn independently, with the CDF in dtype."""
    if temperature == 0:
        return logits.argmax(-1)
    # inverse CDF, one uniform per draw: much faster than torch.multinomial over a large vocabulary
    probs = filter_probs(logits, temperature, top_k, top_p, top_p_mode, dtype)
    u = torch.rand(probs.shape[:-1] + (1,), generator=generator, device=probs.device, dtype=dtype)
    return inverse_cdf(probs, u).squeeze(-1)


def confidence_scores(logits, kind):
    """Higher is more confident: the max-probability, or minus the entropy, of each prediction."""
    logp = logits.float().log_softmax(-1)
    return logp.max(-1).values.exp() if kind == 'maxprob' else (logp.exp() * logp).sum(-1)


@torch.no_grad()
def generate(model, x, known, steps, schedule='linear', order='random', confidence='maxprob',
             temperature=1.0, top_k=None, top_p=1.0, generator=None, progress=False, on_step=None,
             top_p_mode='nucleus', sample_dtype=torch.float64, n_tokens=None):
    """Fill the unknown positions of x (B, T) in place; return x and the decoding order (B, n).

    known (T,) bool: the given tokens (the same positions in every row). They are read first, left
    to right, in one forward with the first step; then the n unknown positions are decoded in
    `steps` steps. on_step(targets, logits), if given, sees each step's positions (B, k) and logits.
    Tokens are drawn with sample_tokens (temperature, top_k, top_p, top_p_mode, sample_dtype), from
    ids below n_tokens only if given (the ids past it pad the vocabulary table and have no text).
    """
    B, T = x.shape
    masked = (~known).nonzero().squeeze(1).expand(B, -1)
    given = known.nonzero().squeeze(1).expand(B, -1)
    if order == 'random':
        masked = masked.gather(1, torch.rand(masked.shape, generator=generator, device=x.device).argsort(1))
    device_type = x.device.type
    cache_dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) \
        else next(model.parameters()).dtype
    # one slot more than decoding fills: a compiled forward then never sees a full cache, a case of
    # its own that it would compile again for
    cache = KVCache(model.config, B, T + 1, x.device, cache_dtype)
    positions = torch.cat([torch.full((B, 1), -1, device=x.device), given], 1)  # start slot, known tokens
    decoded = []
    for k in tqdm(step_sizes(masked.size(1), steps, schedule), disable=not progress, desc='steps'):
        candidates = masked if order == 'confidence' else masked[:, :k]
        logits = decode_step(model, cache, x.gather(1, positions.clamp(min=0)), positions, candidates)[..., :n_tokens]
        if order == 'confidence':
            pick = confidence_scores(logits, confidence).topk(k, dim=1).indices  # most confident first
            targets = candidates.gather(1, pick)
            logits = logits.gather(1, pick.unsqueeze(-1).expand(-1, -1, logits.size(-1)))
            cache.commit(positions.size(1), last=pick[:, 0])
            rest = torch.ones_like(masked, dtype=torch.bool).scatter(1, pick, False)
            masked = masked[rest].view(B, -1)
        else:
            targets, masked = candidates, masked[:, k:]
            cache.commit(positions.size(1))
        x.scatter_(1, targets, sample_tokens(logits, temperature, top_k, top_p, generator, top_p_mode, sample_dtype))
        if on_step is not None:
            on_step(targets, logits)
        decoded.append(targets)
        positions = targets
    return x, torch.cat(decoded, 1)


# -----------------------------------------------------------------------------
# command line: tokenizer, prompts, checks

def parse_infill(template, marker, encode):
    """Token ids and a known-mask for an infill template: marker is one masked token, and with a
    count before its last character (e.g. [MASK:5]) that many."""
    pattern = re.escape(marker[:-1]) + f'(?::([^{re.escape(marker[-1])}]*))?' + re.escape(marker[-1])
    ids, known, at = [], [], 0
    for match in re.finditer(pattern, template):
        text = encode(template[at:match.start()])
        count = match.group(1)
        if count is not None and not (count.isdecimal() and int(count) >= 1):
            fail(f'{match.group(0)} in the infill template: a masked span needs a whole number of tokens, at least '
                 f'one (as in {marker[:-1]}:5{marker[-1]})')
        count = int(count or 1)
        ids += text + [0] * count
        known += [True] * len(text) + [False] * count
        at = match.end()
    if not known:
        fail(f'the infill template has no {marker} marker')
    text = encode(template[at:])
    return ids + text, known + [True] * len(text)


SAMPLING_RULES = {  # the settings sample.py and gen_ppl.py share, and what each must be
    'order': one_of(*ORDERS), 'confidence': one_of(*CONFIDENCES), 'schedule': one_of(*SCHEDULES),
    'top_k': optional_int(1), 'top_p_mode': one_of(*TOP_P_MODES), 'sample_dtype': one_of(*SAMPLE_DTYPES),
    'max_new_tokens': optional_int(1),
    'mask_token': (lambda v: len(v) >= 2, 'a marker of at least 2 characters, such as [MASK]'),
}
TEMPERATURE_RULE = (lambda v: v >= 0, '>= 0 (0 is greedy)')
TOP_P_RULE = (lambda v: 0 < v <= 1, 'in (0, 1]')


def check_sampling(settings):
    """The checks of SAMPLING_RULES, plus the device (MPS has no float64) and the prompt."""
    check_settings(settings, SAMPLING_RULES)
    if settings['start'] and settings['infill']:
        fail('--start and --infill both give the prompt: put the start at the beginning of the infill template '
             '(--infill="ROMEO: [MASK:20]")')
    check_device(settings['device'], settings['dtype'])
    if torch.device(settings['device']).type == 'mps' and settings['sample_dtype'] == 'float64':
        fail('MPS has no float64: use --sample_dtype=float32 there')


def check_inputs():
    check_sampling(globals())
    check_settings(globals(), {'temperature': TEMPERATURE_RULE, 'top_p': TOP_P_RULE, 'steps': optional_int(1),
                               'num_samples': (lambda v: type(v) is int and v >= 1, 'an int >= 1')})


def prompt_tokens(encode, block_size, start='', infill='', max_new_tokens=None, mask_token='[MASK]'):
    """The ids of one sample and which of them are known, from an infill template or a start prefix."""
    if infill:
        ids, known = parse_infill(infill, mask_token, encode)
        if len(ids) > block_size:
            fail(f'the infill template is {len(ids)} tokens long, more than block_size {block_size}')
        return ids, known
    text = start
    if text.startswith('FILE:'):
        try:
            with open(text[5:], encoding='utf-8') as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            fail(f'cannot read the prompt file {text[5:]} as UTF-8 text ({type(e).__name__}: {e})')
    prefix = encode(text)
    if len(prefix) >= block_size:
        fail(f'the prompt is {len(prefix)} tokens long and leaves no room in block_size {block_size}')
    new = block_size - len(prefix) if max_new_tokens is None else max_new_tokens
    if len(prefix) + new > block_size:
        fail(f'the output would be {len(prefix)} + {new} tokens, longer than block_size {block_size}')
    return prefix + [0] * new, [True] * len(prefix) + [False] * new


def check_steps(steps, n):
    """The number of decoding steps for n tokens: steps, or n (one token per step) for None."""
    n_steps = n if steps is None else steps
    if type(n_steps) is not int or not 1 <= n_steps <= n:
        fail(f'--steps must be an int from 1 to the {n} tokens to generate, got {steps!r}')
    return n_steps


def main():
    check_inputs()
    model, checkpoint = read_checkpoint(checkpoint_path(init_from, out_dir), device, use_ema)
    block_size = model.config.block_size
    encode, decode = load_tokenizer(checkpoint, model.config.vocab_size)
    ids, known = prompt_tokens(encode, block_size, start, infill, max_new_tokens, mask_token)
    n_steps = check_steps(steps, known.count(False))

    if compile:
        model.forward_slots = torch.compile(model.forward_slots, dynamic=True)
    generator = torch.Generator(device).manual_seed(seed)
    x = torch.tensor(ids, device=device).repeat(num_samples, 1)
    n_tokens = token_count(checkpoint, model.config.vocab_size)  # never the padding ids of a GPT-2 table
    with autocast(device, dtype):
        x, _ = generate(model, x, torch.tensor(known, device=device), n_steps, schedule, order, confidence,
                        temperature, top_k, top_p, generator, progress=True, top_p_mode=top_p_mode,
                        sample_dtype=getattr(torch, sample_dtype), n_tokens=n_tokens)
    for row in x.tolist():
        print(decode(row))
        print('---------------')


if __name__ == '__main__':
    config_keys = [k for k, v in globals().items()
                   if not k.startswith('_') and k.islower() and isinstance(v, (int, float, bool, str, type(None)))]
    from configurator import configure
    configure(globals(), config_keys, doc=__doc__)
    main()
