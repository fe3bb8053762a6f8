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


FILES = {'lambada_openai_local': 'lambada/lambada_test.jsonl', 'wikitext_local': 'wikitext-2-raw/wiki.test.raw'}


def mirror_file(task):
    """The file of a local task's set in AOGPT_DATA_DIR, or an error saying what is wrong and how to have it."""
    folder = os.environ.get('AOGPT_DATA_DIR', '')
    path = os.path.join(folder, FILES[task])
    if not os.path.isfile(path):
        problem = ('AOGPT_DATA_DIR is not set' if not folder else f'AOGPT_DATA_DIR={folder} is not a folder'
                   if not os.path.isdir(folder) else f'AOGPT_DATA_DIR={folder} holds no {FILES[task]}')
        raise FileNotFoundError(f'{task} reads the data mirror, and {problem}: point AOGPT_DATA_DIR at the mirror '
                                f'(docs/tests.md), or run the standard task ({task[:-len("_local")]}) online')
    return path


def test_split(rows):
    return datasets.DatasetDict({'test': datasets.Dataset.from_list(rows)})


def lambada_openai(**_):  # the harness passes the model_args and metadata, which do not choose the data
    """OpenAI's LAMBADA jsonl, the set EleutherAI/lambada_openai serves as its default config."""
    with open(mirror_file('lambada_openai_local'), encoding='utf-8') as f:
        return test_split([{'text': json.loads(line)['text']} for line in f if line.strip()])


def wikitext_pages(**_):
    """WikiText-2's raw test set as EleutherAI/wikitext_document_level serves it: one row per article,
    its lines joined by newlines, a new article at each top-level heading line (' = Title = ')."""
    with open(mirror_file('wikitext_local'), encoding='utf-8') as f:
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
