"""aogpt/engine.py and sample.py: cached decoding equals uncached forwards, schedules, filtering, orders, infill, the CLI."""
import math
import os
import re
import subprocess
import sys

import pytest
import torch

from aogpt.sampling import prompt_tokens
from conftest import DECODERS, ROOT, TINY_BLOCK as T, decoder_id, run_script, samples, says, tiny_model
from aogpt.decoding import generate
from aogpt.engine import Sampling, confidence_scores, filter_probs, inverse_cdf, sample_tokens, step_sizes
from configurator import parse_infill
from fixtures.reference import load

pytestmark = pytest.mark.usefixtures('one_thread')  # tiny models: one thread, here and in the scripts run

KNOWN = {
    'none': [False] * T,
    'prefix': [True] * 5 + [False] * 11,
    'infill': [True, True, False, False, False, True, True, True, False, False, True, False, False, False, False, True],
}


def uncached_logits(model, x, prefix, candidates):
    """Logits (B, R, V) of full uncached forwards with order (prefix, candidates[:, r], the rest), at
    the slot after the prefix: each candidate predicted from exactly the decoded prefix."""
    B, R = candidates.shape
    P = prefix.size(1)
    rank = torch.arange(T).repeat(B * R, 1) + T  # positions outside the prefix and the candidate go last
    rank.scatter_(1, prefix.repeat_interleave(R, 0), torch.arange(P).expand(B * R, P))
    rank.scatter_(1, candidates.reshape(-1, 1), P)
    logits, _ = model(x.repeat_interleave(R, 0), rank.argsort(1))
    return logits[:, P].view(B, R, -1)


# each row its own known tokens, or all the same ones (shared: one row reads them for all, engine.shared_cache)
@pytest.mark.parametrize('prompt,rows', [('none', 'own'), ('prefix', 'own'), ('infill', 'own'), ('prefix', 'shared'),
                                         ('infill', 'shared')])
@pytest.mark.parametrize('order,confidence', [('random', None), ('l2r', None), ('confidence', 'maxprob'),
                                              ('confidence', 'entropy')])
@pytest.mark.parametrize('steps,schedule', [(None, 'linear'), (4, 'linear'), (5, 'cosine')])
@pytest.mark.parametrize('kind', DECODERS, ids=decoder_id)  # AO-GPT and sigma-GPT, each position encoding
def test_cached_decoding_equals_uncached_forwards(kind, prompt, rows, order, confidence, steps, schedule):
    model = tiny_model(**kind)
    known = torch.tensor(KNOWN[prompt])
    n = int((~known).sum())
    x = torch.randint(0, 11, (3, T), generator=torch.Generator().manual_seed(0))
    if rows == 'shared':
        x[:, known] = x[0, known]
    given = x[:, known].clone()
    steps = n if steps is None else steps
    record = []
    out, sigma = generate(model, x.clone(), known, steps, schedule=schedule, order=order, confidence=confidence,
                          generator=torch.Generator().manual_seed(1),
                          on_step=lambda t, l: record.append((t.clone(), l.clone())))
    assert torch.equal(out[:, known], given)  # every known token stays at its position
    assert torch.equal(sigma.sort(1).values, (~known).nonzero().squeeze(1).expand(3, n))
    assert [t.size(1) for t, _ in record] == step_sizes(n, steps, schedule)
    if order == 'l2r':
        assert torch.equal(sigma, sigma.sort(1).values)
    prefix = known.nonzero().squeeze(1).expand(3, -1)  # the known tokens are read first, left to right
    remaining = sigma
    with torch.no_grad():
        for targets, logits in record:
            k = targets.size(1)
            expected = uncached_logits(model, out, prefix, targets)
            torch.testing.assert_close(logits, expected, atol=1e-4, rtol=0)
            if order == 'confidence':  # the step took k of the most confident masked positions (ties either way:
                # with no context 'queries' gives every target the same law)
                scores = confidence_scores(uncached_logits(model, out, prefix, remaining), confidence)
                taken = torch.stack([s[torch.isin(r, t)] for s, r, t in zip(scores, remaining, targets)])
                torch.testing.assert_close(taken.sort(1).values, scores.topk(k, dim=1).values.sort(1).values,
                                           atol=1e-5, rtol=0)
            prefix = torch.cat([prefix, targets], 1)
            remaining = torch.stack([r[~torch.isin(r, t)] for r, t in zip(remaining, targets)])


def authors_step_sizes(steps, schedule, n=1024):
    """The authors' sampler loop, written out: n_i = max(int(n * (1 - t_i)), n_{i-1} + 1) in float32."""
    t = torch.linspace(1, 0, steps + 1)
    if schedule == 'cosine':
        t = torch.cos((1 - t) * math.pi * 0.5)
    done, sizes = 0, []
    for i in range(1, steps + 1):
        reached = max(int(n * (1 - t[i])), done + 1)
        sizes.append(reached - done)
        done = reached
    return sizes


def test_step_sizes():
    for n in [1, 7, 16, 64, 1000]:
        for steps in {min(s, n) for s in (1, 2, 5, n // 3 or 1, n - 1 or 1, n)}:
            for schedule in ['linear', 'cosine']:
                sizes = step_sizes(n, steps, schedule)
                assert len(sizes) == steps and sum(sizes) == n and min(sizes) >= 1, (n, steps, schedule)
        assert step_sizes(n, n, 'cosine') == [1] * n
    # the authors' sizes for their 5-step linear schedule at T=32, from their own sampler
    generation = load('ao_gpt')['generation']
    linear5 = next(g for g in generation if g['name'] == 'linear5')['step_sizes'].tolist()
    assert step_sizes(32, 5, 'linear') == linear5 == [6, 6, 7, 6, 7]  # int(32 * s / 5): truncated, not rounded
    # cosine: int(100 * (1 - cos(pi/2 * s/4))) = 7, 29, 61, 100: few tokens first, many at the end
    assert step_sizes(100, 4, 'cosine') == [7, 22, 32, 39]
    for steps in [64, 100, 128, 256, 300, 512, 1000, 1024]:  # 1024 tokens, as the authors' sampler hard-codes
        for schedule in ['linear', 'cosine']:
            assert step_sizes(1024, steps, schedule) == authors_step_sizes(steps, schedule), (steps, schedule)


def test_filter_probs_by_hand():
    logits = torch.tensor([0.5, 0.25, 0.15, 0.1]).log()
    p = lambda *v: torch.tensor(v, dtype=torch.float64)
    torch.testing.assert_close(filter_probs(logits), p(0.5, 0.25, 0.15, 0.1))
    # top_p=0.7: 0.5 alone is not enough, 0.5 + 0.25 is; the rest are dropped and renormalised
    torch.testing.assert_close(filter_probs(logits, Sampling(top_p=0.7)), p(2 / 3, 1 / 3, 0, 0))
    torch.testing.assert_close(filter_probs(logits, Sampling(top_p=0.5)), p(1.0, 0, 0, 0))
    torch.testing.assert_close(filter_probs(logits, Sampling(top_k=3)), p(0.5, 0.25, 0.15, 0) / 0.9)
    squared = p(0.25, 0.0625, 0.0225, 0.01)
    torch.testing.assert_close(filter_probs(logits, Sampling(temperature=0.5)), squared / squared.sum())
    # top_k first (0.5, 0.25 renormalised to 2/3, 1/3), then top_p=0.6 keeps the first only
    torch.testing.assert_close(filter_probs(logits, Sampling(top_k=2, top_p=0.6)), p(1.0, 0, 0, 0))
    batch = torch.stack([logits, logits.flip(0)])  # filtering is per row
    torch.testing.assert_close(filter_probs(batch, Sampling(top_p=0.7))[1], p(0, 0, 1 / 3, 2 / 3))
    # the authors' top-p keeps the tokens whose cumulative probability (0.5, 0.75, 0.9, 1) is at most top_p
    authors = lambda top_p: filter_probs(logits, Sampling(top_p=top_p, top_p_mode='authors'))
    torch.testing.assert_close(authors(0.7), p(1.0, 0, 0, 0))  # 0.25 crosses 0.7: dropped
    torch.testing.assert_close(authors(0.95), p(0.5, 0.25, 0.15, 0) / 0.9)
    torch.testing.assert_close(filter_probs(logits, Sampling(top_p=0.95)), p(0.5, 0.25, 0.15, 0.1))  # nucleus keeps it
    torch.testing.assert_close(authors(0.3), p(1.0, 0, 0, 0))  # the most likely token always stays
    assert filter_probs(logits, Sampling(dtype=torch.float32)).dtype == torch.float32
    # four equal tokens (exactly 0.25 each): the first two hold exactly top_p=0.5, so the third has 0.5 before it
    tied = torch.zeros(4)
    torch.testing.assert_close(filter_probs(tied, Sampling(top_p=0.5)), p(0.5, 0.5, 0, 0))
    torch.testing.assert_close(filter_probs(tied, Sampling(top_p=0.5, top_p_mode='authors')), p(0.5, 0.5, 0, 0))


def sorted_nucleus(logits, sampling):
    """filter_probs' kept tokens the slow way: each row sorted whole (stably: equal tokens by id), the rule
    applied to the cumulative sums."""
    probs = (logits.double() / sampling.temperature).softmax(-1)
    if sampling.top_k is not None:
        probs = (logits.double() / sampling.temperature).masked_fill(
            logits < logits.topk(sampling.top_k, -1).values[..., -1:], -math.inf).softmax(-1)
    sorted_probs, index = probs.sort(dim=-1, descending=True, stable=True)
    before = sorted_probs.cumsum(-1) - sorted_probs
    if sampling.top_p_mode == 'nucleus':
        keep = before < sampling.top_p
    else:
        keep = before + sorted_probs <= sampling.top_p
        keep[..., 0] = True
    return torch.zeros_like(keep).scatter(-1, index, keep)


@pytest.mark.parametrize('mode', ['nucleus', 'authors'])
def test_top_p_keeps_what_a_full_sort_keeps(mode):
    """The nucleus search sorts one bucket of log-probabilities; a whole sorted row must keep the same tokens:
    flat and peaked rows of GPT-2's vocabulary, bf16-rounded logits (many ties), a spread wider than the
    buckets (the crossing in the last one), top_k's -inf, temperatures, a small vocabulary."""
    g = torch.Generator().manual_seed(0)
    cases = [(torch.randn(8, 50304, generator=g) * scale, Sampling(top_p=top_p, top_p_mode=mode, temperature=temp))
             for scale, top_p, temp in [(0.3, 0.9, 1.0), (3.0, 0.9, 1.0), (6.0, 0.5, 0.7), (2.0, 0.999, 1.3)]]
    ties = (torch.randn(8, 50304, generator=g) * 2).bfloat16().float()
    cases += [(ties, Sampling(top_p=0.9, top_p_mode=mode)), (ties, Sampling(top_p=0.97, top_k=4000, top_p_mode=mode))]
    wide = torch.cat([torch.zeros(4, 1), torch.full((4, 5000), -17.0)], 1)  # the tail 17 nats down, tied
    cases += [(wide, Sampling(top_p=1 - 1e-5, top_p_mode=mode)), (torch.randn(16, 65, generator=g) * 2,
                                                                   Sampling(top_p=0.8, top_p_mode=mode))]
    for logits, sampling in cases:
        kept = filter_probs(logits, sampling) > 0
        assert torch.equal(kept, sorted_nucleus(logits, sampling)), sampling
        assert kept.sum() < kept.numel()  # each case cuts something
    assert filter_probs(torch.zeros(0, 50304), Sampling(top_p=0.9, top_p_mode=mode)).shape == (0, 50304)


ULP = 2.0 ** -24  # the spacing of float32 numbers in [0.5, 1), where a CDF spends most of its tokens
PAIRS, DRAWS = 2_500, 4_000_000


def long_tail_logits():
    """One token with most of the mass, then PAIRS pairs of tail tokens of 0.7 and 0.3 float32 steps
    (4e-8 and 1.8e-8 each): a tail spread thinner than float32 can resolve near a cumulative 1."""
    tail = torch.tensor([0.7 * ULP, 0.3 * ULP], dtype=torch.float64).repeat(PAIRS)
    return torch.cat([(1 - tail.sum()).view(1), tail]).log()


@pytest.mark.parametrize('cut', [0, PAIRS // 2])
def test_sampling_is_float64_and_follows_a_long_tail(cut):
    """Each kind of tail token is drawn as often as its probability says. A float32 CDF moves in whole
    steps near 1, so here the 0.3-step tokens get empty intervals (never drawn) and the 0.7-step ones a
    whole step each (drawn 1.4x too often): this test fails with dtype=torch.float32."""
    logits = long_tail_logits()
    # top_p < 1 (the sorted path) drops the `cut` least likely tokens, all of the 0.3-step kind
    top_p = 1 - (cut + 0.5) * 0.3 * ULP if cut else 1.0
    masses = {'head': 1 - PAIRS * ULP, '0.7-step tail': PAIRS * 0.7 * ULP, '0.3-step tail': (PAIRS - cut) * 0.3 * ULP}
    total = sum(masses.values())
    uniforms = torch.rand(DRAWS, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(inverse_cdf(filter_probs(logits, Sampling(top_p=top_p)), uniforms), minlength=len(logits))
    found = {'head': counts[0], '0.7-step tail': counts[1::2].sum(), '0.3-step tail': counts[2::2].sum()}
    for name, mass in masses.items():
        expected = DRAWS * mass / total
        sigma = math.sqrt(expected * (1 - mass / total))
        assert abs(found[name].item() - expected) < 5 * sigma, (name, found[name].item(), expected)
    # sample_tokens draws through this float64 path by default
    rows = logits.expand(64, -1)
    drawn = sample_tokens(rows, Sampling(), torch.Generator().manual_seed(1))
    uniforms = torch.rand(64, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    assert torch.equal(drawn, inverse_cdf(filter_probs(rows, Sampling(dtype=torch.float64)), uniforms).squeeze(-1))


@pytest.mark.parametrize('order', ['random', 'l2r', 'confidence'])
def test_seeded_sampling_is_deterministic(order):
    model = tiny_model()
    known = torch.tensor(KNOWN['infill'])

    def run(seed, temperature=1.0):
        x = torch.zeros(4, T, dtype=torch.long)
        return generate(model, x, known, 4, Sampling(temperature), order=order,
                        generator=torch.Generator().manual_seed(seed))

    (a, sigma_a), (b, sigma_b), (c, _) = run(0), run(0), run(1)
    assert torch.equal(a, b) and torch.equal(sigma_a, sigma_b)
    assert not torch.equal(a, c)
    if order != 'random':  # greedy with a deterministic order: nothing random is left
        assert torch.equal(run(0, temperature=0)[0], run(1, temperature=0)[0])


@pytest.mark.parametrize('order', ['random', 'confidence'])
def test_ids_past_n_tokens_are_never_drawn(order):
    # the padding rows of a GPT-2 table (50257 of 50304 are tokens) stand for ids 6..10 here
    x, _ = generate(tiny_model(), torch.zeros(64, T, dtype=torch.long), torch.tensor(KNOWN['none']), 4, order=order,
                    generator=torch.Generator().manual_seed(0), n_tokens=6)
    assert x.max() == 5


@pytest.mark.parametrize('rows', ['own', 'shared'])
def test_rows_with_the_same_prompt_read_it_once(monkeypatch, rows):
    """generate's forwards: rows that all hold the same known tokens have one row read them but the last (the start
    slot and 4 tokens), then each row its last known token; rows with their own read all of them each."""
    model, known = tiny_model(), torch.tensor(KNOWN['prefix'])
    x = torch.randint(0, 11, (3, T), generator=torch.Generator().manual_seed(0))
    if rows == 'shared':
        x[:, known] = x[0, known]
    widths, forward = [], model.forward_slots
    monkeypatch.setattr(model, 'forward_slots', lambda tokens, *a, **k: widths.append(tuple(tokens.shape)) or
                        forward(tokens, *a, **k))
    generate(model, x, known, int((~known).sum()), order='l2r')  # one token a step
    assert widths[:2] == ([(1, 5), (3, 1)] if rows == 'shared' else [(3, 6), (3, 1)])


def test_greedy_l2r_equals_argmax_of_full_forwards():
    model = tiny_model()
    x, _ = generate(model, torch.zeros(2, T, dtype=torch.long), torch.tensor(KNOWN['prefix']), 11,
                    Sampling(temperature=0), order='l2r')
    with torch.no_grad():
        logits, _ = model(x, torch.arange(T).expand(2, T))
    assert torch.equal(x[:, 5:], logits[:, 5:T].argmax(-1))


def test_parse_infill():
    encode = lambda text: [ord(c) for c in text]
    ids, known, at = parse_infill('ab[MASK:1]c[MASK:3]', '[MASK]', encode)
    assert ids == [97, 98, 0, 99, 0, 0, 0] and known == [True, True, False, True, False, False, False] and at is None
    ids, known, at = parse_infill('<m:2>x<m>', '<m>', encode)
    assert ids == [0, 0, 120] and known == [False, False, True] and at == 3
    with pytest.raises(ValueError, match='no \\[MASK\\] marker'):
        parse_infill('no markers here', '[MASK]', encode)
    for bad in ('[MASK:0]', '[MASK:-3]', '[MASK:2.5]', '[MASK:x]', '[MASK:]'):  # the bad count is named
        with pytest.raises(ValueError) as exc:
            parse_infill(f'a {bad} b', '[MASK]', encode)
        says(str(exc.value), bad, 'whole number of tokens', 'as in [MASK:5]')
    with pytest.raises(ValueError, match=re.escape('<m:-1> in the infill template')):
        parse_infill('<m:-1>x', '<m>', encode)
    with pytest.raises(SystemExit, match=re.escape('[MASK:0] in the infill template')):  # the scripts: one line
        prompt_tokens(encode, 16, infill='a[MASK:0]')


@pytest.mark.parametrize('start,infill,max_new_tokens,parts', [
    ('x' * 16, '', None, ('prompt is 16 tokens', 'no room')),
    ('abc', '', 14, ('output would be 3 + 14 tokens',)),
    ('', 'a[MASK:20]', None, ('template is 21 tokens long',)),
])
def test_prompts_that_do_not_fit(start, infill, max_new_tokens, parts):
    with pytest.raises(SystemExit) as exc:
        prompt_tokens(lambda text: [1] * len(text), 16, start, infill, max_new_tokens)
    says(str(exc.value), *parts)


# -----------------------------------------------------------------------------
# the command line, on a checkpoint trained here

@pytest.fixture(scope='module')
def checkpoint(workdir, char_ckpt):
    return workdir


@pytest.mark.parametrize('args,prefix', [
    (['--order=l2r', '--start=ROMEO:'], 'ROMEO:'),
    (['--order=confidence', '--confidence=entropy', '--steps=8', '--schedule=cosine', '--top_k=10', '--top_p=0.9',
      '--start=FILE:prompt.txt'], 'KING:\n'),
])
def test_cli_samples(checkpoint, args, prefix):
    (checkpoint / 'prompt.txt').write_text('KING:\n')
    out = run_script('sample.py', '--out_dir=out-char', '--num_samples=2', '--device=cpu', *args, cwd=checkpoint)
    texts = samples(out.stdout)
    assert len(texts) == 2 and all(len(t) == 32 and t.startswith(prefix) for t in texts), out.stdout


def test_cli_infill(checkpoint):
    out = run_script('sample.py', '--out_dir=out-char', '--num_samples=3', '--device=cpu', '--order=random',
                     '--steps=4', '--infill=ROMEO:[MASK:10] the [MASK:5].', cwd=checkpoint)
    texts = samples(out.stdout)
    assert len(texts) == 3
    for t in texts:  # each generated span between the default fill_marks
        assert len(t) == 31 and t[:7] == 'ROMEO:«' and t[17:24] == '» the «' and t[29:] == '».', t
    out = run_script('sample.py', '--out_dir=out-char', '--num_samples=3', '--device=cpu', '--order=random',
                     '--steps=4', '--infill=ROMEO:[MASK:10] the [MASK:5].', '--fill_marks=', cwd=checkpoint)
    plain = samples(out.stdout)
    assert plain == [t.replace('«', '').replace('»', '') for t in texts]  # the same samples, unmarked


@pytest.mark.parametrize('args,parts', [
    (['--start=ROMEO{}'], ('not in the vocabulary', "'{', '}'")),
    (['--steps=33'], ('--steps', 'from 1 to the 32 tokens', 'got 33')),
])
def test_cli_bad_input_is_one_line(checkpoint, args, parts):
    out = run_script('sample.py', '--out_dir=out-char', '--device=cpu', *args, cwd=checkpoint, check=False)
    assert out.returncode != 0
    assert out.stderr.startswith('error: '), out.stderr
    says(out.stderr, *parts)
    assert 'Traceback' not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_char_samples_decode_from_any_directory(checkpoint, tmp_path):
    # the checkpoint carries its characters: no data/shakespeare_char/meta.pkl is needed here
    out = run_script('sample.py', f'--init_from={checkpoint / "out-char" / "ckpt.pt"}', '--num_samples=2',
                     '--device=cpu', '--order=l2r', '--start=ROMEO:', cwd=tmp_path)
    texts = samples(out.stdout)
    assert len(texts) == 2 and all(len(t) == 32 and t.startswith('ROMEO:') for t in texts), out.stdout


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason="glibc's malloc: hold_freed_memory does nothing elsewhere")
def test_freed_memory_is_kept_for_the_next_step():
    """common.hold_freed_memory: a sampler's float64 passes over a 50k vocabulary reuse the memory the last
    call freed instead of faulting in fresh pages (a trim threshold that wraps to 0 in mallopt's int faults
    thousands of pages a call; glibc's defaults some 19k)."""
    code = ('import resource, torch\n'
            'from aogpt.common import hold_freed_memory\n'
            'hold_freed_memory()\n'
            'logits = torch.randn(64, 50304)\n'
            'faults = []\n'
            'for _ in range(10):\n'
            '    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n'
            '    torch.softmax(logits.double(), -1).cumsum(-1)\n'
            '    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)\n'
            'print(*faults[5:])\n')  # the heap settles in a few calls
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, 'OMP_NUM_THREADS': '1'}).stdout
    assert sum(map(int, out.split())) < 500, f'page faults a call, after five: {out}'
