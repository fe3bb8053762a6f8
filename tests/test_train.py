"""train.py end to end on the CPU: loss falls, exact resume, preemption, DDP with gloo, NaN safety, bad input."""
import json
import math
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import conftest
from configurator import read_config_file
from conftest import ROOT, metrics, needs, one_line_error, run_script, says, stored_checkpoint, train

TINY = ['--dataset=shakespeare_char', *conftest.TINY]


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
    assert 'val_fixed' not in records[0]  # a run in many orders has no fixed one
    first, last = records[0], records[-1]
    assert first['val_l2r'] > 4.0 and first['val_ao'] > 4.0  # ~log(65) at init
    assert last['val_l2r'] < first['val_l2r'] - 0.7 and last['val_ao'] < first['val_ao'] - 0.6
    ckpt = stored_checkpoint(workdir, 'out-falls')
    assert ckpt['iter_num'] == 150 and ckpt['ema_updates'] == 151
    assert set(ckpt) >= {'model', 'ema', 'optimizer', 'scaler', 'model_args', 'config', 'fixed_order'}
    assert not torch.equal(ckpt['ema']['lm_head.weight'], ckpt['model']['lm_head.weight'])


def test_resume_drops_a_cut_last_metrics_line(workdir):
    common = ['--eval_interval=5', '--lr_decay_iters=10']
    train(workdir, 'out-cut', *common, '--max_iters=5')
    with open(workdir / 'out-cut' / 'metrics.jsonl', 'a') as f:
        f.write('{"iter": 7, "elapsed": 1.')  # killed while the next record was written
    out = train(workdir, 'out-cut', *common, '--max_iters=10', '--init_from=resume')
    says(out.stdout, 'metrics.jsonl was cut', 'dropped')
    assert [r['iter'] for r in metrics(workdir, 'out-cut')] == [0, 5, 10]


def test_a_resumed_runs_elapsed_goes_on_from_its_checkpoint(workdir):
    """metrics.jsonl's `elapsed` counts a run's training over its resumes: a checkpoint that says 1,000 s of training
    went before resumes at 1,000 s, not at 0."""
    common = ['--eval_interval=5', '--lr_decay_iters=10']
    train(workdir, 'out-elapsed', *common, '--max_iters=5')
    path = workdir / 'out-elapsed' / 'ckpt.pt'
    ckpt = torch.load(path, weights_only=True)
    assert 0 < ckpt['elapsed'] < 1000
    torch.save(ckpt | {'elapsed': 1000.0}, path)
    train(workdir, 'out-elapsed', *common, '--max_iters=10', '--init_from=resume')
    records = metrics(workdir, 'out-elapsed')
    assert [r['iter'] for r in records] == [0, 5, 10] and records[1]['elapsed'] < 1000 < records[2]['elapsed']
    assert stored_checkpoint(workdir, 'out-elapsed')['elapsed'] == records[2]['elapsed']  # one clock reading for both


@pytest.mark.parametrize('order', ['mixed', 'block_random', 'encoder'])
def test_resume_is_exact(workdir, order):
    kind = ['--architecture=encoder'] if order == 'encoder' else [f'--order={order}', '--order_block=8']
    common = [*kind, '--dropout=0.1', '--eval_interval=10', '--lr_decay_iters=20', '--ema_decay=0.95']
    train(workdir, f'straight-{order}', *common, '--max_iters=20')
    train(workdir, f'halves-{order}', *common, '--max_iters=10')
    train(workdir, f'halves-{order}', *common, '--max_iters=20', '--init_from=resume')
    a, b = stored_checkpoint(workdir, f'straight-{order}'), stored_checkpoint(workdir, f'halves-{order}')
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


def same_run(a, b):
    """Assert that two runs' checkpoints hold the same weights, EMA and optimizer state, and that their
    metrics.jsonl hold the same losses at the same iterations (times aside)."""
    ca, cb = stored_checkpoint(*a), stored_checkpoint(*b)
    assert ca['iter_num'] == cb['iter_num'] and ca['ema_updates'] == cb['ema_updates']
    for part in ('model', 'ema'):
        for name, tensor in ca[part].items():
            assert torch.equal(tensor, cb[part][name]), f'{part} {name}'
    for name, state in ca['optimizer']['state'].items():
        assert torch.equal(state['exp_avg_sq'], cb['optimizer']['state'][name]['exp_avg_sq'])
    losses = lambda run: [{k: v for k, v in r.items() if k not in ('elapsed', 'tokens_per_sec')} for r in metrics(*run)]
    assert losses(a) == losses(b)


def stop_at(workdir, out_dir, iteration, signals, *args, nproc=None):
    """Start train.py --init_from=auto (torchrun with nproc, else forked as run_script runs it) and send `signals`
    (to torchrun, which passes them on) once it logs `iteration`; return (exit code, the iteration it stopped at,
    stdout, seconds from the signal to the exit). The run goes on while the signal travels, so it stops at
    `iteration` or a little after."""
    argv = [os.path.join(ROOT, 'train.py'), *TINY, f'--out_dir={out_dir}', '--init_from=auto', *args]
    env = os.environ | {'PYTHONUNBUFFERED': '1'}  # each line as it is printed
    if nproc is None:
        run = Forked(argv, workdir, env)
    else:
        run = subprocess.Popen([sys.executable, '-m', 'torch.distributed.run', '--standalone',
                                f'--nproc_per_node={nproc}', *argv], cwd=workdir, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, env=env)
    out, sent = '', None
    for line in run.stdout:
        out += line
        if sent is None and line.startswith(f'iter {iteration}: loss'):
            sent = time.time()
            for sig in signals:
                run.send_signal(sig)
    code = run.wait(timeout=300)
    stopped = re.search(r'stopped by \S+ at iter (\d+)', out)
    return code, int(stopped.group(1)) if stopped else None, out, sent and time.time() - sent


class Forked:
    """A script started by processes.start_python, read and signalled as a Popen: its stdout's lines as it prints
    them, send_signal, wait."""

    def __init__(self, argv, cwd, env):
        from aogpt.experiments.processes import start_python
        self.out = os.path.join(cwd, f'forked-{os.getpid()}-{time.time_ns()}.log')
        open(self.out, 'w').close()
        self.process = start_python(argv, cwd, env, self.out, os.devnull)
        self.stdout = self.lines()

    def lines(self):
        with open(self.out) as f:
            text = ''
            while True:
                ended = self.process.exitcode is not None  # then all it printed is in the file
                *lines, text = (text + f.read()).split('\n')
                yield from (line + '\n' for line in lines)
                if ended:
                    yield from [text] if text else []
                    return
                time.sleep(0.01)

    def send_signal(self, sig):
        os.kill(self.process.pid, sig)

    def wait(self, timeout):
        self.process.join(timeout)
        os.remove(self.out)
        return self.process.exitcode


def seconds_to_stop(workdir, out_dir, iteration, *args):
    """stop_at with SIGTERM, timed from the signal to the exit: (seconds, the iteration it stopped at)."""
    code, stopped, _, seconds = stop_at(workdir, out_dir, iteration, [signal.SIGTERM], *args)
    assert code == 75
    return seconds, stopped


PREEMPTIBLE = ['--max_iters=300', '--eval_interval=100', '--lr_decay_iters=300', '--log_interval=1', '--dropout=0.1']


def test_a_signal_saves_and_auto_goes_on_to_the_same_run(workdir):
    train(workdir, 'out-straight', *PREEMPTIBLE)
    code, first, out, _ = stop_at(workdir, 'out-preempted', 13, [signal.SIGUSR1], *PREEMPTIBLE)  # between evaluations
    assert code == 75 and f'stopped by SIGUSR1 at iter {first}' in out and '--init_from=auto' in out
    assert 13 <= first < 300 and stored_checkpoint(workdir, 'out-preempted')['iter_num'] == first
    code, second, out, _ = stop_at(workdir, 'out-preempted', max(first + 20, 120), [signal.SIGTERM] * 2,  # one in the save
                                *PREEMPTIBLE)
    assert code == 75 and second < 300 and stored_checkpoint(workdir, 'out-preempted')['iter_num'] == second
    evaluated = [r['iter'] for r in metrics(workdir, 'out-preempted')]
    assert evaluated == list(range(0, second + 1, 100))  # each evaluation once
    train(workdir, 'out-preempted', *PREEMPTIBLE, '--init_from=auto')
    same_run((workdir, 'out-straight'), (workdir, 'out-preempted'))
    assert not list((workdir / 'out-preempted').glob('*.tmp'))


SLOW_EVAL = ['--max_iters=20', '--lr_decay_iters=20', '--eval_interval=20', '--log_interval=1', '--batch_size=64',
             '--eval_iters=100']  # an evaluation of about 5 s; the stop takes about 1


@pytest.mark.slow  # three runs with 5 s evaluations
@pytest.mark.parametrize('iteration', [19, 20])
def test_a_signal_before_or_during_an_evaluation_stops_at_once_and_the_resume_evaluates(workdir, iteration):
    """The signal lands in the step before an evaluation iteration (19), or in the evaluation (20: its log line comes
    just before it): the run saves and exits at once (a slow evaluation would outlast a scheduler's grace period),
    the evaluation is dropped, and the resumed run evaluates that iteration as an uninterrupted run does."""
    if not (workdir / 'out-slow-eval').exists():
        train(workdir, 'out-slow-eval', *SLOW_EVAL)
    out_dir = f'out-stop-at-eval-{iteration}'
    seconds, stopped = seconds_to_stop(workdir, out_dir, iteration, *SLOW_EVAL)
    evaluation = metrics(workdir, out_dir)[0]['elapsed']  # the one at iteration 0: its length
    assert iteration <= stopped <= 20 and seconds < min(2, evaluation / 2), (seconds, evaluation)
    assert [r['iter'] for r in metrics(workdir, out_dir)] == [0]
    train(workdir, out_dir, *SLOW_EVAL, '--init_from=auto')
    same_run((workdir, 'out-slow-eval'), (workdir, out_dir))


RACE = ['--max_iters=10', '--eval_interval=10', '--lr_decay_iters=10', '--eval_gaps=span:4']


def signalled_at(workdir, out_dir, point):
    """train.py with RACE, sent SIGTERM at a point of its first evaluation's exit (tests/signal_at.py)."""
    return conftest.run_forked([os.path.join(ROOT, 'tests', 'signal_at.py'), str(point), os.path.join(ROOT, 'train.py'),
                                *TINY, f'--out_dir={out_dir}', *RACE], workdir)


def test_a_signal_anywhere_in_an_evaluations_exit_saves_and_the_resume_goes_on(workdir):
    """The handler only notes the signal (runs.Preemption): wherever it lands, from the evaluation's last step to the
    loop's check after it, the run exits 75 with a checkpoint and no traceback. The evaluation is recorded whole or
    dropped, never half: metrics.jsonl and the checkpoint agree, a later signal never drops what an earlier one kept,
    and a resumed run from a dropped one and from a kept one is the uninterrupted run."""
    train(workdir, 'out-race-straight', *RACE)
    counted = signalled_at(workdir, 'out-race-count', 0)
    points = int(re.search(r'points: (\d+)', counted.stdout).group(1))
    assert counted.returncode == 0 and points >= 4, counted.stdout[-500:]
    kept = []
    for point in range(1, points + 1):
        out_dir = f'out-race-{point}'
        run = signalled_at(workdir, out_dir, point)
        assert run.returncode == 75 and 'Traceback' not in run.stderr, (point, run.stderr[-2000:])
        assert 'stopped by SIGTERM at iter 0' in run.stdout, (point, run.stdout[-500:])
        evaluated = stored_checkpoint(workdir, out_dir)['evaluated_at'] == 0
        assert [r['iter'] for r in metrics(workdir, out_dir)] == ([0] if evaluated else []), point
        kept.append(evaluated)
    assert kept == sorted(kept) and kept[0] is False and kept[-1] is True, kept
    for out_dir in ('out-race-1', f'out-race-{points}'):
        train(workdir, out_dir, *RACE, '--init_from=auto')
        same_run((workdir, 'out-race-straight'), (workdir, out_dir))


DDP = ['--gradient_accumulation_steps=2', '--max_iters=50', '--eval_interval=25', '--lr_decay_iters=50',
       '--log_interval=1', '--dropout=0.1']  # PREEMPTIBLE, shorter: the signal comes at 13


@pytest.fixture(scope='module')
def ddp_run(workdir):
    """torchrun with 2 processes (gloo), uninterrupted: its stdout. The stopped and resumed run is compared with it."""
    return run_script('train.py', *TINY, '--out_dir=out-ddp', *DDP, cwd=workdir, nproc=2).stdout


@pytest.mark.slow
def test_torchrun_stops_every_process_and_auto_goes_on(workdir, ddp_run):
    _, stopped, out, _ = stop_at(workdir, 'out-ddp-preempted', 13, [signal.SIGTERM], *DDP, nproc=2)
    assert stopped and stored_checkpoint(workdir, 'out-ddp-preempted')['iter_num'] == stopped < 50
    run_script('train.py', *TINY, '--out_dir=out-ddp-preempted', *DDP, '--init_from=auto', cwd=workdir, nproc=2)
    same_run((workdir, 'out-ddp'), (workdir, 'out-ddp-preempted'))


def test_auto_starts_a_run_then_goes_on_only_with_its_settings(workdir):
    train(workdir, 'out-auto', '--max_iters=10', '--eval_interval=10', '--init_from=auto')  # nothing there: scratch
    assert stored_checkpoint(workdir, 'out-auto')['iter_num'] == 10
    out = train(workdir, 'out-auto', '--max_iters=10', '--eval_interval=10', '--init_from=auto')  # done: nothing to do
    assert stored_checkpoint(workdir, 'out-auto')['iter_num'] == 10 and 'saved checkpoint' not in out.stdout
    says(one_line_error('train.py', *TINY, '--out_dir=out-auto', '--max_iters=10', '--eval_interval=10',
                        '--learning_rate=0.1', '--init_from=auto', cwd=workdir),
         '--init_from=auto', 'out-auto/ckpt.pt', 'learning_rate=0.0006, now 0.1', '--init_from=resume', 'new out_dir')


def test_a_checkpoint_of_another_world_size_is_refused_by_auto_and_noted_by_resume(workdir):
    train(workdir, 'out-world', '--max_iters=4', '--eval_interval=4', '--init_from=auto')
    assert stored_checkpoint(workdir, 'out-world')['world_size'] == 1
    ckpt = stored_checkpoint(workdir, 'out-world')
    torch.save(ckpt | dict(world_size=2), workdir / 'out-world' / 'ckpt.pt')  # as if torchrun --nproc_per_node=2
    says(one_line_error('train.py', *TINY, '--out_dir=out-world', '--max_iters=4', '--eval_interval=4',
                        '--init_from=auto', cwd=workdir), '--init_from=auto', 'trained by 2 processes, now 1',
         'same number of processes')
    out = train(workdir, 'out-world', '--max_iters=8', '--eval_interval=4', '--init_from=resume')
    assert 'note: out-world/ckpt.pt was trained by 2 processes, now 1' in out.stdout
    assert stored_checkpoint(workdir, 'out-world')['iter_num'] == 8


def test_a_checkpoint_reaches_the_disk_before_it_replaces_the_old_one(tmp_path, monkeypatch):
    from aogpt import checkpoints
    events = []
    monkeypatch.setattr(checkpoints.os, 'fsync', lambda fd: events.append(('fsync', os.readlink(f'/proc/self/fd/{fd}'))))
    real_replace = os.replace
    monkeypatch.setattr(checkpoints.os, 'replace', lambda a, b: (events.append(('replace', a)), real_replace(a, b)))
    path = str(tmp_path / 'ckpt.pt')
    checkpoints.save_checkpoint({'x': torch.ones(3)}, path)
    assert events == [('fsync', path + '.tmp'), ('replace', path + '.tmp'), ('fsync', str(tmp_path))]
    assert torch.equal(torch.load(path)['x'], torch.ones(3))


def test_encoder_trains_on_its_nelbo(workdir):
    from aogpt.checkpoints import load_checkpoint
    from model import MDM
    train(workdir, 'out-mdm-nelbo', '--architecture=encoder', '--max_iters=150', '--lr_decay_iters=150',
          '--eval_interval=75', '--learning_rate=3e-3', '--ema_decay=0.9')
    records = metrics(workdir, 'out-mdm-nelbo')
    first, last = records[0], records[-1]
    assert all(math.isfinite(r[key]) for r in records for key in ('train_l2r', 'val_l2r', 'train_ao', 'val_ao'))
    assert first['val_ao'] > 4.0 and last['val_ao'] < first['val_ao'] - 0.6  # the NELBO, per token
    assert last['val_l2r'] < first['val_l2r'] - 0.6
    model, ckpt = load_checkpoint(workdir / 'out-mdm-nelbo' / 'ckpt.pt')  # the checkpoint says what it is
    assert ckpt['model_args']['architecture'] == 'encoder' and isinstance(model, MDM)


@pytest.mark.parametrize('args,parts', [
    (['--order=l2r'], ['--order=l2r', 'random masks']),
    (['--target_injection=add'], ['target_injection', "got 'add'", 'adaLN']),
])
def test_encoder_bad_settings_are_one_line(workdir, args, parts):
    says(one_line_error('train.py', *TINY, '--out_dir=out-mdm-bad', '--architecture=encoder', *args, cwd=workdir),
         *parts)


@pytest.mark.slow  # torchrun: two processes
def test_ddp_two_processes_with_gloo(workdir, ddp_run):
    assert ddp_run.count('tokens per iteration: 512') == 1  # 2 processes x 1 micro-step x 8 x 32, logged once
    ckpt = stored_checkpoint(workdir, 'out-ddp')
    assert ckpt['iter_num'] == 50
    assert all(torch.isfinite(t).all() for t in ckpt['model'].values())
    assert all(math.isfinite(r['val_ao']) for r in metrics(workdir, 'out-ddp'))


def test_nonfinite_loss_stops_without_clobbering_the_checkpoint(workdir):
    train(workdir, 'out-nan', '--max_iters=10', '--eval_interval=10')
    before = (workdir / 'out-nan' / 'ckpt.pt').read_bytes()
    out = train(workdir, 'out-nan', '--init_from=resume', '--max_iters=40', '--eval_interval=10',
                '--decay_lr=False', '--learning_rate=1e30', check=False)
    assert out.returncode == 1
    assert 'stopped without saving' in out.stderr and 'Traceback' not in out.stderr
    says(out.stderr, 'out-nan/ckpt.pt', 'last good checkpoint', 'untouched')
    assert (workdir / 'out-nan' / 'ckpt.pt').read_bytes() == before


def test_nonfinite_loss_before_any_checkpoint_says_there_is_none(workdir):
    message = one_line_error('train.py', *TINY, '--out_dir=out-nan-first', '--decay_lr=False', '--learning_rate=1e30',
                             cwd=workdir)
    says(message, 'stopped without saving', 'no checkpoint was written')
    assert 'untouched' not in message
    assert not (workdir / 'out-nan-first' / 'ckpt.pt').exists()


def test_nonfinite_loss_at_iter_0_blames_the_start_not_the_learning_rate(workdir):
    # no optimizer step is taken before the first evaluation: a lower learning rate would not help
    message = one_line_error('train.py', *TINY, '--out_dir=out-nan-init', '--target_init_std=1e30', cwd=workdir)
    says(message, 'at iter 0', 'no optimizer step was taken yet', 'gate_init and target_init_std')
    assert 'lower learning_rate' not in message


@pytest.mark.slow  # torchrun: two processes
def test_torchrun_setting_errors_are_said_once(workdir):
    out = run_script('train.py', *TINY, '--out_dir=out-ddp-bad', '--gradient_accumulation_steps=3', cwd=workdir,
                     nproc=2, check=False)
    assert out.returncode != 0
    assert out.stderr.count('error: ') == 1
    says(out.stderr, 'error: gradient_accumulation_steps (3)', 'divisible')
    assert 'train.py", line' not in out.stderr  # no traceback from the script (torchrun adds its own summary)


def test_scratch_run_never_replaces_a_checkpoint(workdir, char_ckpt):
    files = [workdir / char_ckpt / name for name in ('ckpt.pt', 'metrics.jsonl')]
    before = [f.read_bytes() for f in files]
    out = train(workdir, char_ckpt, '--max_iters=30', check=False)
    assert out.returncode == 1 and out.stderr.count('\n') == 1
    assert out.stderr.startswith('error: ')
    says(out.stderr, f'{char_ckpt}/ckpt.pt already exists', 'continue it with --init_from=resume')
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


def test_init_from_authors_checkpoint(workdir, sized_data):  # 96 ids, as its vocabulary
    run_script('train.py', *conftest.TINY_RUN, '--out_dir=out-ref', '--init_from=authors.pt', '--dataset=sized96',
               '--max_iters=2', '--eval_interval=2', '--block_size=16', cwd=workdir)
    ckpt = stored_checkpoint(workdir, 'out-ref')
    assert ckpt['model_args']['n_embd'] == 64 and ckpt['model_args']['vocab_size'] == 96
    assert ckpt['config']['n_embd'] == 64 and ckpt['config']['cond_dim'] == 128  # the stored config: what was trained
    assert ckpt['config']['block_size'] == 16 < ckpt['model_args']['block_size']  # on shorter sequences than it holds


@pytest.mark.parametrize('name', ['train_ao_gpt_small', 'train_ao_gpt_medium', 'train_gpt_small',
                                  'train_shakespeare_char', 'train_sigma_gpt_small', 'train_ao_gpt_small_nocl',
                                  'train_mdm_shakespeare_char', 'train_sigma_gpt_shakespeare_char',
                                  'train_order_l2r', 'train_order_fixed_random', 'train_order_block_random',
                                  'train_shakespeare', 'train_mdm_small', 'train_ao_gpt_small_rotary'])
def test_config_files_apply(workdir, name):
    # the real config, then a tiny model and data: its settings checked and its model built, written at once
    out = run_script('train.py', os.path.join(ROOT, 'config', f'{name}.py'), *TINY, '--max_iters=0',
                     f'--out_dir=out-{name}', cwd=workdir)
    assert 'wrote the starting weights' in out.stdout and (workdir / f'out-{name}' / 'ckpt.pt').exists()


def test_recipes_are_the_authors():
    def recipe(name):
        return read_config_file(os.path.join(ROOT, 'config', f'{name}.py'))

    def tokens_per_iter(c):
        return c['batch_size'] * c['block_size'] * c['gradient_accumulation_steps']
    small, medium, nocl = recipe('train_ao_gpt_small'), recipe('train_ao_gpt_medium'), recipe('train_ao_gpt_small_nocl')
    for c in (small, medium, nocl):
        assert tokens_per_iter(c) == 1_048_576 and c['batch_size'] == 16
        assert c['max_iters'] == c['lr_decay_iters'] == 500_000 and c['warmup_iters'] == 2000 and c['min_lr'] == 6e-5
        assert c['dropout'] == 0.0 and c['beta2'] == 0.95 and c['ema_decay'] == 0.9999
    assert small['learning_rate'] == nocl['learning_rate'] == 6e-4 and medium['learning_rate'] == 3e-4
    assert (medium['n_layer'], medium['n_head'], medium['n_embd']) == (24, 16, 1024)
    assert small['order'] == 'mixed' and small['random_ratio'] == 0.9 and nocl['random_ratio'] == 1.0
    sigma = recipe('train_sigma_gpt_small')  # their sigma-GPT has no mixed mode; raw weights evaluated
    assert sigma['order'] == 'random' and sigma['target_injection'] == 'add' and sigma['ema_decay'] == 0.0
    same = set(small) - {'order', 'ema_decay', 'out_dir', 'wandb_run_name'}  # the rest is AO-GPT small's recipe
    assert {k: sigma[k] for k in same} == {k: small[k] for k in same}
    # the paper's recipes keep the authors' learned positions (train.py's default); ours only adds rotary ones
    assert all(c.get('position_encoding', 'learned') == 'learned' for c in (small, medium, nocl, sigma))
    rotary = recipe('train_ao_gpt_small_rotary')
    assert rotary['position_encoding'] == 'rotary'
    assert {k: v for k, v in rotary.items() if k not in ('position_encoding', 'out_dir', 'wandb_run_name')} == \
        {k: v for k, v in small.items() if k not in ('out_dir', 'wandb_run_name')}
    for name, order in [('l2r', 'l2r'), ('fixed_random', 'fixed_random'), ('block_random', 'block_random')]:
        c = recipe(f'train_order_{name}')
        assert c['order'] == order and tokens_per_iter(c) == 524_288
        assert c['max_iters'] == 20_000 and c['lr_decay_iters'] == 500_000


def test_resume_with_the_config_file_it_was_trained_with(workdir, tmp_path):
    # the file's model settings are the checkpoint's: they differ from the defaults, not from the checkpoint
    config = tmp_path / 'tiny.py'
    config.write_text('n_layer = 1\nn_embd = 16\ncond_dim = 8\ndropout = 0.1\nmax_iters = 2\n')
    train(workdir, 'out-config', str(config), '--eval_interval=2')
    # target_init_std and gate_init shape only the initial weights, which a resume replaces: not a mismatch
    train(workdir, 'out-config', str(config), '--eval_interval=2', '--max_iters=4', '--init_from=resume',
          '--target_init_std=1.0', '--gate_init=1.0')
    assert stored_checkpoint(workdir, 'out-config')['iter_num'] == 4
    says(one_line_error('train.py', *TINY, '--out_dir=out-config', str(config), '--n_layer=3', '--init_from=resume',
                        cwd=workdir), '--n_layer=3', 'n_layer=1')


def test_learning_rate_is_the_authors_schedule(workdir):
    train(workdir, 'out-lr', '--max_iters=12', '--eval_interval=1', '--warmup_iters=4', '--lr_decay_iters=10',
          '--learning_rate=1e-3', '--min_lr=1e-4')

    def authors_lr(it):  # linear from 0 over the warmup, cosine to min_lr, then flat
        if it < 4:
            return 1e-3 * it / 4
        if it > 10:
            return 1e-4
        return 1e-4 + 0.5 * (1 + math.cos(math.pi * (it - 4) / 6)) * (1e-3 - 1e-4)
    records = metrics(workdir, 'out-lr')
    assert [r['iter'] for r in records] == list(range(13))
    assert [r['lr'] for r in records] == pytest.approx([authors_lr(it) for it in range(13)], rel=1e-12, abs=1e-15)


def write_order(path, order):
    if path.suffix == '.pt':
        torch.save(order, path)
    elif path.suffix == '.npy':
        np.save(path, order)
    else:
        path.write_text(order)
    return str(path)


@pytest.mark.parametrize('suffix', ['.txt', '.pt', '.npy'])
def test_order_file_is_the_fixed_order(workdir, tmp_path, suffix):
    order = torch.arange(32).flip(0).roll(5)  # any permutation of 0..31
    content = {'.txt': ', '.join(map(str, order.tolist())) + '\n', '.pt': order, '.npy': order.numpy()}[suffix]
    path = write_order(tmp_path / f'order{suffix}', content)
    out_dir = f'out-order-file{suffix}'
    train(workdir, out_dir, '--order=fixed_random', f'--order_file={path}', '--max_iters=2', '--eval_interval=2')
    ckpt = stored_checkpoint(workdir, out_dir)
    assert torch.equal(ckpt['fixed_order'], order) and ckpt['config']['order_file'] == path
    if suffix == '.txt':  # resuming keeps the checkpoint's order and refuses another one
        train(workdir, out_dir, '--order=fixed_random', f'--order_file={path}', '--max_iters=4', '--eval_interval=2',
              '--init_from=resume')
        other = write_order(tmp_path / 'other.txt', ' '.join(map(str, range(32))))
        assert 'is not the order' in one_line_error('train.py', *TINY, f'--out_dir={out_dir}', '--order=fixed_random',
                                                    f'--order_file={other}', '--init_from=resume', cwd=workdir)


def test_metrics_record_the_loss_in_the_runs_fixed_order(workdir, tmp_path):
    identity = write_order(tmp_path / 'identity.txt', ' '.join(map(str, range(32))))
    train(workdir, 'out-fixed-identity', '--order=fixed_random', f'--order_file={identity}', '--max_iters=4',
          '--eval_interval=2')
    for r in metrics(workdir, 'out-fixed-identity'):  # read on the l2r batches: the identity order is l2r
        assert r['train_fixed'] == r['train_l2r'] and r['val_fixed'] == r['val_l2r']
    out = train(workdir, 'out-fixed-block', '--order=block_random', '--order_block=8', '--max_iters=4',
                '--eval_interval=2')
    assert 'fixed order train' in out.stdout
    assert all(r['val_fixed'] != r['val_l2r'] for r in metrics(workdir, 'out-fixed-block'))


def test_the_authors_orders_are_permutations_of_their_block():
    for i in (1, 2, 3):
        with open(os.path.join(ROOT, 'config', 'orders', f'authors_order{i}.txt')) as f:
            assert sorted(int(v) for v in f.read().split()) == list(range(1024))


@pytest.mark.parametrize('name,content,parts', [
    ('dup.txt', ' '.join(['0'] * 32), ('position 0 appears 32 times', 'position 1 is missing')),
    ('twice.txt', ' '.join(map(str, [*range(31), 5])), ('position 5 appears 2 times', 'position 31 is missing')),
    ('outside.txt', ' '.join(map(str, [*range(31), 40])), ('40 is not a position',)),
    ('short.txt', '0 1 2', ('permutation of 0..31', 'block_size 32', 'got 3 values')),
    ('words.txt', '0 1 two', ('not hold a list of integers', 'ValueError')),
    ('arabic.txt', ' '.join(map(str, range(30))) + ' ٣٠ 31', ('not hold a list of integers', "'٣'", 'ASCII')),
    ('float.npy', np.arange(32.0), ('one list of integers', 'torch.float64', 'shape (32,)')),
    ('square.pt', torch.arange(32).view(4, 8), ('one list of integers', 'torch.int64', 'shape (4, 8)')),
    ('order.csv', '0,1', ('--order_file', '.pt, .npy or .txt')),
])
def test_bad_order_file_is_one_line(workdir, tmp_path, name, content, parts):
    path = write_order(tmp_path / name, content)
    error = one_line_error('train.py', *TINY, '--out_dir=out-bad-order', '--order=fixed_random', f'--order_file={path}',
                           cwd=workdir)
    says(error, path, *parts)


def test_order_file_needs_a_fixed_order_run(workdir, tmp_path):
    path = write_order(tmp_path / 'order.txt', ' '.join(map(str, range(32))))
    says(one_line_error('train.py', *TINY, f'--order_file={path}', cwd=workdir),
         '--order_file', 'add --order=fixed_random', 'got --order=mixed')
    assert 'order_file=nope.txt not found' in one_line_error('train.py', *TINY, '--order_file=nope.txt',
                                                             '--order=fixed_random', cwd=workdir)


def test_val_losses_on_a_benchmark_sets_chunks(workdir, bpe_ckpt):  # bpe_ckpt writes data/webtext
    data_dir = needs('gpt2_bpe', 'wikitext2')
    run_script('train.py', *conftest.TINY, '--dataset=webtext', '--out_dir=out-val-wikitext2', '--max_iters=10',
               '--eval_interval=10', '--learning_rate=1e-2', '--ema_decay=0.5', '--val_dataset=wikitext2',
               f'--data_dir={data_dir}', cwd=workdir)
    record = metrics(workdir, 'out-val-wikitext2')[-1]
    # eval_ppl.py scores the same EMA weights on the same chunks: the first eval_iters x batch_size = 16
    run_script('eval_ppl.py', '--out_dir=out-val-wikitext2', '--dataset=wikitext2', '--split=validation',
               f'--data_dir={data_dir}', '--max_chunks=16', '--device=cpu', '--out_json=val-wikitext2.json', cwd=workdir)
    ppl = json.load(open(workdir / 'val-wikitext2.json'))['results']['wikitext2']['ppl']
    assert record['iter'] == 10 and record['val_l2r'] == pytest.approx(math.log(ppl['l2r']), rel=1e-5)


@pytest.mark.parametrize('args,parts', [
    (['--val_dataset=lambada'], ('--val_dataset', 'wikitext2, wikitext103, ptb')),
    (['--val_dataset=wikitext2'], ('--val_dataset=wikitext2', 'GPT-2 BPE', 'shakespeare_char has its own vocabulary')),
])
def test_bad_val_dataset_is_one_line(workdir, args, parts):
    says(one_line_error('train.py', *TINY, '--out_dir=out-bad-val', *args, cwd=workdir), *parts)

