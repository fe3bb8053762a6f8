"""Speculative decoding (aogpt/speculative.py): its samples against the exact joint of one token per step,
enumerated; greedy against the argmax of full forwards; what it refuses."""
import itertools
import json
import math
import re
from types import SimpleNamespace

import pytest
import torch

from conftest import (DECODERS, TINY_BLOCK as T, decoder_id, one_line_error, run_script, samples, says, tiny_mdm,
                      tiny_model)
import aogpt.speculative as speculation
from aogpt.decoding import check_order, generate
from aogpt.engine import Sampling, sampling_probs
from aogpt.speculative import Speculation, speculative

pytestmark = pytest.mark.usefixtures('one_thread')


def full_order(known, order):
    """The order a full forward reads a row in: the known positions left to right, then `order` (n,)."""
    return torch.cat([known.nonzero().squeeze(1), order])


# our target settings' tiny models whose rows keep different numbers of drafts in both tests below (with the seeds
# the others use, theirs keep every draft: their query reads its context through attention alone)
SEEDS = {'two_stream-rotary': 6, 'queries-rotary': 2}


@pytest.mark.parametrize('order', ['random', 'l2r'])
@pytest.mark.parametrize('k', [2, 3, 8])
@pytest.mark.parametrize('kind', DECODERS, ids=decoder_id)
def test_greedy_equals_the_argmax_of_full_forwards(order, k, kind):
    model = tiny_model(seed=SEEDS.get(decoder_id(kind), 1), **kind).double()  # seed 0's rotary AO-GPT keeps no draft
    known = torch.zeros(T, dtype=torch.bool)
    known[[0, 1, 6, 11]] = True
    x = torch.randint(0, 11, (6, T), generator=torch.Generator().manual_seed(0))
    stats = Speculation()
    x, decoded = generate(model, x, known, 12, Sampling(temperature=0), order=order, speculate=k,
                          generator=torch.Generator().manual_seed(1), stats=stats)
    g = int(known.sum())
    with torch.no_grad():
        logits, _ = model(x, torch.stack([full_order(known, o) for o in decoded]))
    assert torch.equal(x.gather(1, decoded), logits[:, g:T].argmax(-1))  # each token the argmax given those before it
    assert stats.forwards <= 12 and stats.tests > 0  # never more forwards than one token per step
    assert 0 < stats.kept < stats.tests  # rows kept different numbers of drafts: the per-row cache was exercised


def law_given(model, tokens, order, context, target):
    """Logits of position order[target] given the first `context` positions of `order` (T,) holding tokens
    (T,), by an uncached forward over those slots alone."""
    read = order[:context]
    positions = torch.cat([torch.tensor([-1]), read]).unsqueeze(0)
    targets = torch.cat([read, order[target:target + 1]]).unsqueeze(0)
    with torch.no_grad():
        return model.forward_slots(tokens[positions.clamp(min=0)], positions, targets)[0, -1]


@pytest.mark.parametrize('order,k,sampling,count', [('random', 2, Sampling(), 6), ('random', 3, Sampling(), 6),
                                                    ('random', 5, Sampling(top_p=0.9), 6), ('l2r', 3, Sampling(), 6),
                                                    ('random', 3, Sampling(), 15), ('l2r', 2, Sampling(top_p=0.9), 15)])
@pytest.mark.parametrize('kind', DECODERS, ids=decoder_id)
def test_every_law_it_uses_is_a_full_forwards(order, k, sampling, count, kind):
    """Every distribution speculative decoding treats as exact (a draft's q, a tested draft's p and the q
    its ratio divides by) equals an uncached forward's over the final tokens, at batch 6 with rows keeping
    different numbers of drafts, known positions before, between and after 11 unknown ones, so that later
    forwards read the cached slots of kept drafts; count 15: the rows take turns, each that finishes
    starting the next sample on its stale cache slots."""
    model = tiny_model(seed=SEEDS.get(decoder_id(kind), 2), **kind).double()
    known = torch.zeros(T, dtype=torch.bool)
    known[[0, 1, 6, 9, 15]] = True
    x = torch.randint(0, 11, (6, T), generator=torch.Generator().manual_seed(0))
    given = x.clone()
    records, stats = [], Speculation()
    x, decoded = speculative(model, x, known, k, sampling, order=order, generator=torch.Generator().manual_seed(3),
                             stats=stats, trace=lambda *r: records.append([t.clone() for t in r]), count=count)
    assert x.shape == (count, T) and stats.tokens == count * 11
    assert 0 < stats.kept < stats.tests and stats.forwards < 11 * count / 6  # drafts kept and rejected, fewer forwards
    assert torch.equal(x[:, known], given[torch.arange(count) % 6][:, known]) or count > 6  # the prompt kept
    assert all(any(torch.equal(row[known], g[known]) for g in given) for row in x)
    covered = set()
    g = int(known.sum())
    for rows, contexts, targets, probs in records:
        for b, context, target, law in zip(rows.tolist(), contexts.tolist(), targets.tolist(), probs):
            full = full_order(known, decoded[b])
            assert g <= context <= target < T
            expected = sampling_probs(law_given(model, x[b], full, context, target), sampling)
            torch.testing.assert_close(law, expected, rtol=0, atol=1e-12, msg=f'row {b}, {context} -> {target}')
            covered.add((b, target))
    assert covered == {(b, t) for b in range(count) for t in range(g, T)}  # every decoded token's law was checked


@pytest.mark.parametrize('case', ['overlapping', 'disjoint', 'equal', 'nested'])
def test_the_ratio_test_and_its_residual_give_p(case):
    """verify_drafts on synthetic laws: each draft drawn from q, kept with probability min(1, p/q), else
    replaced by a draw from max(p - q, 0), must come out distributed as p (the first draft), and the second
    as its own p given the first kept, whatever the overlap of the supports."""
    V, B = 6, 40000
    gen = torch.Generator().manual_seed(0)
    q = {'overlapping': [[.3, .3, .2, .1, .1, 0], [.1, .1, .1, .1, .3, .3]],
         'disjoint': [[.5, .5, 0, 0, 0, 0], [0, 0, 0, .2, .4, .4]],
         'equal': [[.1, .2, .3, .4, 0, 0], [0, .25, .25, .25, .25, 0]],
         'nested': [[.2, .2, .2, .2, .2, 0], [.4, .3, .1, .1, .1, 0]]}[case]
    p = {'overlapping': [[.1, .2, .3, .1, .1, .2], [.3, .3, .1, .1, .1, .1]],
         'disjoint': [[0, 0, .3, .3, .2, .2], [.6, .4, 0, 0, 0, 0]],
         'equal': [[.1, .2, .3, .4, 0, 0], [0, .25, .25, .25, .25, 0]],
         'nested': [[.5, .5, 0, 0, 0, 0], [.1, .1, .4, .2, .2, 0]]}[case]
    q, p = torch.tensor(q, dtype=torch.float64), torch.tensor(p, dtype=torch.float64)
    x = torch.stack([torch.multinomial(q[j], B, replacement=True, generator=gen) for j in range(2)], 1)
    seq = torch.tensor([-1, 0, 1]).expand(B, -1)
    kept, rejected = speculation.verify_drafts(x, seq, p.log().expand(B, -1, -1), q.log().expand(B, -1, -1),
                                          q.gather(1, x.T).T, torch.zeros(B, dtype=torch.long),
                                          torch.ones(B, dtype=torch.long), torch.full((B,), 2),
                                          torch.zeros(B, dtype=torch.long), Sampling(), gen)
    assert torch.equal(rejected, kept < 2)
    first_kept = kept >= 1
    assert first_kept.any() != (case == 'disjoint')  # disjoint supports: every first draft is rejected
    for j, rows in ((0, torch.ones(B, dtype=torch.bool)), (1, first_kept))[:1 + (case != 'disjoint')]:
        observed = torch.bincount(x[rows, j], minlength=V).double()
        expected = p[j] * rows.sum()
        assert observed[expected == 0].sum() == 0
        chi2 = float(((observed - expected)[expected > 0] ** 2 / expected[expected > 0]).sum())
        assert chi2 < critical(int((expected > 0).sum()) - 1), (j, observed, expected)


def test_filler_ids_and_a_huge_k():
    """Unknown positions may hold any id (a [MASK] past n_tokens): speculation reads none of them; k past the
    unknown positions is capped at them, with the same samples."""
    model = tiny_model().double()
    known = torch.zeros(T, dtype=torch.bool)
    known[[0, 5]] = True
    x = torch.full((4, T), 10)  # at or above n_tokens=8
    x[:, known] = 3
    greedy = [generate(model, x.clone(), known, 14, Sampling(temperature=0), speculate=s, n_tokens=8,
                       generator=torch.Generator().manual_seed(0))[0] for s in (0, 3)]
    assert torch.equal(greedy[0], greedy[1]) and greedy[0].max() < 8
    drawn = [generate(model, x.clone(), known, 14, speculate=s, n_tokens=8, generator=torch.Generator().manual_seed(0))[0]
             for s in (14, 10 ** 12)]
    assert torch.equal(drawn[0], drawn[1])


def exact_joint(model, x, known, orders, n_tokens, sampling):
    """P(x) (N,) of each completion x (N, T) under one token per step, averaged over `orders` of the unknown
    positions."""
    g = int(known.sum())
    total = torch.zeros(x.size(0), dtype=torch.float64)
    with torch.no_grad():
        for order in orders:
            logits, _ = model(x, full_order(known, order).expand(x.size(0), -1))
            probs = sampling_probs(logits[:, g:T, :n_tokens], sampling)  # (N, n, V)
            total += probs.gather(2, x[:, order].unsqueeze(-1)).squeeze(-1).prod(1)
    return total / len(orders)


def chi_square(model, known, order, sampling, n_tokens=3, rows=6000, **options):
    """Pearson's chi-square of `rows` samples of generate(**options) against the exact joint, and its degrees
    of freedom."""
    unknown = (~known).nonzero().squeeze(1)
    n = unknown.numel()
    completions = torch.tensor(list(itertools.product(range(n_tokens), repeat=n)))
    x = torch.full((completions.size(0), T), 4)
    x[:, unknown] = completions
    orders = [torch.tensor(o) for o in itertools.permutations(unknown.tolist())] if order == 'random' else [unknown]
    expected = rows * exact_joint(model, x, known, orders, n_tokens, sampling)
    drawn, _ = generate(model, torch.full((options.pop('batch', rows), T), 4), known, options.pop('steps', n), sampling,
                        order=order, generator=torch.Generator().manual_seed(0), n_tokens=n_tokens, count=rows, **options)
    index = (drawn[:, unknown] * n_tokens ** torch.arange(n - 1, -1, -1)).sum(1)
    observed = torch.bincount(index, minlength=completions.size(0)).double()
    possible = expected > 0
    assert observed[~possible].sum() == 0  # nothing the filtered sampler cannot draw
    return float(((observed - expected)[possible] ** 2 / expected[possible]).sum()), int(possible.sum()) - 1


# the chi-square's 0.999 quantile: the tests fail by chance once in a thousand seeds (they use one)
def critical(dof):
    return dof + 3.1 * math.sqrt(2 * dof) + 4


SLOW = pytest.mark.slow  # 24,000 samples each: the fast tier keeps the first case


@pytest.mark.parametrize('order,sampling,positions,injection', [
    ('random', Sampling(), 'learned', 'adaln'), pytest.param('l2r', Sampling(), 'learned', 'adaln', marks=SLOW),
    pytest.param('random', Sampling(temperature=0.7, top_k=2), 'learned', 'adaln', marks=SLOW),
    pytest.param('random', Sampling(top_p=0.8), 'learned', 'adaln', marks=SLOW),
    pytest.param('random', Sampling(), 'rotary', 'adaln', marks=SLOW),
    pytest.param('l2r', Sampling(), 'rotary', 'adaln', marks=SLOW),
    pytest.param('random', Sampling(), 'rotary', 'two_stream', marks=SLOW),
    pytest.param('l2r', Sampling(), 'learned', 'two_stream', marks=SLOW)])
def test_samples_follow_the_exact_joint_of_one_token_per_step(order, sampling, positions, injection):
    model = tiny_model(position_encoding=positions, target_injection=injection)
    known = torch.zeros(T, dtype=torch.bool)
    known[:T - 3] = True  # 3 unknown positions of 3 tokens: 27 completions, enumerated
    known[5] = False
    known[T - 1] = True
    for k, batch in ((0, 6000), (2, 6000), (4, 6000), (3, 256)):  # 0: one token per step; 256 rows taking turns
        chi2, dof = chi_square(model, known, order, sampling, speculate=k, batch=batch)
        assert chi2 < critical(dof), (k, chi2, dof)


def test_the_test_tells_independent_draws_from_the_joint():
    """The same test rejects one step for all (independent draws from one context), which speculation must not be."""
    model = tiny_model()
    known = torch.ones(T, dtype=torch.bool)
    known[[3, 4, 9]] = False
    chi2, dof = chi_square(model, known, 'random', Sampling(), steps=1)
    assert chi2 > 5 * critical(dof)


def test_refused_in_one_line():
    with pytest.raises(ValueError, match='order=random or --order=l2r'):
        check_order(tiny_model(), 'confidence', 4)
    with pytest.raises(ValueError, match='encoder'):
        check_order(tiny_mdm(), 'random', 4)
    with pytest.raises(ValueError, match='steps must be the 16 unknown'):
        generate(tiny_model(), torch.zeros(1, T, dtype=torch.long), torch.zeros(T, dtype=torch.bool), 4, speculate=2)


# -----------------------------------------------------------------------------
# the command line, on a checkpoint trained here

def test_sample_and_gen_ppl_speculate(workdir, char_ckpt, tmp_path):
    out = run_script('sample.py', f'--out_dir={char_ckpt}', '--num_samples=2', '--device=cpu', '--order=l2r',
                     '--start=ROMEO:', '--speculate=4', cwd=workdir)
    texts = samples(out.stdout.split('speculative decoding:')[0])
    assert len(texts) == 2 and all(len(t) == 32 and t.startswith('ROMEO:') for t in texts), out.stdout
    assert re.search(r'speculative decoding: \d+ forwards, [\d.]+ tokens per forward per row', out.stdout)
    out = run_script('sample.py', f'--out_dir={char_ckpt}', '--num_samples=1', '--device=cpu', '--speculate=1e12',
                     cwd=workdir)  # capped at the 32 positions to decode
    assert len(samples(out.stdout.split('speculative decoding:')[0])[0]) == 32
    for order, speculates in (('random', True), ('l2r', False)):  # auto: speculative.AUTO_K's k, 0 left to right
        out = run_script('sample.py', f'--out_dir={char_ckpt}', '--num_samples=1', '--device=cpu', f'--order={order}',
                         '--speculate=auto', cwd=workdir)
        assert ('speculative decoding:' in out.stdout) == speculates and len(samples(out.stdout)[0]) == 32
    report = tmp_path / 'gen.json'
    run_script('gen_ppl.py', f'--out_dir={char_ckpt}', f'--scorer={char_ckpt}/ckpt.pt', '--num_samples=4',
               '--batch_size=2', '--speculate=auto', '--temperature=1.0,0', f'--out_json={report}',
               f'--samples_out={tmp_path / "s.jsonl"}', '--device=cpu', cwd=workdir)
    rows = json.loads(report.read_text())['results']
    for row in rows:
        s = row['speculation']
        assert row['speculate'] == speculation.AUTO_K['random'][1] and s['forwards'] <= 2 * 32 and 1 <= s['tokens_per_forward'] <= 32
        assert s['tokens_per_forward'] <= s['tokens_per_forward_alone'] and 0 <= s['acceptance'] <= 1


@pytest.mark.parametrize('order,batch,vocab,encoder,k', [
    ('random', 1, 65, False, speculation.AUTO_K['random'][0]), ('random', 16, 65, False, speculation.AUTO_K['random'][1]),
    ('random', 1, 50304, False, speculation.AUTO_K['random'][0]),
    ('random', 16, 50304, False, 0),  # a batch's drafts cost it rows of a 50k output layer: slower on the CPU
    ('l2r', 1, 65, False, 0), ('confidence', 1, 65, False, 0), ('random', 1, 65, True, 0)])
def test_auto_k_by_order_batch_and_vocabulary(order, batch, vocab, encoder, k):
    model = SimpleNamespace(config=SimpleNamespace(vocab_size=vocab, is_encoder=encoder))
    assert speculation.auto_k(model, order, batch) == k


@pytest.mark.parametrize('args,parts', [
    (['--order=confidence'], ('--order=random or --order=l2r', "'confidence'")),
    (['--steps=4'], ('--steps=4 with --speculate', 'drop --steps')),
    (['--speculate=-1'], ('--speculate', 'an int >= 0')),
    (['--speculate=fast'], ('--speculate', "or 'auto'")),
])
def test_bad_speculation_is_one_line(workdir, char_ckpt, args, parts):
    says(one_line_error('sample.py', f'--out_dir={char_ckpt}', '--device=cpu', '--speculate=2', *args,
                        cwd=workdir), *parts)


def test_the_encoder_is_refused_in_one_line(workdir, mdm_ckpt):
    says(one_line_error('gen_ppl.py', f'--out_dir={mdm_ckpt}', '--device=cpu', '--speculate=2',
                        '--scorer=none.pt', cwd=workdir), 'encoder', '--speculate=0')
