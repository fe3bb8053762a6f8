"""
Prepare tiny Shakespeare as GPT-2 BPE tokens: a small BPE dataset that trains on a CPU.

    python data/shakespeare/prepare.py

Gets input.txt as data/shakespeare_char/prepare.py does (this folder first, then $AOGPT_DATA_DIR,
then a download) and writes train.bin / val.bin (uint16 GPT-2 ids) next to it; no meta.pkl, which
is how a dataset folder says its ids are GPT-2 BPE.
"""
import os
import sys

import tiktoken

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # data/, for the char script
# one way to get the text, not two
from shakespeare_char.prepare import read_splits, refuse_arguments, write_ids  # noqa: E402


def gpt2_encoding():
    try:
        return tiktoken.get_encoding('gpt2')
    except Exception as e:  # tiktoken fetches its files once; offline without a cache it cannot
        sys.exit(f'error: could not load the GPT-2 BPE ({type(e).__name__}): run once with a network, or set '
                 f'TIKTOKEN_CACHE_DIR to a tiktoken cache (the data mirror has one, tiktoken_cache/)')


def main():
    refuse_arguments(__doc__)
    here = os.path.dirname(os.path.abspath(__file__))
    enc = gpt2_encoding()
    for split, text in read_splits(here).items():  # the char set's text and split: val is the same stretch
        write_ids(here, split, enc.encode_ordinary(text))


if __name__ == '__main__':
    main()
