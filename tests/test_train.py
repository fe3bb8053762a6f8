"""train.py end to end on the CPU: loss falls, exact resume, DDP with gloo, NaN safety, bad input."""
import json
import math
import os

import pytest
import torch

import conftest
from conftest import ROOT, run_script, shared_path

TINY = ['--dataset=shakespeare_char', *conftest.TINY]


def train(workdir, out_dir, *args, **kw):
    return run_script('train.py', *TINY, f'--out_dir={out_dir}', *args, cwd=workdir, **kw)


def load(workdir, out_dir):
    return torch.load(workdir / out_dir / 'ckpt.pt', weights_only=True)


def metrics(workdir, out_dir):
    return [json.loads(line) for line in open(workdir / out_dir / 'metrics.jsonl')]


def test_loss_falls_and_everything_is_recorded(workdir, monkeypatch):
    monkeypatch.setenv('WANDB_DIR', str(workdir))
    out = train(workdir, 'out-falls', '--max_iters=150', '--lr_decay_iters=150', '--eval_interval=75',
                '--learning_rate=3e-3', '--ema_decay=0.9', '--wandb_log=True')
    assert 'tokens per iteration: 256' in out.stdout and 'tok/s' in out.stdout and 'mfu' in out.stdout
    assert list((workdir / 'wandb').glob('offline-run-*'))  # WANDB_MODE=offline, set by conftest
    records = metrics(workdir, 'out-falls')
    assert [r['iter'] for r in records] == [0, 75, 150]
    for key in ('elapsed', 'lr', 'tokens_per_sec', 'train_l2r', 'val_l2r', 'train_ao', 'val_ao'):
        assert all(math.isfinite(r[key]) for r in records), key
    first, last = records[0], records[-1]
    assert first['val_l2r'] > 4.0 and first['val_ao'] > 4.0  # ~log(65) at init
    assert last['val_l2r'] < first['val_l2r'] - 0.7 and last['val_ao'] < first['val_ao'] - 0.6
    ckpt = load(workdir, 'out-falls')
    assert ckpt['iter_num'] == 150 and ckpt['ema_updates'] == 151
    assert set(ckpt) >= {'model', 'ema', 'optimizer', 'scaler', 'model_args', 'config', 'fixed_order'}
    assert not torch.equal(ckpt['ema']['lm_head.weight'], ckpt['model']['lm_head.weight'])


@pytest.mark.parametrize('order', ['mixed', 'block_random'])
def test_resume_is_exact(workdir, order):
    common = [f'--order={order}', '--order_block=8', '--dropout=0.1', '--eval_interval=10', '--lr_decay_iters=20',
              '--ema_decay=0.95']
    train(workdir, f'straight-{order}', *common, '--max_iters=20')
    train(workdir, f'halves-{order}', *common, '--max_iters=10')
    train(workdir, f'halves-{order}', *common, '--max_iters=20', '--init_from=resume')
    a, b = load(workdir, f'straight-{order}'), load(workdir, f'halves-{order}')
    assert a['iter_num'] == b['iter_num'] == 20
    for part in ('model', 'ema'):
        for name, tensor in a[part].items():
            assert torch.equal(tensor, b[part][name]), f'{part} {name}'
    for name, state in a['optimizer']['state'].items():
        assert torch.equal(state['exp_avg'], b['optimizer']['state'][name]['exp_avg'])
    assert a['ema_updates'] == b['ema_updates']
    if order == 'block_random':
        assert torch.equal(a['fixed_order'], b['fixed_order'])
    assert [r['iter'] for r in metrics(workdir, f'halves-{order}')] == [0, 10, 20]  # each evaluation once


def test_ddp_two_processes_with_gloo(workdir):
    out = run_script('train.py', *TINY, '--out_dir=out-ddp', '--gradient_accumulation_steps=2', '--max_iters=8',
                     '--eval_interval=8', cwd=workdir, nproc=2)
    assert out.stdout.count('tokens per iteration: 512') == 1  # 2 processes x 1 micro-step x 8 x 32, logged once
    ckpt = load(workdir, 'out-ddp')
    assert ckpt['iter_num'] == 8
    assert all(torch.isfinite(t).all() for t in ckpt['model'].values())
    assert all(math.isfinite(r['val_ao']) for r in metrics(workdir, 'out-ddp'))


def test_nonfinite_loss_stops_without_clobbering_the_checkpoint(workdir):
    train(workdir, 'out-nan', '--max_iters=10', '--eval_interval=10')
    before = (workdir / 'out-nan' / 'ckpt.pt').read_bytes()
    out = train(workdir, 'out-nan', '--init_from=resume', '--max_iters=40', '--eval_interval=10',
                '--decay_lr=False', '--learning_rate=1e30', check=False)
    assert out.returncode == 1
    assert 'stopped without saving' in out.stderr and 'Traceback' not in out.stderr
    assert (workdir / 'out-nan' / 'ckpt.pt').read_bytes() == before


def test_torchrun_setting_errors_are_said_once(workdir):
    out = run_script('train.py', *TINY, '--out_dir=out-ddp-bad', '--gradient_accumulation_steps=3', cwd=workdir,
                     nproc=2, check=False)
    assert out.returncode != 0
    assert out.stderr.count('error: ') == 1 and 'error: gradient_accumulation_steps (3) must be divisible' in out.stderr
    assert 'train.py", line' not in out.stderr  # no traceback from the script (torchrun adds its own summary)


def test_scratch_run_never_replaces_a_checkpoint(workdir, char_ckpt):
    files = [workdir / char_ckpt / name for name in ('ckpt.pt', 'metrics.jsonl')]
    before = [f.read_bytes() for f in files]
    out = train(workdir, char_ckpt, '--max_iters=30', check=False)
    assert out.returncode == 1 and out.stderr.count('\n') == 1
    assert out.stderr.startswith(f'error: {char_ckpt}/ckpt.pt already exists: continue it with --init_from=resume')
    assert [f.read_bytes() for f in files] == before


def test_eval_only_scores_the_checkpoint_and_writes_nothing(workdir, char_ckpt):
    files = [workdir / char_ckpt / name for name in ('ckpt.pt', 'metrics.jsonl')]
    before = [f.read_bytes() for f in files]
    last = metrics(workdir, char_ckpt)[-1]  # the same evaluation, run at the end of training
    out = train(workdir, char_ckpt, '--eval_only')
    line = next(line for line in out.stdout.splitlines() if 'EMA loss' in line)
    assert line == (f"iter 30: EMA loss l2r train {last['train_l2r']:.4f} val {last['val_l2r']:.4f} | "
                    f"any-order train {last['train_ao']:.4f} val {last['val_ao']:.4f}")
    assert [f.read_bytes() for f in files] == before


def test_init_from_authors_checkpoint(workdir):
    fixture = shared_path('fixtures', 'reference_parity_small.pt')
    train(workdir, 'out-ref', f'--init_from={fixture}', '--max_iters=2', '--eval_interval=2')
    ckpt = load(workdir, 'out-ref')
    assert ckpt['model_args']['n_embd'] == 64 and ckpt['model_args']['vocab_size'] == 96


@pytest.mark.parametrize('name', ['train_ao_gpt_small', 'train_ao_gpt_medium', 'train_gpt_small',
                                  'train_sigma_gpt_small', 'train_shakespeare_char'])
def test_config_files_apply(workdir, name):
    # the real config, then a tiny model and data so that the evaluation at iteration 0 runs in seconds
    out = run_script('train.py', os.path.join(ROOT, 'config', f'{name}.py'), *TINY, '--max_iters=0',
                     f'--out_dir=out-{name}', cwd=workdir)
    assert 'EMA loss' in out.stdout and not (workdir / f'out-{name}' / 'ckpt.pt').exists()
