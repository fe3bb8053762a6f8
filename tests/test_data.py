"""Data preparation: the shakespeare_char script end to end, the openwebtext tokenize-and-write path on local text."""
import json
import pickle

import numpy as np
import pytest
import tiktoken
from datasets import load_dataset

from conftest import synthetic_play
from data.openwebtext.prepare import split_val, tokenize, write_bins


def test_shakespeare_char(shakespeare):
    folder = shakespeare  # the real tiny Shakespeare, prepared by prepare.py as a user gets it
    with open(folder / 'meta.pkl', 'rb') as f:
        meta = pickle.load(f)
    assert meta['vocab_size'] == 65
    assert len(meta['itos']) == len(meta['stoi']) == 65
    assert all(meta['stoi'][ch] == i for i, ch in meta['itos'].items())

    train = np.fromfile(folder / 'train.bin', dtype=np.uint16)
    val = np.fromfile(folder / 'val.bin', dtype=np.uint16)
    assert len(train) + len(val) == 1115394
    assert abs(len(val) / 1115394 - 0.1) < 1e-3
    assert ''.join(meta['itos'][int(i)] for i in train[:14]) == 'First Citizen:'


@pytest.mark.needs('gpt2_bpe')
def test_openwebtext_tokenize_and_write(tmp_path):
    path = tmp_path / 'docs.jsonl'  # 200 documents of a few hundred characters, one a line
    path.write_text(''.join(json.dumps({'text': turn}) + '\n' for turn in synthetic_play().split('\n\n')[:200]))
    docs = load_dataset('json', data_files=str(path), split='train', cache_dir=str(tmp_path / 'hf'))
    splits = split_val(docs)
    assert set(splits) == {'train', 'val'} and len(splits['train']) + len(splits['val']) == 200

    # 7 shards: uneven multi-document shards for train, and fewer documents than shards for val
    counts = write_bins(tokenize(splits, num_proc=2), tmp_path, shards=7)

    enc = tiktoken.get_encoding('gpt2')
    for split, dset in splits.items():
        # expected ids computed independently: every document's tokens, then end-of-text, in order
        expected = [t for text in dset['text'] for t in enc.encode_ordinary(text) + [50256]]
        ids = np.memmap(tmp_path / f'{split}.bin', dtype=np.uint16, mode='r')
        assert counts[split] == len(expected)
        assert ids.tolist() == expected
