"""Shared test setup: offline environment, paths to the repo and to ../shared."""
import os
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
