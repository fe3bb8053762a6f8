"""
Any-subset speculative decoding (Guo & Ermon, arXiv 2504.20456): the samples of one token per step in a random or
left-to-right order, with up to k drafts per forward of the engine (engine.py), each kept or drawn again by a
ratio test so that the samples are distributed exactly as decoding.generate's one token per step.
"""
from dataclasses import dataclass

import torch
from tqdm import tqdm

from .engine import (Forward, KVCache, Sampling, cache_place, decoding_orders, inverse_cdf, sampling_probs,
                     speculative_forward, write_where)

SPECULATIVE_ORDERS = ('random', 'l2r')  # the orders speculative decoding can keep exact
# --speculate=auto: the k that bench.py --run=speculate found fastest on the CPU (docs/speed.md), for one row and for
# a batch; left to right no k paid, so it decodes one token per step
AUTO_K = {'random': (8, 4), 'l2r': (0, 0)}
# ... and a batch speculates only with a small vocabulary: each draft costs it a row of the output layer, which paid
# at 65 characters and not at GPT-2's 50,304 tokens (docs/speed.md); between the two it is unmeasured
AUTO_BATCH_VOCAB = 1024


def check_speculative(model, order):
    """Raise ValueError unless `model` can decode in `order` speculatively: a decoder (the exact joint of an order in
    one forward) and an order known before decoding starts."""
    if model.config.is_encoder:
        raise ValueError('speculative decoding checks drafts against the exact joint of an order, which the encoder '
                         'does not give: sample the encoder with --speculate=0')
    if order not in SPECULATIVE_ORDERS:
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
    if k:
        check_speculative(model, order)
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
