"""
A run's folder, train.py's out_dir: what it holds (ckpt.pt to resume from, best.pt, metrics.jsonl), how a run starts
(init_from), whether a resume may go on with the settings it is given, what a new run starts from (its parent), the
data it reads, and the signals that stop it (Preemption). Each function takes what it checks as arguments and fails
with one line (configurator.fail).
"""
import json
import math
import os
import signal
from collections import Counter
from dataclasses import fields

import numpy as np
import torch

from aogpt.benchmarks import load_tokens, make_chunks, paper_chunks
from aogpt.checkpoints import CheckpointError, gpt2_checkpoint, gpt2_missing, load_weights_only, training_record
from aogpt.common import (above, at_least, between, check_device, check_settings, dataset_vocab, one_of,
                          read_checkpoint)
from aogpt.fim import fim_vocab_size
from aogpt.scoring import check_gap_sizes, gap_lengths
from aogpt.training import MIX_EXAMPLE, ORDER_MODES, make_fixed_order, run_stages, val_half
from configurator import fail, parse_number
from model import ARCHITECTURES, GELUS, POSITION_ENCODINGS, TARGET_INJECTIONS, GPTConfig, build_model

INIT_MODES = ('scratch', 'resume', 'auto')
INIT_ONLY = ('target_init_std', 'gate_init')  # shape only the initial weights, which a checkpoint replaces
RESTART_FREE = ('out_dir', 'init_from', 'overwrite', 'eval_only')  # a run may take these on afresh when it goes on
# what a resume never changes: its data (check_same_data) and its model (check_model_settings)
RESUME_FIXED = ('train_tokens', 'keep_best', 'fim_rate',
                *(f.name for f in fields(GPTConfig) if f.name not in INIT_ONLY))
PREEMPTED = 75  # EX_TEMPFAIL: stopped by a signal with a checkpoint; the same command with --init_from=auto goes on
VAL_SETS = ('wikitext2', 'wikitext103', 'ptb')  # the benchmark sets with a validation split
SETTINGS_RULES = {  # train.py's settings, and what each must be
    **dict.fromkeys(['batch_size', 'block_size', 'gradient_accumulation_steps', 'eval_interval', 'log_interval',
                     'eval_iters', 'n_layer', 'n_head', 'n_embd', 'cond_dim', 'order_block'], at_least(1)),
    'max_iters': at_least(0), 'train_tokens': at_least(0), 'order_curriculum': at_least(0), 'fim_max_span': at_least(0),
    'warmup_iters': at_least(0), 'lr_decay_iters': at_least(1),
    'learning_rate': above(0), 'min_lr': at_least(0), 'weight_decay': at_least(0), 'grad_clip': at_least(0),
    'beta1': (lambda v: 0 <= v < 1, 'in [0, 1)'), 'beta2': (lambda v: 0 <= v < 1, 'in [0, 1)'),
    'dropout': (lambda v: 0 <= v < 1, 'in [0, 1)'), 'input_mask': (lambda v: 0 <= v < 1, 'in [0, 1)'),
    'keep_best': (lambda v: v == '' or reading_weights(v) is not None,
                  "'' (no best checkpoint), 'l2r', 'ao' or both weighted, e.g. 'l2r:0.1,ao:0.9'"),
    'random_ratio': between(0, 1), 'ema_decay': between(0, 1), 'fim_rate': between(0, 1),
    'target_init_std': above(0),
    # adaLN's gate multiplies its block's output (no sigmoid; model.AdaLNBlock): 0 shuts the block, 1 opens it.
    # A start past ±10 has no use, and a huge one overflows float16 (max 65504): NaN before the first step
    'gate_init': (lambda v: -10 <= v <= 10, "in [-10, 10] (0 shuts adaLN's gates, 1 opens them)"),
    'peak_flops': above(0), 'order': one_of(*ORDER_MODES), 'target_injection': one_of(*TARGET_INJECTIONS),
    'architecture': one_of(*ARCHITECTURES), 'position_encoding': one_of(*POSITION_ENCODINGS), 'gelu': one_of(*GELUS),
    'mask_eps': (lambda v: 0 <= v < 1, 'in [0, 1)'),
    'val_dataset': (lambda v: v in ('', *VAL_SETS), f"'' (the dataset's val.bin) or one of {', '.join(VAL_SETS)}"),
}


def check_run_settings(config):
    """Every setting of train.py on its own and those that go together, before anything is read."""
    check_settings(config, SETTINGS_RULES)
    if config['decay_lr'] and config['lr_decay_iters'] <= config['warmup_iters']:
        fail(f"--lr_decay_iters ({config['lr_decay_iters']}) must be larger than --warmup_iters "
             f"({config['warmup_iters']})")
    if config['min_lr'] > config['learning_rate']:
        fail(f"--min_lr ({config['min_lr']}) must not exceed --learning_rate ({config['learning_rate']})")
    check_device(config['device'], config['dtype'])
    try:  # the model's own rules (model.GPTConfig): which settings go together
        GPTConfig(**{f.name: config[f.name] for f in fields(GPTConfig) if f.name in config})
    except ValueError as e:
        fail(e)
    if config['fim_rate'] and config['architecture'] == 'encoder':
        fail('--fim_rate trains a FIM GPT, a left-to-right decoder, and --architecture=encoder is not one: drop one')
    if config['fim_rate'] and config['order'] != 'l2r':
        fail(f"--fim_rate trains a FIM GPT, a left-to-right GPT on rearranged windows: add --order=l2r (got "
             f"--order={config['order']}), or drop --fim_rate (AO-GPT's own fim orders: --order_mix={MIX_EXAMPLE})")
    if config['order_file'] and config['order'] != 'fixed_random':
        fail(f"--order_file gives the one order of a fixed-order run: add --order=fixed_random "
             f"(got --order={config['order']})")
    init_from = config['init_from']
    if init_from.lower() in INIT_MODES and init_from not in INIT_MODES and not os.path.exists(init_from):
        fail(f'--init_from={init_from} is read as a checkpoint path, and there is none: the modes are lower case, '
             f'--init_from={init_from.lower()}')


def run_files(out_dir):
    """The paths of what a run's folder holds: (ckpt.pt, best.pt, metrics.jsonl)."""
    return tuple(os.path.join(out_dir, name) for name in ('ckpt.pt', 'best.pt', 'metrics.jsonl'))


def start_mode(init_from, ckpt_path, eval_only, overwrite):
    """'scratch', 'resume' or the parent init_from names: --init_from=auto resumes where ckpt_path exists (a requeued
    job's one command), --eval_only evaluates the run there; a new run never replaces a checkpoint unasked."""
    if init_from == 'auto':
        init_from = 'resume' if os.path.exists(ckpt_path) else 'scratch'
    if eval_only and init_from == 'scratch':
        init_from = 'resume'
    if init_from != 'resume' and not eval_only and os.path.exists(ckpt_path) and not overwrite:
        fail(f'{ckpt_path} already exists: continue it with --init_from=resume, write elsewhere with '
             f'--out_dir=..., or replace it with --overwrite=True')
    return init_from


# -----------------------------------------------------------------------------
# whether a resume may go on


def check_resumable(checkpoint, path):
    if not {'ema', 'optimizer', 'iter_num'} <= checkpoint.keys():
        fail(f'{path} was not written by train.py, so it cannot be resumed: start a new run from its '
             f'weights with --init_from=<its path> and another --out_dir')


def check_resume(checkpoint, model_config, config, overridden, stages, auto, path):
    """Whether out_dir's checkpoint (at path) may go on with these settings: written by train.py, the same model,
    under --init_from=auto the same settings, and unless only evaluated the same data and stages."""
    check_resumable(checkpoint, path)
    check_model_settings(model_config, overridden, True, path)
    if auto:
        check_same_run(checkpoint['config'], config, path)
    if not config['eval_only']:
        check_same_data(checkpoint['config'], config, stages, path)


def run_order(checkpoint, order_file, config, path):
    """The one order of a fixed-order run (None for the others): a resumed run's own, which --order_file may only
    repeat; else --order_file's, or one drawn from the seed (training.make_fixed_order)."""
    explicit = read_order_file(order_file, config['block_size']) if order_file else None
    if checkpoint is None:
        return explicit if explicit is not None else make_fixed_order(
            config['order'], config['block_size'], config['order_block'], torch.Generator().manual_seed(config['seed']))
    if explicit is not None and not torch.equal(explicit, checkpoint['fixed_order']):
        fail(f'--order_file={order_file} is not the order {path} was trained with: resume without it')
    return checkpoint['fixed_order']


def check_same_data(saved, config, stages, path):
    """A resumed run goes on with the tokens, the selection and the order stages it started with (an older checkpoint
    records none of the first two: all of train.bin, no best kept)."""
    for key, default in (('train_tokens', 0), ('keep_best', ''), ('fim_rate', 0.0)):
        if saved.get(key, default) != config[key]:
            fail(f"--{key}={config[key]!r} is not the run's ({saved.get(key, default)!r} in {path}): resume "
                 f"with --{key}={saved.get(key, default)!r}, or start a new out_dir")
    if config['order_stages'] and config['order_stages'] == saved.get('order_stages') and stages != saved_stages(saved):
        fail(f"--order_stages: the stages at --max_iters={config['max_iters']} are not the ones {path} was trained "
             f"on (--max_iters={saved['max_iters']}): a percentage moves with max_iters; give the knots in iterations")


def saved_stages(saved):
    """The order stages a checkpoint's run was trained on (training.run_stages); None where they no longer parse."""
    try:
        return run_stages(saved)
    except ValueError:
        return None


def check_same_run(saved, config, path):
    """--init_from=auto goes on only with the run's own settings (a requeue repeats its command): fail on others. The
    settings a resume may change say so: --init_from=resume goes on with them."""
    differ = [k for k in config if k not in RESTART_FREE and k in saved and saved[k] != config[k]]
    if not differ:
        return
    fixed = [k for k in differ if k in RESUME_FIXED]
    fix = f"give the run's own {', '.join(f'--{k}={saved[k]!r}' for k in fixed)} (a resume goes on with them), " \
        if fixed else 'go on with --init_from=resume and those settings, '
    fail(f"--init_from=auto: {path} was written with other settings ("
         f"{', '.join(f'{k}={saved[k]!r}, now {config[k]!r}' for k in differ)}): {fix}or start a new out_dir")


def check_model_settings(model_config, overridden, resume, path, free=()):
    """Fail if a model setting given in a config file or flag differs from the checkpoint's that the run starts from:
    its model is the one that goes on. `free` names the settings the run may change."""
    names = [f.name for f in fields(GPTConfig) if f.name in overridden and f.name not in INIT_ONLY + free]
    given = {k: overridden[k] for k in names}
    differ = [k for k, v in given.items() if v != getattr(model_config, k)]
    if differ:
        flags = ', '.join(f'--{k}={given[k]}' for k in differ)
        saved = ', '.join(f'{k}={getattr(model_config, k)}' for k in differ)
        verb, pronoun = ('differs', 'it') if len(differ) == 1 else ('differ', 'them')
        fix = f'drop {pronoun} to resume, or start a new out_dir' if resume else \
            f'a run started from a checkpoint takes its model: drop {pronoun}, or train from scratch'
        fail(f"{flags} {verb} from the checkpoint's {saved} ({path}); {fix}")


def world_size_note(checkpoint, world_size, auto, path):
    """'' when the checkpoint was trained by world_size processes; else a note, or under --init_from=auto a failure:
    each process draws its own batches, so another count goes on with other data."""
    if checkpoint.get('world_size', world_size) == world_size:
        return ''
    message = (f"{path} was trained by {checkpoint['world_size']} processes, now {world_size}: each "
               'process draws its own batches, so the run goes on with other data than it would have')
    if auto:  # a requeue repeats its command: another world size is another job
        fail(f'--init_from=auto: {message}; resume with the same number of processes, or start a new out_dir')
    return f'note: {message}'


# -----------------------------------------------------------------------------
# what a new run starts from


def read_parent(path, from_gpt2):
    """The network and checkpoint a new run starts from: GPT-2 converted (checkpoints.gpt2_checkpoint), or ours."""
    if not from_gpt2:
        return read_checkpoint(path)
    try:
        checkpoint = gpt2_checkpoint(path)
    except CheckpointError as e:
        fail(e)
    model = build_model(GPTConfig(**checkpoint['model_args']))
    model.load_state_dict(checkpoint['model'])
    return model, checkpoint


def parent_record(path, checkpoint):
    """What a run started from, for its checkpoint, metrics.jsonl and model card: the path, what trained it, and its
    own parent."""
    trained = training_record(checkpoint)
    return dict(init_from=path, iterations=trained['iterations'], tokens=trained['tokens'], orders=trained['orders'],
                parent=checkpoint.get('parent'))


def read_order_file(path, block_size):
    """The permutation of 0..block_size-1 in a .pt (tensor or list), .npy or .txt (integers separated by
    spaces, commas or newlines) file; one-line errors for anything else."""
    if not os.path.isfile(path):
        fail(f'--order_file={path} not found')
    if not path.endswith(('.pt', '.npy', '.txt')):
        fail(f'--order_file must be a .pt, .npy or .txt file, got {path}')
    try:
        if path.endswith('.pt'):
            values = load_weights_only(path)
        elif path.endswith('.npy'):
            values = np.load(path, allow_pickle=False)
        else:
            with open(path) as f:
                values = [parse_number(v, int) for v in f.read().strip().strip('[]').replace(',', ' ').split()]
        explicit = torch.as_tensor(values)
    except Exception as e:  # a broken file of any of three formats: say which file, in one line
        reason = ' '.join(str(e).split())[:120]
        fail(f'--order_file={path} does not hold a list of integers ({type(e).__name__}: {reason})')
    if explicit.dim() != 1 or explicit.dtype.is_floating_point or explicit.dtype == torch.bool:
        fail(f'--order_file={path} must hold one list of integers, got a {explicit.dtype} tensor of shape '
             f'{tuple(explicit.shape)}')
    explicit = explicit.long()
    problem = permutation_problem(explicit.tolist(), block_size)
    if problem:
        fail(f'--order_file={path} must hold a permutation of 0..{block_size - 1} (every position of block_size '
             f'{block_size} once): {problem}')
    return explicit


def permutation_problem(values, n):
    """What keeps values from being a permutation of 0..n-1, in words; '' if nothing."""
    if len(values) != n:
        return f'got {len(values)} values'
    outside = [v for v in values if not 0 <= v < n]
    if outside:
        return f'{outside[0]} is not a position'
    counts = Counter(values)
    repeated = next((v for v in values if counts[v] > 1), None)
    if repeated is None:
        return ''
    missing = next(v for v in range(n) if v not in counts)
    return f'position {repeated} appears {counts[repeated]} times and position {missing} is missing'


# -----------------------------------------------------------------------------
# the data a run reads


def check_files(dataset, init_from, from_gpt2):
    """Before a parent is read or downloaded: data/<dataset>'s splits, and with them GPT-2's weights where they are
    not on this machine, so that a run lacking both says both at once."""
    problem = data_problem(dataset)
    missing = gpt2_missing(init_from) if problem and from_gpt2 else ''
    if problem:
        fail(f'{problem}; and {missing}' if missing else problem)


def data_problem(dataset):
    """Why data/<dataset> cannot be trained on ('' if it can): no name, or a split missing."""
    if not dataset:
        found = sorted(d.name for d in os.scandir('data') if d.is_dir()) if os.path.isdir('data') else []
        return f"--dataset is empty: name a folder of data/ ({', '.join(found) or 'there is none here'})"
    for split in ('train', 'val'):
        path = os.path.join('data', dataset, f'{split}.bin')
        if not os.path.exists(path):
            return f'{path} not found: run python data/{dataset}/prepare.py first'
    return ''


def check_data(dataset, block_size, train_tokens, keep_best, val_dataset, block_from=''):
    """The dataset's folder, its vocabulary (dataset_vocab) and the unique tokens a run trains on (train_tokens, or
    all of train.bin), once the splits hold a block; block_from: where block_size came from, if not a setting."""
    dataset_dir = os.path.join('data', dataset)
    block = f'block_size={block_size}' + (f' (the block of {block_from})' if block_from else '')
    for split in ('train', 'val'):
        path = os.path.join(dataset_dir, f'{split}.bin')
        if os.path.getsize(path) // 2 <= block_size:
            fail(f'{path} holds fewer than {block} tokens: use a smaller --block_size')
    train_size = os.path.getsize(os.path.join(dataset_dir, 'train.bin')) // 2
    if train_tokens > train_size:
        fail(f'--train_tokens={train_tokens:,} is more than {dataset_dir}/train.bin holds ({train_size:,} tokens): '
             'use at most that, or 0 for all of it')
    if 0 < train_tokens <= block_size:
        fail(f'--train_tokens={train_tokens} holds no training window of block_size + 1 tokens: use at least '
             f'{block_size + 1}' + (f' (block_size {block_size} is the block of {block_from}: --block_size=N reads '
                                    'shorter ones)' if block_from else ''))
    if keep_best and val_dataset:
        fail(f'--keep_best chooses on the first half of {dataset_dir}/val.bin and reports on the second: drop '
             f'--val_dataset={val_dataset}, or --keep_best')
    if keep_best and os.path.getsize(os.path.join(dataset_dir, 'val.bin')) // 4 <= block_size:
        fail(f'--keep_best cuts {dataset_dir}/val.bin in halves, each no longer than {block}: use a '
             'smaller --block_size')
    return dataset_dir, dataset_vocab(dataset_dir), train_tokens or train_size


def benchmark_chunks(val_dataset, data_vocab, dataset, data_dir, block_size, batch_size, eval_iters):
    """The paper's chunks of val_dataset's validation split, in whole batches, at most eval_iters of them."""
    if data_vocab != 'gpt2':
        fail(f'--val_dataset={val_dataset} is GPT-2 BPE text but {dataset} has its own vocabulary '
             f'(data/{dataset}/meta.pkl): use a GPT-2 BPE dataset, or no --val_dataset')
    docs, _ = load_tokens(val_dataset, 'validation', data_dir)
    chunks = paper_chunks(docs, block_size)
    n_batches = min(len(chunks) // batch_size, eval_iters)
    if n_batches == 0:
        fail(f'{val_dataset} validation makes {len(chunks)} chunks of {block_size} tokens, fewer than '
             f'--batch_size={batch_size}: use a smaller --batch_size or --block_size')
    return chunks[:n_batches * batch_size]


def gap_eval_chunks(val_chunks, dataset_dir, keep_best, block_size, count):
    """The chunks of the in-training gap NLLs: the first `count` of the val split (with keep_best, of its second half,
    which chose nothing), cut as eval_ppl.py cuts them (val_dataset's, with one)."""
    if val_chunks is not None:
        return val_chunks
    tokens = load_tokens(os.path.join(dataset_dir, 'val.bin'))[0][0]
    return make_chunks([val_half(tokens, 'report' if keep_best else '')], block_size)[:count]


def check_fit(model_config, config, trained, resume, data_size, gap_settings):
    """What the settings must fit once the model is known (its own, or its checkpoint's): the encoder's objective,
    the block it trained on (`trained`), the vocabulary, the FIM spans and the gaps."""
    block_size, order = config['block_size'], config['order']
    if model_config.is_encoder and config['fim_rate']:
        fail('--fim_rate trains a FIM GPT, a left-to-right decoder; this checkpoint is an encoder: drop --fim_rate')
    if model_config.is_encoder and (order not in ('mixed', 'random') or config['order_file']):
        fail(f'the encoder trains on random masks (its NELBO), not in an order: drop --order={order} and --order_file')
    if model_config.is_encoder and config['input_mask']:
        fail('--input_mask hides a decoder\'s inputs; the encoder\'s objective masks its inputs already: drop it')
    if block_size > model_config.block_size or (resume and block_size != trained):
        fail(f'--block_size={block_size} does not fit the checkpoint (block_size {trained}): use '
             f'--block_size={trained}' + ('' if resume else ' or less'))
    needed = fim_vocab_size(data_size, 0) if config['fim_rate'] else data_size
    if model_config.vocab_size < needed:  # GPT-2's converted table is not padded (checkpoints.gpt2_checkpoint)
        fail(f"the model has {model_config.vocab_size} tokens but {config['dataset']} needs {needed}" +
             (" with --fim_rate's sentinels: start the FIM GPT from scratch" if needed > data_size else ''))
    if config['fim_max_span'] > block_size:
        fail(f"--fim_max_span={config['fim_max_span']} is longer than the block (--block_size={block_size}): use at "
             f'most {block_size}, or 0 for any length')
    if any(gap_lengths(*s) for s in gap_settings):
        fail('--eval_gaps: a range or line gap, its length unknown, is read by eval_ppl.py --gaps; training reads '
             'span:L and scatter:r')
    try:
        check_gap_sizes(gap_settings, block_size, '--eval_gaps')
    except ValueError as e:
        fail(e)


def keep_best_note(is_encoder, keep_best):
    """A note where the encoder's best.pt is chosen by a reading other than its own objective, else ''."""
    if not (is_encoder and keep_best == 'l2r'):
        return ''
    return ("note: --keep_best=l2r chooses the encoder's best.pt by its left-to-right loss, which it estimates at one "
            'position a row; its own objective, the NELBO, is --keep_best=ao')


# -----------------------------------------------------------------------------
# the records: metrics.jsonl, best.pt


def start_metrics(path, resume, iter_num):
    """A new run starts a fresh metrics.jsonl; a resumed one keeps the records up to its checkpoint."""
    kept = [line for line, record in read_metrics(path) if record['iter'] <= iter_num] \
        if resume and os.path.exists(path) else []
    with open(path, 'w') as f:
        f.writelines(kept)


def read_metrics(path):
    """(line, record) of each line of metrics.jsonl. A kill while it was written leaves its last line cut:
    that line is dropped, with a note; a bad line before it stops the run."""
    with open(path) as f:
        lines = [line if line.endswith('\n') else line + '\n' for line in f if line.strip()]
    records = []
    for i, line in enumerate(lines, start=1):
        try:
            records.append((line, json.loads(line)))
        except json.JSONDecodeError:
            if i < len(lines):
                fail(f'{path}, line {i}, is not a metrics record: mend or delete that line to resume')
            print(f'note: the last line of {path} was cut (killed while writing it): dropped')
    return records


def check_finite(what, value, iter_num, ckpt_path, init_path, dtype):
    """Stop without saving on a loss that is nan or inf, saying what it cannot be blamed on."""
    if math.isfinite(value):
        return
    kept = f'{ckpt_path}, the last good checkpoint, is untouched' if os.path.exists(ckpt_path) else \
        'no checkpoint was written'
    if iter_num == 0:  # no optimizer step yet: the starting weights in this dtype, not the learning rate
        start = f'the weights of {init_path}' if init_path else 'the initial weights of gate_init and target_init_std'
        cause = f'no optimizer step was taken yet, so not the learning rate: {start} give it in {dtype}' + \
            ('; try dtype=float32' if dtype != 'float32' else '')
    else:
        cause = 'try a lower learning_rate, or dtype=bfloat16 instead of float16'
    fail(f'{what} is {value} at iter {iter_num}; stopped without saving, {kept} ({cause})')


def metrics_record(iter_num, epochs, elapsed, lr, tokens_per_sec, losses, parent, fim_rate):
    """One evaluation's line of metrics.jsonl; a new run's first also says what it started from and, for a FIM GPT,
    its rate."""
    record = dict(iter=iter_num, epochs=round(epochs, 4), elapsed=elapsed, lr=lr,
                  tokens_per_sec=round(tokens_per_sec, 1), **losses)
    if iter_num == 0 and parent is not None:
        record['parent'] = parent['init_from']
    if iter_num == 0 and fim_rate:
        record['fim_rate'] = fim_rate
    return record


def append_metrics(path, record):
    with open(path, 'a') as f:
        f.write(json.dumps(record) + '\n')


READINGS = ('l2r', 'ao')  # what keep_best weighs: the selection half's left-to-right and any-order losses


def reading_weights(keep_best):
    """keep_best as {reading: weight}: 'l2r' or 'ao' alone, or weights of both ('l2r:0.1,ao:0.9': an AO-GPT mix's own
    objective, the sum of select_<reading> x weight); None for anything else."""
    if keep_best in READINGS:
        return {keep_best: 1.0}
    weights = {}
    for part in keep_best.split(','):
        name, _, weight = part.partition(':')
        try:
            weights[name] = parse_number(weight)
        except ValueError:
            return None
        if name not in READINGS or not 0 < weights[name] < math.inf:
            return None
    return weights if len(weights) == len(keep_best.split(',')) else None


def selection_reading(losses, keep_best):
    """keep_best's reading of an evaluation (losses: its select_* losses and others)."""
    return sum(w * losses[f'select_{name}'] for name, w in reading_weights(keep_best).items())


def is_best(best, losses, keep_best):
    """Whether keep_best's selection reading of this evaluation is the lowest so far (best: best.pt's record)."""
    return bool(keep_best) and (best is None or selection_reading(losses, keep_best) < best['loss'])


# -----------------------------------------------------------------------------
# preemption


class Preemption:
    """SIGTERM and SIGUSR1 (which some clusters send first) ask the run to stop. The handler only notes the first
    signal: the loop reads `asked` where it can stop (between iterations, between an evaluation's batches), so nothing
    is raised from a handler, wherever the signal lands."""

    SIGNALS = ('SIGTERM', 'SIGUSR1')

    def __init__(self):
        self.signal = None

    def install(self):
        for name in self.SIGNALS:
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), self.note)

    def note(self, signum, frame):
        if self.signal is None:  # a second signal changes nothing
            self.signal = signum

    def asked(self):
        return self.signal is not None

    def agreed(self, ddp, group):
        """Whether any process was asked: under DDP every rank learns it at the same iteration, from a flag
        all-reduced on the CPU (group: gloo beside NCCL), so the loop never waits for the GPU to learn it."""
        if not ddp:
            return self.asked()
        asked = torch.tensor(float(self.asked()))
        torch.distributed.all_reduce(asked, op=torch.distributed.ReduceOp.MAX, group=group)
        return asked.item() > 0

    def by(self):
        return signal.Signals(self.signal).name if self.signal else "another process's signal"
