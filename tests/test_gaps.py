"""Gap (infilling) scores against independent computations: a decoder's exact log-prob of a gap against one full
forward per gap token in the same order, the encoder's gap revealed left to right against one forward per token,
its NELBO restricted to the gap against an enumeration of the gap's masks, and a gap of the whole chunk against
the plain left-to-right and any-order losses."""
import itertools
import json
import math

import pytest
import torch

from conftest import (N_EXACT, TINY_BLOCK as T, nll_given, one_forward_logprob, one_line_error, run_script, says,
                      tiny_mdm, tiny_model, train)
from aogpt.scoring import (chunk_gap, content_seed, decoder_gap_logprobs, encoder_l2r_logprobs, gap_orders,
                           left_gap_logprobs, nelbo_estimates)

pytestmark = pytest.mark.usefixtures('one_thread')

DECODERS = [dict(), dict(position_encoding='rotary'), dict(target_injection='add')]  # AO-GPT learned, rotary; sigma
DECODER_IDS = ['ao-gpt-learned', 'ao-gpt-rotary', 'sigma-gpt']


def chunks(n_chunks, n=T, vocab=11, seed=0):
    return torch.randint(vocab, (n_chunks, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize('kind', DECODERS, ids=DECODER_IDS)
@pytest.mark.parametrize('gap', [('span', 5), ('scatter', 0.3)])
@pytest.mark.parametrize('max_tokens', [1, 10_000])  # an order per forward; all of them in one
def test_decoder_gap_logprob_is_one_forward_per_gap_token(kind, gap, max_tokens):
    model, xs = tiny_model(**kind), chunks(3)
    gaps = [chunk_gap(x, *gap, seed=0) for x in xs]
    scores = decoder_gap_logprobs(model, xs, gaps, n_random=2, max_tokens=max_tokens, seed=5)
    assert scores.shape == (3, 3)
    with torch.no_grad():
        for x, g, row in zip(xs, gaps, scores):
            orders = gap_orders(T, g, 2, content_seed(5, x.tolist()))
            known = T - len(g)
            assert torch.equal(orders[0, known:], g)  # the first order reads the gap left to right
            for order, score in zip(orders, row):
                assert sorted(order[:known].tolist()) == order[:known].tolist()  # the rest first, left to right
                expected = sum(one_forward_logprob(model, x, order[:j], order[j].item()) for j in range(known, T))
                assert score.item() == pytest.approx(expected, abs=1e-5)
            assert len(set(row.tolist())) > 1  # the orders' joints differ: each order is really read


@pytest.mark.parametrize('kind', DECODERS, ids=DECODER_IDS)
def test_a_gap_of_the_whole_chunk_gives_the_plain_losses(kind):
    model, xs = tiny_model(**kind), chunks(2)
    whole = [torch.arange(T)] * 2
    scores = decoder_gap_logprobs(model, xs, whole, n_random=2, max_tokens=10_000, seed=1)
    with torch.no_grad():
        for x, row in zip(xs, scores):
            orders = gap_orders(T, whole[0], 2, content_seed(1, x.tolist()))
            assert torch.equal(orders[0], torch.arange(T))
            for order, score in zip(orders, row):  # left to right, then random orders: the any-order loss
                _, loss = model(x[None], order[None], reduction='none')
                assert score.item() == pytest.approx(-loss.double().sum().item(), abs=1e-5)
        _, l2r = model(xs, torch.arange(T).expand(2, T), reduction='none')
    torch.testing.assert_close(left_gap_logprobs(-l2r, whole), scores[:, 0], atol=1e-5, rtol=0)


def test_left_gap_logprobs_sum_the_gap_of_the_left_to_right_pass():
    l2r = torch.arange(12.).view(2, 6)
    assert left_gap_logprobs(l2r, [torch.tensor([1, 2]), torch.tensor([5])]).tolist() == [3.0, 11.0]


def test_gaps_are_drawn_from_the_chunk_and_the_seed():
    xs = chunks(40, n=64, vocab=50)
    for x in xs:
        span = chunk_gap(x, 'span', 16, seed=0)
        assert torch.equal(span, torch.arange(span[0], span[0] + 16)) and 0 <= span[0] <= 48
        scatter = chunk_gap(x, 'scatter', 0.15, seed=0)
        assert len(scatter) == 10 and torch.equal(scatter, scatter.unique())  # round(0.15 * 64), sorted, distinct
        assert torch.equal(chunk_gap(x.clone(), 'span', 16, seed=0), span)  # the same text, the same gap
    starts = [chunk_gap(x, 'span', 16, seed=0)[0].item() for x in xs]
    assert len(set(starts)) > 20  # other texts, other places
    assert [chunk_gap(x, 'span', 16, seed=1)[0].item() for x in xs] != starts
    assert len(chunk_gap(xs[0], 'scatter', 0.001, seed=0)) == 1  # at least one token
    assert torch.equal(chunk_gap(xs[0], 'span', 64, seed=0), torch.arange(64))


@pytest.fixture(scope='module')
def mdm():
    return tiny_mdm()


def test_encoder_gap_revealed_left_to_right_is_one_forward_per_token(mdm):
    xs = chunks(3, n=N_EXACT, vocab=5)
    gaps = [torch.tensor([1, 2, 4]), torch.tensor([0]), torch.arange(N_EXACT)]
    for max_tokens in (1, 10_000):
        logp, hit = encoder_l2r_logprobs(mdm, xs, max_tokens, gaps=gaps)
        assert logp.shape == hit.shape == (9,)
        expected = [-nll_given(mdm, x, set(range(N_EXACT)) - set(g[j:].tolist()))[g[j]].item()
                    for x, g in zip(xs, gaps) for j in range(len(g))]
        torch.testing.assert_close(logp.double(), torch.tensor(expected, dtype=torch.float64), atol=1e-5, rtol=0)
    whole, _ = encoder_l2r_logprobs(mdm, xs[2:], 10_000)  # a gap of the whole chunk: the plain left to right
    torch.testing.assert_close(logp[-N_EXACT:], whole, atol=1e-6, rtol=0)


def exact_gap_nelbo(model, x, gap):
    """The NELBO of the gap given the rest, per gap token, by enumeration: each masked subset M of the gap weighs
    (|M|-1)! (G-|M|)! / G! (exact_nelbo's weights over the gap alone)."""
    G, total = len(gap), 0.0
    for m in range(1, G + 1):
        weight = math.factorial(m - 1) * math.factorial(G - m) / math.factorial(G)
        for masked in itertools.combinations(gap, m):
            nll = nll_given(model, x, set(range(len(x))) - set(masked))
            total += weight * nll[list(masked)].sum().item()
    return total / G


def test_restricted_nelbo_is_unbiased(mdm):
    x, gap = torch.tensor([3, 0, 4, 4, 1]), torch.tensor([0, 2, 3])
    estimates = nelbo_estimates(mdm, x.expand(4096, N_EXACT), 16, max_tokens=10**7, seed=1, gaps=[gap] * 4096)
    mean, error = estimates.mean().item(), estimates.std().item() / math.sqrt(len(estimates))
    with torch.no_grad():
        exact = exact_gap_nelbo(mdm, x, gap.tolist())
    assert abs(mean - exact) < 4 * error
    assert error < 0.005 * mean  # the check has power
    whole = nelbo_estimates(mdm, x.expand(8, N_EXACT), 4, 10**7, seed=2, gaps=[torch.arange(N_EXACT)] * 8)
    assert torch.equal(whole, nelbo_estimates(mdm, x.expand(8, N_EXACT), 4, 10**7, seed=2))  # the whole chunk


# -----------------------------------------------------------------------------
# eval_ppl.py --gaps

def gap_table(workdir, *args):
    """eval_ppl.py --gaps=... on shakespeare_char's first 3 chunks of 32: its JSON results of the set."""
    run_script('eval_ppl.py', '--max_chunks=3', '--device=cpu', '--out_json=gaps.json', *args, cwd=workdir)
    return json.load(open(workdir / 'gaps.json'))['results']['shakespeare_char']


def log_ppl(workdir, *args):
    """eval_ppl.py's perplexities on the same chunks, as NLL per token."""
    run_script('eval_ppl.py', '--max_chunks=3', '--device=cpu', '--out_json=ppl.json', *args, cwd=workdir)
    return {k: math.log(v) for k, v in json.load(open(workdir / 'ppl.json'))['results']['shakespeare_char']['ppl'].items()
            if not k.endswith('_se')}


def test_eval_ppl_gaps_on_ao_gpt(workdir, char_ckpt):
    out = run_script('eval_ppl.py', f'--out_dir={char_ckpt}', '--gaps=span:4,scatter:0.2', '--ensemble=2',
                     '--max_chunks=3', '--device=cpu', cwd=workdir).stdout.splitlines()
    assert out[-3].split() == ['dataset', 'gap', 'gaps', 'gap', 'tokens', 'left', 'only', 'gap', 'l2r', 'gap', 'random',
                               'ensemble=2', 'time']
    assert out[-2].split()[:4] == ['shakespeare_char', 'span:4', '3', '12']
    assert out[-1].split()[:4] == ['shakespeare_char', 'scatter:0.2', '3', '18']  # round(0.2 * 32) = 6 a chunk
    # the whole chunk as the gap: read left to right it is the left-to-right loss, and the left-only column too
    whole = gap_table(workdir, f'--out_dir={char_ckpt}', '--gaps=span:32')['span:32']
    assert whole['tokens'] == 96
    l2r = log_ppl(workdir, f'--out_dir={char_ckpt}')['l2r']
    assert whole['nll']['gap_l2r'] == pytest.approx(l2r, abs=1e-5) and whole['nll']['left'] == pytest.approx(l2r, abs=1e-5)
    assert sum(whole['chunk_nll']['gap_l2r']) / 3 == pytest.approx(whole['nll']['gap_l2r'])


def test_eval_ppl_gaps_on_a_left_to_right_gpt(workdir):
    train(workdir, 'out-l2r-gaps', '--order=l2r', '--max_iters=2', '--eval_interval=2')
    result = gap_table(workdir, '--out_dir=out-l2r-gaps', '--gaps=span:4', '--ensemble=2')['span:4']
    assert list(result['nll']) == ['left'] and result['tokens'] == 12


def test_eval_ppl_gaps_on_the_encoder(workdir, mdm_ckpt):
    result = gap_table(workdir, f'--out_dir={mdm_ckpt}', '--gaps=span:32')['span:32']
    assert list(result['nll']) == ['revealed', 'nelbo', 'nelbo_se']
    ppl = log_ppl(workdir, f'--out_dir={mdm_ckpt}')
    assert result['nll']['revealed'] == pytest.approx(ppl['l2r'], abs=1e-5)  # the whole chunk revealed left to right
    assert result['nll']['nelbo'] == pytest.approx(ppl['nelbo_bound'], abs=1e-5)  # and its NELBO, the same masks
    masks = gap_table(workdir, f'--out_dir={mdm_ckpt}', '--gaps=scatter:0.25', '--encoder_l2r=False')['scatter:0.25']
    assert list(masks['nll']) == ['nelbo', 'nelbo_se'] and masks['tokens'] == 24


@pytest.mark.parametrize('gaps,named', [
    ('span:0', ('span:0', '1 to 32 tokens')), ('span:33', ('span:33', '1 to 32')), ('span:1.5', ('span:1.5', 'span:L')),
    ('span:²', ('span:²', 'span:L')), ('scatter:0', ('scatter:0', 'between 0 and 1')),
    ('scatter:1', ('scatter:1', 'between 0 and 1')), ('scatter:nan', ('between 0 and 1',)),
    ('scatter:abc', ('scatter:abc', 'scatter:r')), ('hole:3', ('hole:3', 'span:L')), (',', ('names no gap',)),
    ('range:0-4', ('range:0-4', '1 <= LO <= HI')), ('range:5-2', ('range:5-2', '1 <= LO <= HI')),
    ('range:3', ('range:3', 'range:LO-HI')), ('range:1-٣', ('range:1-٣', 'ASCII')),
    ('range:1-40', ('range:1-40', 'leaves no chunk'))])
def test_eval_ppl_gaps_bad_inputs(workdir, char_ckpt, gaps, named):
    says(one_line_error('eval_ppl.py', f'--out_dir={char_ckpt}', f'--gaps={gaps}', '--device=cpu', cwd=workdir), *named)


@pytest.mark.slow  # transformers in three fresh interpreters
def test_eval_ppl_gaps_on_a_hugging_face_gpt(workdir, tiny_gpt2, bpe_ckpt):  # bpe_ckpt writes data/webtext
    run_script('eval_ppl.py', f'--init_from={tiny_gpt2}', '--data_file=data/webtext/val.bin', '--gaps=span:1024',
               '--max_chunks=2', '--device=cpu', '--out_json=hf-gaps.json', cwd=workdir)
    result = json.load(open(workdir / 'hf-gaps.json'))['results']['data/webtext/val.bin']['span:1024']
    run_script('eval_ppl.py', f'--init_from={tiny_gpt2}', '--data_file=data/webtext/val.bin', '--max_chunks=2',
               '--device=cpu', '--out_json=hf-ppl.json', cwd=workdir)
    ppl = json.load(open(workdir / 'hf-ppl.json'))['results']['data/webtext/val.bin']['ppl']['l2r']
    # the whole chunk, left only: GPT-2's left-to-right loss, and each chunk's first token read after <|endoftext|>
    # (by hand here), so that every kind's gaps hold the same tokens
    import numpy as np
    from transformers import AutoModelForCausalLM
    gpt2 = AutoModelForCausalLM.from_pretrained(tiny_gpt2)
    first = np.fromfile(workdir / 'data' / 'webtext' / 'val.bin', dtype=np.uint16)[[0, 1024]].astype(np.int64)
    with torch.no_grad():
        after_start = torch.log_softmax(gpt2(torch.tensor([[50256]])).logits[0, -1], -1)[first].double().sum().item()
    assert list(result['nll']) == ['left'] and result['tokens'] == 2 * 1024
    assert result['nll']['left'] * 2048 == pytest.approx(math.log(ppl) * 2046 - after_start, rel=1e-5)
    # one-token gaps of 4-token chunks, at a seed that puts one at position 0: scored, not dropped
    xs = torch.from_numpy(np.fromfile(workdir / 'data' / 'webtext' / 'val.bin', dtype=np.uint16)[:32].astype(np.int64))
    seed = next(s for s in range(100) if any(chunk_gap(x, 'span', 1, s)[0] == 0 for x in xs.view(8, 4)))
    run_script('eval_ppl.py', f'--init_from={tiny_gpt2}', '--data_file=data/webtext/val.bin', '--gaps=span:1',
               '--block_size=4', '--max_chunks=8', '--device=cpu', '--out_json=hf-gap1.json', f'--seed={seed}',
               cwd=workdir)
    one = json.load(open(workdir / 'hf-gap1.json'))['results']['data/webtext/val.bin']['span:1']
    assert one['tokens'] == 8 and all(math.isfinite(v) for v in one['chunk_nll']['left'])


def test_every_column_of_a_gap_table_is_in_one_precision(workdir, char_ckpt):
    table = lambda *flags: gap_table(workdir, f'--out_dir={char_ckpt}', '--gaps=span:4', '--ensemble=1', *flags)
    plain, asked = table('--l2r_dtype=float32'), table('--l2r_dtype=bfloat16')
    assert asked['span:4']['nll'] == plain['span:4']['nll']  # the left column too: --dtype's float32
    low = table('--dtype=bfloat16')['span:4']['nll']
    assert low['left'] != plain['span:4']['nll']['left'] and low['gap_l2r'] != plain['span:4']['nll']['gap_l2r']


# -----------------------------------------------------------------------------
# a gap whose length is unknown (range:lo-hi): the middle and its length as one event, AO-GPT's and the FIM GPT's

N = 7  # a FIM GPT's tokens: tiny_model's rows 7..10 are its sentinels (AO-GPT's tokens are all 11)


def range_columns(model, reads, prefix, suffix, L, lengths):
    """eval_ppl.py's gap columns for every middle of L tokens between prefix and suffix: {column: (tokens ** L,)}."""
    import eval_ppl
    from contextlib import nullcontext
    from aogpt.scoring import decoder_l2r_logprobs
    tokens = N if reads == 'fim' else model.config.vocab_size
    xs = torch.tensor([prefix + list(m) + suffix for m in itertools.product(range(tokens), repeat=L)])
    gaps = [torch.arange(len(prefix), len(prefix) + L)] * len(xs)
    l2r = torch.stack([decoder_l2r_logprobs(model, x) for x in xs])
    return eval_ppl.gap_logprobs(model, xs, gaps, False, reads, tokens, lengths, l2r, nullcontext(), None)[0]


@pytest.mark.parametrize('reads,given,unknown,hi', [('any', 'gap_l2r', 'unknown', 2), ('fim', 'fim', 'fim_unknown', 3)],
                         ids=['ao-gpt', 'fim-gpt'])
def test_the_middle_and_its_length_are_one_distribution(reads, given, unknown, hi):
    """Enumerated: given its length, the middles of each length sum to 1; unknown, every middle of every length of
    the range does."""
    from aogpt.scoring import Lengths
    model, total = tiny_model(2, position_encoding='rotary'), 0.0
    for L in range(1, hi + 1):
        columns = range_columns(model, reads, [1, 2, 3], [4, 5], L, Lengths(1, hi))
        assert float(columns[given].exp().sum()) == pytest.approx(1, abs=1e-6)
        total += float(columns[unknown].exp().sum())
    assert total == pytest.approx(1, abs=1e-6)


def slow_fim_given(model, prefix, middle, suffix):
    """The FIM GPT's log p(middle | both sides, its length), a full forward per token: each read after the prompt and
    the middle so far, among the real tokens alone."""
    from aogpt.fim import fim_prompt, sentinel_ids
    row, total = fim_prompt(prefix, suffix, sentinel_ids(N)), 0.0
    for token in middle:
        with torch.no_grad():
            logits, _ = model(torch.tensor([row + [0]]), torch.arange(len(row) + 1)[None])  # the last slot: the next
        total += float(logits[0, len(row), :N].double().log_softmax(-1)[token])
        row.append(token)
    return total


def test_the_joint_is_the_product_of_its_parts():
    """AO-GPT's unknown-length column is its length posterior (a full forward per length) plus the middle read after
    both sides (one forward per token); the FIM GPT's given-length column is a full forward per token."""
    from aogpt.scoring import Lengths
    from conftest import slow_length_logprobs
    model, prefix, suffix, lengths = tiny_model(3), [6, 1], [2, 0, 4], Lengths(1, 4)
    for L in (1, 2):
        ao = range_columns(model, 'any', prefix, suffix, L, lengths)
        fim = range_columns(model, 'fim', prefix, suffix, L, lengths)
        posterior = slow_length_logprobs(model, prefix + suffix, [True] * 5, len(prefix), list(range(1, 5)))
        n = len(prefix) + L + len(suffix)
        known = torch.tensor([j for j in range(n) if not len(prefix) <= j < len(prefix) + L])
        for i, middle in list(enumerate(itertools.product(range(model.config.vocab_size), repeat=L)))[::13]:
            x = torch.tensor(prefix + list(middle) + suffix)
            read = [one_forward_logprob(model, x, torch.cat([known, torch.arange(len(prefix), j)]), j)
                    for j in range(len(prefix), len(prefix) + L)]
            assert float(ao['unknown'][i]) == pytest.approx(float(posterior[L - 1]) + sum(read), abs=1e-4)
        for i, middle in list(enumerate(itertools.product(range(N), repeat=L)))[::5]:
            assert float(fim['fim'][i]) == pytest.approx(slow_fim_given(model, prefix, middle, suffix), abs=1e-4)


def test_eval_ppl_reads_a_range_both_ways(workdir, char_ckpt, fim_ckpt):
    """Every model reads the same chunks, with room for the range and the FIM GPT's sentinels: AO-GPT's length and
    middle, the FIM GPT's middle with its length given and unknown."""
    ao = gap_table(workdir, f'--out_dir={char_ckpt}', '--gaps=span:4,range:2-6')
    fim = gap_table(workdir, f'--out_dir={fim_ckpt}', '--gaps=span:4,range:2-6')
    assert list(ao['range:2-6']['nll']) == ['left', 'gap_l2r', '1', 'length', 'unknown']
    assert list(fim['range:2-6']['nll']) == ['left', 'fim', 'fim_unknown']
    assert list(fim['span:4']['nll']) == ['left', 'fim']
    assert ao['range:2-6']['tokens'] == fim['range:2-6']['tokens']  # the same gaps of the same chunks
    assert 2 * 3 <= ao['range:2-6']['tokens'] <= 6 * 3
    # a middle and its length is a rarer event than the middle given its length
    assert fim['range:2-6']['nll']['fim_unknown'] > fim['range:2-6']['nll']['fim'] > 0
    assert ao['range:2-6']['nll']['unknown'] > ao['range:2-6']['nll']['gap_l2r']


@pytest.mark.parametrize('args,named', [
    (('--gaps=range:1-8', '--block_size=32'), ('--block_size=32', 'at most 25')),
    (('--gaps=span:4', '--block_size=32', 'fim'), ('--block_size=32', 'FIM GPT', 'at most 28')),
    # its prompt of 24 - 1 + 3 tokens, then up to 8: one more than the block
    (('--gaps=range:1-8', '--fills=greedy', '--block_size=24', 'fim'), ('--block_size=24', 'with --fills', 'at most 22')),
    (('--gaps=scatter:0.15', 'fim'), ('--gaps=scatter', 'one gap between a prefix and a suffix', 'span, range or line'))])
def test_eval_ppl_gap_chunks_too_long_for_the_model(workdir, char_ckpt, fim_ckpt, args, named):
    out_dir = fim_ckpt if args[-1] == 'fim' else char_ckpt
    flags = [a for a in args if a != 'fim']
    says(one_line_error('eval_ppl.py', f'--out_dir={out_dir}', *flags, '--device=cpu', cwd=workdir), *named)


def test_eval_ppl_notes_fills_a_model_cannot_make(workdir, char_ckpt, mdm_ckpt):
    """findings.py gives every arm's evaluation the same flags: --fills is noted as ignored, not refused, where a model
    fills no gap of unknown length."""
    checkpoint = torch.load(workdir / char_ckpt / 'ckpt.pt', weights_only=True)
    checkpoint['config']['order'] = 'l2r'  # as train.py --order=l2r records it
    torch.save(checkpoint, workdir / 'l2r-fills.pt')
    for model, named in [(f'--out_dir={mdm_ckpt}', 'is an encoder'), ('--init_from=l2r-fills.pt', 'left to right')]:
        result = run_script('eval_ppl.py', model, '--gaps=range:1-4', '--fills=greedy', '--max_chunks=2',
                            '--device=cpu', '--out_json=fills.json', cwd=workdir)
        assert 'note: --fills is ignored' in result.stdout and named in result.stdout
        assert all('fills' not in r for r in json.loads((workdir / 'fills.json').read_text())['results'][
            'shakespeare_char'].values())


def test_a_line_gap_is_a_whole_non_blank_line_inside_the_chunk():
    """line:H hides one whole line: a newline before it and after it inside the chunk, none inside it, at most H
    characters, not only blanks; each such line is drawn for some seed, and a chunk without one has none."""
    from aogpt.scoring import chunk_line
    text = 'ab\n  \ncdef\nghijk\nq\nrs'  # 'ab' and 'rs' lack a newline on one side; '  ' is blank
    vocab = sorted(set(text))
    x = torch.tensor([vocab.index(c) for c in text])
    newline, blank = vocab.index('\n'), {vocab.index(' ')}
    drawn = {''.join(text[i] for i in chunk_line(x, 4, newline, blank, seed).tolist()) for seed in range(40)}
    assert drawn == {'cdef', 'q'}  # 'ghijk' is one longer than 4
    assert chunk_line(x, 20, newline, blank, 0) is not None
    assert chunk_line(torch.tensor([vocab.index(c) for c in 'abc\ndef']), 4, newline, blank, 0) is None


def test_eval_ppl_hides_lines_of_a_character_model_only(workdir, char_ckpt, bpe_ckpt):
    result = gap_table(workdir, f'--out_dir={char_ckpt}', '--gaps=line:8', '--max_chunks=40')['line:8']
    assert list(result['nll']) == ['left', 'gap_l2r', '1', 'length', 'unknown'] and 0 < result['gaps'] <= 40
    assert result['tokens'] <= 8 * result['gaps']
    says(one_line_error('eval_ppl.py', f'--out_dir={bpe_ckpt}', '--data_file=data/webtext/val.bin', '--gaps=line:8',
                        '--device=cpu',
                        cwd=workdir), '--gaps=line:H', 'character vocabulary')
