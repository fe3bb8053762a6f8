"""Shared test setup: offline environment, paths to the repo and to ../shared."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), 'shared')
sys.path.insert(0, ROOT)

# no network here: make every library fail fast (or read its local cache) instead of retrying
os.environ.setdefault('HF_HUB_OFFLINE', '1')
os.environ.setdefault('HF_DATASETS_OFFLINE', '1')
os.environ.setdefault('WANDB_MODE', 'offline')
os.environ.setdefault('TIKTOKEN_CACHE_DIR', os.path.join(SHARED, 'data', 'tiktoken_cache'))


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
