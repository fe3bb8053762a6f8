"""
What the scripts share besides the model: one-line errors and the rules their settings follow, devices
and dtypes, memory, checkpoints and tokenizers as one-line errors, the sampling settings and prompts
of sample.py and gen_ppl.py, small file readers, scripts run in processes that start with torch imported.
"""
import atexit
import ctypes
import json
import multiprocessing
import multiprocessing.connection
import os
import pickle
import runpy
import subprocess
import sys
import tempfile
import threading
from contextlib import nullcontext
from functools import partial

import torch
from torch.nn import functional as F

from checkpoints import (GPT2_VOCAB, CheckpointError, checkpoint_path, checkpoint_tokens, checkpoint_vocab,
                         is_hf_folder, load_checkpoint, training_record, weights_read)
from engine import (DECODING_RULES, Sampling, check_order, check_rules, check_speculation, decoding_steps, parse_infill,
                    parse_number)
from scoring import encoder_gap_nlls, encoder_l2r_logprobs, known_first_nlls, left_nlls, order_logprobs
from training import run_mix

DTYPES = ('float32', 'bfloat16', 'float16')
SAMPLE_DTYPES = ('float64', 'float32')


# -----------------------------------------------------------------------------
# one-line errors, and the rules of settings: (test, what the value must be)

def rank():
    """This process's rank under torchrun, 0 otherwise."""
    return int(os.environ.get('RANK', 0))


def fail(message):
    """Stop a script with a one-line error (no traceback); under torchrun only rank 0 says it."""
    raise SystemExit(f'error: {message}' if rank() == 0 else 1)


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
    threshold afresh and unmaps it when freed, so each decoding step faults in its logits' pages again (a third of
    a 64-step decoding of GPT-2's vocabulary on 2 cores, docs/sampling.md). The cost: the process keeps up to 1 GiB
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


def is_hf_model(name):
    """Whether init_from (or a scorer) names a Hugging Face causal LM, a Hub name or a folder saved with
    save_pretrained, rather than one of our checkpoints ('resume', a .pt or other file, hf:owner/repo/file,
    any other folder: a model folder of export.py's, or a run's, whose error names the ckpt.pt in it)."""
    ours = name == 'resume' or name.startswith('hf:') or name.endswith('.pt') or os.path.isfile(name)
    return not ours and (not os.path.isdir(name) or is_hf_folder(name))


def load_hf_causal_lm(name, device):
    """A Hugging Face causal LM (gpt2, gpt2-large, ... or a local folder), in eval mode, through the
    optional dependency transformers; one-line errors when it or the weights cannot be had."""
    try:
        from transformers import AutoModelForCausalLM
    except ImportError:
        fail(f'{name} is a Hugging Face model, which needs transformers: pip install transformers')
    try:
        model = AutoModelForCausalLM.from_pretrained(name)
    except (OSError, ValueError) as e:  # unknown name, no network, no weights in the folder
        reason = ' '.join(str(e).split())[:200]
        fail(f'could not load the Hugging Face model {name!r} ({reason}); check the name and the network, '
             f'or pass a local folder saved with save_pretrained')
    return model.to(device).eval()


def load_scorer(name, device, sides='left'):
    """score(x, generated) -> each row's NLL of its scored tokens, for the token ids x (B, T) and which of them were
    generated (B, T) bool, on the CPU; its vocabulary (what the ids mean, as checkpoint_vocab says it, and how
    many), the longest sequence it reads, and which weights of a checkpoint scorer it reads ('EMA' or 'raw'; None
    for a Hugging Face model). sides='left': each generated token but the sample's first, given the tokens before
    it; 'both': every generated token, given every known token (read first, left to right) and the generated ones
    before it (our checkpoints only). An encoder is read exactly, one forward per scored token."""
    if not is_hf_model(name):
        model, checkpoint = read_checkpoint(find_checkpoint(name, ''), device)
        if sides == 'both' and training_record(checkpoint)['config'].get('order') == 'l2r':
            fail(f'--sides=both reads the known tokens first, but the scorer {name} was trained left to right '
                 f'(--order=l2r): score with an any-order checkpoint, or --sides=left')

        def nll(x):  # an encoder's exactly: one forward per token
            if model.config.is_encoder:
                return -encoder_l2r_logprobs(model, x.cpu(), x.numel(), first=1)[0].view(len(x), -1)
            # a row at a time through order_logprobs: a batch's logits at a 50k vocabulary would take gigabytes
            l2r = torch.arange(x.size(1))[None]
            return -torch.stack([order_logprobs(model, row, l2r, 1, max_tokens=len(row))[0] for row in x])
        both = encoder_gap_nlls if model.config.is_encoder else known_first_nlls
        score = partial(both, model) if sides == 'both' else partial(left_nlls, nll)
        return score, checkpoint_tokens(checkpoint, model.config.vocab_size), model.config.block_size, \
            weights_read(checkpoint)
    if sides == 'both':
        fail(f'--sides=both reads the known tokens first, but the scorer {name} is a Hugging Face model, which reads '
             f'left to right only: score with an any-order checkpoint of ours, or --sides=left')
    model = load_hf_causal_lm(name, device)
    if model.config.vocab_size < GPT2_VOCAB:
        fail(f'the scorer {name} has a {model.config.vocab_size}-token vocabulary: a Hugging Face scorer must '
             f'read GPT-2 BPE ids (gpt2, gpt2-medium, gpt2-large, gpt2-xl, ...)')

    def nll(x):  # a row's log-softmax at a time: the batch's would double the logits' gigabytes at GPT-2's vocabulary
        logits = model(input_ids=x).logits
        return torch.stack([F.cross_entropy(row[:-1].float(), ids[1:], reduction='none')
                            for row, ids in zip(logits, x)])
    return partial(left_nlls, nll), ('gpt2', model.config.vocab_size), \
        getattr(model.config, 'max_position_embeddings', None), None


# -----------------------------------------------------------------------------
# the sampling settings and prompts of sample.py and gen_ppl.py

SAMPLING_SETTINGS = dict(  # sample.py's and gen_ppl.py's settings, loaded into their globals (--help lists them)
    init_from='resume',  # the sampler: 'resume' (out_dir/ckpt.pt), a path, or hf:owner/repo/path
    out_dir='out-shakespeare-char',
    use_ema=True,  # the EMA weights, as evaluated during training (the raw ones if there are none)
    start='',  # a prefix, or FILE:path to read it from
    infill='',  # a template such as "The [MASK] sat on the [MASK:5]."; not with start
    mask_token='[MASK]',
    max_new_tokens=None,  # tokens after start; None fills the block the run trained on (trained_block)
    steps=None,  # decoding steps; None: one token per step
    schedule='linear',  # 'linear' or 'cosine'
    order='random',  # 'random', 'l2r', 'confidence', or 'ancestral' (the encoder only)
    confidence='maxprob',  # order=confidence decodes the highest 'maxprob' or the lowest 'entropy' first
    # k > 0: one token per step's samples by speculative decoding, up to k drafts per forward; 'auto': the k measured
    # fastest for the order, batch and vocabulary (engine.auto_k, 0 where none pays); None or 0: one token per step
    speculate=None,
    temperature=1.0,  # 0: greedy
    top_k=None,  # sample from the top_k most likely tokens only
    top_p=1.0,  # nucleus sampling: the smallest set of tokens with this much probability
    top_p_mode='nucleus',  # 'nucleus' keeps the token that crosses top_p, 'authors' drops it (their sampler)
    sample_dtype='float64',  # precision of the sampling probabilities and CDF: 'float64' or 'float32'
    seed=1337,
    compile=False,  # torch.compile each decoding step (static shapes; CUDA graphs on a GPU)
)


SAMPLING_RULES = {  # the settings sample.py and gen_ppl.py share, and what each must be
    **{k: DECODING_RULES[k] for k in ('order', 'confidence', 'schedule', 'top_k', 'top_p_mode', 'speculate')},
    'sample_dtype': one_of(*SAMPLE_DTYPES), 'max_new_tokens': optional_int(1),
    'mask_token': (lambda v: len(v) >= 2, 'a marker of at least 2 characters, such as [MASK]'),
}
TEMPERATURE_RULE = DECODING_RULES['temperature']
TOP_P_RULE = DECODING_RULES['top_p']


def check_sampling(settings):
    """The checks of SAMPLING_RULES, plus the device (MPS has no float64) and the prompt."""
    check_settings(settings, SAMPLING_RULES)
    if settings['start'] and settings['infill']:
        fail('--start and --infill both give the prompt: put the start at the beginning of the infill template '
             '(--infill="ROMEO: [MASK:20]")')
    check_device(settings['device'], settings['dtype'])
    if torch.device(settings['device']).type == 'mps' and settings['sample_dtype'] == 'float64':
        fail('MPS has no float64: use --sample_dtype=float32 there')


def parse_list(key, text, cast, rule):
    """The entries of the comma list `text` of the setting `key`, each cast and checked, or one-line errors."""
    values = []
    for entry in str(text).split(','):
        try:
            value = parse_number(entry.strip(), cast)
        except ValueError as e:
            fail(f"--{key} takes a comma list of {'ints' if cast is int else 'numbers'} such as "
                 f"{'64,128' if cast is int else '1.0,0.7'}; {e}")
        test, what = rule
        if not test(value):
            fail(f'--{key} entries must be {what}, got {value!r}')
        values.append(value)
    return values


def trained_block(model, checkpoint):
    """The block_size a checkpoint's run trained on where it records one smaller than its model's (a run from GPT-2
    keeps GPT-2's 1,023 positions at --block_size=128), else the model's: what a sample fills and an evaluation
    reads by default."""
    trained = training_record(checkpoint)['config'].get('block_size')
    block = model.config.block_size
    return trained if type(trained) is int and 0 < trained < block else block


def prompt_tokens(encode, block_size, start='', infill='', max_new_tokens=None, mask_token='[MASK]', trained=None):
    """The ids of one sample and which of them are known, from an infill template or a start prefix. Without
    max_new_tokens a sample fills the block the model trained on (trained_block; None: block_size)."""
    if infill:
        try:
            ids, known = parse_infill(infill, mask_token, encode)
        except ValueError as e:
            fail(str(e))
        if len(ids) > block_size:
            fail(f'the infill template is {len(ids)} tokens long, more than block_size {block_size}')
        return ids, known
    text = start
    if text.startswith('FILE:'):
        try:
            with open(text[5:], encoding='utf-8') as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            fail(f'cannot read the prompt file {text[5:]} as UTF-8 text ({type(e).__name__}: {e})')
    prefix = encode(text)
    if len(prefix) >= block_size:
        fail(f'the prompt is {len(prefix)} tokens long and leaves no room in block_size {block_size}')
    if max_new_tokens is None and trained and trained < block_size:
        if len(prefix) >= trained:
            fail(f'the prompt is {len(prefix)} tokens long and leaves no room in the {trained} tokens the checkpoint '
                 f'was trained on: set --max_new_tokens (its model reads up to {block_size})')
        if rank() == 0:
            print(f'note: the checkpoint was trained on blocks of {trained} tokens (its model reads {block_size}): a '
                  f'sample fills {trained}; --max_new_tokens sets how many tokens it adds')
        max_new_tokens = trained - len(prefix)
    new = block_size - len(prefix) if max_new_tokens is None else max_new_tokens
    if len(prefix) + new > block_size:
        fail(f'the output would be {len(prefix)} + {new} tokens, longer than block_size {block_size}')
    return prefix + [0] * new, [True] * len(prefix) + [False] * new


def check_steps(steps, n, order='random', speculate=0, flag='--{}'):
    """engine.decoding_steps for a script: the number of decoding steps for n tokens, or its one-line error."""
    try:
        return decoding_steps(steps, n, order, speculate, flag)
    except ValueError as e:
        fail(e)


def check_speculation_steps(steps, speculate, flag='--{}'):
    """engine.check_speculation for a script: fail if steps are given with speculative decoding."""
    try:
        check_speculation(steps, speculate, flag)
    except ValueError as e:
        fail(e)


def decoding_order(order, given, checkpoint, model, infill):
    """The order a decoder decodes in: --order when given; else left to right, said in one line, for one trained left
    to right only (it never learned another order), and for an infill of one trained on FIM orders (the known tokens
    read first, then the gaps left to right: how it was trained to fill one)."""
    if 'order' in given or model.config.is_encoder:
        return order
    config = training_record(checkpoint)['config']
    if config.get('order') == 'l2r':
        print('note: decoding left to right (order=l2r): the model was trained left to right only; --order sets '
              'another')
        return 'l2r'
    mix = run_mix(config)
    if not infill or not mix or not mix['fim']:
        return order
    print(f"order: l2r, each gap left to right after the known tokens: the model trained on FIM orders "
          f"({training_record(checkpoint)['orders']}); --order sets another")
    return 'l2r'


def check_decoding(order, model, speculate=0):
    """Fail unless the model can decode in `order`, speculatively if speculate > 0 (engine.check_order)."""
    try:
        check_order(model, order, speculate)
    except ValueError as e:
        fail(e)


def sampling_options(settings, **point):
    """engine.Sampling and generate's decoding options from a script's SAMPLING_SETTINGS; point overrides
    some of them (gen_ppl.py's grid point: temperature and top_p)."""
    s = settings | point
    sampling = Sampling(s['temperature'], s['top_k'], s['top_p'], s['top_p_mode'], getattr(torch, s['sample_dtype']))
    return sampling, {key: s[key] for key in ('schedule', 'order', 'confidence', 'speculate')}


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


# -----------------------------------------------------------------------------
# a script in a new process that starts with torch imported: `python script.py` spends 4 s of a slow core
# importing torch (and torch._dynamo, which its optimizers import), more than a toy run takes

def run_python(argv, cwd, env, out, err=None, timeout=None, pids=None):
    """Run `python *argv` (a script and its arguments) in cwd with env, printing into the file out (and err, or
    out); return its exit status, None if it ran past timeout seconds (then it is killed). The process is forked
    from a server that imported torch once, where the platform has one (not Windows). pids: a set (or what has
    add and discard) that holds the process's pid while it runs, for the caller to signal it."""
    pids = set() if pids is None else pids
    if 'forkserver' not in multiprocessing.get_all_start_methods():
        with open(out, 'w') as o, open(err or os.devnull, 'w') as e:
            process = subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, stdout=o,
                                       stderr=e if err else subprocess.STDOUT)
            pids.add(process.pid)
            try:
                return process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                return None
            finally:
                pids.discard(process.pid)
    process = start_python(argv, cwd, env, out, err)
    pids.add(process.pid)
    ended = multiprocessing.connection.wait([process.sentinel], timeout)
    with FORKING:
        pids.discard(process.pid)
        if not ended:
            process.kill()
            process.join()
        return process.exitcode if ended else None


def start_python(argv, cwd, env, out, err=None):
    """Start `python *argv` as run_python runs it, where the platform has a fork server: the multiprocessing Process
    (its pid to signal, its sentinel to wait on). With PYTHONUNBUFFERED set in env, each line is written as printed."""
    forks = multiprocessing.get_context('forkserver')
    forks.set_forkserver_preload(['torch', 'torch._dynamo'])
    process = forks.Process(target=exec_script, args=(list(argv), str(cwd), dict(env), out, err or out))
    with FORKING:
        process.start()
    return process


# a Process is not thread-safe (findings.py runs jobs from threads): start() reads the exit status of every other
# process that has ended, and two threads reading one status get it and EOF (exit status 255)
FORKING = threading.Lock()


def exec_script(argv, cwd, env, out, err):
    """In the new process: become `python *argv` in cwd with env, printing into out and err (the exit status is
    multiprocessing's: SystemExit's, or 1 after printing an exception)."""
    os.environ.clear()
    os.environ.update(env)
    if env.get('OMP_NUM_THREADS', '').isdecimal():  # torch read it when the server imported it
        torch.set_num_threads(int(env['OMP_NUM_THREADS']))
    os.chdir(cwd)
    os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
    os.dup2(1 if err == out else os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
    sys.stdout = open(1, 'w', buffering=1 if env.get('PYTHONUNBUFFERED') else -1, closefd=False)
    sys.stderr = open(2, 'w', buffering=1, closefd=False)
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    try:
        runpy.run_path(argv[0], run_name='__main__')
    finally:
        atexit._run_exitfuncs()  # multiprocessing ends its processes with os._exit, past atexit
