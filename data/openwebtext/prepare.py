"""
Prepare OpenWebText as GPT-2 BPE tokens.

    python data/openwebtext/prepare.py

Downloads the dataset from the Hugging Face Hub (tens of GB, cached by `datasets`),
splits off a small val set and writes train.bin / val.bin (uint16 token ids, one
end-of-text token after every document) next to this script.
"""
import functools
import os
import sys

import numpy as np
import tiktoken
from datasets import load_dataset
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # data/, for the shared helpers
from shakespeare_char.prepare import refuse_arguments  # noqa: E402

# worker processes for loading and tokenizing; half the cores leaves the machine usable
NUM_PROC = max(1, os.cpu_count() // 2)


@functools.lru_cache(maxsize=None)
def encoder():
    # loaded on first use (once per worker), so main() can report a missing dataset before tiktoken needs its files
    return tiktoken.get_encoding('gpt2')


def encode(example):
    enc = encoder()
    ids = enc.encode_ordinary(example['text'])  # ordinary: special-token text in documents stays plain text
    ids.append(enc.eot_token)  # marks document boundaries once everything is concatenated
    return {'ids': ids, 'len': len(ids)}


def split_val(dataset):
    """Split one Dataset into a DatasetDict with a large 'train' and a tiny 'val' split."""
    splits = dataset.train_test_split(test_size=0.0005, seed=2357, shuffle=True)
    splits['val'] = splits.pop('test')
    return splits


def tokenize(dataset_dict, num_proc=NUM_PROC):
    """Tokenize the 'text' column of every split into columns 'ids' and 'len'."""
    return dataset_dict.map(encode, remove_columns=['text'], desc='tokenizing', num_proc=num_proc)


def write_bins(tokenized, out_dir, shards=1024):
    """Write each split's ids, concatenated, to <out_dir>/<split>.bin; return split -> token count."""
    counts = {}
    for split, dset in tokenized.items():
        n_tokens = int(np.sum(dset.with_format('numpy')['len'], dtype=np.int64))
        path = os.path.join(out_dir, f'{split}.bin')
        # gpt2 ids are < 2**16, so uint16 halves the file size; the memmap keeps the data on disk
        arr = np.memmap(path, dtype=np.uint16, mode='w+', shape=(n_tokens,))
        n_shards = min(shards, len(dset))
        pos = 0
        for i in tqdm(range(n_shards), desc=f'writing {path}'):
            # contiguous shards keep the document order; only one shard is in RAM at a time
            shard = dset.shard(num_shards=n_shards, index=i, contiguous=True).with_format('numpy')
            ids = np.concatenate(shard['ids'])
            arr[pos:pos + len(ids)] = ids
            pos += len(ids)
        arr.flush()
        counts[split] = n_tokens
    return counts


def main():
    refuse_arguments(__doc__)
    try:
        dataset = load_dataset('Skylion007/openwebtext', num_proc=NUM_PROC)
    except ConnectionError as e:  # one line on stderr, exit 1, as the library's fail() (not imported here)
        sys.exit(f'error: could not load Skylion007/openwebtext from the Hub ({str(e).splitlines()[0]}): it '
                 f'downloads once, so connect to the network (HF_HUB_OFFLINE unset) and rerun')
    tokenized = tokenize(split_val(dataset['train']))
    counts = write_bins(tokenized, os.path.dirname(os.path.abspath(__file__)))
    for split, n in counts.items():
        print(f'{split} has {n:,} tokens')


if __name__ == '__main__':
    main()
