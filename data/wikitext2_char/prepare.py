"""
Prepare WikiText-2's validation articles for character-level language modelling: a second small corpus
(1.1 MB of encyclopedia prose, the size of tiny Shakespeare) to check on other text what was chosen on
the play (findings.py's orders finding trains some of its arms here too).

    python data/wikitext2_char/prepare.py

Reads the validation split as eval_ppl.py does: from $AOGPT_DATA_DIR/wikitext-2-raw/wiki.valid.raw when
that variable names an offline mirror of the data, else from the Hugging Face Hub (Salesforce/wikitext).
Each row is detokenized by the authors' WikiText rule (' @,@ ' -> ',', ...), the rows joined, the first
90% kept for training and the rest for val, as data/shakespeare_char does; writes train.bin / val.bin
(uint16 character ids) and meta.pkl (the vocabulary: every character that occurs) next to this script.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # data/, for the shared helpers
sys.path.insert(1, os.path.dirname(os.path.dirname(HERE)))  # the repository, for its WikiText reader
from shakespeare_char.prepare import refuse_arguments, split_contiguous, write_char_corpus  # noqa: E402
from aogpt.benchmarks import SETS, load_rows  # noqa: E402


def main():
    refuse_arguments(__doc__)
    rows = load_rows('wikitext2', 'validation', os.environ.get('AOGPT_DATA_DIR', ''))
    text = ''.join(SETS['wikitext2'].detokenize(row) for row in rows)
    write_char_corpus(HERE, split_contiguous(text))


if __name__ == '__main__':
    main()
