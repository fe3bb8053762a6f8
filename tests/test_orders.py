"""Training orders as a distribution (aogpt/training.py, train.py's --order_mix, --order_curriculum, --fim_max_span,
--eval_gaps): each family's structure, the shares' frequencies, the paper's mix drawn bit for bit as before,
the curriculum, and the in-training gap NLL against eval_ppl.py --gaps on the same chunks."""
import json
import math

import pytest
import torch

from conftest import TINY, metrics, one_line_error, run_here, run_script, says, tiny_model, train
from aogpt.training import (describe_orders, fim_orders, mix_stages, paper_mix, parse_mix, parse_stages, run_mix,
                            sample_orders, shares_at, training_inputs)


def todays_mixed_orders(batch_size, seq_len, generator, random_ratio):
    """The paper's mix as sample_orders drew it before order families: a uniform permutation per row, then one
    uniform per row, left to right where it is at least random_ratio."""
    random = torch.rand(batch_size, seq_len, generator=generator, dtype=torch.float64).argsort(dim=1)
    l2r = torch.rand(batch_size, 1, generator=generator) >= random_ratio
    return torch.where(l2r, torch.arange(seq_len).expand(batch_size, seq_len), random)


@pytest.mark.parametrize('random_ratio', [0.9, 0.5, 1.0, 0.0])
def test_the_paper_mix_draws_todays_orders_bit_for_bit(random_ratio):
    for mix in (paper_mix(random_ratio), shares_at(mix_stages(paper_mix(random_ratio)), 7)):
        a, b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
        for _ in range(3):  # and leaves the generator where it left it
            assert torch.equal(sample_orders('mixed', 64, 32, a, mix), todays_mixed_orders(64, 32, b, random_ratio))
    a, b = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    assert torch.equal(sample_orders('mixed', 64, 32, a), todays_mixed_orders(64, 32, b, 0.9))  # the default mix


def fim_split(order):
    """(start, length) of the span if order is the rest left to right then one span left to right, else None."""
    T = len(order)
    for length in range(1, T + 1):
        start = order[T - length]
        span = list(range(start, start + length))
        rest = [i for i in range(T) if i not in span]
        if order == rest + span:
            return start, length
    return None


@pytest.mark.parametrize('max_span', [0, 3])
def test_fim_orders_read_the_rest_then_a_uniform_span_each_left_to_right(max_span):
    T, N = 12, 30000
    orders = fim_orders(N, T, torch.Generator().manual_seed(0), max_span)
    assert torch.equal(orders.sort(1).values, torch.arange(T).expand(N, T))
    splits = [fim_split(row) for row in orders[:3000].tolist()]
    assert all(s is not None for s in splits)
    # the span's length is uniform on 1..max_span (0: T); given it, its start is uniform on 0..T-length
    longest = max_span or T
    lengths = T - (orders[:, 1:] < orders[:, :-1]).int().argmax(1) - 1  # the span starts after the one descent...
    lengths = torch.where((orders[:, 1:] < orders[:, :-1]).any(1), lengths, -1)  # ...or the order is the identity
    counts = torch.bincount(lengths[lengths > 0], minlength=longest + 1)[1:]
    assert len(counts) == longest
    identity = (lengths == -1).float().mean().item()  # a span at the end: the identity, for every length
    assert abs(identity - sum(1 / (T - L + 1) for L in range(1, longest + 1)) / longest) < 0.01
    for L in range(1, longest + 1):  # a span not at the end of length L: (T - L) of its T - L + 1 places
        expected = N * (T - L) / (T - L + 1) / longest
        assert abs(counts[L - 1].item() - expected) <= 5 * math.sqrt(expected), L
    starts = torch.tensor([s for s, L in splits if L == 1])
    assert torch.bincount(starts, minlength=T).min() > 0  # every place


def family_probabilities(mix, T):
    """Exact probabilities of a row being the identity, FIM-shaped but not the identity, or neither, by enumerating
    the FIM family's (length, start) and counting the FIM-shaped permutations among the T! random ones."""
    fim_identity = sum(1 / (T - L + 1) for L in range(1, T + 1)) / T
    n_shaped = sum(T - L for L in range(1, T + 1))  # spans not at the end: distinct permutations
    identity = mix['l2r'] + mix['fim'] * fim_identity + mix['random'] / math.factorial(T)
    shaped = mix['fim'] * (1 - fim_identity) + mix['random'] * n_shaped / math.factorial(T)
    return identity, shaped, 1 - identity - shaped


@pytest.mark.parametrize('text', ['l2r:0.1,fim:0.4,random:0.5', 'l2r:0.5,fim:0.5', 'random:0.9,l2r:0.1', 'fim:1'])
def test_the_shares_give_their_frequencies(text):
    T, N = 8, 40000
    mix = parse_mix(text)
    assert_family_frequencies(sample_orders('mixed', N, T, torch.Generator().manual_seed(1), mix), mix)


def assert_family_frequencies(orders, mix):
    """The rows of orders (N, T) that are the identity, FIM-shaped but not the identity, or neither, each within 5
    standard deviations of its exact probability under mix."""
    N, T = orders.shape
    identity = (orders == torch.arange(T)).all(1)
    shaped = torch.tensor([fim_split(row) is not None for row in orders.tolist()]) & ~identity
    observed = [identity.sum().item(), shaped.sum().item(), N - identity.sum().item() - shaped.sum().item()]
    for seen, p in zip(observed, family_probabilities(mix, T)):
        assert abs(seen - N * p) <= 5 * math.sqrt(N * p * (1 - p)) + 1, (mix, observed)


def test_the_curriculum_moves_linearly_from_left_to_right_to_the_mix():
    mix = parse_mix('l2r:0.1,fim:0.4,random:0.5')
    stages = mix_stages(mix, 100)
    assert shares_at(stages, 0) == {'random': 0.0, 'l2r': 1.0, 'fim': 0.0}
    assert shares_at(stages, 25) == pytest.approx({'random': 0.125, 'l2r': 0.775, 'fim': 0.1})
    assert shares_at(stages, 100) == mix and shares_at(stages, 5000) == mix and shares_at(mix_stages(mix), 0) == mix
    orders = sample_orders('mixed', 20000, 16, torch.Generator().manual_seed(2),
                           shares_at(mix_stages(paper_mix(0.9), 100), 50))
    assert abs((orders == torch.arange(16)).all(1).float().mean().item() - 0.55) < 0.015


STAGES = 'l2r:1@0/l2r:0.5,fim:0.5@100/l2r:0.5,fim:0.5@200/l2r:0.1,fim:0.4,random:0.5@300/fim:1@300'


@pytest.mark.parametrize('iteration, expected', [
    (0, 'l2r:1'), (50, 'l2r:0.75,fim:0.25'), (100, 'l2r:0.5,fim:0.5'), (199, 'l2r:0.5,fim:0.5'),
    (250, 'l2r:0.3,fim:0.45,random:0.25'), (299, 'l2r:0.104,fim:0.401,random:0.495'), (300, 'fim:1'), (10**6, 'fim:1')])
def test_stages_give_their_frequencies_at_each_iteration(iteration, expected):
    """Linear between stages, held after the last; of two stages at one iteration the later one (a step). The shares
    drawn: the frequencies of identity, FIM-shaped and other rows, against their exact probabilities."""
    shares = shares_at(parse_stages(STAGES, 1000), iteration)
    assert shares == pytest.approx(parse_mix(expected))
    T, N = 8, 20000
    assert_family_frequencies(sample_orders('mixed', N, T, torch.Generator().manual_seed(iteration), shares), shares)


def test_a_staged_run_is_described_by_its_stages_and_ends_on_the_last():
    config = dict(order='mixed', order_stages='l2r:1@0/l2r:0.1,fim:0.4,random:0.5@30%', max_iters=1000)
    assert run_mix(config) == parse_mix('l2r:0.1,fim:0.4,random:0.5')
    assert describe_orders(config) == 'in stages: 100% l2r at iteration 0; then 50% random, 10% l2r, 40% fim at ' \
                                      'iteration 300'


@pytest.mark.parametrize('bad, words', [
    ('l2r:1@5', 'iteration 0'), ('l2r:1@0/fim:1@10/random:1@5', 'go back'), ('l2r:1', 'MIX@ITERATION'),
    ('l2r:1@٠', 'MIX@ITERATION'), ('l2r:1@1.5', 'whole number'), ('l2r:1@0/fim:1@5.5%', 'percentage'), ('l2r:0.5@0', 'sum to 1'),
    ('l2r:٠.٥,fim:٠.٥@0', 'must be a number'), ('sideways:1@0', 'not an order family')])
def test_bad_stages_are_named(bad, words):
    with pytest.raises(ValueError, match='--order_stages') as e:
        parse_stages(bad, 1000)
    assert words in str(e.value)


def test_stages_at_percentages_follow_max_iters():
    stages = parse_stages('l2r:1@0/l2r:1@33%/fim:1@67%/random:1@100%', 300)
    assert [i for i, _ in stages] == [0, 99, 201, 300]
    assert parse_stages('l2r:1@0/fim:1@50%', 0) == [(0, parse_mix('l2r:1')), (0, parse_mix('fim:1'))]


def test_mixes_name_their_families_and_shares_exactly():
    assert parse_mix('fim:0.25, l2r:0.75') == {'random': 0.0, 'l2r': 0.75, 'fim': 0.25}
    for bad, words in [('l2r:0.5', 'sum to 1'), ('l2r:0.5,l2r:0.5', 'twice'), ('fim:nan,l2r:1', '[0, 1]'),
                       ('l2r:-0.5,random:1.5', '[0, 1]'), ('l2r:٠.٥,random:٠.٥', 'must be a number'),
                       ('gpt:1', 'not an order family'), ('l2r', 'must be a number')]:
        with pytest.raises(ValueError, match=words.replace('[', r'\[').replace(']', r'\]')):
            parse_mix(bad)


def test_a_decoders_training_inputs_take_the_mix():
    model = tiny_model()
    x = torch.randint(11, (4, model.config.block_size))
    _, orders = training_inputs(model, x, 'mixed', torch.Generator().manual_seed(0), parse_mix('l2r:1'))
    assert torch.equal(orders, torch.arange(x.shape[1]).expand_as(x))


# -----------------------------------------------------------------------------
# train.py

def test_train_draws_the_mix_it_is_given(workdir):
    """An all-left-to-right mix trains exactly as --order=l2r (one micro-batch: its rows are drawn before its
    orders); the paper's mix given as shares trains exactly as random_ratio's default, also over a config file
    that sets random_ratio (as the small recipe's does): the command line's mix replaces it."""
    short = ['--max_iters=6', '--eval_interval=3']
    (workdir / 'half_random.py').write_text('random_ratio = 0.5\n')
    train(workdir, 'out-mix-l2r', *short, '--order=l2r')
    train(workdir, 'out-mix-all-l2r', *short, '--order_mix=l2r:1')
    train(workdir, 'out-mix-paper', *short)
    train(workdir, 'out-mix-shares', *short, '--order_mix=random:0.9,l2r:0.1')
    train(workdir, 'out-mix-over-config', *short, '--order_mix=random:0.9,l2r:0.1', config='half_random.py')
    strip = lambda out: [{k: v for k, v in r.items() if k not in ('elapsed', 'tokens_per_sec')}
                         for r in metrics(workdir, out)]
    assert strip('out-mix-l2r') == strip('out-mix-all-l2r')
    assert strip('out-mix-paper') == strip('out-mix-shares') == strip('out-mix-over-config') != strip('out-mix-l2r')
    (workdir / 'both_shares.py').write_text('random_ratio = 0.5\norder_mix = "random:0.9,l2r:0.1"\n')
    says(one_line_error('train.py', 'both_shares.py', *TINY, cwd=workdir), '--order_mix', 'drop --random_ratio')


@pytest.mark.parametrize('kind', ['decoder', 'encoder'])
def test_in_training_gap_nlls_equal_eval_ppl_gaps_on_the_same_chunks(workdir, kind):
    out = f'out-gaps-{kind}'
    train(workdir, out, '--max_iters=4', '--eval_interval=4', f'--architecture={kind}', '--eval_gaps=span:4,span:9',
          '--seed=5')  # not eval_ppl.py's seed: every run hides the same tokens
    record = metrics(workdir, out)[-1]
    run_script('eval_ppl.py', f'--out_dir={out}', '--gaps=span:4,span:9', '--max_chunks=16', '--ensemble=1',
               '--l2r_dtype=float32', '--out_json=gaps.json', cwd=workdir)  # TINY: eval_iters 2 x batch_size 8
    table = json.load(open(workdir / 'gaps.json'))['results']['shakespeare_char']
    both = 'revealed' if kind == 'encoder' else 'gap_l2r'
    for L in (4, 9):
        assert record[f'val_gap_span{L}'] == pytest.approx(table[f'span:{L}']['nll'][both], rel=1e-6)
        if kind == 'decoder':
            assert record[f'val_gap_span{L}_left'] == pytest.approx(table[f'span:{L}']['nll']['left'], rel=1e-6)
        else:
            assert f'val_gap_span{L}_left' not in record


def test_an_infill_decodes_as_the_model_was_trained_to_fill(workdir, char_ckpt, capsys):
    """A FIM-trained decoder fills a template left to right unless --order says otherwise, and says so; the paper's
    mix keeps --order's default; the export records the orders."""
    train(workdir, 'out-fim', '--max_iters=4', '--eval_interval=4', '--order_mix=l2r:0.5,fim:0.5')
    template = ['--infill=ROMEO: [MASK:6] my lord', '--num_samples=2', '--device=cpu']
    def sample(*flags):  # in this process: torch is imported once
        run_here('sample.py', *template, *flags, cwd=workdir)
        return capsys.readouterr().out
    fim, told, randomly = sample('--out_dir=out-fim'), sample('--out_dir=out-fim', '--order=l2r'), \
        sample('--out_dir=out-fim', '--order=random')
    samples = lambda out: [line for line in out.splitlines() if '«' in line]
    assert 'order: l2r' in fim and '50% l2r, 50% fim' in fim and 'order: l2r' not in told + randomly
    assert samples(fim) == samples(told) != samples(randomly)
    paper = sample(f'--out_dir={char_ckpt}')  # the paper's mix
    assert 'order: l2r' not in paper
    run_script('export.py', '--out_dir=out-fim', '--out=fim-folder', cwd=workdir)
    card = (workdir / 'fim-folder' / 'README.md').read_text()
    assert 'in these orders: 50% l2r, 50% fim.' in card
    assert json.load(open(workdir / 'fim-folder' / 'config.json'))['trained']['orders'] == '50% l2r, 50% fim'
