"""Data preparation: the shakespeare_char script end to end, the Python corpus, the openwebtext tokenize-and-write path
on local text."""
import json
import os
import pickle
import platform
import shutil
import subprocess
import sys
import sysconfig
import zlib

import numpy as np
import pytest
import tiktoken
from datasets import load_dataset

import data.openwebtext.prepare as openwebtext
from conftest import ROOT, TINY, metrics, needs, run_script, synthetic_play
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
def test_shakespeare_in_gpt2_bpe(shakespeare, tmp_path):  # shakespeare: skips unless the text can be had
    """data/shakespeare: the same text and split as the char set, in GPT-2 BPE (nanoGPT's counts), no meta.pkl."""
    for name in ('shakespeare_char', 'shakespeare'):  # the BPE script takes its text from the char script
        (tmp_path / name).mkdir()
        shutil.copy(os.path.join(ROOT, 'data', name, 'prepare.py'), tmp_path / name)
    subprocess.run([sys.executable, tmp_path / 'shakespeare' / 'prepare.py'], check=True, capture_output=True)
    train = np.fromfile(tmp_path / 'shakespeare' / 'train.bin', dtype=np.uint16)
    val = np.fromfile(tmp_path / 'shakespeare' / 'val.bin', dtype=np.uint16)
    assert (len(train), len(val)) == (301966, 36059)
    assert tiktoken.get_encoding('gpt2').decode(train[:3].tolist()) == 'First Citizen:'
    assert not (tmp_path / 'shakespeare' / 'meta.pkl').exists()


@pytest.mark.needs('gpt2_bpe')
@pytest.mark.slow  # a whole corpus prepared and trained on
def test_python_corpus_is_the_standard_library_and_trains(tmp_path):
    """data/python: every .py file of the stdlib outside site-packages, sorted, one end-of-text after each, split by
    the CRC-32 of its path; source.json says which Python; a tiny model trains on it."""
    for name in ('shakespeare_char', 'shakespeare', 'python'):  # the Python script shares the others' helpers
        (tmp_path / 'data' / name).mkdir(parents=True)
        shutil.copy(os.path.join(ROOT, 'data', name, 'prepare.py'), tmp_path / 'data' / name)
    subprocess.run([sys.executable, tmp_path / 'data' / 'python' / 'prepare.py'], check=True, capture_output=True)
    folder = tmp_path / 'data' / 'python'
    source = json.loads((folder / 'source.json').read_text())
    assert source['python'] == platform.python_version() and not (folder / 'meta.pkl').exists()
    root = sysconfig.get_paths()['stdlib']
    paths = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files
                   if f.endswith('.py') and not {'site-packages', 'dist-packages', '__pycache__'} & set(d.split(os.sep)))
    val = [p for p in paths if zlib.crc32(p.encode()) % 50 == 0 and p not in source['skipped_not_utf8']]
    assert source['val']['files'] == len(val) and source['train']['files'] + len(val) + len(
        source['skipped_not_utf8']) == len(paths)
    enc = tiktoken.get_encoding('gpt2')
    for split, first in (('train', next(p for p in paths if p not in val and p not in source['skipped_not_utf8'])),
                         ('val', val[0])):
        ids = np.fromfile(folder / f'{split}.bin', dtype=np.uint16)
        assert len(ids) == source[split]['tokens'] and (ids == enc.eot_token).sum() == source[split]['files']
        with open(os.path.join(root, first), encoding='utf-8') as f:
            expected = enc.encode_ordinary(f.read()) + [enc.eot_token]
        assert ids[:len(expected)].tolist() == expected  # the first file of the split, whole, then end-of-text
    run_script('train.py', '--dataset=python', *TINY, '--max_iters=4', '--eval_interval=4', '--out_dir=out-py',
               cwd=tmp_path)
    assert metrics(tmp_path, 'out-py')[-1]['iter'] == 4


@pytest.mark.slow  # a whole corpus prepared and trained on
def test_python_char_is_the_ascii_standard_library_by_file_and_trains(tmp_path):
    """data/python_char: data/python's files and split, those in ASCII alone, joined in sorted order, as characters;
    a tiny model trains on it."""
    for name in ('shakespeare_char', 'shakespeare', 'python', 'python_char'):  # it shares the others' helpers
        (tmp_path / 'data' / name).mkdir(parents=True)
        shutil.copy(os.path.join(ROOT, 'data', name, 'prepare.py'), tmp_path / 'data' / name)
    subprocess.run([sys.executable, tmp_path / 'data' / 'python_char' / 'prepare.py'], check=True, capture_output=True)
    folder = tmp_path / 'data' / 'python_char'
    root = sysconfig.get_paths()['stdlib']
    paths = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files
                   if f.endswith('.py') and not {'site-packages', 'dist-packages', '__pycache__'} & set(d.split(os.sep)))
    val = ''
    for path in [p for p in paths if zlib.crc32(p.encode()) % 50 == 0]:
        try:
            text = open(os.path.join(root, path), encoding='utf-8').read()
        except UnicodeDecodeError:
            continue
        val += text if text.isascii() else ''
    meta = pickle.load(open(folder / 'meta.pkl', 'rb'))
    ids = np.fromfile(folder / 'val.bin', dtype=np.uint16)
    assert ''.join(meta['itos'][i] for i in ids.tolist()) == val and meta['vocab_size'] <= 128
    run_script('train.py', '--dataset=python_char', *TINY, '--max_iters=4', '--eval_interval=4', '--out_dir=out-pc',
               cwd=tmp_path)
    assert metrics(tmp_path, 'out-pc')[-1]['iter'] == 4


@pytest.mark.slow  # a whole corpus prepared and trained on
def test_wikitext2_char_is_the_detokenized_validation_articles_and_trains(tmp_path):
    """data/wikitext2_char: WikiText-2's validation rows, detokenized by the authors' rule and joined, the first 90% of
    the characters train and the rest val, ids of the sorted characters; a tiny model trains on it."""
    data_dir = needs('wikitext2')
    for name in ('shakespeare_char', 'wikitext2_char'):  # the script shares the char script's helpers
        (tmp_path / 'data' / name).mkdir(parents=True)
        shutil.copy(os.path.join(ROOT, 'data', name, 'prepare.py'), tmp_path / 'data' / name)
    env = {k: v for k, v in os.environ.items() if k != 'AOGPT_DATA_DIR'} | \
        ({'AOGPT_DATA_DIR': data_dir} if data_dir else {}) | {'PYTHONPATH': ROOT}  # the repository's WikiText reader
    subprocess.run([sys.executable, tmp_path / 'data' / 'wikitext2_char' / 'prepare.py'], check=True,
                   capture_output=True, env=env)
    from aogpt.benchmarks import load_rows, wikitext_detokenize
    text = ''.join(wikitext_detokenize(row) for row in load_rows('wikitext2', 'validation', data_dir))
    assert ' @,@ ' not in text and text.startswith(' = Homarus gammarus =\n')
    folder = tmp_path / 'data' / 'wikitext2_char'
    with open(folder / 'meta.pkl', 'rb') as f:
        meta = pickle.load(f)
    assert ''.join(meta['itos'][i] for i in range(meta['vocab_size'])) == ''.join(sorted(set(text)))
    ids = {split: np.fromfile(folder / f'{split}.bin', dtype=np.uint16) for split in ('train', 'val')}
    assert len(ids['train']) == int(len(text) * 0.9)
    assert ''.join(meta['itos'][int(i)] for i in np.concatenate([ids['train'], ids['val']])) == text
    run_script('train.py', '--dataset=wikitext2_char', *TINY, '--max_iters=4', '--eval_interval=4',
               '--out_dir=out-wiki', cwd=tmp_path)
    assert metrics(tmp_path, 'out-wiki')[-1]['iter'] == 4


@pytest.mark.parametrize('mirror,problem', [('nowhere', 'AOGPT_DATA_DIR={} does not exist'),
                                            ('a_file', 'AOGPT_DATA_DIR={} is a file'),
                                            ('empty', 'tinyshakespeare/input.txt not found: AOGPT_DATA_DIR={}')])
def test_shakespeare_char_with_a_wrong_mirror_is_one_line_on_stderr(tmp_path, mirror, problem):
    (tmp_path / 'a_file').write_text('')
    (tmp_path / 'empty').mkdir()
    (tmp_path / 'run').mkdir()  # the script in a folder without input.txt, so it looks in the mirror
    script = shutil.copy(os.path.join(ROOT, 'data', 'shakespeare_char', 'prepare.py'), tmp_path / 'run')
    out = subprocess.run([sys.executable, script], capture_output=True, text=True,
                         env=os.environ | {'AOGPT_DATA_DIR': str(tmp_path / mirror)})
    assert out.returncode == 1 and out.stdout == ''
    assert out.stderr.startswith('error: ') and out.stderr.count('\n') == 1, out.stderr
    assert problem.format(tmp_path / mirror) in out.stderr


def test_openwebtext_without_the_hub_is_one_line(monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'Skylion007/openwebtext' on the Hub (OfflineModeIsEnabled)\nmore")
    monkeypatch.setattr(openwebtext, 'load_dataset', offline)
    with pytest.raises(SystemExit) as stop:
        openwebtext.main()
    message = str(stop.value.code)
    assert message.startswith('error: could not load Skylion007/openwebtext') and '\n' not in message
    assert 'OfflineModeIsEnabled' in message and 'connect to the network' in message


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


@pytest.mark.parametrize('name', ['shakespeare_char', 'shakespeare', 'python', 'python_char', 'openwebtext',
                                  'wikitext2_char'])
def test_a_prepare_script_refuses_an_argument_it_would_ignore(name, tmp_path):
    result = subprocess.run([sys.executable, os.path.join(ROOT, 'data', name, 'prepare.py'), '--bogus=1'],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 1 and result.stderr.count('\n') == 1
    assert 'takes no arguments, got --bogus=1' in result.stderr and not list(tmp_path.iterdir())
