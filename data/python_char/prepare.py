"""
Prepare the running Python's standard library source for character-level language modelling: code, the text people
infill, split by file as data/python splits it (a file's path picks its side).

    python data/python_char/prepare.py

Reads the .py files of the standard library as data/python does, keeps those written in ASCII alone (a handful of
tests of other scripts would add hundreds of characters seen once), joins each split's files in sorted order and
writes train.bin / val.bin (uint16 character ids), meta.pkl (the vocabulary: every character that occurs) and
source.json (the Python version and the counts: another Python gives another corpus) next to this script.
"""
import json
import os
import platform
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # data/, for the shared helpers
from python.prepare import read_texts, source_files  # noqa: E402
from shakespeare_char.prepare import refuse_arguments, write_char_corpus  # noqa: E402


def main():
    refuse_arguments(__doc__)
    root = sysconfig.get_paths()['stdlib']
    texts, skipped = read_texts(root, source_files(root))
    kept = {split: [t for t in docs if t.isascii()] for split, docs in texts.items()}
    write_char_corpus(HERE, {split: ''.join(docs) for split, docs in kept.items()})
    counts = {split: dict(files=len(docs), characters=sum(map(len, docs))) for split, docs in kept.items()}
    not_ascii = sum(len(texts[s]) - len(kept[s]) for s in texts)
    with open(os.path.join(HERE, 'source.json'), 'w') as f:
        json.dump(dict(python=platform.python_version(), stdlib=root, skipped_not_utf8=len(skipped),
                       skipped_not_ascii=not_ascii, **counts), f, indent=1)
    print(f"Python {platform.python_version()}'s standard library: {counts['train']['files']} + "
          f"{counts['val']['files']} files, {len(skipped)} skipped (not UTF-8), {not_ascii} (not ASCII)")


if __name__ == '__main__':
    main()
