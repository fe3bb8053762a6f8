"""
Scoring: how well a model predicts given tokens. Per-token log-probabilities of evaluation chunks,
left to right, in any order and ensembled over context orders (eval_ppl.py, train.py's val losses
read the same chunks); the encoder's NELBO bound and exact left-to-right log-probs on the same
chunks; and the statistics of generated samples (gen_ppl.py).

The fast ensemble: only the prefix up to slot i matters for target i, so each (target, member)
query is a row of i+1 slots, rows of similar length are batched (at most max_tokens slots per
forward) and only the query slot goes through the head: about half the slots of one full forward
per query, and none of the wasted vocabulary projections.
"""
import ctypes
import hashlib
import json
import math
from contextlib import nullcontext
from itertools import islice
from typing import NamedTuple

import torch
from torch.nn import functional as F
from torch.nn.utils.rnn import pad_sequence
from tqdm import tqdm

try:  # a model folder (export.py): configurator.py lies beside this file
    from .configurator import parse_number
except ImportError:  # the repository: configurator.py is at its root
    from configurator import parse_number

HEAD_COST = 64  # a query's logits row takes about as much memory as 64 slots of activations


def release_freed_memory():
    """Give freed CPU memory back to the system. glibc keeps the freed blocks of tensors of varying
    sizes in its per-thread heaps, so without this a long CPU evaluation's RSS creeps up (3x seen)."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def _find_malloc_trim():
    try:
        return ctypes.CDLL('libc.so.6').malloc_trim
    except (OSError, AttributeError):  # not glibc: macOS, Windows, musl
        return None


_malloc_trim = _find_malloc_trim()



# -----------------------------------------------------------------------------
# chunks: left to right, any order, context-order ensembles

def content_seed(seed, tokens):
    """A seed from the seed setting and some tokens (a list of ids), so the same text gets the same random orders,
    masks or gaps wherever it falls in a call, whatever its neighbours."""
    digest = hashlib.sha256(json.dumps([seed, tokens]).encode()).digest()
    return int.from_bytes(digest[:8], 'little')


def random_context_orders(order, n_extra, seed):
    """context_orders(i) -> (n_extra, i): independent uniform orders of the context set order[:i].

    Seeded per target, so the orders do not depend on batching, and drawn row after row, so the
    members of a smaller ensemble are the first members of a larger one.
    """
    def context_orders(i):
        g = torch.Generator().manual_seed(hash((seed, i)))
        return order[:i][torch.rand(n_extra, i, generator=g, dtype=torch.float64).argsort(1)]
    return context_orders


def query_batches(lengths, max_tokens):
    """The indices of queries of the given context lengths, longest first (ties in their order), grouped under the
    token budget: a row is its context plus the start slot, plus HEAD_COST through the head. A batch's rows are
    padded to its first (longest) row; keeping them within 1/8 of its length bounds the padding to 12.5% of the
    slots."""
    batch, width = [], 0
    for q in sorted(range(len(lengths)), key=lambda q: -lengths[q]):
        width = width or lengths[q] + 1
        if batch and ((len(batch) + 1) * (width + HEAD_COST) > max_tokens or 8 * (width - lengths[q] - 1) > width):
            yield batch
            batch, width = [], lengths[q] + 1
        batch.append(q)
    if batch:
        yield batch


@torch.no_grad()
def query_logprobs(model, queries, max_tokens):
    """log p(x[target] | the tokens of x at the context's positions, read in that order) of each query
    (x, context, target), x and context on the CPU: (len(queries),).

    A query is a row: the start slot, then the context (each slot predicting the next position), the last
    slot predicting the target. Right padding is harmless under causal attention, and only the last slot
    goes through the head.
    """
    device = next(model.parameters()).device
    out = torch.empty(len(queries))
    for batch in query_batches([len(context) for _, context, _ in queries], max_tokens):
        rows = [queries[q] for q in batch] * (2 if len(batch) == 1 else 1)  # a compiled model never meets one row
        pos = pad_sequence([F.pad(context, (1, 0), value=-1) for _, context, _ in rows], batch_first=True,
                           padding_value=-1)
        tgt = pad_sequence([F.pad(context, (0, 1), value=target) for _, context, target in rows], batch_first=True,
                           padding_value=-1)
        xs = [x for x, _, _ in rows]
        x = xs[0].expand(len(rows), -1) if all(x is xs[0] for x in xs) else pad_sequence(xs, batch_first=True)
        tokens = x.gather(1, pos.clamp(min=0))  # the start slot's token is ignored
        last = torch.tensor([[len(context)] for _, context, _ in rows])
        labels = x.gather(1, torch.tensor([[target] for _, _, target in rows]))
        logits = model.forward_slots(tokens.to(device), pos.to(device), tgt.to(device), out_slots=last.to(device))
        logp = F.log_softmax(logits[:, 0].float(), dim=-1).gather(1, labels.to(device))[:, 0].cpu()
        out[batch] = logp[:len(batch)]
    return out


@torch.no_grad()
def ensemble_logprobs(model, x, order, context_orders, ensemble, max_tokens):
    """log p(x[order_i] | context set x[order_<i] read in member j's order), j < ensemble: (ensemble, n).

    Member 0 reads the context in `order` itself (one forward for every target); members 1.. read it
    in context_orders(i)[j-1], one query row each (query_logprobs).
    """
    n = len(x)
    out = torch.empty(ensemble, n)
    _, loss = model(x[None], order[None], reduction='none')
    out[0] = -loss[0].float().cpu()
    if ensemble == 1:
        return out
    out[1:, 0] = out[0, 0]  # an empty context reads the same in every order
    x, order = x.cpu(), order.cpu()  # rows are built on the CPU, then moved in one piece
    targets = range(n - 1, 0, -1)
    contexts = [context for i in targets for context in context_orders(i)[:ensemble - 1]]
    logp = query_logprobs(model, [(x, context, order[len(context)].item()) for context in contexts], max_tokens)
    out[1:, 1:] = logp.view(n - 1, ensemble - 1).flip(0).T
    return out


def ensemble_slots(n, ensemble):
    """The slots ensemble_logprobs reads for a chunk of n tokens, its rows' padding aside: member 0's forward (the
    start slot and n), then for each target after the first the other members' query rows (the start slot and its
    context each): its test-time compute, against n + 1 for one left-to-right reading."""
    return n + 1 + (ensemble - 1) * sum(i + 1 for i in range(1, n))


def ensemble_sizes(ensemble):
    """The ensembles reported up to `ensemble`: 1, 2, 4, ... and itself."""
    return [2 ** k for k in range(int(math.log2(ensemble)) + 1)] + ([ensemble] if ensemble & (ensemble - 1) else [])


@torch.no_grad()
def decoder_l2r_logprobs(model, x, ctx=nullcontext()):
    """log p(x_i | x_<i) of every token of a chunk x (n,) under a decoder, read left to right: (n,), on the CPU."""
    with ctx:
        _, loss = model(x[None], torch.arange(len(x), device=x.device)[None], reduction='none')
    return -loss[0].float().cpu()


@torch.no_grad()  # the kept per-token results must not hold each chunk's graph
def score_chunks(model, chunks, ensemble, max_tokens, seed, ctx=nullcontext(), desc=None, l2r_ctx=None):
    """Per-token log-probs of all chunks: l2r (N*n,) and the ensemble's members (ensemble, N*n), on the CPU.

    The any-order members run under ctx, the left-to-right pass under l2r_ctx (default: ctx).
    """
    l2r, members = [], []
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    for c, x in enumerate(tqdm(chunks, desc=desc, disable=desc is None)):
        order = torch.randperm(len(x), generator=generator)
        x = x.to(device)
        l2r.append(decoder_l2r_logprobs(model, x, ctx if l2r_ctx is None else l2r_ctx))
        with ctx:
            orders = random_context_orders(order, ensemble - 1, hash((seed, c)))
            members.append(ensemble_logprobs(model, x, order.to(device), orders, ensemble, max_tokens))
        release_freed_memory()
    return torch.cat(l2r), torch.cat(members, dim=1)


@torch.no_grad()
def hf_l2r_logprobs(model, chunks, max_tokens, ctx=nullcontext(), desc=None):
    """log p(x_t | x_<t), t = 2..n, of every chunk under a Hugging Face causal LM: (N*(n-1),), on the CPU.

    The first token of a chunk has no context and is not scored, as the authors scored GPT-2.
    Every position goes through the head, so a chunk costs n*(1+HEAD_COST) slots of the budget.
    """
    device = next(model.parameters()).device
    rows = max(1, max_tokens // (chunks.size(1) * (1 + HEAD_COST)))
    out = []
    for batch in tqdm(chunks.split(rows), desc=desc, disable=desc is None):
        x = batch.to(device)
        with ctx:
            logits = model(x).logits[:, :-1]
        out.append(-F.cross_entropy(logits.float().flatten(0, 1), x[:, 1:].flatten(), reduction='none').cpu())
        release_freed_memory()
    return torch.cat(out)


@torch.no_grad()
def hf_start_logprobs(model, tokens, ctx=nullcontext()):
    """log p(token | the start token) of each token (N,) under a Hugging Face causal LM: a chunk's first token read
    after <|endoftext|> (GPT-2's start and end of text; a model's bos_token_id where it has one): (N,), on the CPU."""
    start = model.config.bos_token_id if model.config.bos_token_id is not None else model.config.eos_token_id
    device = next(model.parameters()).device
    with ctx:
        logits = model(torch.tensor([[start]], device=device)).logits[0, -1].float()
    return F.log_softmax(logits, -1).cpu()[tokens]


def perplexity(logprobs):
    return math.exp(-logprobs.mean().item())


def mixture_logprobs(members, ensemble):
    """Per token, the log of the mean over the first `ensemble` members of their probabilities."""
    return members[:ensemble].logsumexp(0) - math.log(ensemble)


def perplexities(l2r, members):
    ppl = {'l2r': perplexity(l2r)}
    for size in ensemble_sizes(members.size(0)):
        ppl[size] = perplexity(mixture_logprobs(members, size))
    return ppl


def chunk_nlls(l2r, members, n_chunks):
    """Each chunk's mean -log p per token (nats) in the columns of perplexities, as lists ('l2r', 1, 2, ...; l2r
    or members None leaves theirs out): kept for paired comparisons over chunks. The chunks are of equal
    length, so the exp of a column's mean is its perplexity."""
    columns = ({} if l2r is None else {'l2r': l2r}) | \
        ({} if members is None else {size: mixture_logprobs(members, size) for size in ensemble_sizes(members.size(0))})
    return {k: (-v.double().view(n_chunks, -1).mean(1)).tolist() for k, v in columns.items()}


# -----------------------------------------------------------------------------
# the encoder (MDM): its NELBO bound and its exact left-to-right log-probs; its context is a set, read
# in no order, so there is no ensemble over context orders

def batched(rows, size):
    """Consecutive lists of `size` rows of an iterable, the last one shorter."""
    rows = iter(rows)
    return iter(lambda: list(islice(rows, size)), [])


def nelbo_masks(n, n_samples, generator):
    """n_samples masks of n positions, one per stratum of the masking level: (mask (K, n), levels (K,)).

    Copy k masks exactly m_k random positions, m_k = 1 + floor(n (k + u_k) / K) (u_k uniform), so the
    counts cover 1..n evenly and the level is m_k / n. Weighted by n / m_k, the masked -log p summed and
    divided by n is an unbiased estimate of the NELBO per token: a masked set M has the weight
    (|M|-1)! (n-|M|)! / n! in it, which is 1/n for its size times 1/|M| over the sets of that size.
    Unlike drawing t and masking each position with probability t, the weights stay at most n, so
    the estimate has no heavy tail (there, t near 0 weighs a lone masked token by 1/t).
    """
    K = n_samples
    u = torch.rand(K, generator=generator, dtype=torch.float64)
    m = 1 + (n * (torch.arange(K) + u) / K).long().clamp(max=n - 1)
    order = torch.rand(K, n, generator=generator).argsort(1)  # a uniform random subset of each size
    mask = torch.zeros(K, n, dtype=torch.bool).scatter_(1, order, torch.arange(n) < m[:, None])
    return mask, m / n


def nelbo_rows(chunks, n_samples, seed, desc, gaps=None):
    """(chunk index, mask, 1/level) of each masked copy of each chunk: its masks over every position, or with gaps
    over chunk c's gap positions gaps[c] only. A chunk's masks come from its own seeded generator, so they do not
    depend on batching."""
    for c, x in enumerate(tqdm(chunks, desc=desc, disable=desc is None)):
        positions = torch.arange(len(x)) if gaps is None else gaps[c]
        hidden, t = nelbo_masks(len(positions), n_samples, torch.Generator().manual_seed(hash((seed, c))))
        mask = torch.zeros(n_samples, len(x), dtype=torch.bool)
        mask[:, positions] = hidden
        yield from zip([c] * n_samples, mask, (1 / t).float())


@torch.no_grad()
def nelbo_estimates(model, chunks, n_samples, max_tokens, seed, ctx=nullcontext(), desc=None, gaps=None):
    """Each chunk's NELBO per token, the encoder's bound on -log p(x) / n: (N,) float64, on the CPU. With gaps
    (each chunk's gap positions), the bound on -log p(gap | the rest of the chunk) / G, G the gap's length: only
    the gap's positions are ever masked (MDLM's estimator, the rest always known).

    Unbiased: the mean over n_samples masked copies (nelbo_masks) of n/m * the sum over the m masked
    positions of -log p(x_i | the unmasked tokens) / n, the model's own weighted loss (n: the gap's length G
    with gaps). A copy's every position goes through the head, so a copy costs n * (1 + HEAD_COST) slots of the
    budget.
    """
    device = next(model.parameters()).device
    N, n = chunks.shape
    total = torch.zeros(N, dtype=torch.float64)
    rows = nelbo_rows(chunks, n_samples, seed, desc, gaps)
    for batch in batched(rows, max(1, max_tokens // (n * (1 + HEAD_COST)))):
        c, mask, weights = zip(*batch)
        c, mask, weights = torch.tensor(c), torch.stack(mask), torch.stack(weights)[:, None]
        with ctx:
            _, terms = model(chunks[c].to(device), mask.to(device), weights.to(device), reduction='none')
        total.index_add_(0, c, terms.double().sum(1).cpu())
        release_freed_memory()
    lengths = torch.full((N,), n) if gaps is None else torch.tensor([len(g) for g in gaps])
    return total / (n_samples * lengths)


def nelbo_bound(estimates):
    """A set's perplexity bound exp(NELBO), NELBO the mean of its chunks' estimates, and the bound's
    standard error by the delta method, exp(NELBO) * std over chunks / sqrt(N) (nan for one chunk)."""
    bound = math.exp(estimates.mean().item())
    se = estimates.std().item() / math.sqrt(len(estimates)) if len(estimates) > 1 else math.nan
    return bound, bound * se


def nearest_known(positions, known, n):
    """The distance from each of positions (P,) to the nearest of known (K,); n (farther than any) when K = 0."""
    if not len(known):
        return torch.full((len(positions),), n)
    return (positions[:, None] - known[None, :]).abs().min(1).values


@torch.no_grad()
def losses_by_context(model, x, order, counts):
    """-log p of the tokens of x (n,) not yet read, given the first c positions of `order` (n,) known, with each
    one's distance from the nearest known position (n when none is): (known counts, distances, nlls), one entry per
    prediction.

    A decoder reads x in `order`, and slot c predicts position order[c] from the c before it: every c, one
    forward. The encoder sees the first `c` of the order for each c of `counts` and predicts every other position
    (exchangeable with order[c]: the same loss in expectation, with less noise): a forward per count.
    """
    device = next(model.parameters()).device
    n = len(x)
    if not model.config.is_encoder:
        _, loss = model(x[None].to(device), order[None].to(device), reduction='none')
        distances = torch.cat([nearest_known(order[c:c + 1], order[:c], n) for c in range(n)])
        return torch.arange(n), distances, loss[0].double().cpu()
    known, distances, nlls = [], [], []
    for c in counts:
        hidden = order[c:]
        z = x.clone()
        z[hidden] = model.mask_id
        logits = model.forward_masked(z[None].to(device), out_positions=hidden[None].to(device))[0]
        nlls.append(F.cross_entropy(logits.float(), x[hidden].to(device), reduction='none').double().cpu())
        distances.append(nearest_known(hidden, order[:c], n))
        known.append(torch.full((len(hidden),), c))
    return torch.cat(known), torch.cat(distances), torch.cat(nlls)


def l2r_queries(chunks, first, desc, gaps=None):
    """(chunk index, position) of each left-to-right query: from position `first` on, or chunk c's gap gaps[c]."""
    for c, x in enumerate(tqdm(chunks, desc=desc, disable=desc is None)):
        yield from ((c, i) for i in (range(first, len(x)) if gaps is None else gaps[c].tolist()))


@torch.no_grad()
def encoder_l2r_logprobs(model, chunks, max_tokens, ctx=nullcontext(), desc=None, first=0, gaps=None):
    """log p(x_i | x_<i) of every token from position `first` on under the encoder, exactly, and whether each
    is the argmax: two (N*(n-first),) tensors, on the CPU. With gaps (each chunk's gap positions, sorted), the gap
    revealed left to right with the rest of the chunk known: log p(x_i | the rest, the gap's tokens before i) of
    each gap token, in the gaps' order.

    Position i is read with positions i..n-1 masked (of the gap only, with gaps), and only it goes through the
    head: a forward of n slots per token read, O(n^2) work for a chunk. Position 0 is predicted from nothing, as a
    decoder's start slot predicts it.
    """
    device = next(model.parameters()).device
    N, n = chunks.shape
    hideable = torch.ones(N, n, dtype=torch.bool)
    if gaps is not None:
        hideable = torch.zeros(N, n, dtype=torch.bool)
        for c, gap in enumerate(gaps):
            hideable[c, gap] = True
    logp, hit = [torch.empty(0)], [torch.empty(0, dtype=torch.bool)]  # none when first = n
    for batch in batched(l2r_queries(chunks, first, desc, gaps), max(1, max_tokens // (n + HEAD_COST))):
        c, i = torch.tensor(batch).T
        z = torch.where(hideable[c] & (torch.arange(n) >= i[:, None]), model.mask_id, chunks[c])
        with ctx:
            logits = model.forward_masked(z.to(device), out_positions=i[:, None].to(device))[:, 0].float()
        token = chunks[c, i][:, None].to(device)
        logp.append(F.log_softmax(logits, dim=-1).gather(1, token)[:, 0].cpu())
        hit.append((logits.argmax(-1, keepdim=True) == token)[:, 0].cpu())
        release_freed_memory()
    return torch.cat(logp), torch.cat(hit)


# -----------------------------------------------------------------------------
# gaps (infilling): some of a chunk's tokens hidden, a span or scattered, and scored given all the others

GAP_KINDS = ('span', 'scatter', 'range', 'line')


class Lengths(NamedTuple):
    """A range gap's lengths: a span of lo to hi tokens, its length drawn per chunk (range:lo-hi)."""
    lo: int
    hi: int

    def __str__(self):
        return f'{self.lo}-{self.hi}'


def parse_size(kind, text):
    """A gap setting's size: span's tokens, scatter's share, range's Lengths. ValueError if it is not one."""
    if kind == 'range':
        lo, dash, hi = text.partition('-')
        if not dash:
            raise ValueError(f'{text!r} is not LO-HI')
        return Lengths(parse_number(lo, int), parse_number(hi, int))
    return parse_number(text, int if kind in ('span', 'line') else float)


def parse_gaps(spec, flag):
    """A gap list as [(kind, size)]: 'span:16' a span of 16 tokens, 'scatter:0.15' 15% of the tokens, 'range:1-16' a
    span of 1 to 16 tokens, its length drawn per chunk; [] for ''. ValueError naming the flag and the fix."""
    settings = []
    for item in (part.strip() for part in spec.split(',') if part.strip()):
        kind, _, size = item.partition(':')
        reason = ''
        try:
            size = parse_size(kind, size)
        except ValueError as e:
            kind, reason = None, f' ({e})'
        if kind not in GAP_KINDS:
            raise ValueError(f'{flag}: {item!r} is none of span:L (a span of L tokens), scatter:r (a share r of the '
                             f'tokens, scattered), range:LO-HI (a span of LO to HI tokens, its length drawn per chunk) '
                             f'and line:H (a whole line of at most H characters){reason}: e.g. '
                             f'{flag}=span:16,scatter:0.15,range:1-16,line:40')
        settings.append((kind, size))
    if spec and not settings:
        raise ValueError(f'{flag}={spec!r} names no gap: e.g. {flag}=span:16,scatter:0.15')
    return settings


def check_gap_sizes(settings, n, flag):
    """Each gap fits an n-token chunk and hides something: ValueError otherwise."""
    for kind, size in settings:
        if kind == 'span' and not 1 <= size <= n:
            raise ValueError(f'{flag}=span:{size}: a span is 1 to {n} tokens long (the chunk)')
        if kind == 'line' and not 1 <= size <= n:
            raise ValueError(f'{flag}=line:{size}: the longest line hidden is 1 to {n} characters (the chunk): give a '
                             'smaller one, or a model of a longer block')
        if kind == 'range' and not 1 <= size.lo <= size.hi <= n:
            raise ValueError(f'{flag}=range:{size}: a range runs from LO to HI tokens, 1 <= LO <= HI <= {n} (the '
                             'chunk)')
        if kind == 'scatter' and not 0 < size < 1:
            raise ValueError(f'{flag}=scatter:{size}: the share of the tokens hidden must be between 0 and 1, such as '
                             '0.15')


def gap_lengths(kind, size):
    """The lengths a gap of unknown length may have (Lengths), None for a gap whose length is given (span, scatter):
    a range's, or a line's 1 to its most."""
    return size if kind == 'range' else Lengths(1, size) if kind == 'line' else None


def chunk_line(x, longest, newline, blank, seed):
    """A whole line of chunk x (n,), sorted positions, drawn uniformly among its lines of 1 to `longest` tokens that
    hold more than blank ids and have a newline on each side inside the chunk (single-line infilling, as the FIM
    paper and HumanEval-infilling define it); None if it has none. Seeded by the chunk's tokens."""
    breaks = (x == newline).nonzero()[:, 0].tolist()
    lines = [(a + 1, b) for a, b in zip(breaks, breaks[1:]) if 1 <= b - a - 1 <= longest and
             any(t not in blank for t in x[a + 1:b].tolist())]
    if not lines:
        return None
    generator = torch.Generator().manual_seed(content_seed([seed, 'line', longest], x.tolist()))
    start, end = lines[int(torch.randint(len(lines), (1,), generator=generator))]
    return torch.arange(start, end)


def chunk_gap(x, kind, size, seed):
    """The gap positions of chunk x (n,), sorted: a span of `size` tokens at a uniform place ('span'; 'range': of a
    length drawn uniformly in size.lo..size.hi first), or
    max(1, round(size * n)) positions drawn uniformly ('scatter', size a rate). Seeded by the chunk's tokens, so
    every model and run hides the same tokens of the same text."""
    n = len(x)
    generator = torch.Generator().manual_seed(content_seed([seed, kind, size], x.tolist()))
    if kind == 'range':
        kind, size = 'span', int(torch.randint(size.lo, size.hi + 1, (1,), generator=generator))
    if kind == 'span':
        start = int(torch.randint(n - size + 1, (1,), generator=generator))
        return torch.arange(start, start + size)
    return torch.randperm(n, generator=generator)[:max(1, round(size * n))].sort().values


def gap_orders(n, gap, n_random, seed):
    """The decoder's reading orders of a chunk of n tokens with this gap: the known positions left to right, then
    the gap left to right (row 0) or in n_random uniform orders (rows 1..), seeded: (1 + n_random, n)."""
    known = torch.ones(n, dtype=torch.bool)
    known[gap] = False
    generator = torch.Generator().manual_seed(seed)
    shuffles = [torch.arange(len(gap))] + [torch.randperm(len(gap), generator=generator) for _ in range(n_random)]
    return torch.stack([torch.cat([known.nonzero()[:, 0], gap[s]]) for s in shuffles])


@torch.no_grad()
def order_logprobs(model, x, orders, first, max_tokens):
    """log p(x[order_j] | x[order_<j]) of slots j = first.. of each order (E, n) under a decoder, exactly (each
    order's joint of those tokens, the first `first` read before them): (E, n - first), on the CPU. x: one chunk
    (n,) read in every order, or a chunk per order (E, n). Only the scored slots go through the head."""
    device = next(model.parameters()).device
    E, n = orders.shape
    size = max(1, max_tokens // (n + 1 + (n - first) * HEAD_COST))
    chunks, out = x.expand(E, -1), []
    for at in range(0, E, size):
        rows = orders[at:at + size].to(device)
        targets = chunks[at:at + size].to(device).gather(1, rows)
        none = torch.full((len(rows), 1), -1, device=device)
        tokens = torch.cat([torch.zeros_like(none), targets], 1)
        slots = torch.arange(first, n, device=device).expand(len(rows), -1)
        logits = model.forward_slots(tokens, torch.cat([none, rows], 1), torch.cat([rows, none], 1), out_slots=slots)
        out.append(F.log_softmax(logits.float(), -1).gather(-1, targets[:, first:, None])[..., 0].cpu())
    return torch.cat(out)


@torch.no_grad()
def decoder_gap_logprobs(model, chunks, gaps, n_random, max_tokens, seed, ctx=nullcontext(), desc=None):
    """log p(gap | the rest of the chunk) of each chunk under a decoder, exactly, the rest read first (left to
    right), then the gap left to right and in n_random uniform orders (gap_orders, seeded by the chunk's tokens,
    so a smaller ensemble's orders are the first of a larger one's): (N, 1 + n_random), float64, on the CPU."""
    out = torch.empty(len(chunks), 1 + n_random, dtype=torch.float64)
    for c, (x, gap) in enumerate(zip(tqdm(chunks, desc=desc, disable=desc is None), gaps)):
        orders = gap_orders(len(x), gap, n_random, content_seed(seed, x.tolist()))
        with ctx:
            out[c] = order_logprobs(model, x, orders, len(x) - len(gap), max_tokens).double().sum(1)
        release_freed_memory()
    return out


def left_gap_logprobs(l2r, gaps):
    """Each chunk's gap scored from the left only, from per-token left-to-right log-probs l2r (N, n): the sum over
    the gap of log p(x_i | x_<i), each gap token given all before it (what a left-to-right model can use): (N,)."""
    return torch.stack([row[gap].double().sum() for row, gap in zip(l2r, gaps)])


# -----------------------------------------------------------------------------
# samples: a scorer's NLL of their generated tokens, given the tokens to their left or every known one

SIDES = ('left', 'both')


def left_nlls(nll, x, generated):
    """From nll(x) -> (B, T-1) NLL of x[:, 1:] given the tokens before: each row's generated tokens but the first."""
    return [row[g[1:]] for row, g in zip(nll(x).cpu(), generated)]


def known_first_nlls(model, x, generated):
    """Each row's NLL of its generated tokens under a decoder that reads its known tokens first, left to right,
    then the generated ones left to right: an infill's gaps given both sides, exactly."""
    out = []
    for row, g in zip(x, generated):
        order = torch.cat([(~g).nonzero()[:, 0], g.nonzero()[:, 0]])
        out.append(-order_logprobs(model, row, order[None], int((~g).sum()), max_tokens=len(row))[0].float())
    return out


def encoder_gap_nlls(model, x, generated):
    """Each row's NLL of its generated tokens under an encoder, revealed left to right with the known tokens given
    (encoder_l2r_logprobs with the generated positions as the gap): a forward of the batch's size per token."""
    gaps = [g.nonzero()[:, 0] for g in generated]
    return list((-encoder_l2r_logprobs(model, x.cpu(), x.numel(), gaps=gaps)[0]).split([len(g) for g in gaps]))


@torch.no_grad()
def score_samples(records, score, batch_size, device):
    """The NLL of every scored token of each record (score: load_scorer's), in the records' order, scoring batch_size
    records of one length at once on device (the gaps of no given length make samples of many lengths)."""
    scored, by_length = [None] * len(records), {}
    for i, r in enumerate(records):
        by_length.setdefault(len(r['tokens']), []).append(i)
    batches = [rows[b:b + batch_size] for rows in by_length.values() for b in range(0, len(rows), batch_size)]
    for batch in tqdm(batches, desc='scoring', leave=False):
        x = torch.tensor([records[i]['tokens'] for i in batch], device=device)
        for i, nll in zip(batch, score(x, torch.stack([generated(records[i]) for i in batch]))):
            scored[i] = nll
    return scored


def generated(record):
    """Which positions of a sample were generated (True), not given by a prompt."""
    mask = torch.ones(len(record['tokens']), dtype=torch.bool)
    mask[torch.tensor(record['known_positions'], dtype=torch.long)] = False
    return mask


def unigram_entropy(tokens):
    """Entropy (nats) of the frequencies of the tokens (1-d tensor) of one sample."""
    p = tokens.unique(return_counts=True)[1].double() / len(tokens)
    return -(p * p.log()).sum().item()


def summarize(records, nlls):
    """The row of one grid point: gen PPL (mean, population std), pooled PPL, entropy, time; and each sample's
    mean NLL and entropy, in the order of the records, for paired comparisons over samples."""
    sample_nll = torch.stack([nll.double().mean() for nll in nlls])
    ppl = sample_nll.exp()
    entropy = [unigram_entropy(torch.tensor(r['tokens'])[generated(r)]) for r in records]
    return dict(n=len(records), gen_ppl=ppl.mean().item(), gen_ppl_std=ppl.std(correction=0).item(),
                pooled_ppl=math.exp(torch.cat(nlls).double().mean().item()), entropy=sum(entropy) / len(records),
                seconds_per_sample=sum(r['seconds'] for r in records) / len(records),
                sample_nll=sample_nll.tolist(), sample_entropy=entropy)
