"""
Prepare the running Python's standard library source as GPT-2 BPE tokens: a real corpus (about 34 MB of
code, some 10M tokens) that every machine has offline, a lent GPU included.

    python data/python/prepare.py

Reads every .py file under the standard library's folder (site-packages left out) in sorted order, one
end-of-text token after each file, splits train and val by file (a file's path picks its side, so the val
set stays the same as files come and go between versions) and writes train.bin / val.bin (uint16 GPT-2
ids) next to this script, as data/openwebtext does; no meta.pkl (the ids are GPT-2's). source.json
records the Python version and the counts: another Python gives another corpus.
"""
import json
import os
import platform
import sys
import sysconfig
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # data/, for the shared helpers
from shakespeare.prepare import gpt2_encoding  # noqa: E402
from shakespeare_char.prepare import refuse_arguments, write_ids  # noqa: E402

VAL_ONE_IN = 50  # about 2% of the files are val: a file is val when the CRC-32 of its path is 0 modulo this


def source_files(root):
    """The standard library's .py files under root, as sorted relative paths (installed packages left out)."""
    paths = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d not in ('site-packages', 'dist-packages', '__pycache__'))
        paths += [os.path.relpath(os.path.join(folder, f), root) for f in sorted(files) if f.endswith('.py')]
    return sorted(paths)


def read_texts(root, paths):
    """split -> the texts of its files; files that are not UTF-8 (a few tests of bad encodings) are skipped."""
    texts, skipped = {'train': [], 'val': []}, []
    for path in paths:
        try:
            with open(os.path.join(root, path), encoding='utf-8') as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            skipped.append(path)
            continue
        split = 'val' if zlib.crc32(path.replace(os.sep, '/').encode()) % VAL_ONE_IN == 0 else 'train'
        texts[split].append(text)
    return texts, skipped


def main():
    refuse_arguments(__doc__)
    here = os.path.dirname(os.path.abspath(__file__))
    root = sysconfig.get_paths()['stdlib']
    enc = gpt2_encoding()
    texts, skipped = read_texts(root, source_files(root))
    counts = {}
    for split, docs in texts.items():
        ids = [i for doc in enc.encode_ordinary_batch(docs) for i in doc + [enc.eot_token]]
        write_ids(here, split, ids)
        counts[split] = dict(files=len(docs), tokens=len(ids))
    source = dict(python=platform.python_version(), implementation=platform.python_implementation(), stdlib=root,
                  skipped_not_utf8=skipped, **counts)
    with open(os.path.join(here, 'source.json'), 'w') as f:
        json.dump(source, f, indent=1)
    print(f"Python {source['python']}'s standard library: {counts['train']['files']} + {counts['val']['files']} "
          f"files, {len(skipped)} skipped (not UTF-8)")


if __name__ == '__main__':
    main()
