"""
The zero-shot benchmark sets as the authors' evaluation pipeline reads them: each set's rows exactly
as the Hugging Face Hub serves them (or from local copies), their detokenizers, and the authors'
cutting of the encoded rows into chunks; also the tokenized sets of data/ and a user's own files.
eval_ppl.py scores these chunks; train.py can report its validation loss on them (--val_dataset),
as the authors' trainer does on WikiText-103.
"""
import os
import re
from typing import Callable, NamedTuple

import numpy as np
import torch

from aogpt.checkpoints import GPT2_VOCAB
from aogpt.common import check_vocab, dataset_vocab, gpt2_encoding, read_jsonl, read_lines
from configurator import fail

LAMBADA_URL = 'https://openaipublic.blob.core.windows.net/gpt-2/data/lambada_test.jsonl'
MAP_SHARDS, MAP_BATCH = 8, 1000  # the authors' datasets.map(batched=True, num_proc=8) and its batch size
PIPELINES = ('paper', 'clean')


# -----------------------------------------------------------------------------
# detokenizers: the authors' rules (those of SEDD's data pipeline), in their order, on each row


def wikitext_detokenize(text):
    text = text.replace("s '", "s'")
    for mark in '-,.':  # number separators: 1 @,@ 000 -> 1,000
        text = text.replace(f' @{mark}@ ', mark)
    for mark in ':;.!?,':  # only between spaces: ' , ' -> ', '
        text = text.replace(f' {mark} ', f'{mark} ')
    for left, right in ('()', '[]', '{}', '""', "''"):  # no spaces just inside a pair
        text = re.sub(rf'{re.escape(left)}\s*([^{re.escape(right)}]*?)\s*{re.escape(right)}', rf'{left}\1{right}', text)
    for a, b in (('= = = =', '===='), ('= = =', '==='), ('= =', '=='), (' \u00b0 ', '\u00b0'), (' \n', '\n'),
                 ('\n ', '\n'), (' N ', ' 1 '), (" 's", "'s")):
        text = text.replace(a, b)
    return text


def ptb_detokenize(text):
    for a, b in ((" 's", "'s"), ("s ' ", "s' "), (" n't", "n't"), (" \n ", "\n"), ('\\/', '/')):
        text = text.replace(a, b)
    for _ in range(10):  # overlapping matches: ' N N ' needs more than one pass
        text = text.replace(' N ', ' 1 ')
    for a, b in (('$ 1', '$1'), ('# 1', '#1'), ('<unk>', '?')):
        text = text.replace(a, b)
    return text


def lm1b_detokenize(text):
    text = text.replace('http : / / ', 'http://').replace('https : / / ', 'https://')
    text = re.sub(r" '(\w+)", r"'\1", text)
    text = re.sub(r' (\w+) \. ', r' \1. ', text)
    text = re.sub(r' (\w+) \.$', r' \1.', text)
    for mark in '?!':
        text = re.sub(rf' \{mark}$', mark, text.replace(f' {mark} ', f'{mark} '))
    for a, b in ((' , ', ', '), (' : ', ': '), (' ; ', '; '), (' / ', '/')):
        text = text.replace(a, b)
    for left, right in ('""', "''", '()', '[]'):  # no spaces just inside a pair
        inner = re.escape(left) if left == right else re.escape(left + right)
        text = re.sub(rf'{re.escape(left)} ([^{inner}]+) {re.escape(right)}', rf'{left}\1{right}', text)
    return text.replace('$ ', '$').replace('\u00a3 ', '\u00a3')


def lambada_detokenize(text):
    return '\n' + text.replace('\u201c', '"').replace('\u201d', '"').strip()


# -----------------------------------------------------------------------------
# rows: each set's documents exactly as the Hugging Face Hub serves them


def read_text_file(path):
    """Rows of a local .txt (one per line) or .jsonl ({"text": ...} per line, blank lines skipped)."""
    if not path.endswith('.jsonl'):
        return read_lines(path)
    rows = []
    for number, record in read_jsonl(path, 'one {"text": ...}'):
        if not isinstance(record, dict) or not isinstance(record.get('text'), str):
            fail(f'{path} line {number} has no "text" string; a .jsonl file holds one {{"text": ...}} per line')
        rows.append(record['text'])
    return rows


def wikitext_rows(path):
    """Salesforce/wikitext's rows: each raw line with its newline (and leading space); a blank line is ''."""
    return [line + '\n' if line.strip() else '' for line in read_lines(path)]


def ptb_rows(path):
    """ptb_text_only's sentences: the stripped lines."""
    return [line.strip() for line in read_lines(path)]


class Hub(NamedTuple):
    """A set on the Hugging Face Hub: load_dataset(path, config)[column]."""
    path: str
    config: str | None
    column: str


class BenchmarkSet(NamedTuple):
    """A zero-shot set: where its rows come from, and the authors' rule that restores their text."""
    source: Hub | str  # the Hub's copy, or a URL
    files: dict  # split -> its local copy, under --data_dir
    read_rows: Callable  # the rows of a local copy, as the source serves them
    detokenize: Callable


SETS = {
    'wikitext2': BenchmarkSet(Hub('Salesforce/wikitext', 'wikitext-2-raw-v1', 'text'),
                              {'test': 'wikitext-2-raw/wiki.test.raw', 'validation': 'wikitext-2-raw/wiki.valid.raw'},
                              wikitext_rows, wikitext_detokenize),
    # WikiText-103 shares its validation and test splits with WikiText-2
    'wikitext103': BenchmarkSet(Hub('Salesforce/wikitext', 'wikitext-103-raw-v1', 'text'),
                                {'test': 'wikitext-2-raw/wiki.test.raw', 'validation': 'wikitext-2-raw/wiki.valid.raw'},
                                wikitext_rows, wikitext_detokenize),
    'ptb': BenchmarkSet(Hub('ptb_text_only', None, 'sentence'),
                        {'test': 'ptb/ptb.test.txt', 'validation': 'ptb/ptb.valid.txt'}, ptb_rows, ptb_detokenize),
    'lambada': BenchmarkSet(LAMBADA_URL, {'test': 'lambada/lambada_test.jsonl'}, read_text_file, lambada_detokenize),
    'lm1b': BenchmarkSet(Hub('dvruette/lm1b', None, 'text'), {'test': 'lm1b/news.en.heldout-00000-of-00050'},
                         read_lines, lm1b_detokenize),
}
# every corpus a data/<name>/prepare.py tokenizes (GPT-2 BPE or characters): its val.bin
BIN_SETS = ('openwebtext', 'python', 'python_char', 'shakespeare', 'shakespeare_char', 'wikitext2_char')
KNOWN = (*SETS, *BIN_SETS)


def download(url):
    import requests
    path = os.path.join(os.path.expanduser('~/.cache/ao-gpt'), os.path.basename(url))
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        response = requests.get(url, timeout=60)
        response.raise_for_status()
        with open(path + '.tmp', 'wb') as f:
            f.write(response.content)
        os.replace(path + '.tmp', path)
    return path


def load_rows(name, split, data_dir=''):
    """The rows of a known set's split: from data_dir if given, else from the Hub / URL."""
    benchmark = SETS[name]
    if data_dir:
        # the scripts' data_dir defaults to AOGPT_DATA_DIR: say which of the two named a wrong folder
        given = 'AOGPT_DATA_DIR' if data_dir == os.environ.get('AOGPT_DATA_DIR') else '--data_dir'
        drop = 'unset AOGPT_DATA_DIR' if given == 'AOGPT_DATA_DIR' else 'drop --data_dir'
        if split not in benchmark.files:
            fail(f"{name} has no local '{split}' split (local: {', '.join(benchmark.files)}); {drop} to "
                 f"load it from the Hub, or pass --data_file")
        if not os.path.isdir(data_dir):
            fail(f"{given}={data_dir} {'is a file' if os.path.exists(data_dir) else 'does not exist'}: point it "
                 f'at the folder of local copies (the data mirror), or {drop} to load {name} from the Hub')
        path = os.path.join(data_dir, benchmark.files[split])
        if not os.path.exists(path):
            fail(f'{path} not found (the local copy of {name} {split}, in {given}={data_dir}): point {given} at a '
                 f'mirror that holds it, or {drop} to load {name} from the Hub')
        return benchmark.read_rows(path)
    source = benchmark.source
    try:
        if isinstance(source, str):  # LAMBADA: OpenAI's file, test split only
            if split != 'test':
                fail(f"lambada has only a 'test' split, got --split={split}")
            return read_text_file(download(source))
        from datasets import load_dataset
        return list(load_dataset(source.path, source.config, split=split)[source.column])
    except (ConnectionError, OSError, ImportError) as e:
        fail(f'could not fetch {name} ({type(e).__name__}: {str(e).splitlines()[0]}); without network, '
             f'point AOGPT_DATA_DIR (or --data_dir) at local copies, or pass --data_file=path')


# -----------------------------------------------------------------------------
# chunks


def encode_rows(rows, detokenize=None):
    """GPT-2 BPE of each (detokenized) row followed by end-of-text; an empty row is end-of-text alone."""
    enc = gpt2_encoding()
    texts = [detokenize(row) for row in rows] if detokenize else rows
    return [doc + [enc.eot_token] for doc in enc.encode_ordinary_batch(texts)]


def chunk(ids, n):
    """Cut a token stream into (N, n) chunks, dropping the remainder."""
    n_chunks = len(ids) // n
    return torch.from_numpy(np.asarray(ids[:n_chunks * n], dtype=np.int64).reshape(n_chunks, n))


def contiguous_shards(n_rows, n_shards):
    """[start, end) of datasets' contiguous shards (Dataset.shard(contiguous=True)): the first
    n_rows % n_shards shards get one row more; map lowers num_proc to the number of rows."""
    n_shards = min(n_shards, n_rows)
    size, extra = divmod(n_rows, n_shards)
    starts = [i * size + min(i, extra) for i in range(n_shards + 1)]
    return list(zip(starts, starts[1:]))


def concatenation(docs):
    return np.concatenate([np.asarray(doc, dtype=np.int64) for doc in docs])


def paper_chunks(docs, n):
    """The authors' chunks: each map batch (MAP_BATCH rows of one of MAP_SHARDS contiguous shards) is
    concatenated and cut into n-token chunks on its own, its remainder dropped."""
    chunks = [chunk(concatenation(docs[b:min(b + MAP_BATCH, end)]), n)
              for start, end in contiguous_shards(len(docs), MAP_SHARDS) for b in range(start, end, MAP_BATCH)]
    return torch.cat(chunks)


def make_chunks(docs, n, pipeline='paper'):
    """n-token chunks of token documents: the authors' ('paper') or of one concatenation ('clean')."""
    return paper_chunks(docs, n) if pipeline == 'paper' else chunk(concatenation(docs), n)


# -----------------------------------------------------------------------------
# any set as token documents


def token_file(name):
    """The token file a set names (a set of data/ is its val.bin; a .bin is itself), or None for a text set."""
    if name in BIN_SETS or name.endswith('.bin'):
        return name if name.endswith('.bin') else os.path.join('data', name, 'val.bin')
    return None


def load_tokens(name, split='test', data_dir='', pipeline='paper'):
    """(token documents, (what their ids mean, how many ids): see common.dataset_vocab) of a known set
    (its split; a set of data/ is its val.bin) or of a .txt, .jsonl or .bin file. A .bin token file
    is one document, read with the meta.pkl beside it if any. pipeline='clean' strips the rows of
    text and skips the blank ones."""
    path = token_file(name)
    if path:
        if not os.path.exists(path):
            fail(f'{path} not found' + ('' if name.endswith('.bin') else f': run python data/{name}/prepare.py'))
        if os.path.getsize(path) == 0 or os.path.getsize(path) % 2:
            fail(f'{path} is not a token file: expected uint16 token ids, got {os.path.getsize(path)} bytes')
        return [np.memmap(path, dtype=np.uint16, mode='r')], dataset_vocab(os.path.dirname(path))
    rows = load_rows(name, split, data_dir) if name in SETS else read_text_file(name)
    if not any(row.strip() for row in rows):
        fail(f'{name} holds no text')
    if pipeline == 'clean':
        rows = [row.strip() for row in rows if row.strip()]
    return encode_rows(rows, SETS[name].detokenize if name in SETS else None), ('gpt2', GPT2_VOCAB)


def check_tokens(name, docs, data, model, n):
    """Fail unless the model reads this set's tokens (the same tokenizer or, where one side gives only
    its vocabulary size, the same size; every id in range) and the set holds at least one block of
    them. Returns check_vocab's note."""
    note = check_vocab(model, data, name)
    top = max(int(np.max(doc)) for doc in docs)
    if top >= model[1]:
        fail(f'{name} holds token id {top} but the checkpoint has only {model[1]} tokens')
    total = sum(len(doc) for doc in docs)
    if total < n:
        fail(f'{name} has {total} tokens, fewer than one block of {n}')
    return note
