"""
Export a checkpoint as a model folder, the way models are shared on the Hugging Face Hub:
model.safetensors (the weights, no pickle), config.json (the network, its vocabulary, which weights,
what trained it) and README.md (a model card with the Hub's metadata).

    python export.py --out_dir=out-shakespeare-char --out=ao-gpt-shakespeare-char
    python export.py --init_from=path/to/authors_ckpt.pt --out=ao-gpt-small      # the authors' releases too
    python export.py --out_dir=out --out=ao-gpt --eval_json=ppl.json --gen_json=gen.json   # numbers in the card
    python export.py --out_dir=out --out=ao-gpt --harness_json=results/<model>/results_<date>.json
    python export.py --out_dir=out --out=ao-gpt --push=owner/ao-gpt              # then upload it (network, token)

Every script reads the folder wherever it reads a checkpoint (python sample.py --init_from=ao-gpt,
or hf:owner/repo once pushed). A folder holds one set of weights: the EMA ones unless --use_ema=False.
init_from: 'resume' (out_dir/ckpt.pt), a checkpoint path (ours or the authors'), hf:owner/repo/file, or a model
folder (written again, say with new numbers in its card: its training record is carried over).
"""
import json
import os
import re

from aogpt.checkpoints import FOLDER_FILES, CheckpointError, folder_config, is_hf_folder, save_folder, weights_read
from aogpt.common import check_settings, check_writable, find_checkpoint, read_checkpoint
from configurator import fail
from configurator import configure

# -----------------------------------------------------------------------------
init_from = 'resume'
out_dir = 'out-shakespeare-char'
out = ''  # the model folder to write
use_ema = True  # the EMA weights (False: the raw ones)
eval_json = ''  # an eval_ppl.py --out_json whose perplexities the card quotes
gen_json = ''  # a gen_ppl.py --out_json whose gen PPLs the card quotes
harness_json = ''  # a results JSON of lm_eval_ao.py (--output_path) whose metrics the card quotes
license = 'other'  # the card's license, a Hub license id (mit, apache-2.0, ...)
push = ''  # owner/repo: upload the folder to the Hugging Face Hub
# -----------------------------------------------------------------------------
KINDS = {'adaln': 'AO-GPT, an any-order autoregressive decoder: a masked diffusion language model written with '
                  'causal attention, the target position given by adaLN',
         'add': 'sigma-GPT (the paper\'s baseline): an any-order decoder with the target position added to its input',
         'two_stream': 'AO-GPT with two streams (ours): keys and values from a content stream without targets, '
                       'predictions from a query stream told the target position by adaLN',
         'queries': 'AO-GPT told the target position by its rotary queries only (ours)',
         'encoder': 'an encoder-only masked diffusion language model (MDM), the paper\'s comparison'}
DATASETS = {'openwebtext': 'Skylion007/openwebtext'}  # the Hub's name of a dataset train.py reads
# a Hub license id, as the card's YAML metadata holds it unquoted: no space, newline, colon or quote
LICENSE_RULE = (lambda v: re.fullmatch(r'[A-Za-z0-9][\w.+-]*', v, re.ASCII),
                'a Hub license id such as mit or apache-2.0')


def check_inputs():
    """Every setting, the output folder and the result files, before any work; returns the results the card
    quotes, by setting (eval_json, ...)."""
    if not out:
        fail('--out names the model folder to write (say --out=ao-gpt-shakespeare-char)')
    check_settings(globals(), {'license': LICENSE_RULE})
    others = sorted(set(os.listdir(out)) - set(FOLDER_FILES)) if os.path.isdir(out) else []
    ours = os.path.isfile(os.path.join(out, 'config.json')) and not is_hf_folder(out)
    if os.path.exists(out) and (not os.path.isdir(out) or others and not ours):
        fail(f'--out={out} exists and is not a model folder written by export.py: name a new folder')
    if others:  # writing the folder again replaces it whole
        fail(f"--out={out} is a model folder that also holds {', '.join(others)}, which writing it again would delete: "
             f"move them out, or name a new folder")
    for key in RESULTS:
        if globals()[key] and not os.path.isfile(globals()[key]):
            fail(f'--{key}={globals()[key]}: no such file')
    if push:
        check_repo(push)
    check_writable(os.path.dirname(os.path.abspath(out)), f'--out={out}')  # the folder is written beside, then moved
    return {key: read_results(key, globals()[key]) for key in RESULTS if globals()[key]}


def check_repo(name):
    """Fail unless name is a Hub repo name, owner/repo, by huggingface_hub's own rule."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id
    try:
        validate_repo_id(name)
        valid = name.count('/') == 1
    except HFValidationError:
        valid = False
    if not valid:
        fail(f"--push={name} is not a Hub repo name: owner/repo, each of letters, digits, '-', '_' and '.' (not first "
             f"or last), at most 96 characters")


def read_results(key, path):
    """The results of the JSON given as --key, or a one-line error: naming the script that wrote it when it is
    another's (see RESULTS)."""
    script, fits = RESULTS[key]
    try:
        with open(path, encoding='utf-8') as f:
            results = json.load(f)['results']
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        fail(f'{path} is not the results JSON of {script} ({type(e).__name__})')
    if not fits(results):
        other = next((k for k, (_, f) in RESULTS.items() if f(results)), None)
        fail(f"{path} holds {RESULTS[other][0]}'s results, not {script}'s: give it as --{other}" if other else
             f'{path} is not the results JSON of {script}: its results hold none of the numbers the card quotes')
    return results


def per_item(kind, test):
    """Whether results are a non-empty `kind` (dict or list) whose every item is a dict that passes test."""
    return lambda r: isinstance(r, kind) and bool(r) and all(
        isinstance(v, dict) and test(v) for v in (r.values() if kind is dict else r))


RESULTS = {  # the card's result files: setting -> (the script that writes them, whether results are of its shape)
    'eval_json': ('eval_ppl.py', per_item(dict, lambda v: 'ppl' in v)),  # set -> its perplexities
    'gen_json': ('gen_ppl.py', per_item(list, lambda v: 'gen_ppl' in v)),  # grid points
    'harness_json': ('lm_eval_ao.py', per_item(dict, lambda v: any(',' in k for k in v))),  # task -> 'metric,filter'
}


def eval_table(results):
    """Markdown rows of eval_ppl.py's perplexities: each set, left to right and each ensemble."""
    columns = list(next(iter(results.values()))['ppl'])
    head = ['set', 'chunks'] + ['left to right' if c == 'l2r' else f'ensemble={c}' for c in columns]
    rows = [[name, str(r['chunks'])] + [f"{r['ppl'][c]:.2f}" for c in columns] for name, r in results.items()]
    return table(head, rows)


def gen_table(results):
    """Markdown rows of gen_ppl.py's sample quality: each grid point's gen PPL and entropy."""
    head = ['steps', 'temperature', 'top_p', 'gen PPL', 'entropy', 'samples']
    rows = [[str(r['steps'] or 'one token per step'), str(r['temperature']), str(r['top_p']),
             f"{r['gen_ppl']:.2f}", f"{r['entropy']:.3f}", str(r['n'])] for r in results]
    return table(head, rows)


def harness_table(results):
    """Markdown rows of the harness's metrics: each task's, with their standard errors."""
    rows = []
    for task, metrics in results.items():
        for key, value in metrics.items():
            name, _, kind = key.partition(',')
            if kind and '_stderr' not in name and isinstance(value, (int, float)):
                stderr = metrics.get(f'{name}_stderr,{kind}')
                rows.append([task, name, f'{value:.4g}', f'{stderr:.2g}' if isinstance(stderr, (int, float)) else ''])
    return table(['task', 'metric', 'value', 'stderr'], rows)


def table(head, rows):
    return '\n'.join('| ' + ' | '.join(row) + ' |' for row in [head, ['---'] * len(head), *rows])


def prefix_text(trained):
    """A run on a prefix of its train split (train.py --train_tokens): how much, and how often it was read."""
    unique = trained['config'].get('train_tokens')
    if not unique:
        return ''
    epochs = f", {trained['tokens'] / unique:.1f} epochs" if trained['tokens'] else ''
    return f' (its first {unique:,} tokens only{epochs})'


def started_from(parent):
    """The card's line on the checkpoint a run started from, and on what that one started from."""
    iterations = f"{parent['iterations']:,} iterations, " if parent['iterations'] is not None else ''
    text = f"Started from `{parent['init_from']}` ({iterations}orders: {parent['orders']})."
    return text + (' ' + started_from(parent['parent']) if parent.get('parent') else '')


def model_card(model, config, source, name, results):
    """README.md of the folder: the Hub's metadata, what the model is, what trained it, its numbers (results, by
    setting: see check_inputs), how to use it."""
    c, trained = model.config, config['trained']
    vocab = config['vocab']
    vocab_text = ('GPT-2 BPE' if vocab == 'gpt2' else f'{len(vocab)} characters' if vocab else
                  f'{c.vocab_size} ids (its tokenizer is not stored)')
    dataset = trained['config'].get('dataset')
    meta = ['library_name: ao-gpt', 'pipeline_tag: text-generation', f'license: {license}',
            'tags:', '- any-order', '- masked-diffusion', '- text-generation']
    meta += ['datasets:', f'- {DATASETS[dataset]}'] if dataset in DATASETS else []
    kind = KINDS['encoder' if c.is_encoder else c.target_injection]
    lines = ['---', *meta, '---', '', f'# {name}', '',
             f'{kind} (Xue et al., "Any-Order GPT as Masked Diffusion Model", arXiv 2506.19935). '
             f'{c.n_layer} layers, {c.n_embd} wide, {c.n_head} heads, block {c.block_size}, {c.position_encoding} '
             f'positions, {model.get_num_params() / 1e6:.1f}M parameters; vocabulary: {vocab_text}. '
             f'Weights: {config["weights"]}. Exported from `{source}` by the ao-gpt code\'s `export.py`.', '',
             '## Training', '']
    if trained['iterations'] is None:
        lines.append('The checkpoint does not say how it was trained.')
    else:
        tokens = f" ({trained['tokens']:,} tokens)" if trained['tokens'] else ''
        orders = f" in these orders: {trained['orders']}" if trained.get('orders') else ''
        lines.append(f"{trained['iterations']:,} iterations{tokens} of ao-gpt's `train.py`"
                     + (f' on {dataset}' if dataset else '') + prefix_text(trained) + f'{orders}. Its settings:')
        lines += ['', table(['setting', 'value'], [[k, f'`{v}`'] for k, v in sorted(trained['config'].items())])]
    if trained.get('parent'):
        lines += ['', started_from(trained['parent'])]
    if eval_json:
        lines += ['', f'## Perplexity (`eval_ppl.py`, {os.path.basename(eval_json)})', '',
                  eval_table(results['eval_json'])]
    if gen_json:
        lines += ['', f'## Sample quality (`gen_ppl.py`, {os.path.basename(gen_json)})', '',
                  gen_table(results['gen_json'])]
    if harness_json:
        lines += ['', f'## lm-evaluation-harness (`lm_eval_ao.py`, {os.path.basename(harness_json)})', '',
                  harness_table(results['harness_json'])]
    where = f'hf:{push}' if push else name
    lines += ['', '## Use', '', 'With the ao-gpt code (`pip install -r requirements.txt`):', '', '```sh',
              f'python sample.py --init_from={where}', f'python eval_ppl.py --init_from={where} --ensemble 8',
              '```', '', '```python', 'from checkpoints import load_checkpoint',
              f"model, config = load_checkpoint('{name}')  # safetensors and JSON: nothing is unpickled", '```', '',
              'With `transformers` (the folder carries its code):', '', '```python', *transformers_use(c, vocab, where),
              '```', '']
    return '\n'.join(lines)


def transformers_use(c, vocab, where):
    """The card's lines of Python that load the folder with transformers and use it."""
    name = where.removeprefix('hf:')
    auto = 'AutoModelForMaskedLM' if c.is_encoder else 'AutoModelForCausalLM'
    lines = [f'from transformers import {auto}' + (', AutoTokenizer' if vocab else ''),
             f"model = {auto}.from_pretrained('{name}', trust_remote_code=True)"]
    if vocab is None:  # no tokenizer: the ids are the user's
        return lines + ['logits = model(input_ids).logits']
    lines.append(f"tokenizer = AutoTokenizer.from_pretrained('{name}', trust_remote_code=True)")
    if c.is_encoder:
        return lines + ["masked = tokenizer('ROMEO' + tokenizer.mask_token * 3, return_tensors='pt').input_ids",
                        'logits = model(masked).logits']
    return lines + [f"ids = model.generate(tokenizer('ROMEO:', return_tensors='pt').input_ids, "
                    f"max_new_tokens={min(64, c.block_size // 2)}, do_sample=True)", 'print(tokenizer.decode(ids[0]))']


def upload(folder, repo):
    """Push the folder to the Hub (creating the repo), or say in one line why it could not."""
    try:
        from huggingface_hub import HfApi
        api = HfApi()
        api.create_repo(repo, exist_ok=True)
        api.upload_folder(folder_path=folder, repo_id=repo)
    except Exception as e:  # the Hub raises many kinds (offline, auth, permissions)
        fail(f'could not push {folder} to the Hub repo {repo} ({type(e).__name__}): check the network and '
             f'`huggingface-cli login`; the folder is written and can be pushed again')
    print(f'pushed {folder} to https://huggingface.co/{repo}')


def main():
    results = check_inputs()
    path = find_checkpoint(init_from, out_dir)
    model, checkpoint = read_checkpoint(path, 'cpu', use_ema)
    config = folder_config(model, checkpoint, weights_read(checkpoint, use_ema))
    try:
        save_folder(model, config, model_card(model, config, path, os.path.basename(os.path.normpath(out)), results),
                    out)
    except CheckpointError as e:
        fail(str(e))
    print(f"wrote {out}: model.safetensors ({config['weights']} weights), config.json, README.md")
    if push:
        upload(out, push)


if __name__ == '__main__':
    configure(globals(), doc=__doc__)
    main()
