"""
The samplers of sample.py, gen_ppl.py and a model folder, built on the engine (engine.py): `generate` decodes the
masked positions of a batch in `steps` steps (`schedule` says how many per step), in a random order, left to
right, or most confident first, each token drawn by `Sampling`; with speculate=k, one token per step's samples by
speculative decoding (speculative.py); for the encoder only, MDLM's ancestral rule (`ancestral`), where each step
reveals every masked position with the same probability. DECODING_RULES say what their options must be.
"""
import math
from contextlib import nullcontext

import torch
from tqdm import tqdm

from .engine import (Forward, Sampling, confidence_scores, decoding_orders, make_engine, masked_forward, masking_times,
                     sample_tokens, shared_cache, shares_prompt, step_sizes)
from .speculative import check_speculative, speculative

SCHEDULES = ('linear', 'cosine')
ORDERS = ('random', 'l2r', 'confidence', 'ancestral')  # which masked positions a step decodes
CONFIDENCES = ('maxprob', 'entropy')
TOP_P_MODES = ('nucleus', 'authors')


# what generate's options must be, as (test, what): sample.py checks them as settings, a model folder's sample() as
# arguments
DECODING_RULES = {
    'order': (lambda v: v in ORDERS, f"one of {', '.join(ORDERS)}"),
    'schedule': (lambda v: v in SCHEDULES, f"one of {', '.join(SCHEDULES)}"),
    'confidence': (lambda v: v in CONFIDENCES, f"one of {', '.join(CONFIDENCES)}"),
    'top_p_mode': (lambda v: v in TOP_P_MODES, f"one of {', '.join(TOP_P_MODES)}"),
    'temperature': (lambda v: v >= 0, '>= 0 (0 is greedy)'),
    'top_k': (lambda v: v is None or (type(v) is int and v >= 1), 'None or an int >= 1'),
    'top_p': (lambda v: 0 < v <= 1, 'in (0, 1]'),
    'speculate': (lambda v: v in (None, 'auto') or (type(v) is int and v >= 0),
                  "an int >= 0 (drafts per forward) or 'auto'"),
}


def check_order(model, order, speculate=0):
    """Raise ValueError unless `model` can decode in `order`, speculatively if speculate > 0: the
    ancestral rule needs the encoder; speculation a decoder (the exact joint of an order in one
    forward) and an order known before decoding starts."""
    if order == 'ancestral' and not model.config.is_encoder:
        raise ValueError("order=ancestral is MDLM's sampler for the encoder (architecture=encoder), and this "
                         "model is a decoder: use random, l2r or confidence")
    if speculate:
        check_speculative(model, order)


def decoding_steps(steps, n, order='random', speculate=0, flag='{}'):
    """The number of decoding steps for n tokens: steps, or n (one token per step) for None; at most n, but any
    number with the ancestral rule (a step may reveal nothing); none given with speculate (k > 0). ValueError
    otherwise, flag naming a value as its user wrote it."""
    check_speculation(steps, speculate, flag)
    n_steps = n if steps is None else steps
    most = math.inf if order == 'ancestral' else n
    if type(n_steps) is not int or not 1 <= n_steps <= most:
        raise ValueError(f"{flag.format('steps')} must be an int from 1 to the {n} tokens to generate (any number "
                         f"with {flag.format('order')}=ancestral), got {steps!r}")
    return n_steps


def check_speculation(steps, speculate, flag='{}'):
    """ValueError if steps are given with speculative decoding (k = speculate > 0, 'auto' resolved)."""
    if speculate and steps is not None:
        raise ValueError(f"{flag.format('steps')}={steps} with {flag.format('speculate')}: speculative decoding draws "
                         f"the samples of one token per step, and its forwards follow from k and the drafts kept; "
                         f"drop {flag.format('steps')}")


@torch.no_grad()
def generate(model, x, known, steps, sampling=Sampling(), *, schedule='linear', order='random', confidence='maxprob',
             generator=None, n_tokens=None, progress=False, on_step=None, reuse_forward=True, speculate=0, stats=None,
             count=None):
    """Fill the unknown positions of x (B, T) in place; return x and the decoding order (B, n).

    known (T,) bool: the given tokens (the same positions in every row). They are read first, left
    to right, in one forward with the first step (a decoder's rows that all hold the same ones read
    them once, in one row, all but the last: shared_cache); then the n unknown positions are decoded in
    `steps` steps, chosen by `order` (see ORDERS; 'confidence' ranks by `confidence`;
    'ancestral' is `ancestral`, with reuse_forward). Tokens are drawn by `sampling`, from ids below
    n_tokens only if given (the ids past it pad the vocabulary table and have no text).
    on_step(targets, logits), if given, sees each step's positions (B, k) and logits (not with
    'ancestral', whose rows reveal different numbers of tokens per step).
    speculate=k > 0: the same samples as one token per step (steps must be n), drawn by `speculative`
    with up to k drafts per forward; stats (a Speculation) adds up its forwards; count > B draws that
    many samples, the rows taking turns, and returns them (see `speculative`).
    """
    if speculate:
        if steps != int((~known).sum()):
            raise ValueError(f'speculative decoding draws one token per step exactly, so steps must be the '
                             f'{int((~known).sum())} unknown positions, got {steps}')
        return speculative(model, x, known, speculate, sampling, order=order, generator=generator,
                           n_tokens=n_tokens, progress=progress, stats=stats, count=count)
    if order == 'ancestral':
        return ancestral(model, x, known, steps, sampling, schedule=schedule, generator=generator, n_tokens=n_tokens,
                         progress=progress, reuse_forward=reuse_forward)
    B, T = x.shape
    masked = decoding_orders((~known).nonzero().squeeze(1), B, order, generator)  # confidence: reordered below
    given = known.nonzero().squeeze(1).expand(B, -1)
    # order=confidence scores every masked position each step, a width that shrinks: a graph per step, so eager
    sizes = step_sizes(masked.size(1), steps, schedule)
    engine = make_engine(model, B, T, compiled=order != 'confidence', sizes=sizes)
    positions = torch.cat([torch.full((B, 1), -1, device=x.device), given], 1)  # start slot, known tokens
    if shares_prompt(engine, x, given):  # one row reads the prompt for all: the first step reads its last token
        engine.start_from(shared_cache(model, x[:1].gather(1, positions[:1].clamp(min=0)), positions[:1]))
        positions = positions[:, -1:]
    decoded = []
    for k in tqdm(sizes, disable=not progress, desc='steps'):
        candidates = masked if order == 'confidence' else masked[:, :k]
        logits = engine.step(x.gather(1, positions.clamp(min=0)), positions, candidates)[..., :n_tokens]
        if order == 'confidence':
            pick = confidence_scores(logits, confidence).topk(k, dim=1).indices  # most confident first
            targets = candidates.gather(1, pick)
            logits = logits.gather(1, pick.unsqueeze(-1).expand(-1, -1, logits.size(-1)))
            engine.accept(last=pick[:, 0])
            rest = torch.ones_like(masked, dtype=torch.int).scatter(1, pick, 0)  # the rest, in order (no sync)
            masked = masked.gather(1, rest.argsort(dim=1, descending=True, stable=True)[:, :masked.size(1) - k])
        else:
            targets, masked = candidates, masked[:, k:]
            engine.accept()
        x.scatter_(1, targets, sample_tokens(logits, sampling, generator))
        if on_step is not None:
            on_step(targets, logits)
        decoded.append(targets)
        positions = targets
    return x, torch.cat(decoded, 1)


@torch.no_grad()
def ancestral(model, x, known, steps, sampling=Sampling(), *, schedule='linear', generator=None, n_tokens=None,
              progress=False, reuse_forward=True):
    """MDLM's ancestral sampler for the encoder: fill the unknown positions of x (B, T) in place;
    return x and the order (B, n), the unknown positions sorted by the step that revealed them.

    The masking time goes from 1 to 0 over `steps` steps (masking_times, in float64). From t to s,
    each position still masked is revealed independently with probability (t - s) / t, the
    log-linear schedule's posterior (so a step may reveal nothing; the last reveals all that remain),
    its token drawn by `sampling` from the encoder's logits given the tokens revealed so far.
    A forward is run only when a step reveals something, and reused (MDLM's ddpm_cache) while no
    token has changed since: steps that reveal nothing cost nothing. reuse_forward=False runs one
    every step instead, for the same samples.
    """
    check_order(model, 'ancestral')
    B, T = x.shape
    masked = (~known).nonzero().squeeze(1).expand(B, -1)
    x.scatter_(1, masked, model.mask_id)  # x is the canvas: [MASK] where nothing is revealed yet
    hidden = torch.ones(masked.shape, dtype=torch.bool, device=x.device)
    revealed_at = torch.zeros(masked.shape, dtype=torch.long, device=x.device)
    t = masking_times(steps, schedule, torch.float64).tolist()
    t[-1] = 0.0  # float64 cos(pi/2) is not quite 0; the last step reveals all that remain
    logits = None  # the last forward's, while no token has changed since
    forward = Forward(model, None, masked_forward)
    for i in tqdm(range(steps), disable=not progress, desc='steps'):
        u = torch.rand(masked.shape, generator=generator, device=x.device, dtype=torch.float64)
        reveal = hidden & (u < (t[i] - t[i + 1]) / t[i])
        changed = bool(reveal.any())
        if not reuse_forward or (changed and logits is None):
            logits = forward(x, masked)[..., :n_tokens]
        if changed:
            rows, cols = reveal.nonzero(as_tuple=True)
            x[rows, masked[rows, cols]] = sample_tokens(logits[rows, cols], sampling, generator)
            hidden &= ~reveal
            revealed_at[reveal] = i
            logits = None
    return x, masked.gather(1, revealed_at.argsort(dim=1, stable=True))


def generate_many(model, ids, known, count, batch_size, steps, sampling=Sampling(), *, ctx=nullcontext(), desc=None,
                  **options):
    """count samples (lists of ids) of one prompt, ids with its known positions (lists of T), drawn
    by generate (with its options) in batches of batch_size under ctx (autocast); desc names the
    progress bar. Speculative decoding draws them in one call of batch_size rows that take turns
    (speculative's count): other draws than batch by batch, from the same distribution."""
    device = next(model.parameters()).device
    known_mask = torch.tensor(known, device=device)
    if options.get('speculate'):  # one call, whose rows start the next sample as they finish
        x = torch.tensor(ids, device=device).repeat(min(batch_size, count), 1)
        with ctx:
            return generate(model, x, known_mask, steps, sampling, count=count, **options)[0].tolist()
    rows = []
    for b in tqdm(range(0, count, batch_size), desc=desc, disable=desc is None, leave=False):
        x = torch.tensor(ids, device=device).repeat(min(batch_size, count - b), 1)
        with ctx:
            x, _ = generate(model, x, known_mask, steps, sampling, **options)
        rows += x.tolist()  # waits for the device, so a timing is the sampling's
    return rows
