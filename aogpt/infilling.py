"""
A gap whose length is not given ([MASK] in a template, configurator.parse_infill). AO-GPT reads each length's
probability from its own likelihood: p(L | the known tokens) is proportional to the probability of the tokens after
the gap, placed L positions on, given those before it, with every known token at its true position; it then fills the
gap at a length drawn from that (or the most likely). The FIM GPT (fim.py) writes the middle until its end token.
Both take the range of lengths as given: lengths lo..hi, the end token never before lo and always at hi.
"""
import math

import torch

from .decoding import generate
from .engine import KVCache, cache_place, make_engine, sample_tokens, shared_cache
from .fim import PROMPT_SENTINELS, fim_prompt, sentinel_ids

SLOTS_PER_PASS = 32768  # candidate rows x slots of one forward of the posterior: its memory, whatever the lengths
LOGITS_PER_PASS = 2 ** 25  # and slots x vocabulary of its logits (128 MiB of float32), at GPT-2's 50,304 rows too


def placed(ids, known, at, length):
    """The template (lists) with a gap of `length` unknown tokens inserted at index `at`."""
    return ids[:at] + [0] * length + ids[at:], known[:at] + [False] * length + known[at:]


def check_lengths(model, ids, at, lengths):
    """ValueError unless every candidate length puts the template's tokens inside the block."""
    block = model.config.block_size
    if model.config.is_encoder:
        raise ValueError('a gap without a length needs a decoder, whose likelihood gives each length its '
                         'probability; the encoder fills a gap of a given length: write it as [MASK:n]')
    if not lengths or min(lengths) < 1 or len(ids) + max(lengths) > block:
        raise ValueError(f'a gap of up to {max(lengths, default=0)} tokens in a template of {len(ids)} known tokens '
                         f'does not fit block_size {block}: the cap is at most {block - len(ids)}')


@torch.no_grad()
def length_logprobs(model, ids, known, at, lengths, n_tokens=None, context=None):
    """log p(L | the known tokens) (len(lengths),), float64, normalised over lengths: for each L the log-likelihood of
    the known tokens after index `at` (the first `context` of them, None: all), placed L positions on, read left to
    right after the known tokens before `at`, also left to right; unknown positions elsewhere are left out of the order
    (a decoder's joint over a subset of positions is its marginal). One pass: the slots before the gap's last known
    token are read once and their cache shared by every candidate, in batches of at most SLOTS_PER_PASS slots and
    LOGITS_PER_PASS logits."""
    check_lengths(model, ids, at, lengths)
    device = next(model.parameters()).device
    x = torch.tensor(ids, device=device)
    before = [-1] + [i for i in range(at) if known[i]]  # the start slot first
    after = [i for i in range(at, len(ids)) if known[i]][:context]
    if not after:  # nothing after the gap says how long it is
        return torch.full((len(lengths),), -math.log(len(lengths)), dtype=torch.float64, device=device)
    # every slot but the last: its target, the first token after the gap, moves with L
    pos = torch.tensor([before], device=device)
    shared = shared_cache(model, x[pos.clamp(min=0)], pos)
    slots = min(SLOTS_PER_PASS, LOGITS_PER_PASS // model.config.vocab_size)
    rows = max(1, slots // (len(after) + 1))
    scores = [suffix_logprobs(model, x, shared, before[-1], after, lengths[i:i + rows], n_tokens)
              for i in range(0, len(lengths), rows)]
    return torch.cat(scores).double().log_softmax(0)


def suffix_logprobs(model, x, shared, last, after, lengths, n_tokens):
    """log p(the tokens at `after`, moved L on | the shared slots and the token at `last`) for each L of lengths."""
    B, device = len(lengths), x.device
    cache = KVCache(model.config, B, shared.slots + len(after), *cache_place(model))
    cache.copy_rows(shared)
    shift = torch.tensor(lengths, device=device).unsqueeze(1)
    moved = torch.tensor(after, device=device) + shift  # (B, S): where each known token after the gap sits
    positions = torch.cat([torch.full((B, 1), last, device=device), moved[:, :-1]], 1)
    tokens = x[torch.tensor([last] + after[:-1], device=device).clamp(min=0)].expand(B, -1)
    logits = model.forward_slots(tokens, positions, moved, cache)[..., :n_tokens].float()
    return logits.log_softmax(-1).gather(2, x[after].expand(B, -1).unsqueeze(-1)).sum((1, 2))


def choose_lengths(logprobs, lengths, count, choice, generator=None):
    """count lengths: drawn from the posterior ('sample') or its most likely ('mode'), with their probabilities."""
    probs = logprobs.exp()
    picks = probs.argmax().expand(count) if choice == 'mode' else \
        torch.multinomial(probs, count, replacement=True, generator=generator)
    return [(lengths[i], float(probs[i])) for i in picks.tolist()]


@torch.no_grad()
def infill_unknown(model, ids, known, at, lengths, count, choice='sample', generator=None, n_tokens=None, context=None,
                   **options):
    """count fills of a template whose gap at index `at` has no length: [(ids, known, L, p(L))], a length drawn (or
    the most likely) from length_logprobs (reading `context` tokens after the gap), then the gap filled at that length
    by decoding.generate with options."""
    device = next(model.parameters()).device
    chosen = choose_lengths(length_logprobs(model, ids, known, at, lengths, n_tokens, context), lengths, count, choice,
                            generator)
    out = [None] * count
    for L in sorted({L for L, _ in chosen}):
        rows = [i for i, (length, _) in enumerate(chosen) if length == L]
        row_ids, row_known = placed(ids, known, at, L)
        x = torch.tensor(row_ids, device=device).repeat(len(rows), 1)
        mask = torch.tensor(row_known, device=device)
        x, _ = generate(model, x, mask, int((~mask).sum()), generator=generator, n_tokens=n_tokens, **options)
        for i, row in zip(rows, x.tolist()):
            out[i] = (row, row_known, L, chosen[i][1])
    return out


@torch.no_grad()
def fim_fill(model, prefix, suffix, n_tokens, lo, hi, count, sampling, generator=None):
    """count middles from the FIM GPT, [tokens], each written after its PSM prompt until the end token, which is
    forbidden before lo tokens and taken at hi (lo = hi: a middle of exactly that many tokens). Tokens are drawn from
    the real tokens and the end token only (renormalised), by `sampling`."""
    device = next(model.parameters()).device
    end = sentinel_ids(n_tokens)['end']
    prompt = fim_prompt(prefix, suffix, sentinel_ids(n_tokens))
    block = model.config.block_size
    if len(prompt) + hi > block:
        raise ValueError(f'a middle of up to {hi} tokens after a FIM prompt of {len(prompt)} (the sides and '
                         f'{PROMPT_SENTINELS} sentinels) does not fit block_size {block}: the cap is at most '
                         f'{block - len(prompt)}')
    engine = make_engine(model, count, len(prompt) + hi)
    tokens = torch.tensor([0] + prompt, device=device).expand(count, -1)
    positions = torch.arange(-1, len(prompt), device=device).expand(count, -1)
    if count > 1:  # one row reads the prompt for all (as decoding.generate): the first step reads its last token
        engine.start_from(shared_cache(model, tokens[:1], positions[:1]))
        tokens, positions = tokens[:, -1:], positions[:, -1:]
    written = torch.zeros(count, 0, dtype=torch.long, device=device)
    ended = torch.zeros(count, dtype=torch.bool, device=device)
    for t in range(hi):
        target = torch.full((count, 1), len(prompt) + t, device=device)
        logits = engine.step(tokens, positions, target)[:, 0]
        choices = torch.cat([logits[:, :n_tokens], logits[:, end:end + 1]], 1)
        if t < lo:
            choices[:, -1] = -torch.inf
        pick = sample_tokens(choices, sampling, generator)
        token = torch.where(pick == n_tokens, end, pick)
        engine.accept()
        ended |= token == end
        written = torch.cat([written, torch.where(ended, end, token).unsqueeze(1)], 1)
        if bool(ended.all()):
            break
        tokens, positions = token.unsqueeze(1), target
    return [[t for t in row if t != end] for row in written.tolist()]


def fim_sides(ids, known, at):
    """(prefix, suffix, lo, hi or None) of the template's one gap as the FIM GPT fills it: the gap of no length at
    `at` (lengths from 1), or its one masked span (exactly its length). ValueError for any other template."""
    unknown = [i for i, k in enumerate(known) if not k]
    if at is not None and not unknown:
        return ids[:at], ids[at:], 1, None
    if at is None and unknown and unknown == list(range(unknown[0], unknown[-1] + 1)):
        return ids[:unknown[0]], ids[unknown[-1] + 1:], len(unknown), len(unknown)
    raise ValueError('the FIM GPT fills one gap between a prefix and a suffix: give a template with one [MASK] (or '
                     'one [MASK:n]) and known text around it')


def gap_room(block, ids, fim):
    """The longest gap a template of len(ids) tokens leaves room for in a block: the rest (the FIM GPT's prompt also
    holds its sentinels)."""
    return block - len(ids) - PROMPT_SENTINELS * fim


def fill_gap(model, ids, known, at, count, sampling, *, fim=False, n_tokens=None, cap=None, choice='sample',
             context=None, generator=None, **options):
    """count fills of a template with a gap of no given length at `at` (cap: the longest tried, None: gap_room; context:
    the known tokens after it AO-GPT's posterior reads, None: all), or for the FIM GPT (fim) one gap of any kind:
    [(ids, known, L, p(L) or None)], the FIM GPT's with no probability."""
    block = model.config.block_size
    room = gap_room(block, ids, fim)
    fit = f'the template of {len(ids)} tokens in block_size {block}' + \
        (f" (with the FIM GPT's {PROMPT_SENTINELS} sentinels)" if fim else '')
    if room < 1:
        raise ValueError(f'{fit} leaves no room for a gap')
    if cap is not None and not (type(cap) is int and 1 <= cap <= room):
        raise ValueError(f'gap_cap={cap!r}: the longest gap tried is an int from 1 to the {room} tokens that {fit} '
                         'leaves')
    if context is not None and not (type(context) is int and context >= 1):
        raise ValueError(f'gap_context={context!r}: the known tokens after the gap that the length posterior reads is '
                         'an int >= 1, or None for all of them')
    cap = room if cap is None else cap
    if not fim:
        return infill_unknown(model, ids, known, at, list(range(1, cap + 1)), count, choice, generator, n_tokens,
                              context, sampling=sampling, **options)
    prefix, suffix, lo, hi = fim_sides(ids, known, at)
    middles = fim_fill(model, prefix, suffix, n_tokens, lo, hi or cap, count, sampling, generator)
    return [(prefix + m + suffix, [True] * len(prefix) + [False] * len(m) + [True] * len(suffix), len(m), None)
            for m in middles]


@torch.no_grad()
def fim_logprobs(model, gaps, n_tokens, lo, hi):
    """log p(middle | prefix, suffix) under the FIM GPT for each (prefix, middle, suffix) of gaps, its length known
    to lie in lo..hi, as fim_fill draws it: each middle token from the real tokens and the end token renormalised (the
    end token left out before lo tokens), then the end token (taken for sure at hi). lo = hi = len(middle): the length
    given, the end token masked out at each step. Rows of one length share a forward, in batches of at most
    SLOTS_PER_PASS slots and LOGITS_PER_PASS logits, and only the middles' slots go through the head: (len(gaps),),
    float64."""
    device = next(model.parameters()).device
    ids = sentinel_ids(n_tokens)
    out = torch.empty(len(gaps), dtype=torch.float64)
    rows = [fim_prompt(p, s, ids) + m + [ids['end']] for p, m, s in gaps]
    by_length = {}
    for i, row in enumerate(rows):
        by_length.setdefault(len(row), []).append(i)
    for length, members in by_length.items():
        reads = max(len(gaps[i][1]) for i in members) + 1  # the slots read last: the longest middle's and its end's
        size = max(1, min(SLOTS_PER_PASS // length, LOGITS_PER_PASS // (reads * model.config.vocab_size)))
        for batch in [members[j:j + size] for j in range(0, len(members), size)]:
            B = len(batch)
            x = torch.tensor([rows[i] for i in batch], device=device)
            tokens = torch.cat([torch.zeros(B, 1, dtype=torch.long, device=device), x[:, :-1]], 1)  # the start slot
            positions = torch.arange(-1, length - 1, device=device).expand(B, -1)
            out_slots = torch.arange(length - reads, length, device=device).expand(B, -1)  # slot j predicts token j
            logits = model.forward_slots(tokens, positions, positions + 1, out_slots=out_slots)
            for r, i in enumerate(batch):
                L = len(gaps[i][1])
                out[i] = middle_logprob(logits[r, reads - L - 1:], x[r, length - L - 1:], n_tokens, lo, hi)
    return out


def middle_logprob(logits, targets, n_tokens, lo, hi):
    """The sum over a FIM row's middle and end token (targets, L + 1) of log p(token) among the real tokens and the
    end token (the end left out before lo; the end at hi scored as sure): logits (L + 1, V) of the slots that predict
    them, the row read left to right."""
    L, end = len(targets) - 1, sentinel_ids(n_tokens)['end']
    choices = torch.cat([logits[:, :n_tokens], logits[:, end:end + 1]], 1).float()
    choices[:min(lo, L + 1), -1] = -torch.inf
    logp = choices.log_softmax(-1).double().gather(1, torch.where(targets == end, n_tokens, targets)[:, None])[:, 0]
    return float(logp[:L].sum() + (0.0 if L >= hi else logp[L]))


@torch.no_grad()
def infill_middle(model, prefix, suffix, lo, hi, sampling, *, fim, n_tokens, choice='sample', generator=None):
    """One middle (a list) between prefix and suffix of lo to hi tokens (lo = hi: its length given): the FIM GPT's
    written to its end token; AO-GPT's at a length from its posterior (choose_lengths' choice), written left to right
    after both sides, as eval_ppl.py scores it."""
    if fim:
        return fim_fill(model, prefix, suffix, n_tokens, lo, hi, 1, sampling, generator)[0]
    ids, at, lengths = prefix + suffix, len(prefix), list(range(lo, hi + 1))
    L = lo if lo == hi else choose_lengths(length_logprobs(model, ids, [True] * len(ids), at, lengths, n_tokens),
                                           lengths, 1, choice, generator)[0][0]
    row, known = placed(ids, [True] * len(ids), at, L)
    x = torch.tensor([row], device=next(model.parameters()).device)
    x, _ = generate(model, x, torch.tensor(known, device=x.device), L, sampling, order='l2r', generator=generator,
                    n_tokens=n_tokens)
    return x[0, at:at + L].tolist()


def fill_scores(fill, truth):
    """How a middle matches the held-out one: exact (1 or 0), chars (the share of positions, over the longer of the
    two, where they agree, aligned at the gap's start), length (1 where the length is right) and length_error
    (tokens, absolute)."""
    agree = sum(a == b for a, b in zip(fill, truth))
    return dict(exact=float(fill == truth), chars=agree / max(len(fill), len(truth)),
                length=float(len(fill) == len(truth)), length_error=abs(len(fill) - len(truth)))


def gap_sides(chunks, gaps):
    """[(prefix, middle, suffix)] of each chunk's span gap (sorted positions), as lists."""
    return [(x[:g[0]].tolist(), x[g].tolist(), x[g[-1] + 1:].tolist()) for x, g in zip(chunks, gaps)]


def fim_given_logprobs(model, sides, n_tokens):
    """The FIM GPT's log p(middle | both sides, its length) of each (prefix, middle, suffix) (fim_logprobs with lo =
    hi, the middles of one length at a time): (len(sides),), float64."""
    out = torch.empty(len(sides), dtype=torch.float64)
    for L in sorted({len(m) for _, m, _ in sides}):
        rows = [i for i, (_, m, _) in enumerate(sides) if len(m) == L]
        out[rows] = fim_logprobs(model, [sides[i] for i in rows], n_tokens, L, L)
    return out


def gap_length_logprobs(model, sides, lengths, n_tokens):
    """AO-GPT's log p(L | both sides) of each (prefix, middle, suffix), L its middle's length, normalised over
    lengths.lo..lengths.hi (length_logprobs): (len(sides),), float64."""
    candidates = list(range(lengths.lo, lengths.hi + 1))
    out = torch.empty(len(sides), dtype=torch.float64)
    for c, (prefix, middle, suffix) in enumerate(sides):
        ids = prefix + suffix
        logp = length_logprobs(model, ids, [True] * len(ids), len(prefix), candidates, n_tokens)
        out[c] = float(logp[len(middle) - lengths.lo])
    return out
