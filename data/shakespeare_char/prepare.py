"""
Prepare tiny Shakespeare for character-level language modelling.

    python data/shakespeare_char/prepare.py

Uses input.txt in this folder; when it is missing, copies $AOGPT_DATA_DIR/tinyshakespeare/input.txt
if that variable names an offline mirror of the data, else downloads it. Writes train.bin / val.bin
(uint16 character ids) and meta.pkl (the vocabulary) next to it.
"""
import os
import pickle
import shutil
import sys

import numpy as np
import requests

URL = 'https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt'


def fetch_input(input_path):
    """Copy input.txt from the offline mirror named by AOGPT_DATA_DIR, or else download it."""
    # errors as the library's fail() says them (one line on stderr, exit 1); this script runs on its own, without it
    mirror = os.environ.get('AOGPT_DATA_DIR')
    if mirror:
        if not os.path.isdir(mirror):
            sys.exit(f"error: AOGPT_DATA_DIR={mirror} {'is a file' if os.path.exists(mirror) else 'does not exist'}: "
                     f'point it at the data mirror (the folder holding tinyshakespeare/input.txt), or unset it to '
                     f'download')
        source = os.path.join(mirror, 'tinyshakespeare', 'input.txt')
        if not os.path.exists(source):
            sys.exit(f'error: {source} not found: AOGPT_DATA_DIR={mirror} is not a mirror of the data; unset it to '
                     f'download')
        shutil.copy(source, input_path)
        return
    try:
        response = requests.get(URL, timeout=30)
        response.raise_for_status()
    except requests.RequestException as e:
        sys.exit(f'error: could not download {URL} ({type(e).__name__}); place input.txt in '
                 f'{os.path.dirname(input_path)} and rerun')
    with open(input_path, 'w', encoding='utf-8') as f:
        f.write(response.text)


def read_splits(folder):
    """The play's text, fetched into folder/input.txt if missing, split into train and val."""
    input_path = os.path.join(folder, 'input.txt')
    if not os.path.exists(input_path):
        fetch_input(input_path)
    with open(input_path, 'r', encoding='utf-8') as f:
        return split_contiguous(f.read())


def refuse_arguments(doc):
    """A prepare script takes no arguments: any would be ignored, so each is refused in one line (--help prints
    how to run it). Exits as the library's fail() does, which a data script does not import."""
    args = sys.argv[1:]
    if args in (['--help'], ['-h']):
        print(doc.strip())
        sys.exit(0)
    if args:
        sys.exit(f"error: {sys.argv[0]} takes no arguments, got {' '.join(args)}: run it as it is (--help says what "
                 'it does)')


def write_ids(folder, split, ids):
    print(f'{split} has {len(ids):,} tokens')
    np.array(ids, dtype=np.uint16).tofile(os.path.join(folder, f'{split}.bin'))


def write_char_corpus(folder, splits):
    """train.bin / val.bin of the texts in splits as character ids, and meta.pkl: the vocabulary is every
    character that occurs, in sorted order so ids are reproducible."""
    chars = sorted(set(''.join(splits.values())))
    vocab_size = len(chars)
    print(f'vocab size: {vocab_size}')
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}
    for split, text in splits.items():
        write_ids(folder, split, [stoi[c] for c in text])
    with open(os.path.join(folder, 'meta.pkl'), 'wb') as f:
        pickle.dump({'vocab_size': vocab_size, 'itos': itos, 'stoi': stoi}, f)


def split_contiguous(text):
    """The first 90% of the text for training, the rest for val: a held-out stretch, not random lines."""
    print(f'length of dataset in characters: {len(text):,}')
    n = len(text)
    return {'train': text[:int(n * 0.9)], 'val': text[int(n * 0.9):]}


def main():
    refuse_arguments(__doc__)
    here = os.path.dirname(os.path.abspath(__file__))
    write_char_corpus(here, read_splits(here))


if __name__ == '__main__':
    main()
