"""
Any-order decoding with a KV cache: the engine owns the cache; the model only reads and writes it.

An Engine decodes a batch step by step: `step` returns the logits of any number of target
positions, all predicted from the same context (the cache and the new slots), and `accept` keeps
the new slots in the cache. The encoder's EncoderEngine has the same handshake but no cache: it
keeps the current tokens of each row and runs one full forward per step.
`generate` is the sampler of sample.py and gen_ppl.py built on them: the masked positions of a
batch are decoded in `steps` steps (`schedule` says how many per step), in a random order, left to
right, or most confident first, each token drawn by `Sampling`; or, for the encoder only, by MDLM's
ancestral rule (`ancestral`), where each step reveals every masked position with the same probability.
"""
import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from tqdm import tqdm

SCHEDULES = ('linear', 'cosine')
POLICIES = ('random', 'l2r', 'confidence', 'ancestral')  # which masked positions a step decodes
CONFIDENCES = ('maxprob', 'entropy')
TOP_P_MODES = ('nucleus', 'authors')


class KVCache:
    """Keys and values of the slots decoded so far, per layer, in buffers allocated once.

    A forward with a cache writes the keys and values of all its new slots after the `length`
    committed ones; `commit(n)` then keeps the first n of them. Slots written but not committed
    (e.g. extra copies that only served as queries) are overwritten by the next forward.
    """

    def __init__(self, config, batch_size, max_slots, device=None, dtype=torch.float32):
        shape = (config.n_layer, batch_size, config.n_head, max_slots, config.n_embd // config.n_head)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0

    def update(self, layer, k, v):
        end = self.length + k.size(2)
        if end > self.k.size(3):
            raise ValueError(f'KV cache overflow: {end} slots needed, {self.k.size(3)} allocated')
        self.k[layer, :, :, self.length:end] = k
        self.v[layer, :, :, self.length:end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]

    def commit(self, n, last=None):
        """Keep the first n new slots; with last (B,), row b keeps new slot n-1+last[b] as its n-th.

        `last` picks, after the forward, which of the copies that ended a decoding step goes on.
        """
        if last is not None:
            rows = torch.arange(self.k.size(1), device=last.device)
            src, dst = self.length + n - 1 + last, torch.full_like(last, self.length + n - 1)
            for buf in (self.k, self.v):
                buf[:, rows, :, dst] = buf[:, rows, :, src]
        self.length += n


class Engine:
    """Cached any-order decoding of a batch of batch_size rows, up to max_slots slots each.

    The cache holds keys and values in the autocast dtype when autocast is on where the engine is
    made, else in the model's dtype.
    """

    def __init__(self, model, batch_size, max_slots):
        self.model = model
        device = next(model.parameters()).device
        dtype = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) \
            else next(model.parameters()).dtype
        self.cache = KVCache(model.config, batch_size, max_slots, device, dtype)
        self.new = 0  # slots of the last step, not yet accepted

    def reset(self):
        """Forget every slot: the next step starts a new sequence."""
        self.cache.length, self.new = 0, 0

    def step(self, tokens, positions, targets):
        """Logits (B, k, V) for each target position in targets (B, k).

        tokens, positions (B, m): the slots not yet in the cache, in decoding order: on the first
        step the start slot (position -1) and any known tokens, later the tokens decoded by the
        previous step. Each predicts the position after it; the last one is run once per target,
        and these copies see the cache, the other new slots and themselves only, so every target is
        predicted from the same context. Then accept() keeps the slots.
        """
        B, m = positions.shape
        k = targets.size(1)
        tok = torch.cat([tokens, tokens[:, -1:].expand(B, k - 1)], 1)
        pos = torch.cat([positions, positions[:, -1:].expand(B, k - 1)], 1)
        tgt = torch.cat([positions[:, 1:], targets], 1)
        S, L = m + k - 1, self.cache.length
        mask = torch.ones(S, L + S, dtype=torch.bool, device=tok.device).tril(L)
        mask[m:, L + m - 1:] = torch.eye(S, dtype=torch.bool, device=tok.device)[m:, m - 1:]
        queries = torch.arange(m - 1, S, device=tok.device).expand(B, k)  # no logits for the other slots
        self.new = m
        return self.model.forward_slots(tok, pos, tgt, self.cache, mask, out_slots=queries)

    def accept(self, last=None):
        """Keep the last step's slots, with the copy of row b's last slot whose target is decoded
        next: copy last[b] (B,), or copy 0 if last is None."""
        self.cache.commit(self.new, last)
        self.new = 0


class EncoderEngine:
    """The encoder's decoding of a batch of batch_size rows of `length` tokens, with Engine's handshake.

    No cache: the canvas holds each row's current tokens, [MASK] where none is known or decoded
    yet, and every step runs one full forward over it. Its column 0 is a spare for the start slot
    (position -1), so canvas column p + 1 holds position p.
    """

    def __init__(self, model, batch_size, length):
        self.model = model
        device = next(model.parameters()).device
        self.canvas = torch.full((batch_size, length + 1), model.mask_id, device=device)

    def reset(self):
        self.canvas.fill_(self.model.mask_id)

    def step(self, tokens, positions, targets):
        """Logits (B, k, V) for targets (B, k), once the tokens (B, m) are written at their positions (B, m)."""
        self.canvas.scatter_(1, positions + 1, tokens)
        return self.model.forward_masked(self.canvas[:, 1:], out_positions=targets)

    def accept(self, last=None):
        """Nothing to keep: the canvas holds every token the steps were given."""


def is_encoder(model):
    return model.config.architecture == 'encoder'


def make_engine(model, batch_size, length):
    """The engine that decodes rows of `length` tokens with `model`: the encoder's or the cached decoder's."""
    if is_encoder(model):
        return EncoderEngine(model, batch_size, length)
    # one slot more than decoding fills: a compiled forward then never sees a full cache, a case of
    # its own that it would compile again for
    return Engine(model, batch_size, length + 1)


def check_policy(model, policy):
    """Raise ValueError unless `model` can decode by `policy`: the ancestral rule needs the encoder."""
    if policy == 'ancestral' and not is_encoder(model):
        raise ValueError("the ancestral policy is MDLM's sampler for the encoder (architecture=encoder), and this "
                         "model is a decoder: use random, l2r or confidence")


def compile_forward(model):
    """torch.compile the forward that decoding runs, with dynamic shapes (the steps vary in size)."""
    name = 'forward_masked' if is_encoder(model) else 'forward_slots'
    setattr(model, name, torch.compile(getattr(model, name), dynamic=True))


@dataclass(frozen=True)
class Sampling:
    """How a token is drawn from logits: temperature, then top_k, then top_p (see filter_probs),
    by inverse CDF in `dtype`."""
    temperature: float = 1.0  # 0: greedy
    top_k: int | None = None
    top_p: float = 1.0
    top_p_mode: str = 'nucleus'
    dtype: torch.dtype = torch.float64


def masking_times(steps, schedule='linear', dtype=torch.float32):
    """The masking time t_0 = 1 > ... > t_steps of the steps: linspace(1, 0, steps + 1), or
    cos(pi/2 * (1 - linspace(1, 0, steps + 1))) for cosine, in dtype."""
    t = torch.linspace(1, 0, steps + 1, dtype=dtype)
    return torch.cos((1 - t) * math.pi * 0.5) if schedule == 'cosine' else t


def step_sizes(n, steps, schedule='linear'):
    """Tokens decoded at each step, counted as the authors' sampler does: by step i, n_i =
    max(int(n * (1 - t_i)), n_{i-1} + 1) tokens, truncated, with the masking times in float32."""
    t = masking_times(steps, schedule)
    reached = (n * (1 - t[1:])).long().tolist()
    reached[-1] = n  # float32 cos(pi/2) is not quite 0; the last step always ends the sample
    sizes, done = [], 0
    for r in reached:
        r = max(r, done + 1)
        sizes.append(r - done)
        done = r
    return sizes


def filter_probs(logits, sampling=Sampling()):
    """Sampling probabilities in sampling.dtype from logits (..., V): temperature, then top_k, then top_p.

    top_p_mode 'nucleus' keeps the smallest set of most likely tokens holding top_p of the mass
    (the token that crosses top_p stays); 'authors' keeps those whose cumulative probability is at
    most top_p (the crossing token goes, the most likely one always stays), as the authors' sampler.
    """
    s = sampling
    logits = logits.to(s.dtype) / s.temperature
    if s.top_k is not None and s.top_k < logits.size(-1):
        kth = logits.topk(s.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    probs = logits.softmax(-1)
    if s.top_p < 1.0:
        sorted_probs, index = probs.sort(-1, descending=True)
        cumulative = sorted_probs.cumsum(-1)
        if s.top_p_mode == 'nucleus':  # drop a token when the more likely ones already hold top_p
            drop = cumulative - sorted_probs >= s.top_p
        else:
            drop = cumulative > s.top_p
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


def sample_tokens(logits, sampling, generator):
    """One token per row of logits (..., V), each drawn independently."""
    if sampling.temperature == 0:
        return logits.argmax(-1)
    # inverse CDF, one uniform per draw: much faster than torch.multinomial over a large vocabulary
    probs = filter_probs(logits, sampling)
    u = torch.rand(probs.shape[:-1] + (1,), generator=generator, device=probs.device, dtype=sampling.dtype)
    return inverse_cdf(probs, u).squeeze(-1)


def confidence_scores(logits, kind):
    """Higher is more confident: the max-probability, or minus the entropy, of each prediction."""
    logp = logits.float().log_softmax(-1)
    return logp.max(-1).values.exp() if kind == 'maxprob' else (logp.exp() * logp).sum(-1)


@torch.no_grad()
def generate(model, x, known, steps, sampling=Sampling(), *, schedule='linear', policy='random', confidence='maxprob',
             generator=None, n_tokens=None, progress=False, on_step=None, reuse_forward=True):
    """Fill the unknown positions of x (B, T) in place; return x and the decoding order (B, n).

    known (T,) bool: the given tokens (the same positions in every row). They are read first, left
    to right, in one forward with the first step; then the n unknown positions are decoded in
    `steps` steps, chosen by `policy` (see POLICIES; 'confidence' ranks by `confidence`;
    'ancestral' is `ancestral`, with reuse_forward). Tokens are drawn by `sampling`, from ids below
    n_tokens only if given (the ids past it pad the vocabulary table and have no text).
    on_step(targets, logits), if given, sees each step's positions (B, k) and logits (not with
    'ancestral', whose rows reveal different numbers of tokens per step).
    """
    if policy == 'ancestral':
        return ancestral(model, x, known, steps, sampling, schedule=schedule, generator=generator, n_tokens=n_tokens,
                         progress=progress, reuse_forward=reuse_forward)
    B, T = x.shape
    masked = (~known).nonzero().squeeze(1).expand(B, -1)
    given = known.nonzero().squeeze(1).expand(B, -1)
    if policy == 'random':
        masked = masked.gather(1, torch.rand(masked.shape, generator=generator, device=x.device).argsort(1))
    engine = make_engine(model, B, T)
    positions = torch.cat([torch.full((B, 1), -1, device=x.device), given], 1)  # start slot, known tokens
    decoded = []
    for k in tqdm(step_sizes(masked.size(1), steps, schedule), disable=not progress, desc='steps'):
        candidates = masked if policy == 'confidence' else masked[:, :k]
        logits = engine.step(x.gather(1, positions.clamp(min=0)), positions, candidates)[..., :n_tokens]
        if policy == 'confidence':
            pick = confidence_scores(logits, confidence).topk(k, dim=1).indices  # most confident first
            targets = candidates.gather(1, pick)
            logits = logits.gather(1, pick.unsqueeze(-1).expand(-1, -1, logits.size(-1)))
            engine.accept(last=pick[:, 0])
            rest = torch.ones_like(masked, dtype=torch.bool).scatter(1, pick, False)
            masked = masked[rest].view(B, -1)
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
    check_policy(model, 'ancestral')
    B, T = x.shape
    masked = (~known).nonzero().squeeze(1).expand(B, -1)
    x.scatter_(1, masked, model.mask_id)  # x is the canvas: [MASK] where nothing is revealed yet
    hidden = torch.ones(masked.shape, dtype=torch.bool, device=x.device)
    revealed_at = torch.zeros(masked.shape, dtype=torch.long, device=x.device)
    t = masking_times(steps, schedule, torch.float64).tolist()
    t[-1] = 0.0  # float64 cos(pi/2) is not quite 0; the last step reveals all that remain
    logits = None  # the last forward's, while no token has changed since
    for i in tqdm(range(steps), disable=not progress, desc='steps'):
        u = torch.rand(masked.shape, generator=generator, device=x.device, dtype=torch.float64)
        reveal = hidden & (u < (t[i] - t[i + 1]) / t[i])
        changed = bool(reveal.any())
        if not reuse_forward or (changed and logits is None):
            logits = model.forward_masked(x, out_positions=masked)[..., :n_tokens]
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
    progress bar."""
    device = next(model.parameters()).device
    known_mask = torch.tensor(known, device=device)
    rows = []
    for b in tqdm(range(0, count, batch_size), desc=desc, disable=desc is None, leave=False):
        x = torch.tensor(ids, device=device).repeat(min(batch_size, count - b), 1)
        with ctx:
            x, _ = generate(model, x, known_mask, steps, sampling, **options)
        rows += x.tolist()  # waits for the device, so a timing is the sampling's
    return rows
