"""
Any-order decoding with a KV cache: the engine owns the cache; the model only reads and writes it.

An Engine decodes a batch step by step: `step` returns the logits of any number of target
positions, all predicted from the same context (the cache and the new slots), and `accept` keeps
the new slots in the cache. The encoder's EncoderEngine has the same handshake but no cache: it
keeps the current tokens of each row and runs one full forward per step. Beside them: the forwards
a decoding loop runs (compiled by compile_decoding), and how a token is drawn from logits (`Sampling`).
The loops themselves are decoding.py's (one token or more per step) and speculative.py's.
"""
import logging
import math
from dataclasses import dataclass

import torch
from torch import nn


class KVCache:
    """Keys and values of each row's slots, per layer, in buffers of max_slots slots allocated once.

    lengths (B,), on the device, counts each row's committed slots. A forward places its new slots
    after each row's committed ones (begin), writes their keys and values there (update) and
    attends to the whole buffer, the slots it may not see hidden by its mask (mask); commit then
    keeps the first new slots of each row. Every step has the same shapes whatever the lengths, so a
    compiled step runs one graph without a host sync. Slots written but not committed (extra copies
    that only served as queries) are overwritten by the next forward.
    """

    def __init__(self, config, batch_size, max_slots, device=None, dtype=torch.float32, spare=0):
        """Each row holds up to max_slots slots, and a forward may write `spare` more that are never kept."""
        n_head = config.n_head
        self.slots = max_slots
        shape = (batch_size, n_head, max_slots + spare, config.n_embd // n_head)
        # one buffer per layer, head-major as attention reads it (a matmul over (row, head) pairs copies a buffer
        # whose two dims do not merge), written in place by index_put_ (a compiled step copies a buffer whole to
        # scatter into a slice of it); zeros, not empty: a hidden key still enters the attention scores
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layer)]
        self.lengths = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.rows = torch.arange(batch_size, device=device)
        self.heads = torch.arange(n_head, device=device).view(1, n_head, 1)
        self.end = None  # the slots a forward attends: all, or the first `end` where the caller knows no row has more

    def begin(self, width):
        """Place the next forward's `width` new slots after each row's committed ones."""
        slots = self.lengths.unsqueeze(1) + torch.arange(width, device=self.rows.device)
        self.index = (self.rows.view(-1, 1, 1), self.heads, slots.unsqueeze(1))

    def update(self, layer, k, v):
        """Write the new slots' keys and values (B, nh, width, hs); return the layer's, all max_slots of them."""
        for buf, new in ((self.k[layer], k), (self.v[layer], v)):
            buf.index_put_(self.index, new.to(buf.dtype))
        return self.k[layer][:, :, :self.end], self.v[layer][:, :, :self.end]

    def mask(self, m, width, copies=0):
        """(B, 1, width + copies, end or max_slots) attention of a forward's new slots: row b's m[b] (an int or (B,))
        slots read in order, then padding to width (each seeing only itself), then `copies` more copies of
        its last slot, which see what that slot sees but not each other; every slot sees the row's
        committed slots and no other."""
        S, dev = width + copies, self.lengths.device
        # each key's place among the row's new slots (negative: committed)
        t = (torch.arange(self.end or self.k[0].size(2), device=dev) - self.lengths.unsqueeze(1)).unsqueeze(1)
        s = torch.arange(S, device=dev).view(1, S, 1)
        m = m.view(-1, 1, 1) if torch.is_tensor(m) else m
        return ((t < 0) | (t == s) | ((s < m) & (t <= s)) | ((s >= width) & (t < m - 1))).unsqueeze(1)

    def copy_rows(self, shared):
        """Start every row with the committed slots of the one-row cache `shared` (shared_cache)."""
        n = int(shared.lengths[0])
        for mine, theirs in zip(self.k + self.v, shared.k + shared.v):
            mine[:, :, :n] = theirs[:, :, :n]
        self.lengths.fill_(n)

    def commit(self, counts, last=None):
        """Keep the first counts (an int, or (B,) per row) new slots of each row; with last (B,), row b
        keeps new slot counts-1+last[b] as its last, which picks after the forward the copy that goes on."""
        if last is not None:
            dst = self.lengths + counts - 1
            for buf in self.k + self.v:
                buf[self.rows, :, dst] = buf[self.rows, :, dst + last]
        self.lengths += counts


def shared_cache(model, tokens, positions):
    """A one-row KVCache of the slots every row of a batch shares, committed: tokens, positions (1, m + 1) a prompt's
    start slot and known tokens, of which the first m are read, each predicting the next one's position. The last is
    left to the rows' own first step: its target, the first position decoded, may differ between them."""
    m = positions.size(1) - 1
    cache = KVCache(model.config, 1, m, *cache_place(model))
    if m:
        model.forward_slots(tokens[:, :-1], positions[:, :-1], positions[:, 1:], cache,
                            out_slots=torch.zeros(1, 1, dtype=torch.long, device=positions.device))
        cache.commit(m)
    return cache


def shares_prompt(engine, x, given):
    """Whether a decoder's rows x (B, T) hold the same tokens at the known positions given (B, K), so that one row's
    read of them serves all (Engine.start_from): two rows or more, and a known token; one host sync."""
    return isinstance(engine, Engine) and x.size(0) > 1 and given.size(1) > 0 and \
        bool((x.gather(1, given) == x[:1].gather(1, given[:1])).all())


def cache_place(model):
    """The device and dtype of a cache for model: the autocast dtype if autocast is on, else the model's."""
    p = next(model.parameters())
    return p.device, torch.get_autocast_dtype(p.device.type) if torch.is_autocast_enabled(p.device.type) else p.dtype


def step_forward(model, cache, tokens, positions, targets, m):
    """Engine.step's forward: logits (B, K, V) of the targets (B, K) after the new slots tokens, positions (B, W),
    of which each row's first m (B,) are read and the rest are padding (position -1, seen by none); the last read
    slot runs once per target (its copies, after the W slots, see what it sees). A padding target (-1) gives
    logits nobody reads."""
    B, W = positions.shape
    K = targets.size(1)
    last = (m - 1).unsqueeze(1)
    read = torch.arange(W, device=m.device) < m.unsqueeze(1)
    following = torch.cat([positions[:, 1:], positions[:, :1]], 1)  # each slot predicts the next slot's position
    own_targets = torch.where(read, following, -1).scatter(1, last, targets[:, :1])
    tok = torch.cat([tokens, tokens.gather(1, last).expand(B, K - 1)], 1)
    pos = torch.cat([positions, positions.gather(1, last).expand(B, K - 1)], 1)
    tgt = torch.cat([own_targets, targets[:, 1:]], 1)
    queries = torch.cat([last, W - 1 + torch.arange(1, K, device=m.device).expand(B, K - 1)], 1)
    return model.forward_slots(tok, pos, tgt, cache, cache.mask(m, W, K - 1), out_slots=queries)


class Forward:
    """A decoding loop's forwards fn(model, cache, *args) (step_forward, speculative_forward, or the encoder's
    masked_forward with no cache), compiled if compile_decoding(model) compiled fn.

    Compiled, each set of argument shapes and cache widths (graph_width) gets its graph once. Dynamo checks all its
    guards the first time a set comes, then only those that tell its graphs apart (skip_guard_eval_unsafe): within
    one loop nothing else can change, and checking every guard at every forward would cost a CPU's step a share of
    its time. On a GPU the graphs replay as CUDA graphs, which write the cache where it is (a static address) and overwrite their output at the next replay.
    """

    def __init__(self, model, cache, fn, compiled=True):
        self.model, self.cache, self.fn = model, cache, fn
        self.compiled = getattr(model, 'compiled', {}).get(fn) if compiled else None
        self.graphs = self.compiled is not None and next(model.parameters()).is_cuda
        if self.graphs and cache is not None:
            for buf in cache.k + cache.v:
                torch._dynamo.mark_static_address(buf)
        self.seen = set()

    def __call__(self, *args, eager=False):
        """fn's output; eager=True runs it uncompiled, attending only to the first cache.end slots. A step shape
        past torch.compile's recompile limit (its graphs are counted per function over every model in the process)
        runs eager, and so does the rest of the loop, with one note per process."""
        if eager or self.compiled is None:
            return self.fn(self.model, self.cache, *args)
        end = width = self.cache.end if self.cache is not None else None
        if self.cache is not None:  # a graph attends to one of a few widths of the cache (all where end is unknown)
            width = self.cache.end = end and graph_width(end, self.cache.slots, self.cache.k[0].size(2))
        key = tuple((a.shape, a.stride(), a.dtype) if torch.is_tensor(a) else a for a in args) + (width,)
        if self.graphs:
            torch.compiler.cudagraph_mark_step_begin()
        try:
            with torch.compiler.set_stance(skip_guard_eval_unsafe=key in self.seen):
                out = self.compiled(self.model, self.cache, *args)
        except torch._dynamo.exc.FailOnRecompileLimitHit:
            note_eager_fallback()
            self.compiled = None
            if self.cache is not None:
                self.cache.end = end
            return self.fn(self.model, self.cache, *args)
        self.seen.add(key)
        return out.clone() if self.graphs else out


def graph_width(end, slots, size):
    """The cache slots a compiled step attends when the first `end` hold every row's: end rounded up to a power of
    two, at least GRAPH_WIDTH; the whole buffer (`size`: the rows' `slots` and the spare) once that would reach the
    slots. A long decoding then runs a few graphs per step shape, each reading at most twice what is filled, where
    one graph of the whole buffer would read it all at every step; up to a block of GRAPH_WIDTH, one graph."""
    width = max(GRAPH_WIDTH, 1 << (end - 1).bit_length())
    return size if width + 1 >= slots else width


def step_width(sizes):
    """The width of a compiled decoding loop whose steps decode `sizes` tokens: its widest step rounded up to a power
    of two, so that schedules of about the same widths share a graph."""
    return 1 << (max(sizes) - 1).bit_length()


GRAPH_WIDTH = 256  # up to this block a decoding runs one graph per step shape, over the whole cache


_fell_back = []  # whether note_eager_fallback has printed its note in this process


def note_eager_fallback():
    if not _fell_back:
        _fell_back.append(True)
        print(f'note: compiled decoding met more step shapes than torch.compile\'s recompile limit '
              f'({torch._dynamo.config.recompile_limit} graphs a function, over every model in this process): the '
              'loops that meet one more run eager, with the same tokens at eager speed')


class Engine:
    """Cached any-order decoding of a batch of batch_size rows, up to max_slots slots each.

    The cache holds keys and values in the autocast dtype when autocast is on where the engine is
    made, else in the model's dtype. After compile_decoding(model) each step after the first runs
    compiled, padded to step_width new slots and targets (its widest step, or more): one graph for
    every step of the loop, whatever the schedule gives each and whatever the cache holds.
    """

    def __init__(self, model, batch_size, max_slots, compiled=True, step_width=1):
        compiled = compiled and step_forward in getattr(model, 'compiled', {})
        self.step_width = step_width if compiled else 0
        # room for the padding of the last steps
        self.cache = KVCache(model.config, batch_size, max_slots, *cache_place(model),
                             spare=2 * max(self.step_width - 1, 0))
        self.forward = Forward(model, self.cache, step_forward, compiled)
        self.length, self.new, self.width = 0, 0, 0  # slots committed (the same in every row), new in the last
        # step, and those with its padding

    def reset(self):
        """Forget every slot: the next step starts a new sequence."""
        self.cache.lengths.zero_()
        self.length, self.new, self.width = 0, 0, 0

    def step(self, tokens, positions, targets):
        """Logits (B, k, V) for each target position in targets (B, k).

        tokens, positions (B, m): the slots not yet in the cache, in decoding order: on the first
        step the start slot (position -1) and any known tokens, later the tokens decoded by the
        previous step. Each predicts the position after it; the last one is run once per target,
        and these copies see the cache, the other new slots and themselves only, so every target is
        predicted from the same context. Then accept() keeps the slots.

        A compiled step pads m and k to step_width: padding slots that none sees, targets whose logits none reads.
        """
        B, m = positions.shape
        k = targets.size(1)
        eager = self.length == 0 or not self.step_width  # the prompt's length varies between calls
        if not eager and max(m, k) > self.step_width:
            raise ValueError(f'a step of {m} new slots and {k} targets is wider than the engine\'s step_width '
                             f'({self.step_width})')
        self.new, self.width = m, m if eager else self.step_width
        K = k if eager else self.step_width
        end = self.length + self.width + K - 1
        if end > self.cache.k[0].size(2):
            raise ValueError(f'KV cache overflow: {end} slots needed, {self.cache.k[0].size(2)} allocated')
        self.cache.end = end

        def pad(t, n, value):  # into a new tensor: one stride, as the graph guards
            return torch.cat([t, t.new_full((B, n - t.size(1)), value)], 1)
        if not eager:
            tokens, positions, targets = pad(tokens, self.width, 0), pad(positions, self.width, -1), pad(targets, K, -1)
        logits = self.forward(tokens, positions, targets, torch.full((B,), m, device=positions.device), eager=eager)
        return logits[:, :k]

    def start_from(self, shared):
        """Begin every row with the slots of the one-row cache `shared` (shared_cache); the next step reads the rest."""
        self.cache.copy_rows(shared)
        self.length = int(shared.lengths[0])

    def accept(self, last=None):
        """Keep the last step's slots, with the copy of row b's last slot whose target is decoded
        next: copy last[b] (B,), or copy 0 if last is None. Copies follow the slots in an unpadded step only
        (order=confidence decodes eager)."""
        if last is not None and self.width != self.new:
            raise ValueError('a padded (compiled) step keeps copy 0 of its last slot only: decode eager')
        self.cache.commit(self.new, last)
        self.length, self.new = self.length + self.new, 0


class EncoderEngine:
    """The encoder's decoding of a batch of batch_size rows of `length` tokens, with Engine's handshake.

    No cache: the canvas holds each row's current tokens, [MASK] where none is known or decoded
    yet, and every step runs one full forward over it. Its column 0 is a spare for the start slot
    (position -1), so canvas column p + 1 holds position p.
    """

    def __init__(self, model, batch_size, length):
        self.mask_id = model.mask_id
        device = next(model.parameters()).device
        self.canvas = torch.full((batch_size, length + 1), model.mask_id, device=device)
        self.forward = Forward(model, None, masked_forward)

    def reset(self):
        self.canvas.fill_(self.mask_id)

    def step(self, tokens, positions, targets):
        """Logits (B, k, V) for targets (B, k), once the tokens (B, m) are written at their positions (B, m)."""
        self.canvas.scatter_(1, positions + 1, tokens)
        return self.forward(self.canvas[:, 1:], targets)

    def accept(self, last=None):
        """Nothing to keep: the canvas holds every token the steps were given."""


def masked_forward(model, cache, z, positions):
    """The encoder's decoding forward: logits (B, Q, V) at positions (B, Q) of z (B, T); no cache."""
    return model.forward_masked(z, out_positions=positions)


def make_engine(model, batch_size, length, compiled=True, sizes=(1,)):
    """The engine that decodes rows of `length` tokens with `model` in steps of `sizes` tokens: the encoder's or the
    cached decoder's, whose steps run compiled if compile_decoding(model) ran and `compiled`."""
    if model.config.is_encoder:
        return EncoderEngine(model, batch_size, length)
    return Engine(model, batch_size, length + 1, compiled, step_width(sizes))


def compile_forward(model):
    """torch.compile the forward that scoring runs, with dynamic shapes (the chunks' slots vary in number)."""
    name = 'forward_masked' if model.config.is_encoder else 'forward_slots'
    setattr(model, name, torch.compile(getattr(model, name), dynamic=True))


def compile_decoding(model, dtype='float32'):
    """torch.compile what each decoding step runs, with static shapes (model.compiled, which Forward runs): the
    decoder's step_forward and speculative_forward, the encoder's masked_forward (its canvas is fixed). One graph
    per step shape, whatever the cache holds; on a GPU replayed as a CUDA graph (mode 'reduce-overhead'), with no
    launch per operation. dtype: the autocast dtype the steps run under (common.autocast), in which the Linear
    layers then keep their weights (store_linear_weights)."""
    if dtype != 'float32':
        store_linear_weights(model, getattr(torch, dtype))
    cuda = next(model.parameters()).is_cuda
    # on a CPU the graph's wrapper in C++ (cpp_wrapper) saves a step its Python wrapper's overhead
    options = dict(mode='reduce-overhead') if cuda else dict(options={'cpp_wrapper': True})
    forwards = (masked_forward,) if model.config.is_encoder else (step_forward, speculative_forward)
    model.compiled = {fn: torch.compile(fn, dynamic=False, fullgraph=True, **options) for fn in forwards}
    # dynamo keeps at most recompile_limit graphs of a function over every model in the process: each compiled model
    # adds the graphs its decoding can make, so that a grid of loops on several models stays compiled
    for limit in ('recompile_limit', 'accumulated_recompile_limit'):
        setattr(torch._dynamo.config, limit, getattr(torch._dynamo.config, limit) + decoding_graphs(model.config))
    # Forward meets the recompile limit itself, with one note a process (note_eager_fallback): dynamo's warning of it,
    # five lines at every loop that meets it, would only repeat the note
    logging.getLogger('torch._dynamo.convert_frame').setLevel(logging.ERROR)


def decoding_graphs(config):
    """The most graphs of each compiled function that one model's decoding makes in a script (sample.py, gen_ppl.py):
    one per step width (a power of two up to the block), cache width (graph_width's) and batch size (a batch and its
    remainder)."""
    block = config.block_size
    cache_widths = {graph_width(end, block + 1, block + 1) for end in range(1, block + 2)}
    return ((block - 1).bit_length() + 1) * len(cache_widths) * 2


def store_linear_weights(model, dtype):
    """Each Linear layer's weight and bias stored in dtype, what autocast casts them to at every forward: the same
    numbers under autocast, without a cast at each step (docs/speed.md; inductor's freezing, which would fold the
    casts into the graph, stops CUDA graphs from writing the cache). A head tied to
    the embedding gets its own copy, so the embedding stays as it was."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            for name, p in list(module.named_parameters(recurse=False)):
                setattr(module, name, nn.Parameter(p.detach().to(dtype), requires_grad=False))


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
    Equally likely tokens are ranked by id, the lower first (as a stable sort would).
    """
    s = sampling
    logits = logits.to(s.dtype, copy=True).div_(s.temperature)  # in place: a pass less over a 50k vocabulary
    if s.top_k is not None and s.top_k < logits.size(-1):
        kth = logits.topk(s.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    probs = logits.softmax(-1)
    if s.top_p < 1.0 and probs.numel():
        probs = probs.masked_fill(~nucleus(logits, probs, s.top_p, s.top_p_mode), 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


BUCKETS, BUCKETS_PER_NAT = 1024, 64  # the nucleus search's log-probability buckets (the last holds the rest)


def nucleus(logits, probs, top_p, mode):
    """The tokens top_p keeps (filter_probs' rule), bool (..., V), without sorting the vocabulary.

    Each token goes in a bucket by how far its logit is below the largest (1/64 nat a bucket), so the
    buckets are ordered as the sorted probabilities are. The buckets' masses say which one holds the
    crossing token: the buckets before it are kept, those after it dropped, and only its own tokens
    are sorted (a 50k-token row sorted whole costs 10 to 30 times more).
    """
    bucket = (logits.max(-1, keepdim=True).values - logits).mul_(BUCKETS_PER_NAT).clamp_(max=BUCKETS - 1).long()
    mass = probs.new_zeros(probs.shape[:-1] + (BUCKETS,)).scatter_add_(-1, bucket, probs)
    before = mass.cumsum(-1) - mass  # the mass of the buckets before each
    if mode == 'nucleus':  # the crossing bucket: the last whose tokens can have less than top_p before them
        crossing = (before < top_p).sum(-1, keepdim=True) - 1
    else:  # the first whose tokens cannot all be kept
        crossing = (before + mass <= top_p).sum(-1, keepdim=True).clamp(max=BUCKETS - 1)
    inside = bucket == crossing
    sorted_probs = probs.masked_fill(~inside, -1.0).topk(max(int(inside.sum(-1).max()), 1), -1).values
    ahead = before.gather(-1, crossing) + sorted_probs.cumsum(-1) - sorted_probs
    keep = (ahead < top_p) if mode == 'nucleus' else (ahead + sorted_probs <= top_p)
    keep &= sorted_probs >= 0  # the padding of rows whose bucket holds fewer tokens
    if mode == 'authors':  # the most likely token always stays
        keep[..., 0] |= crossing.squeeze(-1) == 0
    count = keep.sum(-1, keepdim=True)  # the crossing bucket keeps its `count` most likely tokens
    least = sorted_probs.gather(-1, (count - 1).clamp(min=0))
    above, tied = inside & (probs > least), inside & (probs == least)
    # ties in id order, as a stable sort (counted in int32: a bool's int64 cumsum is 4 times as slow)
    tied &= tied.cumsum(-1, dtype=torch.int32) <= count - above.sum(-1, keepdim=True)
    return (bucket < crossing) | above | tied


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


def sampling_probs(logits, sampling):
    """The distributions (..., V) tokens are drawn from: filter_probs, or a one-hot of the argmax when greedy."""
    if sampling.temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.size(-1)).to(sampling.dtype)
    return filter_probs(logits, sampling)


def confidence_scores(logits, kind):
    """Higher is more confident: the max-probability, or minus the entropy, of each prediction."""
    logp = logits.float().log_softmax(-1)
    return logp.max(-1).values.exp() if kind == 'maxprob' else (logp.exp() * logp).sum(-1)


def speculative_forward(model, cache, x, seq, read, m, live, width, k, tests):
    """The logits (B, tests + k, V) of a speculative forward: row b reads its m[b] (B,) new slots, positions
    seq[b, read[b]:] (then padding to width), and k - 1 copies of its last slot; out come its first `tests`
    new slots (which test its drafts), the last, and the copies, which target the next positions."""
    B, dev = x.size(0), x.device
    last = (m - 1).clamp(min=0).unsqueeze(1)
    col = torch.arange(width, device=dev)
    real = col < m.unsqueeze(1)
    index = read.unsqueeze(1) + col
    positions = torch.where(real, seq.gather(1, index), -1)
    targets = torch.where(real, seq.gather(1, index + 1), -1)
    copies = torch.arange(1, k, device=dev)
    positions = torch.cat([positions, positions.gather(1, last).expand(B, k - 1)], 1)
    targets = torch.cat([targets, torch.where(live.unsqueeze(1), seq.gather(1, (read + m).unsqueeze(1) + copies), -1)],
                        1)
    out = torch.cat([torch.arange(tests, device=dev).expand(B, tests), last, width - 1 + copies.expand(B, k - 1)], 1)
    return model.forward_slots(x.gather(1, positions.clamp(min=0)), positions, targets, cache,
                               cache.mask(m, width, k - 1), out_slots=out)


def decoding_orders(unknown, rows, order, generator):
    """(rows, n): the unknown positions (n,) in each row's decoding order: random, else left to right. Contiguous
    either way, so that a compiled step's graph (which guards the strides) serves both orders."""
    orders = unknown.expand(rows, -1)
    if order == 'random':
        return orders.gather(1, torch.rand(orders.shape, generator=generator, device=unknown.device).argsort(1))
    return orders.contiguous()


def write_where(x, positions, values, mask):
    """x[b, positions[b, j]] = values[b, j] where mask[b, j] (B, J), without a host sync: the others are written to a
    spare column, dropped."""
    spare = torch.cat([x, x[:, :1]], 1)
    spare.scatter_(1, torch.where(mask, positions, x.size(1)), values)
    x.copy_(spare[:, :-1])


