"""What a GPU run uses, exercised on the CPU: bf16 autocast, torch.compile (inductor's CPU backend,
which needs a C++ compiler) in training, cached sampling and ensembled evaluation, and the MFU line.
Each compiled run is compared with the same run uncompiled. The models are tiny: compiling dominates."""
import math
import re

import pytest

from conftest import metrics, run_script, samples, train
from model import GPT, GPTConfig

pytestmark = pytest.mark.slow


def train_bf16(workdir, compile, positions='learned'):
    out_dir = f'out-bf16-compile-{compile}-{positions}'
    out = train(workdir, out_dir, '--max_iters=10', '--eval_interval=5', '--learning_rate=3e-3', '--peak_flops=1e9',
                '--dtype=bfloat16', f'--compile={compile}', f'--position_encoding={positions}')
    return out.stdout, metrics(workdir, out_dir)


@pytest.fixture(scope='module')
def bf16_eager(workdir):
    return train_bf16(workdir, False)


def test_bf16_autocast_training(bf16_eager):
    out, records = bf16_eager
    assert [r['iter'] for r in records] == [0, 5, 10]
    losses = [float(v) for v in re.findall(r'loss (\S+),', out)]
    assert len(losses) == 2 and all(math.isfinite(v) for v in losses)
    assert records[-1]['val_ao'] < records[0]['val_ao'] - 0.1 and records[-1]['val_l2r'] < records[0]['val_l2r'] - 0.1


def test_mfu_line(bf16_eager):
    # PaLM's estimate, restated: 6 flops per parameter and token, plus attention's 12 * layers * width * slots
    out, _ = bf16_eager
    n_params = sum(p.numel() for p in GPT(GPTConfig(block_size=32, vocab_size=65, n_layer=2, n_head=2, n_embd=32,
                                                    cond_dim=16)).parameters())
    flops_per_token = 6 * n_params + 12 * 2 * 32 * 33
    lines = re.findall(r'([\d,]+) tok/s, mfu (\S+)%', out)
    assert len(lines) == 2
    for tokens_per_sec, mfu in lines:
        expected = 100 * flops_per_token * float(tokens_per_sec.replace(',', '')) / 1e9  # --peak_flops=1e9
        assert math.isfinite(float(mfu)) and float(mfu) == pytest.approx(expected, rel=5e-3, abs=0.006)


@pytest.mark.parametrize('positions', ['learned', 'rotary'])
def test_compiled_bf16_training_matches_eager(workdir, bf16_eager, positions):
    out, records = train_bf16(workdir, True, positions)
    assert 'compiling the model' in out
    eager_records = bf16_eager[1] if positions == 'learned' else train_bf16(workdir, False, positions)[1]
    for compiled, eager in zip(records, eager_records, strict=True):
        for key in ('train_l2r', 'val_l2r', 'train_ao', 'val_ao'):
            assert compiled[key] == pytest.approx(eager[key], abs=5e-3), (compiled['iter'], key)


@pytest.mark.parametrize('args', [[], ['--speculate=4']])
def test_compiled_cached_sampling_matches_eager(workdir, char_ckpt, args):
    # one token per step, a random order: the first step eager (it reads the prompt), the rest one graph;
    # speculative decoding: per-row cache lengths and masks, each row's new slots padded to k
    def drawn(compile):
        return samples(run_script('sample.py', f'--out_dir={char_ckpt}', '--num_samples=2', '--device=cpu',
                                  '--dtype=float32', f'--compile={compile}', *args, cwd=workdir).stdout)
    compiled, eager = drawn(True), drawn(False)
    assert compiled == eager and len(compiled) == 2 and all(len(text) == 32 for text in compiled)


def test_compiled_ensemble_evaluation_matches_eager(workdir, char_ckpt):
    rows = [run_script('eval_ppl.py', f'--out_dir={char_ckpt}', '--ensemble=2', '--max_chunks=3', '--device=cpu',
                       f'--compile={compile}', cwd=workdir).stdout.splitlines()[-1].split() for compile in (True, False)]
    assert rows[0][:2] == rows[1][:2] == ['shakespeare_char', '96']
    for compiled, eager in zip(rows[0][2:5], rows[1][2:5]):  # l2r, any-order, ensemble=2
        assert float(compiled) == pytest.approx(float(eager), rel=1e-4)


@pytest.mark.parametrize('args', [['--steps=8'], ['--speculate=4']])
def test_bf16_sampling_draws_as_float32_does(workdir, char_ckpt, args):
    # the cache and the logits in bf16, the draws in float64 from one seed: bf16's rounding moves a draw only where a
    # uniform falls near a bucket's edge, so most characters match float32's (98% here; two seeds' samples share
    # 9%). Not order=confidence: a near tie in the confidences, ranked otherwise, sends every later step elsewhere
    def drawn(dtype):
        return samples(run_script('sample.py', f'--out_dir={char_ckpt}', '--num_samples=4', '--device=cpu',
                                  f'--dtype={dtype}', *args, cwd=workdir).stdout)
    bf16, fp32 = drawn('bfloat16'), drawn('float32')
    assert len(bf16) == 4 and all(len(text) == 32 for text in bf16)
    same = sum(a == b for x, y in zip(bf16, fp32) for a, b in zip(x, y)) / sum(map(len, fp32))
    print(f'sample.py {" ".join(args)}: bf16 draws {same:.0%} of float32\'s characters')
    assert same >= 0.75


def test_bf16_encoder_trains_and_samples(workdir):
    out = train(workdir, 'out-bf16-mdm', '--architecture=encoder', '--max_iters=10', '--eval_interval=5',
                '--learning_rate=3e-3', '--dtype=bfloat16')
    records = metrics(workdir, 'out-bf16-mdm')
    assert [r['iter'] for r in records] == [0, 5, 10] and 'nan' not in out.stdout
    texts = samples(run_script('sample.py', '--out_dir=out-bf16-mdm', '--num_samples=2', '--steps=8',
                               '--device=cpu', '--dtype=bfloat16', cwd=workdir).stdout)
    assert len(texts) == 2 and all(len(text) == 32 for text in texts)
