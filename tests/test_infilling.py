"""Gaps of no given length (aogpt/infilling.py): AO-GPT's length posterior against full uncached forwards, one per
length, in every decoder and batch remainder; the FIM GPT's middles against a full forward per step, the end token
forbidden before lo and taken at hi."""
import itertools

import pytest
import torch

from aogpt import infilling
from aogpt.engine import Sampling
from aogpt.fim import fim_prompt, sentinel_ids
from aogpt.infilling import (fill_gap, fill_scores, fim_fill, fim_given_logprobs, fim_logprobs, infill_middle,
                             length_logprobs)
from configurator import parse_infill
from conftest import DECODERS, TINY_BLOCK, decoder_id, slow_length_logprobs, tiny_model

# a template of 9 tokens: 3 known, the gap (index 3), 2 known, one masked, 3 known
IDS = [3, 1, 4, 1, 5, 0, 9, 2, 6]
KNOWN = [True, True, True, True, True, False, True, True, True]


@pytest.mark.parametrize('kind', DECODERS, ids=decoder_id)
def test_the_length_posterior_is_a_full_forward_per_length(kind):
    model = tiny_model(**kind)
    lengths = list(range(1, TINY_BLOCK - len(IDS) + 1))
    fast = length_logprobs(model, IDS, KNOWN, 3, lengths).double()
    assert torch.allclose(fast, slow_length_logprobs(model, IDS, KNOWN, 3, lengths), atol=1e-5)
    assert abs(float(fast.exp().sum()) - 1) < 1e-9


@pytest.mark.parametrize('at', [0, 3, len(IDS)], ids=['at the start', 'inside', 'at the end'])
def test_the_posterior_in_batches_with_a_remainder_and_at_each_end(monkeypatch, at):
    model = tiny_model()
    lengths = list(range(1, 8))
    monkeypatch.setattr(infilling, 'SLOTS_PER_PASS', 3 * (len(IDS) - at + 1))  # 3 rows a pass: 3 + 3 + 1
    fast = length_logprobs(model, IDS, KNOWN, at, lengths).double()
    slow = slow_length_logprobs(model, IDS, KNOWN, at, lengths) if at < len(IDS) else \
        torch.full((7,), 1 / 7, dtype=torch.float64).log()  # nothing after the gap: every length alike
    assert torch.allclose(fast, slow, atol=1e-5)


def test_a_posterior_that_reads_less_of_the_suffix_is_the_template_cut_there():
    """gap_context=3: the posterior given the first 3 known tokens after the gap (3, 4 and 6 of IDS: 5 is masked) is
    the posterior of the template cut after them."""
    model, lengths = tiny_model(5), list(range(1, 8))
    fast = length_logprobs(model, IDS, KNOWN, 3, lengths, context=3).double()
    assert torch.allclose(fast, slow_length_logprobs(model, IDS[:7], KNOWN[:7], 3, lengths), atol=1e-5)
    assert not torch.allclose(fast, length_logprobs(model, IDS, KNOWN, 3, lengths).double(), atol=1e-3)
    with pytest.raises(ValueError, match='gap_context=0'):
        fill_gap(model, IDS, KNOWN, 3, 1, Sampling(), cap=5, context=0)


def test_a_fill_has_the_chosen_length_and_keeps_the_known_tokens():
    model = tiny_model()
    fills = fill_gap(model, IDS, KNOWN, 3, 6, Sampling(), cap=5, generator=torch.Generator().manual_seed(0))
    posterior = length_logprobs(model, IDS, KNOWN, 3, list(range(1, 6))).exp()
    for row, known, L, p in fills:
        assert 1 <= L <= 5 and abs(p - float(posterior[L - 1])) < 1e-6
        assert len(row) == len(IDS) + L and [t for t, k in zip(row, known) if k] == [t for t, k in zip(IDS, KNOWN) if k]
    again = fill_gap(model, IDS, KNOWN, 3, 6, Sampling(), cap=5, generator=torch.Generator().manual_seed(0))
    assert again == fills and len({L for _, _, L, _ in fills}) > 1  # the seed draws the lengths too
    mode = fill_gap(model, IDS, KNOWN, 3, 2, Sampling(), cap=5, choice='mode')
    assert {L for _, _, L, _ in mode} == {int(posterior.argmax()) + 1}


def test_the_template_marks_where_the_gap_of_no_length_goes():
    encode = lambda text: [ord(c) - 96 for c in text]
    assert parse_infill('ab[MASK]c[MASK:2]d', '[MASK]', encode) == ([1, 2, 3, 0, 0, 4],
                                                                     [True, True, True, False, False, True], 2)
    assert parse_infill('ab[MASK:1]c', '[MASK]', encode)[2] is None
    with pytest.raises(ValueError, match='one is the most'):
        parse_infill('a[MASK]b[MASK]', '[MASK]', encode)


N = 7  # the FIM GPT's tokens; its sentinels 7..10 fill tiny_model's 11 rows
END = sentinel_ids(N)['end']


def slow_greedy_middle(model, prefix, suffix, lo, hi):
    """Greedy decoding with a full forward per step: the most likely of the real tokens and the end token (the end
    token left out before lo), until the end token or hi tokens."""
    row = fim_prompt(prefix, suffix, sentinel_ids(N))
    middle = []
    while len(middle) < hi:
        with torch.no_grad():
            logits, _ = model(torch.tensor([row + [0]]), torch.arange(len(row) + 1)[None])  # a slot: the next token
        last = logits[0, len(row)]
        allowed = list(range(N)) + ([END] if len(middle) >= lo else [])
        token = max(allowed, key=lambda t: float(last[t]))
        if token == END:
            break
        middle.append(token)
        row.append(token)
    return middle


@pytest.mark.parametrize('lo,hi', [(1, 6), (3, 3), (0, 5)])
def test_the_fim_gpts_middle_is_greedy_decoding_with_the_end_token_held_to_the_range(lo, hi):
    for seed in range(4):
        model = tiny_model(seed)
        with torch.no_grad():  # make the end token likely, so that it ends some middles early
            model.lm_head.bias[END] += 2.0 * (seed % 2)
        got = fim_fill(model, [1, 2], [3], N, lo, hi, 2, Sampling(temperature=0))
        want = slow_greedy_middle(model, [1, 2], [3], lo, hi)
        assert got == [want, want]
        assert lo <= len(want) <= hi


def test_sampled_fim_middles_hold_no_sentinel_and_keep_to_the_range():
    model = tiny_model(1)
    middles = fim_fill(model, [1], [2, 3], N, 2, 5, 64, Sampling(), torch.Generator().manual_seed(0))
    assert all(2 <= len(m) <= 5 and all(t < N for t in m) for m in middles)
    assert len({len(m) for m in middles}) > 1


def all_middles(L):
    return [list(m) for m in itertools.product(range(N), repeat=L)]


@pytest.mark.parametrize('L', [1, 2, 3])
def test_the_fim_gpts_length_given_probabilities_sum_to_one_over_every_middle(L):
    model = tiny_model(2)
    gaps = [([1, 2], m, [3]) for m in all_middles(L)]
    total = fim_logprobs(model, gaps, N, L, L).exp().sum()
    assert abs(float(total) - 1) < 1e-6, float(total)


def test_the_fim_gpts_unknown_length_probabilities_sum_to_one_over_every_middle_and_length():
    model = tiny_model(3)
    with torch.no_grad():
        model.lm_head.bias[END] += 1.0  # the end token likely enough that every length carries weight
    gaps = [([4], m, [5, 6]) for L in (1, 2, 3) for m in all_middles(L)]
    logp = fim_logprobs(model, gaps, N, 1, 3)
    assert abs(float(logp.exp().sum()) - 1) < 1e-6
    per_length = [float(logp[[len(m) == L for _, m, _ in gaps]].exp().sum()) for L in (1, 2, 3)]
    assert all(0.05 < p < 0.9 for p in per_length), per_length


def slow_fim_logprob(model, prefix, middle, suffix, lo, hi):
    """The product of the FIM GPT's renormalised step probabilities (the end token out before lo, sure at hi), from
    one full forward per step."""
    row, want = fim_prompt(prefix, suffix, sentinel_ids(N)), 0.0
    for j, token in enumerate(middle + ([END] if len(middle) < hi else [])):
        with torch.no_grad():
            logits, _ = model(torch.tensor([row + [0]]), torch.arange(len(row) + 1)[None])
        last = logits[0, len(row)]  # the slot of the row's last token, which targets the next position
        allowed = list(range(N)) + ([END] if j >= lo else [])
        want += float(last[allowed].log_softmax(0)[allowed.index(token)])
        row = row + [token]
    return want


def test_the_fim_gpts_probability_is_its_greedy_decoders_and_a_full_forward(monkeypatch):
    """Rows of one length whose middles differ in length (chunks of one size, as eval_ppl.py reads them), in passes of
    two rows and a remainder of one, the length given and not."""
    model = tiny_model(4)
    gaps = [([1, 2, 0], [2], [3]), ([1], [2, 0, 1], [3]), ([1, 2], [2, 0], [3]), ([], [0, 1, 2, 2], [3]),
            ([1, 0], [1, 1], [3])]
    monkeypatch.setattr(infilling, 'SLOTS_PER_PASS', 2 * 9)  # every row: 5 tokens, 3 sentinels and the end
    for lo, hi in [(1, 4), (1, 5)]:
        got = fim_logprobs(model, gaps, N, lo, hi)
        want = [slow_fim_logprob(model, p, m, s, lo, hi) for p, m, s in gaps]
        assert torch.allclose(got, torch.tensor(want, dtype=torch.float64), atol=1e-5), (lo, hi)
    given = fim_given_logprobs(model, gaps, N)
    want = [slow_fim_logprob(model, p, m, s, len(m), len(m)) for p, m, s in gaps]
    assert torch.allclose(given, torch.tensor(want, dtype=torch.float64), atol=1e-5)


def slow_greedy_fill(model, prefix, suffix, L):
    """AO-GPT's greedy middle of L tokens, a full forward per token: the known tokens read first, then the middle so
    far, left to right; each token the most likely of all."""
    row = prefix + [0] * L + suffix
    known = [i for i in range(len(row)) if not len(prefix) <= i < len(prefix) + L]
    order = torch.tensor(known + list(range(len(prefix), len(prefix) + L)))
    for j in range(L):  # slot len(known) + j reads the known tokens and the middle's first j
        logits, _ = model(torch.tensor([row]), order[None])
        row[len(prefix) + j] = int(logits[0, len(known) + j].argmax())
    return row[len(prefix):len(prefix) + L]


@pytest.mark.parametrize('kind', DECODERS[:2] + DECODERS[3:4], ids=decoder_id)
def test_ao_gpts_greedy_infill_is_the_posteriors_mode_filled_left_to_right(kind):
    model, prefix, suffix = tiny_model(4, **kind), [1, 2, 3], [4, 5]
    posterior = slow_length_logprobs(model, prefix + suffix, [True] * 5, 3, [1, 2, 3, 4])
    for lo, hi in [(1, 4), (3, 3)]:
        middle = infill_middle(model, prefix, suffix, lo, hi, Sampling(temperature=0), fim=False, n_tokens=11,
                               choice='mode')
        L = int(posterior.argmax()) + 1 if lo < hi else lo
        assert middle == slow_greedy_fill(model, prefix, suffix, L)


def test_fill_scores_count_what_a_reader_would():
    assert fill_scores([1, 2, 3], [1, 2, 3]) == dict(exact=1.0, chars=1.0, length=1.0, length_error=0)
    assert fill_scores([1, 9, 3, 4], [1, 2, 3]) == dict(exact=0.0, chars=0.5, length=0.0, length_error=1)
    assert fill_scores([2], [1, 2]) == dict(exact=0.0, chars=0.0, length=0.0, length_error=1)  # aligned at the start
