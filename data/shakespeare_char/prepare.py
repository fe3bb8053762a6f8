"""
Prepare tiny Shakespeare for character-level language modelling.

    python data/shakespeare_char/prepare.py

Uses input.txt in this folder (downloading it if it is missing) and writes
train.bin / val.bin (uint16 character ids) and meta.pkl (the vocabulary) next to it.
"""
import os
import pickle
import sys

import numpy as np
import requests

URL = 'https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt'


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    input_path = os.path.join(here, 'input.txt')
    if not os.path.exists(input_path):
        try:
            response = requests.get(URL, timeout=30)
            response.raise_for_status()
        except requests.RequestException as e:
            print(f'could not download {URL} ({type(e).__name__}); place input.txt in {here} and rerun')
            sys.exit(1)
        with open(input_path, 'w', encoding='utf-8') as f:
            f.write(response.text)

    with open(input_path, 'r', encoding='utf-8') as f:
        data = f.read()
    print(f'length of dataset in characters: {len(data):,}')

    # the vocabulary is every character that occurs, in sorted order so ids are reproducible
    chars = sorted(set(data))
    vocab_size = len(chars)
    print(f'vocab size: {vocab_size}')
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}

    # contiguous split: the val text is a held-out stretch of the play, not random lines
    n = len(data)
    splits = {'train': data[:int(n * 0.9)], 'val': data[int(n * 0.9):]}
    for split, text in splits.items():
        ids = np.array([stoi[c] for c in text], dtype=np.uint16)
        print(f'{split} has {len(ids):,} tokens')
        ids.tofile(os.path.join(here, f'{split}.bin'))

    with open(os.path.join(here, 'meta.pkl'), 'wb') as f:
        pickle.dump({'vocab_size': vocab_size, 'itos': itos, 'stoi': stoi}, f)


if __name__ == '__main__':
    main()
