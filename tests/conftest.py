"""Shared test setup: offline environment, paths to the repo and to ../shared."""
import json
import os
import runpy
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), 'shared')
sys.path.insert(0, ROOT)

# no network here: make every library fail fast (or read its local cache) instead of retrying
os.environ.setdefault('HF_HUB_OFFLINE', '1')
os.environ.setdefault('HF_DATASETS_OFFLINE', '1')
os.environ.setdefault('WANDB_MODE', 'offline')
os.environ.setdefault('TIKTOKEN_CACHE_DIR', os.path.join(SHARED, 'data', 'tiktoken_cache'))


def pytest_configure(config):
    config.addinivalue_line('markers', 'slow: the real shapes (block 1024, GPT-2 vocabulary); deselect with -m "not slow"')


def shared_path(*parts):
    """Path of a file under ../shared, failing the test clearly if it is missing."""
    path = os.path.join(SHARED, *parts)
    if not os.path.exists(path):
        pytest.fail(f'missing {path}: the tests need the shared/ folder next to the checkout')
    return path


@pytest.fixture(scope='session')
def workdir(tmp_path_factory):
    """A folder laid out like the repo's root for data: data/shakespeare_char prepared from the shared copy.

    Scripts run with this as their working directory, so their data/ and out_dir paths resolve here.
    """
    root = tmp_path_factory.mktemp('work')
    folder = root / 'data' / 'shakespeare_char'
    folder.mkdir(parents=True)
    script = shutil.copy(os.path.join(ROOT, 'data', 'shakespeare_char', 'prepare.py'), folder)
    shutil.copy(shared_path('data', 'tinyshakespeare', 'input.txt'), folder / 'input.txt')
    subprocess.run([sys.executable, script], check=True, capture_output=True)
    return root


def run_script(script, *args, cwd, check=True, nproc=None):
    """Run one of the repo's scripts (or torchrun on it) in cwd; return the CompletedProcess."""
    path = os.path.join(ROOT, script)
    cmd = [sys.executable, path] if nproc is None else \
        [sys.executable, '-m', 'torch.distributed.run', '--standalone', f'--nproc_per_node={nproc}', path]
    result = subprocess.run(cmd + list(args), cwd=cwd, capture_output=True, text=True, timeout=600)
    if check and result.returncode != 0:
        pytest.fail(f'{script} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}')
    return result


# the tiny training run that the script tests share: small enough to train in seconds
TINY = ['--device=cpu', '--dtype=float32', '--compile=False', '--n_layer=2', '--n_head=2', '--n_embd=32',
        '--cond_dim=16', '--block_size=32', '--batch_size=8', '--gradient_accumulation_steps=1', '--eval_iters=2',
        '--log_interval=5', '--warmup_iters=5']


@pytest.fixture(scope='session')
def char_ckpt(workdir):
    """out_dir (relative to workdir) of a tiny char-level model trained briefly on tiny Shakespeare."""
    run_script('train.py', *TINY, '--dataset=shakespeare_char', '--out_dir=out-char', '--max_iters=30',
               '--eval_interval=30', '--learning_rate=3e-3', cwd=workdir)
    return 'out-char'


@pytest.fixture(scope='session')
def bpe_ckpt(workdir):
    """out_dir of a tiny GPT-2-BPE model trained briefly on data/webtext (the shared webtext snippets)."""
    from datasets import Dataset, DatasetDict
    from data.openwebtext.prepare import tokenize, write_bins
    folder = workdir / 'data' / 'webtext'
    folder.mkdir(parents=True, exist_ok=True)
    texts = [json.loads(line)['text'] for line in open(shared_path('data', 'webtext', 'webtext.valid.jsonl'))]
    splits = DatasetDict(train=Dataset.from_dict({'text': texts[:600]}), val=Dataset.from_dict({'text': texts[600:700]}))
    write_bins(tokenize(splits, num_proc=1), str(folder))
    run_script('train.py', *TINY, '--dataset=webtext', '--out_dir=out-bpe', '--max_iters=10', '--eval_interval=10',
               '--learning_rate=3e-3', cwd=workdir)
    return 'out-bpe'


@pytest.fixture(scope='session')
def tiny_gpt2(tmp_path_factory):
    """A randomly initialised GPT-2 (GPT-2's vocabulary and 1024 positions, 16 wide) saved with
    save_pretrained: the offline stand-in for gpt2-medium / gpt2-large."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp('tiny-gpt2')
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=1024)).save_pretrained(folder)
    return str(folder)


def peak_memory_run(script, *args, cwd):
    """Run a script to the end in a fresh process; return (its stdout, its peak RSS in MB)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen([sys.executable, os.path.join(ROOT, script), *args], cwd=cwd, stdout=out,
                                   stderr=err)
        _, status, usage = os.wait4(process.pid, 0)  # the child's own rusage, unlike RUSAGE_CHILDREN
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if process.returncode != 0:
            pytest.fail(f'{script} failed ({process.returncode}):\n{err.read().decode()[-3000:]}')
        return out.read().decode(), usage.ru_maxrss / 1024  # kB on Linux


def one_line_error(script, *args, cwd):
    """Run a script in this process (fast: torch is already imported) and return the one-line
    error it stops with; fail the test if it does not stop that way."""
    old = os.getcwd()
    os.chdir(cwd)
    argv, sys.argv = sys.argv, [script, *args]
    try:
        runpy.run_path(os.path.join(ROOT, script), run_name='__main__')
    except SystemExit as e:
        message = str(e.code)
    else:
        pytest.fail(f'{script} {" ".join(args)} ran to the end instead of stopping with an error')
    finally:
        sys.argv = argv
        os.chdir(old)
    assert message.startswith('error: ') and '\n' not in message, message
    return message
