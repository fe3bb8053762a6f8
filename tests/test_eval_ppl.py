"""eval_ppl.py: the fast ensemble equals the authors' one-forward-per-query algorithm, data handling, CLI."""
import json
import os

import pytest
import torch

from conftest import SHARED, peak_memory_run, run_script
from eval_ppl import (chunk, encode_documents, ensemble_logprobs, ensemble_sizes, evaluate, lambada_detokenize,
                      lm1b_detokenize, ptb_detokenize, random_context_orders, wikitext_detokenize)
from model import GPT, GPTConfig


@torch.no_grad()
def slow_ensemble_logprobs(model, x, sigma, context_orders, n_members):
    """The authors' algorithm: one full forward of the whole block per (target, member).

    Member j > 0 reads the context set sigma[:i] in context_orders(i)[j-1], then sigma[i:]; the
    loss of slot i is -log p(x[sigma_i] | the context in that order).
    """
    n = len(x)
    out = torch.empty(n_members, n)
    for i in range(n):
        orders = [sigma[:i], *context_orders(i)[:n_members - 1]]
        for j, context in enumerate(orders):
            _, loss = model(x[None], torch.cat([context, sigma[i:]])[None], reduction='none')
            out[j, i] = -loss[0, i]
    return out


@pytest.mark.parametrize('injection,max_tokens', [('adaln', 150), ('add', 10_000)])  # AO-GPT, sigma-GPT
def test_fast_ensemble_equals_one_forward_per_query(injection, max_tokens):
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=24, vocab_size=50, n_layer=2, n_head=2, n_embd=32, cond_dim=16,
                          target_injection=injection)).eval()
    x = torch.randint(50, (14,))  # shorter than block_size, as --block_size allows
    sigma = torch.randperm(14)
    orders = random_context_orders(sigma, 3, seed=7)
    fast = ensemble_logprobs(model, x, sigma, orders, 4, max_tokens)
    slow = slow_ensemble_logprobs(model, x, sigma, orders, 4)
    torch.testing.assert_close(fast.exp(), slow.exp(), atol=1e-5, rtol=0)
    assert not torch.allclose(fast[1:, 4:], fast[0, 4:].expand(3, -1))  # the members do differ


def test_context_orders_are_seeded_nested_permutations():
    sigma = torch.randperm(30)
    a, b = random_context_orders(sigma, 7, seed=1), random_context_orders(sigma, 3, seed=1)
    for i in (0, 1, 17, 29):
        assert torch.equal(a(i)[:3], b(i)) and a(i).shape == (7, i)
        assert all(sorted(row.tolist()) == sorted(sigma[:i].tolist()) for row in a(i))
    assert not torch.equal(a(17), random_context_orders(sigma, 7, seed=2)(17))
    assert ensemble_sizes(8) == [1, 2, 4, 8] and ensemble_sizes(6) == [1, 2, 4, 6] and ensemble_sizes(1) == [1]


def test_detokenizers():
    assert wikitext_detokenize('= = Gameplay = =') == '== Gameplay =='
    assert wikitext_detokenize('a 1 @,@ 000 @-@ year ( roughly ) , the " best " team \'s 3 @.@ 5 .') == \
        'a 1,000-year (roughly), the "best" team\'s 3.5.'
    assert ptb_detokenize("it was n't the <unk> 's N points , N") == "it wasn't the ?'s 1 points , 1"
    assert lm1b_detokenize('Wal-Mart \'s founder said : " We are here , " he said .') == \
        'Wal-Mart\'s founder said: "We are here," he said.'
    assert lambada_detokenize('“Hi,” she said, ‘ok’') == '"Hi," she said, \'ok\''


def test_documents_get_end_of_text_and_the_remainder_is_dropped():
    ids = encode_documents(['hello world', '   ', 'a @-@ b'], wikitext_detokenize)
    eot = 50256
    assert ids.tolist() == [31373, 995, eot, 64, 12, 65, eot]  # blank document skipped, 'a-b'
    chunks = chunk(ids, 3)
    assert chunks.tolist() == [[31373, 995, eot], [64, 12, 65]]
    assert chunk(ids, 8).shape == (0, 8)


def eval_ppl(workdir, *args, check=True):
    return run_script('eval_ppl.py', *args, cwd=workdir, check=check)


def test_cli_char_level(workdir, char_ckpt):
    out = eval_ppl(workdir, f'--out_dir={char_ckpt}', '--dataset=shakespeare_char', '--ensemble', '4',
                   '--max_chunks=3', '--out_json=ppl.json', '--device=cpu', '--dtype=float32')
    header, row = out.stdout.splitlines()[-3:-1]
    assert header.split()[:8] == ['dataset', 'tokens', 'l2r', 'ppl', 'any-order', 'ppl', 'M=2', 'M=4']
    assert row.split()[:2] == ['shakespeare_char', '96']
    result = json.load(open(workdir / 'ppl.json'))
    assert result['seed'] == 1337 and result['ensemble'] == 4 and result['block_size'] == 32
    ppl = result['results']['shakespeare_char']['ppl']
    assert set(ppl) == {'l2r', '1', '2', '4'}
    assert all(1 < v < 65 for v in ppl.values())


def test_cli_bpe_sets_from_local_copies(workdir, bpe_ckpt):
    out = eval_ppl(workdir, f'--out_dir={bpe_ckpt}', '--dataset=wikitext2,ptb,lambada',
                   f'--data_dir={os.path.join(SHARED, "data")}', '--ensemble=2', '--max_chunks=2', '--device=cpu',
                   '--dtype=float32')
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[-4:]}
    for name in ('wikitext2', 'ptb', 'lambada'):
        assert rows[name][1] == '64'
        assert all(1 < float(v) < 1e6 for v in rows[name][2:5])


def test_bad_input_is_one_line_on_the_command_line(workdir, bpe_ckpt):
    (workdir / 'short.txt').write_text('just a few words\n')
    out = eval_ppl(workdir, f'--out_dir={bpe_ckpt}', '--device=cpu', '--data_file=short.txt', check=False)
    assert out.returncode == 1 and out.stderr == 'error: short.txt has 5 tokens, fewer than one block of 32\n'


def test_evaluation_keeps_no_graph():
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=16, vocab_size=50, n_layer=1, n_head=2, n_embd=16, cond_dim=8))
    with torch.enable_grad():  # as a caller might have it: evaluate must still not build graphs
        l2r, members = evaluate(model, torch.randint(50, (3, 16)), 2, 10_000, seed=0)
    assert l2r.shape == (48,) and members.shape == (2, 48)
    assert not l2r.requires_grad and not members.requires_grad


def test_memory_is_flat_in_the_number_of_chunks(workdir, bpe_ckpt):
    # a 50,304-token head: a kept graph would cost ~20 MB a chunk, 4 GB over the 200 chunks
    runs = {}
    for max_chunks in (4, 0):
        out, runs[max_chunks] = peak_memory_run('eval_ppl.py', f'--out_dir={bpe_ckpt}', '--ensemble=2',
                                                '--data_file=data/webtext/val.bin', f'--max_chunks={max_chunks}',
                                                '--device=cpu', cwd=workdir)
        assert out.splitlines()[-1].split()[1] == ('128' if max_chunks else '6,400')  # tokens evaluated
    assert runs[0] < runs[4] + 100, runs
