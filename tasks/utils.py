"""
The data of lambada_openai_local and wikitext_local: the standard tasks' sets read from the data
mirror named by the environment variable AOGPT_DATA_DIR (the repo's one data-location setting).
A task YAML cannot read an environment variable, so each set is made here, by the task's
custom_dataset; the wikitext task's detokenizer and metrics are the standard task's own.
"""
import json
import os

import datasets
from lm_eval.tasks.wikitext.preprocess_wikitext import process_results, wikitext_detokenizer  # noqa: F401 (the YAML's)


def mirror_file(relative):
    """AOGPT_DATA_DIR/relative, or an error saying how to have it."""
    folder = os.environ.get('AOGPT_DATA_DIR', '')
    path = os.path.join(folder, relative)
    if not folder or not os.path.isfile(path):
        raise FileNotFoundError(f'{relative} not found in AOGPT_DATA_DIR={folder!r}: point AOGPT_DATA_DIR at the data '
                                f'mirror (docs/tests.md), or run the standard task (lambada_openai, wikitext) online')
    return path


def test_split(rows):
    return datasets.DatasetDict({'test': datasets.Dataset.from_list(rows)})


def lambada_openai(**_):  # the harness passes the model_args and metadata, which do not choose the data
    """OpenAI's LAMBADA jsonl, the set EleutherAI/lambada_openai serves as its default config."""
    with open(mirror_file('lambada/lambada_test.jsonl'), encoding='utf-8') as f:
        return test_split([{'text': json.loads(line)['text']} for line in f if line.strip()])


def wikitext_pages(**_):
    """WikiText-2's raw test set as EleutherAI/wikitext_document_level serves it: one row per article,
    its lines joined by newlines, a new article at each top-level heading line (' = Title = ')."""
    with open(mirror_file('wikitext-2-raw/wiki.test.raw'), encoding='utf-8') as f:
        lines = f.read().split('\n')
    pages, page = [], []
    for line in lines:
        heading = line.replace('= = =', '===').replace('= =', '==').strip()
        if heading.startswith('= ') and heading.endswith(' ='):
            if '\n'.join(page).strip():
                pages.append('\n'.join(page))
            page = []
        page.append(line)
    return test_split([{'page': page} for page in pages + ['\n'.join(page)]])
