"""
What the scripts share besides the model: the rules their settings follow, devices and dtypes, memory,
checkpoints and tokenizers as one-line errors, and small file readers.
"""
import ctypes
import json
import os
import pickle
import sys
import tempfile
from contextlib import nullcontext

import torch

from aogpt.checkpoints import (GPT2_VOCAB, CheckpointError, checkpoint_path, checkpoint_vocab,
                               load_checkpoint, training_record, weights_read)
from configurator import check_rules, fail, rank

DTYPES = ('float32', 'bfloat16', 'float16')


# -----------------------------------------------------------------------------
# one-line errors, and the rules of settings: (test, what the value must be)


def check_settings(namespace, rules, flag='--{}'):
    """Fail with one line on the first setting that breaks its rule; rules: {key: (test, what)}; flag names a
    setting as its user wrote it (a script's --key, the harness's model_args)."""
    try:
        check_rules(namespace, rules, flag)
    except ValueError as e:
        fail(e)


def at_least(low):
    return (lambda v: v >= low), f'at least {low}'


def above(low):
    return (lambda v: v > low), f'> {low}'


def between(low, high):
    return (lambda v: low <= v <= high), f'in [{low}, {high}]'


def one_of(*choices):
    return (lambda v: v in choices), f"one of {', '.join(map(str, choices))}"


def int_at_least(low):
    return (lambda v: type(v) is int and v >= low), f'an int >= {low}'


def optional_int(low):
    """None, or an int >= low (the settings whose None default means 'automatic')."""
    return (lambda v: v is None or (type(v) is int and v >= low)), f'None or an int >= {low}'


def default_device():
    return 'cuda' if torch.cuda.is_available() else 'cpu'


def default_dtype():
    return 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'float32'


def check_device(device, dtype):
    """Fail with one line unless `device` exists here and supports `dtype`."""
    if dtype not in DTYPES:
        fail(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    try:
        kind = torch.device(device).type
    except RuntimeError:
        fail(f"--device must be 'cpu', 'cuda', 'cuda:N' or 'mps', got {device!r}")
    if kind == 'cuda':
        index = torch.device(device).index or 0
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            fail(f'--device={device} but this machine has {torch.cuda.device_count()} CUDA device(s): use --device=cpu')
        if dtype == 'bfloat16' and not torch.cuda.is_bf16_supported():
            fail(f'{device} does not support bfloat16: use --dtype=float16 (or float32)')
    elif kind == 'mps':
        if not torch.backends.mps.is_available():
            fail('--device=mps but MPS is not available here: use --device=cpu')
    elif kind != 'cpu':
        fail(f"--device must be 'cpu', 'cuda', 'cuda:N' or 'mps', got {device!r}")


def hold_freed_memory():
    """Make glibc's malloc (Linux) keep freed memory for the next tensor: by default it maps every block over a
    threshold afresh and unmaps it when freed, so each decoding step faults in its logits' pages again (docs/speed.md).
    The cost: the process keeps up to 1 GiB
    of what it freed until it exits. Elsewhere (no glibc) nothing."""
    try:
        mallopt = ctypes.CDLL('libc.so.6').mallopt
    except (OSError, AttributeError):  # no libc.so.6, or one without mallopt (musl's)
        return
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    mallopt(M_MMAP_THRESHOLD, 32 << 20)  # glibc's largest: blocks up to 32 MiB come from the heap
    mallopt(M_TRIM_THRESHOLD, 1 << 30)  # whose free top it hands back only past 1 GiB (a C int: 4 GiB wraps to 0)


def autocast(device, dtype):
    """The mixed-precision context of a script: nothing for float32, else autocast to dtype."""
    if dtype == 'float32':
        return nullcontext()
    return torch.autocast(torch.device(device).type, dtype=getattr(torch, dtype))


def reset_peak_memory(device):
    """Start a new peak-memory measurement (the CPU's is the process's peak RSS, resettable on Linux)."""
    if torch.device(device).type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)
    elif os.path.exists('/proc/self/clear_refs'):
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')  # resets VmHWM to the current RSS


def peak_memory_mb(device):
    """Peak memory since reset_peak_memory: CUDA tensors allocated, or the process's RSS on the CPU
    (elsewhere than Linux: since the process started)."""
    if torch.device(device).type == 'cuda':
        return torch.cuda.max_memory_allocated(device) / 2**20
    if os.path.exists('/proc/self/status'):
        with open('/proc/self/status') as f:
            return next(int(line.split()[1]) for line in f if line.startswith('VmHWM')) / 1024
    import resource  # not on Windows, where there is no /proc either
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == 'darwin' else peak / 1024


def check_writable(folder, setting):
    """Make folder (and its parents) and write a file in it, so that a folder that cannot hold a script's output
    fails now, in one line; setting names it as the user gave it (--out_dir=...)."""
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        fail(f'{setting} cannot be created or written ({e.strerror or type(e).__name__}): pick a folder you can '
             f'write to')


def find_checkpoint(init_from, out_dir):
    """The local file that init_from names (see checkpoints.py), or the script's one-line error."""
    try:
        return checkpoint_path(init_from, out_dir)
    except CheckpointError as e:
        fail(e)


def read_checkpoint(path, device='cpu', use_ema=True):
    """checkpoints.load_checkpoint for a script: its error as the script's one line, and a note (rank 0)
    when it gives other weights than asked (a checkpoint without EMA weights, a model folder's one set)."""
    try:
        model, checkpoint = load_checkpoint(path, device, use_ema)
    except CheckpointError as e:
        fail(e)
    asked, got = 'EMA' if use_ema else 'raw', weights_read(checkpoint, use_ema)
    if got != asked and rank() == 0:
        print(f'note: {path} holds no {asked} weights: reading its {got} weights')
    return model, checkpoint


def dataset_vocab(folder):
    """What the token ids of a dataset folder (its .bin files) mean, and how many there are: a char-level
    meta.pkl's characters (one string, in id order); None when meta.pkl gives only vocab_size (a
    tokenizer of the user's own, known by its size alone); 'gpt2' when there is no meta.pkl."""
    path = os.path.join(folder, 'meta.pkl')
    if not os.path.exists(path):
        return 'gpt2', GPT2_VOCAB
    with open(path, 'rb') as f:
        meta = pickle.load(f)
    if not isinstance(meta, dict) or 'vocab_size' not in meta:
        fail(f'{path} holds no vocab_size: a meta.pkl is a dict with vocab_size (and itos, the characters)')
    size = int(meta['vocab_size'])
    return (''.join(meta['itos'][i] for i in range(size)) if 'itos' in meta else None), size


def describe_vocab(vocab, size):
    if vocab is None:
        return f'the ids of a {size}-token vocabulary'
    return 'GPT-2 BPE tokens' if vocab == 'gpt2' else f'the ids of a {len(vocab)}-character vocabulary'


def same_vocab(a, b):
    """Whether two vocabularies, each (what its ids mean, how many), can hold the same ids: the same
    tokenizer where both say theirs, else (one says only its size) the same size."""
    if a[0] is None or b[0] is None:
        return a[1] == b[1]
    return a[0] == b[0]


def check_vocab(model, data, name):
    """Fail unless a checkpoint reads the tokens of data (each (vocab, size), see same_vocab). Returns
    the note to print when the ids could only be checked by their number, else ''."""
    if not same_vocab(model, data):
        fail(f'the checkpoint reads {describe_vocab(*model)} but {name} holds {describe_vocab(*data)}: '
             f'use data made with the tokenizer of the checkpoint')
    unsaid = [who for who, (vocab, _) in (('the checkpoint', model), (name, data)) if vocab is None]
    if not unsaid:
        return ''
    return (f"note: {' and '.join(unsaid)} {'give' if len(unsaid) > 1 else 'gives'} only a vocabulary size "
            f'({data[1]}), so the tokens cannot be checked: the ids are taken to be the same')


def load_tokenizer(checkpoint, vocab_size):
    """encode, decode for a checkpoint: its stored character vocabulary, else GPT-2 BPE."""
    chars = checkpoint_vocab(checkpoint, vocab_size)
    if chars is None:
        fail(f'the checkpoint has a {vocab_size}-token vocabulary but does not store its characters, so its '
             f'tokens cannot be decoded: use one trained by this train.py on text (characters or GPT-2 BPE)')
    if chars != 'gpt2':
        stoi = {c: i for i, c in enumerate(chars)}

        def encode(text):
            unknown = sorted(set(text) - set(stoi))
            if unknown:
                fail(f'characters not in the vocabulary of the checkpoint: {", ".join(map(repr, unknown))}')
            return [stoi[c] for c in text]
        return encode, lambda ids: ''.join(chars[i] for i in ids)
    enc = gpt2_encoding()
    # ids past GPT-2's 50257 are padding of the embedding table and have no text
    return (lambda text: enc.encode(text, allowed_special={'<|endoftext|>'}),
            lambda ids: enc.decode([i for i in ids if i < enc.n_vocab]))


def gpt2_encoding():
    """tiktoken's GPT-2 BPE; it downloads its two files once, so say what to do when it cannot."""
    import tiktoken
    try:
        return tiktoken.get_encoding('gpt2')
    except Exception as e:  # requests' connection errors, and whatever a broken cache raises
        fail(f'could not load the GPT-2 BPE ({type(e).__name__}): tiktoken downloads it once, so connect to the '
             f'network, or point TIKTOKEN_CACHE_DIR at a cache that holds it')



def trained_block(model, checkpoint):
    """The block_size a checkpoint's run trained on where it records one smaller than its model's (a run from GPT-2
    keeps GPT-2's 1,023 positions at --block_size=128), else the model's: what a sample fills and an evaluation
    reads by default."""
    trained = training_record(checkpoint)['config'].get('block_size')
    block = model.config.block_size
    return trained if type(trained) is int and 0 < trained < block else block


# -----------------------------------------------------------------------------
# small files and tables

def write_json(path, obj, **kw):
    """json.dump obj to path through a file beside it, then renamed: a kill or a failed dump never leaves path cut
    (a run's records are read again by the next call)."""
    with open(path + '.tmp', 'w') as f:
        json.dump(obj, f, **kw)
    os.replace(path + '.tmp', path)


def read_lines(path):
    """The lines of a UTF-8 text file, without their newline; one-line error if it is not UTF-8."""
    try:
        with open(path, encoding='utf-8') as f:
            text = f.read()
    except UnicodeDecodeError as e:
        fail(f'{path} is not UTF-8 text (invalid byte at offset {e.start}); convert it to UTF-8')
    lines = text.split('\n')
    return lines[:-1] if lines[-1] == '' else lines


def read_jsonl(path, holds):
    """(line number, record) of each non-blank line of a .jsonl file; `holds` says in the error what
    one line should be."""
    records = []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            records.append((number, json.loads(line)))
        except json.JSONDecodeError as e:
            fail(f'{path} line {number} is not JSON ({e.msg}); a .jsonl file holds {holds} per line')
    return records


def print_table(head, rows):
    """Print rows of cells under head, in left-aligned columns."""
    widths = [max(len(str(row[k])) for row in [head, *rows]) for k in range(len(head))]
    for row in [head, *rows]:
        print('  '.join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())
