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
import logging
import math
import re
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import nn
from tqdm import tqdm

SCHEDULES = ('linear', 'cosine')
ORDERS = ('random', 'l2r', 'confidence', 'ancestral')  # which masked positions a step decodes
SPECULATIVE_ORDERS = ('random', 'l2r')  # the orders speculative decoding can keep exact
# --speculate=auto: the k that measured fastest on the CPU (docs/sampling.md), for one row and for a batch; left to
# right no k was faster at batch 16, and none clearly at batch 1, so it decodes one token per step
AUTO_K = {'random': (8, 4), 'l2r': (0, 0)}
# ... and a batch speculates only with a small vocabulary: each draft costs it a row of the output layer, which paid
# at 65 characters (1.2 to 1.8x at batch 16) and at GPT-2's 50,304 tokens made every k slower (0.24 to 0.95x);
# between the two it is unmeasured
AUTO_BATCH_VOCAB = 1024
CONFIDENCES = ('maxprob', 'entropy')
TOP_P_MODES = ('nucleus', 'authors')


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

    def commit(self, counts, last=None):
        """Keep the first counts (an int, or (B,) per row) new slots of each row; with last (B,), row b
        keeps new slot counts-1+last[b] as its last, which picks after the forward the copy that goes on."""
        if last is not None:
            dst = self.lengths + counts - 1
            for buf in self.k + self.v:
                buf[self.rows, :, dst] = buf[self.rows, :, dst + last]
        self.lengths += counts


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

    Compiled, each set of argument shapes and cache widths (graph_width) gets its graph once. Dynamo checks all its guards the first time a
    set comes, then only those that tell its graphs apart (skip_guard_eval_unsafe): within one loop nothing
    else can change, and the guards cost about 0.1 ms a forward on a CPU. On a GPU the graphs replay as CUDA
    graphs, which write the cache where it is (a static address) and overwrite their output at the next replay.
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


def check_order(model, order, speculate=0):
    """Raise ValueError unless `model` can decode in `order`, speculatively if speculate > 0: the
    ancestral rule needs the encoder; speculation a decoder (the exact joint of an order in one
    forward) and an order known before decoding starts."""
    if order == 'ancestral' and not model.config.is_encoder:
        raise ValueError("order=ancestral is MDLM's sampler for the encoder (architecture=encoder), and this "
                         "model is a decoder: use random, l2r or confidence")
    if speculate and model.config.is_encoder:
        raise ValueError('speculative decoding checks drafts against the exact joint of an order, which the encoder '
                         'does not give: sample the encoder with --speculate=0')
    if speculate and order not in SPECULATIVE_ORDERS:
        raise ValueError(f"speculative decoding needs the order before decoding starts, and {order!r} chooses it "
                         f"from the predictions: use --order=random or --order=l2r with --speculate")


def auto_k(model, order, batch_size):
    """--speculate=auto's k for a model, order and batch size (AUTO_K): 0, one token per step, where none is known
    to pay or speculation does not apply (the encoder, order=confidence)."""
    one, many = AUTO_K.get(order, (0, 0))
    if model.config.is_encoder or (batch_size > 1 and model.config.vocab_size > AUTO_BATCH_VOCAB):
        return 0
    return one if batch_size == 1 else many


def speculation_k(k, model, order, batch_size):
    """speculate (None, 'auto' or k) as the int k it means for a model: 'auto' auto_k's for the order and the rows of
    a batch (batch_size), None 0."""
    return auto_k(model, order, batch_size) if k == 'auto' else k or 0


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


def check_rules(values, rules, flag='{}'):
    """Raise ValueError naming the first value that breaks its rule; rules: {key: (test, what)}; flag names a value
    as its user wrote it (a script's --key, an argument's key)."""
    for key, (test, what) in rules.items():
        try:
            ok = test(values[key])
        except TypeError:  # e.g. a str where a number was expected (None defaults take any literal)
            ok = False
        if not ok:
            raise ValueError(f'{flag.format(key)} must be {what}, got {values[key]!r}')


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
    # on a CPU the graph's wrapper in C++ (cpp_wrapper) saves about 0.1 ms a step of Python
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
    numbers under autocast, without a cast (about 0.3 ms of a 1.6 ms step at batch 16 on an H200; inductor's
    freezing, which would fold the casts into the graph, stops CUDA graphs from writing the cache). A head tied to
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


def whole(value):
    """A float that is a whole number (1000.0, 1e3) as that int, the one rule for ints written as floats; any other
    value as it is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def parse_number(text, kind=float):
    """The number that text writes, the one reader of numbers in settings and templates: kind=int takes a whole
    number, also written as a float (2e5). ASCII only: int() and float() also read other scripts' digits ('٥' is 5).
    ValueError naming what is wrong, every other character included."""
    what = 'a whole number' if kind is int else 'a number'
    others = sorted({c for c in text if not c.isascii()})
    if others:
        raise ValueError(f"{text!r} holds {', '.join(f'{c!r} (U+{ord(c):04X})' for c in others)}, not ASCII: write "
                         f"{what} with the digits 0-9")
    try:
        return kind(text)  # an int exactly, however long
    except ValueError:
        pass
    try:
        number = whole(float(text))  # an int written as a float
    except ValueError:
        number = None
    if type(number) is not kind:
        raise ValueError(f'{text!r} is not {what}')
    return number


def parse_infill(template, marker, encode):
    """Token ids and a known-mask (lists) for an infill template, whose text encode() turns into ids: marker is one
    masked token, and with a count before its last character (e.g. [MASK:5]) that many. ValueError naming every bad
    count."""
    pattern = re.escape(marker[:-1]) + f'(?::([^{re.escape(marker[-1])}]*))?' + re.escape(marker[-1])
    parts = re.split(pattern, template)
    texts, counts = parts[::2], parts[1::2]
    if not counts:
        raise ValueError(f'the infill template has no {marker} marker')
    sizes = [1 if count is None else count_of(count) for count in counts]
    bad = [f'{marker[:-1]}:{count}{marker[-1]}' for count, size in zip(counts, sizes) if not size]
    if bad:
        raise ValueError(f"{', '.join(bad)} in the infill template: a masked span needs a whole number of tokens, at "
                         f"least one, in the digits 0-9 (as in {marker[:-1]}:5{marker[-1]})")
    encode(''.join(texts))  # a tokenizer's error names every character it does not read, not one piece's
    ids, known = [], []
    for text, size in zip(texts, sizes + [0]):  # no marker after the last text
        piece = encode(text)
        ids += piece + [0] * size
        known += [True] * len(piece) + [False] * size
    return ids, known


def count_of(text):
    """The whole number >= 1 that text writes (parse_number), such as the 5 of [MASK:5]; 0 for any other text."""
    try:
        return max(parse_number(text, int), 0)
    except ValueError:
        return 0


@torch.no_grad()
def generate(model, x, known, steps, sampling=Sampling(), *, schedule='linear', order='random', confidence='maxprob',
             generator=None, n_tokens=None, progress=False, on_step=None, reuse_forward=True, speculate=0, stats=None,
             count=None):
    """Fill the unknown positions of x (B, T) in place; return x and the decoding order (B, n).

    known (T,) bool: the given tokens (the same positions in every row). They are read first, left
    to right, in one forward with the first step; then the n unknown positions are decoded in
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


@dataclass
class Speculation:
    """What speculative decoding did, added up over calls: batched forwards, forwards x rows of each
    call (row_forwards), forwards that each row took part in until its last token (row_forwards_alone),
    tokens decoded in all rows, and the ratio tests run and passed."""
    forwards: int = 0
    row_forwards: int = 0
    row_forwards_alone: int = 0
    tokens: int = 0
    tests: int = 0
    kept: int = 0

    def add(self, forwards, rows, work, tokens):
        """Add a call's forwards of `rows` rows that decoded `tokens` tokens; work (3,), on the device: the rows
        live, the drafts tested and those kept, summed over its forwards."""
        alone, tested, passed = work.tolist()
        self.forwards += forwards
        self.row_forwards += forwards * rows
        self.row_forwards_alone += alone
        self.tests += tested
        self.kept += passed
        self.tokens += tokens

    def summary(self):
        """Tokens per forward of each row in its batch (one token per step: 1), the same if each row had
        run alone (the gap is what batching costs), and the share of ratio tests passed."""
        return dict(forwards=self.forwards, tokens_per_forward=self.tokens / max(self.row_forwards, 1),
                    tokens_per_forward_alone=self.tokens / max(self.row_forwards_alone, 1),
                    acceptance=self.kept / max(self.tests, 1))

    def __str__(self):
        s = self.summary()
        return (f"speculative decoding: {s['forwards']} forwards, {s['tokens_per_forward']:.2f} tokens per forward "
                f"per row ({s['tokens_per_forward_alone']:.2f} alone), {100 * s['acceptance']:.1f}% of drafts kept")


@torch.no_grad()
def speculative(model, x, known, k, sampling=Sampling(), *, order='random', generator=None, n_tokens=None,
                progress=False, stats=None, trace=None, count=None):
    """Fill the unknown positions of x (B, T) in place by any-subset speculative decoding (Guo & Ermon,
    arXiv 2504.20456) with up to k drafts per forward; return x and the decoding order (B, n). The
    samples are distributed exactly as generate's with one token per step in the same order (order
    'random' or 'l2r'), `sampling` included (greedy gives its output).

    Each row reads its slots in one order: the start slot, the known positions left to right, then the
    unknown ones. A forward reads each row's new slots and runs k copies of its last one, targeting
    the next k positions: their logits give q, from which the row drafts k tokens at once. The first
    draft is kept (q is its exact conditional). The next forward reads the drafts in order, so the slot
    before draft i gives p_i, its conditional given the drafts before it: draft i is kept with probability
    min(1, p_i/q_i) while all before it were; the first one rejected is drawn from max(p_i - q_i, 0)
    instead, and the drafts after it, drawn independently of it, are tested by the next forward against
    their q. Kept slots stay in the cache as written; a row that kept every draft drafts again from the
    same forward's copies. Each row keeps its own number of tokens per forward
    in its own cache length (KVCache.lengths). stats (a Speculation), if given, adds up what was done.
    k is capped at the unknown positions: more drafts than that could never be read.
    count > B: draw count samples and return them (count, T) with their orders, x's rows taking turns: a
    row that finishes hands in its sample and starts the next one on its own prompt, so the
    batch never waits for its slowest row (the samples then use the random numbers in another order
    than B rows at a time would: other draws from the same distribution).

    trace(samples, context, target, probs), if given, sees every distribution the sampler treats as
    exact, as it is used: for sample samples[i] (its row of the output), probs[i] (V,) is taken as the
    law of the target[i]-th position of the sample's read order (the known positions left to right,
    then the unknown ones in decoding order), given its first context[i] positions; the tests compare
    them with full forwards.
    """
    check_order(model, order, k)
    B, T = x.shape
    dev = x.device
    count = count or B
    unknown = (~known).nonzero().squeeze(1)
    n = unknown.numel()
    k = min(k, n)
    if k == 0:
        return x[torch.arange(count, device=dev) % B], unknown.expand(count, -1)
    given = known.nonzero().squeeze(1).expand(B, -1)
    g, total = given.size(1), 1 + given.size(1) + n
    # a forward's slots past a row's end: up to the widest row's (its drafts, or a new sample's prompt), then k copies
    spare = max(k, 1 + g) + k
    none = torch.full((B, 1), -1, device=dev)
    # the read order; -1 past its end: no target
    seq = torch.cat([none, given, decoding_orders(unknown, B, order, generator), none.expand(B, spare)], 1)
    samples, orders = (x, None) if count == B else (x.new_empty(count, T), x.new_empty(count, n))
    sample_of, next_sample = torch.arange(B, device=dev), B  # the sample each row draws; the next one to start
    forwards, work = 0, torch.zeros(3, dtype=torch.long, device=dev)  # rows live, drafts tested and kept, summed
    report = trace and (lambda rows, *law: trace(sample_of[rows], *law))
    cache = KVCache(model.config, B, total + spare, *cache_place(model))
    read = torch.zeros(B, dtype=torch.long, device=dev)  # slots of seq in the cache
    decided = torch.full((B,), 1 + g, device=dev)  # positions of seq whose token is final
    drafted = torch.zeros_like(read)  # drafts after them, to be tested by the next forward
    # the pending drafts' logits (B, k - 1, V), q of each drafted token (B, k - 1), and the read-order place
    # they were drawn after (B,): the last position of their context
    q_logits = q_drawn = drawn_after = None
    bar = tqdm(total=count * n, disable=not progress, desc='tokens')
    forward = Forward(model, cache, speculative_forward)
    reading_prompt = True  # a row reads its whole prompt in this forward: the first, or one after a row restarted
    more = True
    while more:
        live = decided < total
        # each row's new slots: 1 (or its prompt), then its drafts, at most k: one width, one graph
        width = max(k, 1 + g) if reading_prompt else k
        tests = 0 if forwards == 0 else k - 1  # slots that test drafts (none are pending in the first forward)
        m = torch.where(live, decided + drafted - read, 0)
        # a prompt's length varies between calls: read eager, not by a graph per prompt
        logits = forward(x, seq, read, m, live, width, k, tests, eager=reading_prompt)[..., :n_tokens]
        kept = torch.zeros_like(read)
        rejected = torch.zeros_like(live)
        if tests:
            kept, rejected = verify_drafts(x, seq, logits[:, :tests], q_logits, q_drawn, read, decided, drafted,
                                           drawn_after, sampling, generator, report)
        # the cache keeps each row's slots up to its decided positions and its kept drafts; a rejected draft's
        # new token is decided, and read by the next forward
        counts = torch.where(live, decided - read + kept, 0)
        cache.commit(counts)
        read += counts
        decided += kept + rejected
        # the drafts after a rejected one were drawn independently of it: still valid, the next forward tests them
        survivors = torch.where(rejected, drafted - kept - 1, 0)
        draft = live & ~rejected & (decided < total)
        drafts = torch.where(draft, (total - decided).clamp(max=k), 0)
        drawn = draw_drafts(x, seq, logits[:, tests:], decided, drafts, sampling, generator, report)
        if tests:  # the drafts the next forward tests: a rejected draft's survivors, or the new ones
            q_logits, q_drawn, drawn_after = pending_q(logits[:, tests:], drawn, decided, kept, rejected,
                                                       q_logits, q_drawn, drawn_after)
        else:  # none were tested: every row's are its new ones
            q_logits, q_drawn, drawn_after = logits[:, 1:], drawn[:, 1:], decided - 1
        decided += draft
        drafted = torch.where(draft, (drafts - 1).clamp(min=0), survivors)
        forwards += 1
        work += torch.stack([live.sum(), (kept + rejected).sum(), kept.sum()])  # on the device: no sync
        reading_prompt = False
        finished = live & (decided == total)
        # the loop's one host sync a forward: whether a row finished, whether any goes on
        any_finished, more = torch.stack([finished.any(), (decided < total).any()]).tolist()
        if count > B and any_finished:  # the rows that finished hand in their samples and start the next ones
            for r in finished.nonzero().squeeze(1).tolist():
                samples[sample_of[r]], orders[sample_of[r]] = x[r], seq[r, 1 + g:total]
                if next_sample < count:  # on its own prompt (x's known positions are never written); no drafts pending
                    seq[r, 1 + g:total] = decoding_orders(unknown, 1, order, generator)[0]
                    read[r], decided[r], cache.lengths[r] = 0, 1 + g, 0
                    sample_of[r], next_sample = next_sample, next_sample + 1
                    reading_prompt = more = True
        if progress:
            bar.update((next_sample - B) * n + int((decided - 1 - g).sum()) - bar.n)
    bar.close()
    if stats is not None:
        stats.add(forwards, B, work, count * n)
    return samples, seq[:, 1 + g:total] if count == B else orders


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


def verify_drafts(x, seq, logits, q_logits, q_drawn, read, decided, drafted, drawn_after, sampling, generator,
                  trace=None):
    """The ratio tests of each row's drafted tokens, in order: how many are kept (B,) and whether one was
    rejected (B,), in which case its token in x is drawn again from max(p - q, 0).

    logits (B, P, V): the first P new slots of the forward that read the drafts; draft j (at
    seq[decided + j]) is predicted by the slot before it, new slot decided - read + j - 1. q_logits
    (B, P, V): the logits the drafts were drawn from, q_drawn (B, P) the drawn tokens' q, drawn_after (B,)
    the place in seq of the last position they were drawn given. Every row's P tests are computed and those
    past its drafts ignored, so that nothing waits for the device.
    """
    B, P, V = logits.shape
    j = torch.arange(P, device=x.device)
    pending = j < drafted.unsqueeze(1)
    slot = torch.where(pending, (decided - read - 1).unsqueeze(1) + j, 0)
    p = sampling_probs(logits.gather(1, slot.unsqueeze(-1).expand(-1, -1, V)), sampling)  # (B, P, V)
    where = seq.gather(1, decided.unsqueeze(1) + j)  # the drafts' positions (-1 past a row's end)
    drafts = x.gather(1, where.clamp(min=0)).clamp(max=V - 1)  # where no draft is pending: any id, unused
    p_drawn = p.gather(-1, drafts.unsqueeze(-1)).squeeze(-1)
    ratio = torch.where(pending, p_drawn / q_drawn, 0.0)
    u = torch.rand((B, P), generator=generator, device=x.device, dtype=sampling.dtype)
    kept = ((u < ratio) & pending).long().cumprod(1).sum(1)
    rejected = kept < drafted
    if trace is not None:  # draft j's test: its law given the drafts before it, and q, drawn one position earlier
        rows, cols = pending.nonzero(as_tuple=True)
        tested = cols <= kept[rows]
        rows, cols = rows[tested], cols[tested]
        at = decided[rows] - 1 + cols
        trace(rows, at, at, p[rows, cols])
        trace(rows, drawn_after[rows], at, sampling_probs(q_logits[rows, cols], sampling))
    u = torch.rand((B, 1), generator=generator, device=x.device, dtype=sampling.dtype)
    at = kept.clamp(max=P - 1).view(B, 1, 1)  # each row's rejected draft, where it has one
    p_at = p.gather(1, at.expand(-1, -1, V)).squeeze(1)
    q_at = sampling_probs(q_logits.gather(1, at.expand(-1, -1, V)).squeeze(1), sampling)
    residual = (p_at - q_at).clamp(min=0)
    residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, p_at)  # p == q: no rejection is possible
    write_where(x, where.gather(1, at.view(B, 1)), inverse_cdf(residual, u), rejected.unsqueeze(1))
    return kept, rejected


def draw_drafts(x, seq, logits, decided, drafts, sampling, generator, trace=None):
    """Draw each row's drafts[b] (B,) next tokens at once, independently, from logits (B, k, V) (its last slot's and
    copies', all given the decided positions), and write them in x at the read order's positions seq[b, decided[b]:];
    return each draft's q (B, k), 0 past a row's drafts."""
    B, k, _ = logits.shape
    u = torch.rand((B, k, 1), generator=generator, device=x.device, dtype=sampling.dtype)
    active = torch.arange(k, device=x.device) < drafts.unsqueeze(1)  # (B, k): the drafts drawn; the rest unused
    q = sampling_probs(logits, sampling)
    tokens = inverse_cdf(q, u).squeeze(-1)
    if trace is not None:  # draft j is drawn from its law given the decided positions
        rows, j = active.nonzero(as_tuple=True)
        trace(rows, decided[rows] - 1, decided[rows] - 1 + j, q[rows, j])
    write_where(x, seq.gather(1, decided.unsqueeze(1) + torch.arange(k, device=x.device)), tokens, active)
    return torch.where(active, q.gather(-1, tokens.unsqueeze(-1)).squeeze(-1), 0.0)


def pending_q(logits, drawn, decided, kept, rejected, q_logits, q_drawn, drawn_after):
    """What the next forward's ratio tests divide by, as verify_drafts takes it (q_logits, q_drawn, drawn_after):
    a row that rejected a draft keeps the q of the drafts after it, shifted past it; any other row tests its new
    drafts, drawn after decided - 1 (B,) from logits (B, k, V) with q drawn (B, k), but the first (kept as drawn)."""
    B, k, V = logits.shape
    shift = ((kept + 1).unsqueeze(1) + torch.arange(k - 1, device=kept.device)).clamp(max=k - 2)
    old_logits = q_logits.gather(1, shift.unsqueeze(-1).expand(-1, -1, V))
    return (torch.where(rejected.view(B, 1, 1), old_logits, logits[:, 1:]),
            torch.where(rejected.unsqueeze(1), q_drawn.gather(1, shift), drawn[:, 1:]),
            torch.where(rejected, drawn_after, decided - 1))


def write_where(x, positions, values, mask):
    """x[b, positions[b, j]] = values[b, j] where mask[b, j] (B, J), without a host sync: the others are written to a
    spare column, dropped."""
    spare = torch.cat([x, x[:, :1]], 1)
    spare.scatter_(1, torch.where(mask, positions, x.size(1)), values)
    x.copy_(spare[:, :-1])


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
