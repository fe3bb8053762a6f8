"""Each script end to end at the paper's shapes (block 1024, the 50,304-token GPT-2 head) on the CPU,
with a small width: the shape and memory bugs that block 32 never meets. Peak memory is the process's RSS,
torch included. In float32: a CPU without bf16 units takes minutes for a bf16 step at these shapes, so the bf16
paths run at small shapes (tests/test_gpu_paths.py)."""
import math

import pytest
import torch

from conftest import needs, peak_memory_run, stored_checkpoint

pytestmark = pytest.mark.slow


@pytest.fixture(scope='module')
def real_ckpt(workdir, bpe_ckpt):  # bpe_ckpt writes data/webtext
    # one row a micro-step: each row is 1,025 x 50,304 logits and their gradient, the shapes this file is for.
    # With the little-data settings too: a prefix of 4,096 tokens, the best on val.bin's first half, input masking
    out, peak = peak_memory_run('train.py', '--dataset=webtext', '--out_dir=out-real', '--device=cpu',
                                '--dtype=float32', '--compile=False', '--n_layer=2', '--n_head=2', '--n_embd=32',
                                '--cond_dim=16', '--block_size=1024', '--batch_size=1',
                                '--gradient_accumulation_steps=2', '--max_iters=2', '--eval_interval=2',
                                '--eval_iters=1', '--warmup_iters=1', '--lr_decay_iters=2', '--train_tokens=4096',
                                '--keep_best=l2r', '--input_mask=0.15', cwd=workdir)
    return out, peak


def test_train(workdir, real_ckpt):
    out, peak = real_ckpt
    print(f'train.py, block 1024: peak {peak:.0f} MB')
    assert 'tokens per iteration: 2,048' in out and 'saved checkpoint to out-real' in out
    ckpt = stored_checkpoint(workdir, 'out-real')
    assert ckpt['model_args']['block_size'] == 1024 and ckpt['model_args']['vocab_size'] == 50304
    assert ckpt['iter_num'] == 2 and ckpt['vocab'] == 'gpt2'
    assert 'epoch 1.00' in out and stored_checkpoint(workdir, 'out-real')['best']['iter'] in (0, 2)
    assert (workdir / 'out-real' / 'best.pt').exists()
    assert all(t.dtype == torch.float32 and torch.isfinite(t).all() for t in ckpt['model'].values())
    assert peak < 2500


def test_an_evaluation_holds_a_rows_logits_not_the_batchs(workdir, real_ckpt):
    # 4 rows of 1,025 x 50,304 logits are 825 MB in float32, and cross-entropy keeps as much again: train.py's
    # evaluation reads a batch a group of rows at a time (training.mean_loss), here one row
    out, peak = peak_memory_run('train.py', '--dataset=webtext', '--out_dir=out-real', '--eval_only', '--device=cpu',
                                '--dtype=float32', '--compile=False', '--batch_size=4', '--eval_iters=1', cwd=workdir)
    print(f'train.py --eval_only, 4 rows of block 1024: peak {peak:.0f} MB')
    assert 'EMA loss' in out and peak < 1300


@pytest.mark.parametrize('args', [[], ['--steps=64'], ['--order=confidence', '--steps=8'], ['--speculate=8']])
@pytest.mark.needs('gpt2_bpe')
def test_sample_1024_tokens(workdir, real_ckpt, args):
    out, peak = peak_memory_run('sample.py', '--out_dir=out-real', '--num_samples=2', '--device=cpu', '--dtype=float32',
                                *args, cwd=workdir)
    print(f'sample.py {" ".join(args)}: peak {peak:.0f} MB')
    texts = out.split('\n---------------\n')[:-1]
    assert len(texts) == 2 and all(len(t) > 1024 for t in texts)  # 1024 BPE tokens decode to more characters
    assert peak < 2000


def test_eval_a_chunk_of_each_dataset(workdir, real_ckpt):
    # an ensemble's queries at these shapes: test_rotary_decoder_trains_samples_and_evaluates
    data_dir = needs('gpt2_bpe', 'wikitext2', 'lambada')
    out, peak = peak_memory_run('eval_ppl.py', '--out_dir=out-real', '--dataset=wikitext2,lambada',
                                f'--data_dir={data_dir}', '--max_chunks=1', '--device=cpu', cwd=workdir)
    print(f'eval_ppl.py, a chunk of 1024 from each: peak {peak:.0f} MB')
    rows = {line.split()[0]: line.split() for line in out.splitlines()[-2:]}
    for name in ('wikitext2', 'lambada'):
        assert rows[name][1] == '1,024'
        assert all(math.isfinite(float(v)) and float(v) > 1 for v in rows[name][2:4])  # left to right, random order
    assert peak < 3000


def test_memory_is_flat_in_the_number_of_chunks(workdir, real_ckpt):
    # a full forward's logits are 1025 x 50,304 floats (206 MB): a graph or logits kept per chunk
    # would add that much a chunk; 4 more chunks may add noise, not a chunk's worth
    data_dir = needs('gpt2_bpe', 'lambada')
    peaks = {}
    for chunks in (2, 6):
        out, peaks[chunks] = peak_memory_run('eval_ppl.py', '--out_dir=out-real', '--dataset=lambada',
                                             f'--data_dir={data_dir}', '--ensemble=1', f'--max_chunks={chunks}',
                                             '--device=cpu', cwd=workdir)
        assert out.splitlines()[-1].split()[:2] == ['lambada', f'{chunks * 1024:,}']
    print(f'eval_ppl.py, LAMBADA chunks of 1024: peak {peaks[2]:.0f} MB after 2 chunks, {peaks[6]:.0f} MB after 6')
    assert peaks[6] < peaks[2] + 100 and peaks[6] < 3000


def test_rotary_decoder_trains_samples_and_evaluates(workdir, bpe_ckpt):
    # the quick start's positions at the paper's shapes: a training step, then speculative sampling (each copy's
    # query at its own target) and an ensemble's queries
    out, peak = peak_memory_run('train.py', '--dataset=webtext', '--out_dir=out-real-rotary', '--device=cpu',
                                '--position_encoding=rotary', '--dtype=float32', '--compile=False', '--n_layer=2',
                                '--n_head=2', '--n_embd=32', '--cond_dim=16', '--block_size=1024', '--batch_size=1',
                                '--max_iters=1', '--eval_interval=1', '--eval_iters=1', '--warmup_iters=0',
                                '--lr_decay_iters=1', '--gradient_accumulation_steps=1', cwd=workdir)
    print(f'train.py --position_encoding=rotary, block 1024: peak {peak:.0f} MB')
    assert stored_checkpoint(workdir, 'out-real-rotary')['model_args']['position_encoding'] == 'rotary'
    assert 'nan' not in out and peak < 2500
    needs('gpt2_bpe')
    out, peak = peak_memory_run('sample.py', '--out_dir=out-real-rotary', '--num_samples=1', '--device=cpu',
                                '--dtype=float32', '--speculate=8', cwd=workdir)
    assert len(out.split('\n---------------\n')[:-1]) == 1 and peak < 2000
    data_dir = needs('gpt2_bpe', 'lambada')
    out, peak = peak_memory_run('eval_ppl.py', '--out_dir=out-real-rotary', '--dataset=lambada', f'--data_dir={data_dir}',
                                '--ensemble=2', '--max_chunks=1', '--device=cpu', '--dtype=float32', cwd=workdir)
    row = out.splitlines()[-1].split()
    assert row[:2] == ['lambada', '1,024'] and all(math.isfinite(float(v)) and float(v) > 1 for v in row[2:5])
    assert peak < 3000


@pytest.fixture(scope='module')
def real_mdm(workdir, bpe_ckpt):  # the encoder at the same shapes
    return peak_memory_run('train.py', '--dataset=webtext', '--out_dir=out-real-mdm', '--architecture=encoder',
                           '--device=cpu', '--dtype=float32', '--compile=False', '--n_layer=2', '--n_head=2',
                           '--n_embd=32', '--cond_dim=16', '--block_size=1024', '--batch_size=1', '--max_iters=2',
                           '--gradient_accumulation_steps=2', '--eval_interval=2', '--eval_iters=1',
                           '--warmup_iters=1', '--lr_decay_iters=2', cwd=workdir)


def test_encoder_trains_evaluates_and_samples(workdir, real_mdm):
    out, peak = real_mdm
    print(f'train.py --architecture=encoder, block 1024: peak {peak:.0f} MB')
    assert 'saved checkpoint to out-real-mdm' in out and peak < 2500
    data_dir = needs('gpt2_bpe', 'wikitext2')
    out, peak = peak_memory_run('eval_ppl.py', '--out_dir=out-real-mdm', '--dataset=wikitext2', f'--data_dir={data_dir}',
                                '--max_chunks=1', '--mc_samples=4', '--device=cpu', cwd=workdir)  # 4 masks, each a forward
    print(f'eval_ppl.py on the encoder, 1 chunk of 1024 (exact l2r and NELBO): peak {peak:.0f} MB')
    row = out.splitlines()[-1].split()
    assert row[:2] == ['wikitext2', '1,024'] and row[3] == '<=' and math.isfinite(float(row[2])) and peak < 3000
    out, peak = peak_memory_run('sample.py', '--out_dir=out-real-mdm', '--num_samples=2', '--steps=16',
                                '--device=cpu', cwd=workdir)
    print(f'sample.py on the encoder, 1024 tokens in 16 steps: peak {peak:.0f} MB')
    assert len(out.split('\n---------------\n')[:-1]) == 2 and peak < 3000


LONG_TEMPLATE = 'The ships sailed at dawn from the harbour, and the town watched them go. ' * 40  # ~640 BPE tokens


@pytest.mark.needs('gpt2_bpe')
def test_a_gap_of_no_length_in_a_block_of_1024(workdir, real_ckpt):
    """AO-GPT's length posterior over 64 lengths after a prefix of ~320 tokens, each placing a suffix of ~320: its
    logits go through in passes (infilling.LOGITS_PER_PASS), not as 64 x 320 x 50,304 floats at once (4 GB)."""
    half = LONG_TEMPLATE[:len(LONG_TEMPLATE) // 2]
    out, peak = peak_memory_run('sample.py', '--out_dir=out-real', '--num_samples=2', '--device=cpu',
                                '--dtype=float32', f'--infill={half}[MASK]{half}', '--gap_cap=64', cwd=workdir)
    print(f'sample.py, [MASK] in a block of 1024, cap 64: peak {peak:.0f} MB')
    assert out.count('gap of ') == 2 and peak < 2000


@pytest.mark.needs('gpt2_bpe')
def test_a_fim_gpt_trains_scores_and_fills_at_the_papers_shapes(workdir, bpe_ckpt):
    out, peak = peak_memory_run('train.py', '--dataset=webtext', '--out_dir=out-real-fim', '--order=l2r',
                                '--fim_rate=0.5', '--device=cpu', '--dtype=float32', '--compile=False', '--n_layer=2',
                                '--n_head=2', '--n_embd=32', '--cond_dim=16', '--block_size=1024', '--batch_size=1',
                                '--gradient_accumulation_steps=2', '--max_iters=2', '--eval_interval=2',
                                '--eval_iters=1', '--warmup_iters=1', '--lr_decay_iters=2', cwd=workdir)
    print(f'train.py --fim_rate=0.5, block 1024: peak {peak:.0f} MB')
    assert 'saved checkpoint to out-real-fim' in out and peak < 2500
    assert stored_checkpoint(workdir, 'out-real-fim')['model_args']['vocab_size'] == 50304  # the sentinels: spare rows
    # the middles' slots alone go through the head: a row's logits kept whole (1,009 x 50,304 floats, 203 MB) would
    # add that much a chunk
    peaks = {}
    for chunks in (2, 6):
        out, peaks[chunks] = peak_memory_run('eval_ppl.py', '--out_dir=out-real-fim', '--gaps=range:1-16',
                                             '--data_file=data/webtext/val.bin', f'--max_chunks={chunks}',
                                             '--fills=greedy', '--device=cpu', cwd=workdir)
        assert 'fim unknown' in out and 'greedy, length unknown' in out
    print(f'eval_ppl.py --gaps=range:1-16 on the FIM GPT, chunks of 1,005: peak {peaks[2]:.0f} MB after 2 chunks, '
          f'{peaks[6]:.0f} MB after 6')
    assert peaks[6] < peaks[2] + 100 and peaks[6] < 2500
    half = LONG_TEMPLATE[:len(LONG_TEMPLATE) // 2]
    out, peak = peak_memory_run('sample.py', '--out_dir=out-real-fim', '--num_samples=2', '--device=cpu',
                                f'--infill={half}[MASK]{half}', '--gap_cap=64', cwd=workdir)
    print(f'sample.py, [MASK] on the FIM GPT in a block of 1024: peak {peak:.0f} MB')
    assert out.count('gap of ') == 2 and peak < 2000
