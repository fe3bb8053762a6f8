"""eval_ppl.py: the authors' chunks, the fast ensemble equals their one-forward-per-query algorithm, the
GPT-2 baseline equals the model's own loss, CLI."""
import ast
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import eval_ppl as script
from aogpt.benchmarks import (encode_rows, lambada_detokenize, lm1b_detokenize, load_rows, load_tokens, make_chunks,
                              paper_chunks, ptb_detokenize, wikitext_detokenize)
from aogpt.common import read_checkpoint
from conftest import (ROOT, needs, nll_given, one_line_error, peak_memory_run, run_script, says, tiny_mdm, tiny_model,
                      write_gpt2_dataset)
from aogpt.scoring import (ensemble_logprobs, ensemble_sizes, ensemble_slots, losses_by_context, random_context_orders,
                           score_chunks)
from fixtures.reference import chunk_digests, eval_chunks
from model import GPT, GPTConfig


@torch.no_grad()
def slow_ensemble_logprobs(model, x, sigma, context_orders, ensemble):
    """The authors' algorithm: one full forward of the whole block per (target, member).

    Member j > 0 reads the context set sigma[:i] in context_orders(i)[j-1], then sigma[i:]; the
    loss of slot i is -log p(x[sigma_i] | the context in that order).
    """
    n = len(x)
    out = torch.empty(ensemble, n)
    for i in range(n):
        orders = [sigma[:i], *context_orders(i)[:ensemble - 1]]
        for j, context in enumerate(orders):
            _, loss = model(x[None], torch.cat([context, sigma[i:]])[None], reduction='none')
            out[j, i] = -loss[0, i]
    return out


@pytest.mark.parametrize('positions', ['learned', 'rotary', 'rotary_plain'])
@pytest.mark.parametrize('injection,max_tokens', [('adaln', 150), ('add', 10_000)])  # AO-GPT, sigma-GPT
def test_fast_ensemble_equals_one_forward_per_query(injection, max_tokens, positions):
    # the slow side reads each order with the training forward, the fast one with scoring's query rows (only their
    # last slot through the head): a rotation that differs between the two paths fails here
    # every weight perturbed: AO-GPT's shut adaLN gates at init would leave attention, and so positions, no say
    model = tiny_model(block_size=24, vocab_size=50, cond_dim=16, target_injection=injection, position_encoding=positions)
    x = torch.randint(50, (14,))  # shorter than block_size, as --block_size allows
    sigma = torch.randperm(14)
    orders = random_context_orders(sigma, 3, seed=7)
    fast = ensemble_logprobs(model, x, sigma, orders, 4, max_tokens)
    slow = slow_ensemble_logprobs(model, x, sigma, orders, 4)
    torch.testing.assert_close(fast.exp(), slow.exp(), atol=1e-5, rtol=0)
    assert not torch.allclose(fast[1:, 4:], fast[0, 4:].expand(3, -1))  # the members do differ


def test_ensemble_slots_is_what_the_ensemble_reads(monkeypatch):
    """The test-time compute finding scarce states: the slots ensemble_logprobs asks for, counted as it asks, member
    0's forward (its start slot and n) and each query row (its start slot and its context); the rows' padding and a
    lone row's copy (for compiled models) aside."""
    from aogpt import scoring
    model, read = tiny_model(), []
    forward, query_logprobs = type(model).forward, scoring.query_logprobs

    def counted_forward(self, x, order, *args, **kwargs):
        read.append(order.size(0) * (order.size(1) + 1))
        return forward(self, x, order, *args, **kwargs)

    def counted_queries(model, queries, max_tokens):
        read.extend(len(context) + 1 for _, context, _ in queries)
        return query_logprobs(model, queries, max_tokens)
    monkeypatch.setattr(type(model), 'forward', counted_forward)
    monkeypatch.setattr(scoring, 'query_logprobs', counted_queries)
    n, sigma = 12, torch.randperm(12, generator=torch.Generator().manual_seed(0))
    for k in (1, 2, 5):
        read.clear()
        ensemble_logprobs(model, torch.randint(11, (n,)), sigma, random_context_orders(sigma, k - 1, 3), k, 10 ** 6)
        assert sum(read) == ensemble_slots(n, k)
    assert ensemble_slots(64, 16) == 65 + 15 * 2079  # 31,250: the GPT's mixture of 3 reads 195


def test_context_orders_are_seeded_nested_permutations():
    sigma = torch.randperm(30)
    a, b = random_context_orders(sigma, 7, seed=1), random_context_orders(sigma, 3, seed=1)
    for i in (0, 1, 17, 29):
        assert torch.equal(a(i)[:3], b(i)) and a(i).shape == (7, i)
        assert all(sorted(row.tolist()) == sorted(sigma[:i].tolist()) for row in a(i))
    assert not torch.equal(a(17), random_context_orders(sigma, 7, seed=2)(17))
    assert ensemble_sizes(8) == [1, 2, 4, 8] and ensemble_sizes(6) == [1, 2, 4, 6] and ensemble_sizes(1) == [1]


def test_detokenizers_follow_the_authors_rules():
    # WikiText rows keep their leading space and newline; punctuation joins only between spaces
    assert wikitext_detokenize(' = = Gameplay = = \n') == ' == Gameplay ==\n'
    assert wikitext_detokenize(' a 1 @,@ 000 @-@ year ( roughly ) , the " best " team \'s 3 @.@ 5 . \n') == \
        ' a 1,000-year (roughly), the "best" team\'s 3.5.\n'
    assert wikitext_detokenize("the players ' union , in N years at 20 ° C ,b") == \
        "the players' union, in 1 years at 20°C ,b"
    assert ptb_detokenize("it was n't the <unk> 's N N points , $ N million for the banks ' loans a\\/b N") == \
        "it wasn't the ?'s 1 1 points , $1 million for the banks' loans a/b N"
    assert lm1b_detokenize('Wal-Mart \'s founder said : " We are here , " he said .') == \
        'Wal-Mart\'s founder said: "We are here," he said.'
    assert lm1b_detokenize('see http : / / www.x.com ( now ) for $ 5 ?') == 'see http://www.x.com (now) for $5?'
    assert lambada_detokenize('  “Hi,” she said, ‘ok’ ') == '\n"Hi," she said, ‘ok’'  # double quotes only


def test_rows_are_taken_as_the_hub_serves_them():
    data_dir = needs('wikitext2', 'ptb')  # the mirror's files, or the Hub's rows
    wikitext = load_rows('wikitext2', 'test', data_dir)
    assert len(wikitext) == 4358 and wikitext.count('') == 1467  # a blank line is an empty row, kept
    assert wikitext[:2] == ['', ' = Robert Boulter = \n']
    ptb = load_rows('ptb', 'test', data_dir)
    assert len(ptb) == 3761 and ptb[0] == "no it was n't black monday"


@pytest.mark.parametrize('name', ['wikitext2', 'ptb'])
def test_paper_pipeline_makes_the_authors_chunks(name):
    """The fixture holds the digests of the chunks that the authors' own pipeline made from the same rows."""
    expected = eval_chunks()[name]['sha256']
    data_dir = needs('gpt2_bpe', name)
    chunks = make_chunks(load_tokens(name, 'test', data_dir)[0], 1024)
    assert sorted(chunk_digests(chunks)) == sorted(expected)  # the same chunks, in any order
    clean = make_chunks(load_tokens(name, 'test', data_dir, 'clean')[0], 1024, 'clean')  # the other pipeline differs
    assert sorted(chunk_digests(clean)) != sorted(expected)


@pytest.mark.parametrize('n_rows', [8100, 5])
def test_paper_chunks_equal_a_parallel_datasets_map(n_rows):
    """datasets.map(batched=True, num_proc=8) itself: 8 contiguous shards (the first ones a row
    longer), 1,000-row batches within each (8,100 rows: 1,013 + 1,012 ... so a short batch each), every
    batch concatenated and cut on its own. 5 rows: datasets runs 5 processes."""
    from itertools import chain
    from datasets import Dataset, disable_progress_bars
    disable_progress_bars()
    g = torch.Generator().manual_seed(0)
    docs = [torch.randint(50, (int(k),)).tolist() for k in torch.randint(1, 30, (n_rows,), generator=g)]

    def group_texts(batch):
        ids = list(chain(*batch['ids']))
        return {'ids': [ids[i:i + 16] for i in range(0, len(ids) // 16 * 16, 16)]}
    expected = Dataset.from_dict({'ids': docs}).map(group_texts, batched=True, num_proc=8)['ids']
    assert paper_chunks(docs, 16).tolist() == list(expected)
    assert len(expected) < sum(map(len, docs)) // 16  # the per-batch remainders were dropped


@pytest.mark.needs('gpt2_bpe')
def test_clean_pipeline_strips_skips_and_cuts_once(tmp_path):
    path = tmp_path / 'rows.txt'
    path.write_text('hello world\n   \na-b \n')
    eot = 50256
    paper, _ = load_tokens(str(path))  # every row as it is, each with its end-of-text
    assert paper == [[31373, 995, eot], [220, 220, 220, eot], [64, 12, 65, 220, eot]]
    clean, _ = load_tokens(str(path), pipeline='clean')
    assert clean == [[31373, 995, eot], [64, 12, 65, eot]]
    assert make_chunks(clean, 3, 'clean').tolist() == [[31373, 995, eot], [64, 12, 65]]  # one stream, rest dropped
    assert make_chunks(clean, 8, 'clean').shape == (0, 8)
    assert encode_rows(['', 'a']) == [[eot], [64, eot]]  # an empty row is end-of-text alone


@pytest.mark.filterwarnings('ignore:Mismatch dtype between input and weight')
def test_any_order_numbers_do_not_follow_the_l2r_precision():
    assert script.dtype == 'float32' and script.l2r_precision('auto', 'cpu', hf=False) == 'float32'  # CPU
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=16, vocab_size=50, n_layer=1, n_head=2, n_embd=16, cond_dim=8)).eval()
    chunks = torch.randint(50, (2, 16))
    l2r, members = score_chunks(model, chunks, 2, 10_000, seed=0)
    l2r_bf16, members_bf16 = score_chunks(model, chunks, 2, 10_000, seed=0,
                                      l2r_ctx=torch.autocast('cpu', dtype=torch.bfloat16))
    assert torch.equal(members, members_bf16) and not torch.equal(l2r, l2r_bf16)
    torch.testing.assert_close(l2r_bf16, l2r, atol=0.05, rtol=0)


def eval_ppl(workdir, *args, check=True):
    return run_script('eval_ppl.py', *args, cwd=workdir, check=check)


def test_cli_char_level(workdir, char_ckpt):
    out = eval_ppl(workdir, f'--out_dir={char_ckpt}', '--dataset=shakespeare_char', '--ensemble', '4',
                   '--max_chunks=3', '--out_json=ppl.json', '--device=cpu', '--dtype=float32')
    header, row = out.stdout.splitlines()[-3:-1]
    assert header.split()[:8] == ['dataset', 'tokens', 'l2r', 'ppl', 'any-order', 'ppl', 'ensemble=2', 'ensemble=4']
    assert row.split()[:2] == ['shakespeare_char', '96']
    result = json.load(open(workdir / 'ppl.json'))
    assert result['seed'] == 1337 and result['ensemble'] == 4 and result['block_size'] == 32
    ppl = result['results']['shakespeare_char']['ppl']
    assert set(ppl) == {'l2r', '1', '2', '4'}
    assert all(1 < v < 65 for v in ppl.values())
    check_chunk_nlls(workdir, char_ckpt, result['results']['shakespeare_char'])


def check_chunk_nlls(workdir, char_ckpt, result):
    """chunk_nll, independently: each of the 3 chunks of val.bin (one document, cut in 32s) read by one forward
    of the EMA weights in the identity order and in its seeded order (the seed's generator, one randperm a chunk)."""
    chunk_nll, ppl = result['chunk_nll'], result['ppl']
    assert set(chunk_nll) == set(ppl) and all(len(v) == 3 for v in chunk_nll.values())
    for k, v in chunk_nll.items():  # equal chunks: the exp of the mean over chunks is the perplexity
        assert math.exp(sum(v) / 3) == pytest.approx(ppl[k], rel=1e-6), k
    model, _ = read_checkpoint(workdir / char_ckpt / 'ckpt.pt')
    tokens = np.fromfile(workdir / 'data' / 'shakespeare_char' / 'val.bin', dtype=np.uint16)[:96]
    chunks = torch.from_numpy(tokens.astype(np.int64)).view(3, 32)
    generator = torch.Generator().manual_seed(1337)

    def nll(x, order):
        with torch.no_grad():
            logits = model(x[None], order[None])[0][0, :32]
        return -logits.double().log_softmax(-1).gather(1, x[order][:, None]).mean().item()
    for c, x in enumerate(chunks):
        order = torch.randperm(32, generator=generator)
        assert chunk_nll['l2r'][c] == pytest.approx(nll(x, torch.arange(32)), rel=1e-5)
        assert chunk_nll['1'][c] == pytest.approx(nll(x, order), rel=1e-5)
    assert chunk_nll['4'] != chunk_nll['1']


def test_any_order_in_bf16_as_the_authors_sigma_gpt_script(workdir, char_ckpt):
    def ppl(dtype):
        eval_ppl(workdir, f'--out_dir={char_ckpt}', '--ensemble=2', '--max_chunks=3', '--device=cpu',
                 f'--dtype={dtype}', f'--out_json=ppl-{dtype}.json')
        result = json.load(open(workdir / f'ppl-{dtype}.json'))
        assert result['dtype'] == dtype and result['l2r_dtype'] == 'float32'  # on the CPU
        return result['results']['shakespeare_char']['ppl']
    bf16, fp32 = ppl('bfloat16'), ppl('float32')
    assert bf16['l2r'] == fp32['l2r']  # --l2r_dtype is its own setting
    for size in ('1', '2'):  # any-order and ensemble=2: bf16 autocast rounds, a little
        assert bf16[size] != fp32[size] and bf16[size] == pytest.approx(fp32[size], rel=0.01)


def test_encoder_settings_on_a_decoder_are_noted_as_ignored(workdir, char_ckpt):
    out = eval_ppl(workdir, f'--out_dir={char_ckpt}', '--max_chunks=1', '--device=cpu', '--mc_samples=4').stdout
    notes = [line for line in out.splitlines() if line.startswith('note: ')]
    assert len(notes) == 1, out
    says(notes[0], '--mc_samples is ignored', "encoder's NELBO bound", 'is not an encoder')
    assert 'ignored' not in eval_ppl(workdir, f'--out_dir={char_ckpt}', '--max_chunks=1', '--device=cpu').stdout


def test_cli_bpe_sets(workdir, bpe_ckpt):
    data_dir = needs('gpt2_bpe', 'wikitext2', 'ptb', 'lambada')
    out = eval_ppl(workdir, f'--out_dir={bpe_ckpt}', '--dataset=wikitext2,ptb,lambada', f'--data_dir={data_dir}',
                   '--ensemble=2', '--max_chunks=2', '--device=cpu', '--dtype=float32')
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[-4:]}
    for name in ('wikitext2', 'ptb', 'lambada'):
        assert rows[name][1] == '64'
        assert all(1 < float(v) < 1e6 for v in rows[name][2:5])


def test_every_corpus_data_prepares_is_a_dataset(workdir, bpe_ckpt, tmp_path):
    """--dataset=<name> reads data/<name>/val.bin for each corpus a data/<name>/prepare.py writes (the Python
    library and tiny Shakespeare in GPT-2 BPE were refused as unknown), as --data_file reads it."""
    from aogpt.benchmarks import BIN_SETS
    assert set(BIN_SETS) == {name for name in os.listdir(os.path.join(ROOT, 'data'))
                             if os.path.exists(os.path.join(ROOT, 'data', name, 'prepare.py'))}
    write_gpt2_dataset(tmp_path, 'python', 0, 640, seed=3)
    flags = [f'--out_dir={workdir / bpe_ckpt}', '--max_chunks=4', '--device=cpu']
    named = run_script('eval_ppl.py', *flags, '--dataset=python', cwd=tmp_path).stdout.splitlines()[-1].split()
    by_path = run_script('eval_ppl.py', *flags, '--data_file=data/python/val.bin', cwd=tmp_path).stdout
    # the same row but its name and its seconds (the last column, which varies run to run)
    assert named[0] == 'python' and named[1:-1] == by_path.splitlines()[-1].split()[1:-1]


def test_each_half_reads_its_half_of_val_bin(workdir, char_ckpt, tmp_path):
    """--half=select and --half=report read the first and the second half of val.bin (train.py --keep_best's cut):
    each gives the chunk NLLs of a token file that holds only that half, and its record says which it read."""
    val = np.fromfile(workdir / 'data' / 'shakespeare_char' / 'val.bin', dtype=np.uint16)
    flags = [f'--out_dir={workdir / char_ckpt}', '--device=cpu', '--dtype=float32', '--ensemble=2', '--max_chunks=4']
    for half, part in (('select', val[:len(val) // 2]), ('report', val[len(val) // 2:])):
        folder = tmp_path / half
        folder.mkdir()
        part.tofile(folder / 'val.bin')
        shutil.copy(workdir / 'data' / 'shakespeare_char' / 'meta.pkl', folder)
        said = eval_ppl(workdir, *flags, '--dataset=shakespeare_char', f'--half={half}',
                        f'--out_json={folder}/half.json').stdout
        assert f'shakespeare_char: the {half} half of data/shakespeare_char/val.bin' in said
        eval_ppl(workdir, *flags, f'--data_file={folder}/val.bin', f'--out_json={folder}/file.json')
        halved, whole = (json.loads((folder / f).read_text())['results'] for f in ('half.json', 'file.json'))
        assert halved['shakespeare_char']['chunk_nll'] == whole[f'{folder}/val.bin']['chunk_nll']
        assert halved['shakespeare_char']['split'] == f'data/shakespeare_char/val.bin, {half} half'


@pytest.mark.needs('gpt2_bpe')
def test_bad_input_is_one_line_on_the_command_line(workdir, bpe_ckpt):
    (workdir / 'short.txt').write_text('just a few words\n')
    out = eval_ppl(workdir, f'--out_dir={bpe_ckpt}', '--device=cpu', '--data_file=short.txt', check=False)
    assert out.returncode == 1 and out.stderr.startswith('error: ') and out.stderr.count('\n') == 1, out.stderr
    says(out.stderr, 'short.txt has 5 tokens', 'one block of 32')


def test_evaluation_keeps_no_graph():
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=16, vocab_size=50, n_layer=1, n_head=2, n_embd=16, cond_dim=8))
    with torch.enable_grad():  # as a caller might have it: evaluate must still not build graphs
        l2r, members = score_chunks(model, torch.randint(50, (3, 16)), 2, 10_000, seed=0)
    assert l2r.shape == (48,) and members.shape == (2, 48)
    assert not l2r.requires_grad and not members.requires_grad


@pytest.mark.slow  # 64 chunks through the GPT-2 vocabulary's head
def test_memory_is_flat_in_the_number_of_chunks(workdir, bpe_ckpt):
    # a 50,304-token head: a kept graph would cost ~20 MB a chunk, 1.2 GB over the 60 more chunks
    runs = {}
    for max_chunks in (4, 64):
        out, runs[max_chunks] = peak_memory_run('eval_ppl.py', f'--out_dir={bpe_ckpt}', '--ensemble=2',
                                                '--data_file=data/webtext/val.bin', f'--max_chunks={max_chunks}',
                                                '--device=cpu', cwd=workdir)
        assert out.splitlines()[-1].split()[1] == f'{max_chunks * 32:,}'  # tokens evaluated
    assert runs[64] < runs[4] + 100, runs


def test_gpt2_baseline_equals_the_models_own_loss(workdir, tiny_gpt2):
    from transformers import AutoModelForCausalLM
    data_dir = needs('gpt2_bpe', 'ptb')
    out = eval_ppl(workdir, f'--init_from={tiny_gpt2}', '--dataset=ptb', f'--data_dir={data_dir}', '--max_chunks=4',
                   '--out_json=gpt2.json', '--device=cpu')
    assert 'left-to-right only; each 1024-token chunk scores its last 1023 tokens' in out.stdout
    result = json.load(open(workdir / 'gpt2.json'))['results']['ptb']
    assert result['tokens'] == 4 * 1023 and set(result['ppl']) == {'l2r'} and set(result['chunk_nll']) == {'l2r'}
    # independently: the Hugging Face model's own shifted loss on the authors' first four PTB chunks
    chunks = make_chunks(load_tokens('ptb', 'test', data_dir)[0], 1024)[:4]
    assert chunk_digests(chunks) == eval_chunks()['ptb']['sha256'][:4]  # theirs, in their order
    model = AutoModelForCausalLM.from_pretrained(tiny_gpt2).eval()
    with torch.no_grad():
        losses = [model(c[None].long(), labels=c[None].long()).loss for c in chunks]
    assert result['ppl']['l2r'] == pytest.approx(math.exp(torch.stack(losses).mean().item()), rel=1e-5)
    assert result['chunk_nll']['l2r'] == pytest.approx(torch.stack(losses).tolist(), rel=1e-5)  # over its 1023 each
    assert out.stdout.splitlines()[-2].split()[:4] == ['ptb', '4,092', f"{result['ppl']['l2r']:.3f}", '-']


def test_gpt2_baseline_errors_are_one_line(workdir, tiny_gpt2, tmp_path, monkeypatch):
    no_weights = tmp_path / 'no-weights'
    no_weights.mkdir()
    shutil.copy(os.path.join(tiny_gpt2, 'config.json'), no_weights)
    data = '--data_dir=nowhere'  # each error comes before any data is read
    says(one_line_error('eval_ppl.py', f'--init_from={tiny_gpt2}', '--dataset=ptb', data, '--ensemble=2', cwd=workdir),
         '--ensemble', 'left-to-right only', 'AO-GPT checkpoints')
    says(one_line_error('eval_ppl.py', f'--init_from={tiny_gpt2}', '--dataset=ptb', data, '--compile=True',
                        cwd=workdir), '--compile', 'AO-GPT checkpoints', 'not to the Hugging Face model')
    says(one_line_error('eval_ppl.py', f'--init_from={no_weights}', '--dataset=ptb', data, cwd=workdir),
         'could not load the Hugging Face model', f"'{no_weights}'")
    says(one_line_error('eval_ppl.py', f'--init_from={tiny_gpt2}', '--dataset=shakespeare_char', cwd=workdir),
         'reads GPT-2 BPE', 'shakespeare_char')
    monkeypatch.setitem(sys.modules, 'transformers', None)  # as if it were not installed
    says(one_line_error('eval_ppl.py', '--init_from=gpt2-medium', '--dataset=ptb', data, cwd=workdir),
         'gpt2-medium', 'needs transformers', 'pip install transformers')


@pytest.mark.parametrize('args,parts', [
    (['--pipeline=sedd'], ('--pipeline', 'paper, clean')),
    (['--l2r_dtype=half'], ('--l2r_dtype', 'auto, float32, bfloat16, float16')),
])
def test_new_settings_are_checked(workdir, char_ckpt, args, parts):
    says(one_line_error('eval_ppl.py', f'--out_dir={char_ckpt}', '--device=cpu', *args, cwd=workdir), *parts)


@pytest.mark.needs('gpt2_bpe')
def test_a_set_too_short_for_one_chunk_per_batch(workdir, bpe_ckpt):
    # 20 one-word rows, 40 tokens: a 32-token block overall, but 8 shards of 2 or 3 rows cut on their own
    (workdir / 'words.txt').write_text('word\n' * 20)
    says(one_line_error('eval_ppl.py', f'--out_dir={bpe_ckpt}', '--device=cpu', '--data_file=words.txt', cwd=workdir),
         'words.txt makes no 32-token chunk', '--pipeline=paper', '8 shards')
    out = eval_ppl(workdir, f'--out_dir={bpe_ckpt}', '--device=cpu', '--data_file=words.txt', '--pipeline=clean')
    assert out.stdout.splitlines()[-1].split()[:2] == ['words.txt', '32']


def test_docs_library_example_equals_the_script(workdir, char_ckpt):
    """The docs' example of the library, run as it is written, gives eval_ppl.py's numbers."""
    page = open(os.path.join(ROOT, 'docs', 'models.md')).read()
    code = page.split('The library used directly')[1].split('```python\n')[1].split('```')[0]
    code = code.replace('out-shakespeare-char/ckpt.pt', f'{char_ckpt}/ckpt.pt')
    printed = subprocess.run([sys.executable, '-c', code], cwd=workdir, capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=ROOT), check=True).stdout
    eval_ppl(workdir, f'--out_dir={char_ckpt}', '--ensemble=4', '--max_chunks=8', '--seed=0', '--device=cpu',
             '--out_json=readme.json')
    expected = json.load(open(workdir / 'readme.json'))['results']['shakespeare_char']['ppl']
    expected = {k if k == 'l2r' else int(k): v for k, v in expected.items()}  # JSON keys are strings
    assert ast.literal_eval(printed.strip()) == pytest.approx(expected)


def brute_distances(targets, known, n):
    return [min((abs(t - k) for k in known), default=n) for t in targets]


@pytest.mark.parametrize('kind', [dict(), dict(position_encoding='learned'), dict(target_injection='add')])
def test_decoder_losses_by_context_are_its_slots_written_out(kind):
    # each slot's -log p from the forward written out by hand (test_model.slow_forward), its distance by brute force
    from test_model import slow_forward
    model = tiny_model(**({'position_encoding': 'rotary'} | kind))
    x, order = torch.randint(11, (12,)), torch.randperm(12)
    known, distances, nlls = losses_by_context(model, x, order, counts=None)
    with torch.no_grad():
        logp = F.log_softmax(slow_forward(model, x, order).double(), -1)
    torch.testing.assert_close(nlls, -logp[torch.arange(12), x[order]], rtol=1e-5, atol=1e-6)
    assert known.tolist() == list(range(12))
    assert distances.tolist() == [brute_distances([order[c].item()], order[:c].tolist(), 12)[0] for c in range(12)]


def test_encoder_losses_by_context_are_its_masked_forwards():
    model = tiny_mdm()
    n = len(x := torch.randint(5, (5,)))
    order = torch.randperm(n)
    known, distances, nlls = losses_by_context(model, x, order, counts=[0, 2, 4])
    expected, near = [], []
    for c in (0, 2, 4):
        hidden = order[c:].tolist()
        expected += nll_given(model, x, set(order[:c].tolist()))[hidden].tolist()
        near += brute_distances(hidden, order[:c].tolist(), n)
    torch.testing.assert_close(nlls, torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=1e-6)
    assert known.tolist() == [0] * 5 + [2] * 3 + [4] and distances.tolist() == near
