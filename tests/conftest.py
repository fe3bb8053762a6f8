"""Shared test setup: offline defaults, where the data is, and the small corpora the tests make themselves."""
import itertools
import json
import math
import os
import pickle
import random
import runpy
import shutil
import string
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import torch
from torch.nn import functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


def default_data_dir():
    """AOGPT_DATA_DIR, an offline mirror of the corpora and the GPT-2 BPE; else ../shared/data when it is there."""
    mirror = os.path.join(os.path.dirname(ROOT), 'shared', 'data')
    return os.environ.get('AOGPT_DATA_DIR') or (mirror if os.path.isdir(mirror) else '')


DATA_DIR = default_data_dir()
if DATA_DIR:
    os.environ['AOGPT_DATA_DIR'] = DATA_DIR  # the scripts the tests run read it too
    if os.path.isdir(os.path.join(DATA_DIR, 'tiktoken_cache')):
        os.environ.setdefault('TIKTOKEN_CACHE_DIR', os.path.join(DATA_DIR, 'tiktoken_cache'))
# the Hugging Face Hub retries an unreachable host for half a minute: the tests stay off it unless told
os.environ.setdefault('HF_HUB_OFFLINE', '1')
os.environ.setdefault('HF_DATASETS_OFFLINE', '1')
os.environ.setdefault('WANDB_MODE', 'offline')
# pytest-xdist runs a worker per core (pytest.ini): each, and each script it starts, on one thread, since two
# processes whose threads spin on the same cores run many times slower
if 'PYTEST_XDIST_WORKER' in os.environ:
    os.environ['OMP_NUM_THREADS'] = '1'
    torch.set_num_threads(1)


# the files that take longest (pytest --durations), run first: a worker per core takes a file at a time
# (pytest.ini), and a long file started last runs alone while the other cores idle
LONGEST_FIRST = ('test_real_shapes.py', 'test_train.py', 'test_findings.py', 'test_bench.py', 'test_gpu_paths.py',
                 'test_speculative.py')


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order kept


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    for mark in item.iter_markers('needs'):  # before the fixtures: a skipped test trains nothing
        needs(*mark.args)


# -----------------------------------------------------------------------------
# corpora and the GPT-2 BPE, had the way users have them: the mirror, else the download

NAMES = {'gpt2_bpe': 'the GPT-2 BPE', 'tinyshakespeare': 'tiny Shakespeare', 'wikitext2': 'WikiText-2', 'ptb': 'PTB',
         'lambada': 'LAMBADA'}
HUB = ('wikitext2', 'ptb')  # from datasets' Hub, which the tests keep offline unless told
_found = {}  # name -> 'mirror', 'download' or None: each is looked for once a session


def skip_without(names):
    how = 'a network' + (' and HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0' if set(names) & set(HUB) else '')
    pytest.skip(f"needs {', '.join(NAMES[name] for name in names)}: set AOGPT_DATA_DIR to an offline mirror "
                f"(docs/tests.md), or allow downloads ({how})")


def fetch(name):
    """Whether `name` can be had without the mirror, the scripts' own way (which stops with a one-line
    error when it cannot); what it fetches stays in the library's cache for the tests to read."""
    from aogpt.benchmarks import load_rows
    from aogpt.common import gpt2_encoding
    try:
        gpt2_encoding() if name == 'gpt2_bpe' else load_rows(name, 'test')
    except SystemExit:
        return False
    return True


def find(name):
    """Where the tests get `name` ('gpt2_bpe' or a benchmark set, test split): 'mirror', 'download' or None."""
    if name not in _found:
        from aogpt.benchmarks import SETS
        local = name in SETS and DATA_DIR and os.path.exists(os.path.join(DATA_DIR, SETS[name].files['test']))
        _found[name] = 'mirror' if local else 'download' if fetch(name) else None
    return _found[name]


def needs(*names):
    """Skip the calling test, with one line, unless it can have each of names ('gpt2_bpe' or an
    benchmark set: 'wikitext2', 'ptb', 'lambada'); return the --data_dir that gives it the sets:
    the mirror, or '' (the download, already in the cache). Also a marker: @pytest.mark.needs(...)."""
    where = {name: find(name) for name in names}
    missing = [name for name in names if where[name] is None]
    if missing:
        skip_without(missing)
    return '' if 'download' in [where[n] for n in names if n != 'gpt2_bpe'] else DATA_DIR


@pytest.fixture(scope='session')
def shakespeare(tmp_path_factory):
    """A folder holding the real tiny Shakespeare as prepare.py makes it for a user (from the mirror, or downloaded)."""
    folder = tmp_path_factory.mktemp('shakespeare')
    script = shutil.copy(os.path.join(ROOT, 'data', 'shakespeare_char', 'prepare.py'), folder)
    if subprocess.run([sys.executable, script], capture_output=True).returncode != 0:
        skip_without(['tinyshakespeare'])
    return folder


# -----------------------------------------------------------------------------
# the text the mechanics tests train on, made here: training, sampling and checkpoints need no corpus

WORDS = ("a all and art as be but by come day dear do ever eyes fair father for from give good grace hath have he "
         "heart her here his honour i if in is it joy king know lady let life like lord love make man me mine more "
         "my never night no not now o of on our peace queen quiet say see shall she so speak sweet than that the thee "
         "then there they this thou thy time to true upon us very vex was we well what when where which who why will "
         "with word world yet you your zeal 'tis o'er well-met &c 3 $").split()
SPEAKERS = ['ROMEO', 'JULIET', 'KING HENRY', 'QUEEN MARGARET', 'DUKE VINCENTIO', 'FIRST CITIZEN', 'PAULINA', 'BAWD',
            'GLOUCESTER', 'LADY CAPULET', 'YORK', 'XANTIPPE', 'ZOUNDS']
CHARACTERS = "\n !$&',-.3:;?" + string.ascii_uppercase + string.ascii_lowercase  # tiny Shakespeare's 65


def markov_words(rng, n):
    """n word indices from a seeded Markov chain: each word is mostly followed by one of 3 of its own;
    words early in WORDS are the frequent ones (Zipf's law), as in text."""
    zipf = [1 / (rank + 1) for rank in range(len(WORDS))]
    follow = [rng.choices(range(len(WORDS)), zipf, k=3) for _ in WORDS]
    word, out = 0, []
    for _ in range(n):
        word = rng.choice(follow[word]) if rng.random() < 0.9 else rng.choices(range(len(WORDS)), zipf)[0]
        out.append(word)
    return out


def synthetic_play(n_words=40_000, seed=0):
    """A play-like text in tiny Shakespeare's 65 characters (about 200 kB): speakers' names, then
    sentences of Markov-chain words, so a tiny model has something to learn."""
    rng = random.Random(seed)
    words = [WORDS[w] for w in markov_words(rng, n_words)]
    turns, i = [], 0
    while i + 30 <= n_words:  # room for a turn's 3 sentences of up to 10 words
        sentences = []
        for n in [rng.randint(3, 10) for _ in range(rng.randint(1, 3))]:
            sentence = ' '.join(words[i:i + n])
            sentences.append(sentence[0].upper() + sentence[1:] + rng.choice('.,!?;:'))
            i += n
        turns.append(f"{rng.choice(SPEAKERS)}:\n{' '.join(sentences)}\n")
    text = '\n'.join(turns)
    assert sorted(set(text)) == sorted(CHARACTERS)
    return text


def synthetic_gpt2_ids(n, seed):
    """n GPT-2-BPE-range ids (uint16) from the same Markov chain, word i as id 256 + 400 i, end-of-text every ~60."""
    rng = random.Random(seed)
    ids = [256 + 400 * w for w in markov_words(rng, n)]
    for i in range(59, n, 60):
        ids[i] = 50256
    return np.array(ids, dtype=np.uint16)


@pytest.fixture(scope='session')
def workdir(tmp_path_factory):
    """A folder laid out like the repo's root for data, where the scripts run: data/shakespeare_char
    prepared by its prepare.py from synthetic_play, and authors.pt and sigma.pt, the AO-GPT and sigma-GPT
    parity fixtures written as the authors' trainers write a checkpoint (96 tokens, no vocabulary stored)."""
    from fixtures.reference import load, save_authors_checkpoint
    root = tmp_path_factory.mktemp('work')
    folder = root / 'data' / 'shakespeare_char'
    folder.mkdir(parents=True)
    script = shutil.copy(os.path.join(ROOT, 'data', 'shakespeare_char', 'prepare.py'), folder)
    (folder / 'input.txt').write_text(synthetic_play())
    subprocess.run([sys.executable, script], check=True, capture_output=True)
    save_authors_checkpoint(load('ao_gpt'), root / 'authors.pt')
    torch.save(load('sigma_gpt'), root / 'sigma.pt')  # the authors' sigma-GPT format: raw weights only
    return root


def run_forked(argv, cwd, timeout=600):
    """`python *argv` in cwd as processes.run_python runs it (a new process with torch imported): the
    CompletedProcess, its output as text."""
    from aogpt.experiments.processes import run_python
    with tempfile.TemporaryDirectory() as tmp:
        out, err = os.path.join(tmp, 'out'), os.path.join(tmp, 'err')
        code = run_python(argv, cwd, os.environ, out, err, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(argv, timeout)
        return subprocess.CompletedProcess(argv, code, *(open(name).read() for name in (out, err)))


def run_script(script, *args, cwd, check=True, nproc=None):
    """Run one of the repo's scripts (or torchrun on it) in cwd; return the CompletedProcess."""
    path = os.path.join(ROOT, script)
    if nproc is None:
        result = run_forked([path, *args], cwd)
    else:
        result = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone',
                                 f'--nproc_per_node={nproc}', path, *args], cwd=cwd, capture_output=True, text=True,
                                timeout=600)
    if check and result.returncode != 0:
        pytest.fail(f'{script} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}')
    return result


def run_here(script, *args, cwd):
    """Run one of the repo's scripts in this process (fast: torch is already imported), in cwd."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        patch.setattr(sys, 'argv', [script, *args])
        runpy.run_path(os.path.join(ROOT, script), run_name='__main__')


# the tiny training run that the script tests share: small enough to train in seconds
TINY = ['--device=cpu', '--dtype=float32', '--compile=False', '--n_layer=2', '--n_head=2', '--n_embd=32',
        '--cond_dim=16', '--block_size=32', '--batch_size=8', '--gradient_accumulation_steps=1', '--eval_iters=2',
        '--log_interval=5', '--warmup_iters=5']
# TINY's run settings without its model's size: a run started from a checkpoint takes the checkpoint's model
TINY_RUN = [a for a in TINY if a.split('=')[0] not in ('--n_layer', '--n_head', '--n_embd', '--cond_dim')]


def train(workdir, out_dir, *args, config=None, **kw):
    """train.py's TINY run on data/shakespeare_char into workdir/out_dir (run_script's CompletedProcess): args
    after TINY override it, a config file before it is overridden by it."""
    return run_script('train.py', *([config] if config else []), '--dataset=shakespeare_char', *TINY,
                      f'--out_dir={out_dir}', *args, cwd=workdir, **kw)


def metrics(workdir, out_dir):
    """The records of a run's metrics.jsonl."""
    return [json.loads(line) for line in open(workdir / out_dir / 'metrics.jsonl')]


def stored_checkpoint(workdir, out_dir):
    """A run's ckpt.pt as train.py stored it (a dict of tensors and settings; no model built)."""
    return torch.load(workdir / out_dir / 'ckpt.pt', weights_only=True)


@pytest.fixture(scope='session')
def char_ckpt(workdir):
    """out_dir (relative to workdir) of a tiny char-level model trained briefly on data/shakespeare_char."""
    train(workdir, 'out-char', '--max_iters=30', '--eval_interval=30', '--learning_rate=3e-3')
    return 'out-char'


@pytest.fixture(scope='session')
def fim_ckpt(workdir):
    """out_dir of a tiny FIM GPT (train.py --fim_rate=0.5) trained briefly on data/shakespeare_char."""
    train(workdir, 'out-fim-gpt', '--order=l2r', '--fim_rate=0.5', '--max_iters=20', '--eval_interval=20',
          '--learning_rate=3e-3')
    return 'out-fim-gpt'


@pytest.fixture(scope='session')
def char_ckpt_by_positions(workdir, char_ckpt):
    """position_encoding -> out_dir of a tiny char-level decoder trained as char_ckpt with that encoding, made on
    first use: 'learned' is char_ckpt's run."""
    made = {'learned': char_ckpt}

    def out_dir(positions):
        if positions not in made:
            made[positions] = f'out-char-{positions}'
            train(workdir, made[positions], '--max_iters=30', '--eval_interval=30', '--learning_rate=3e-3',
                  f'--position_encoding={positions}')
        return made[positions]
    return out_dir


@pytest.fixture(scope='session')
def short_trained(workdir, char_ckpt):
    """The char checkpoint (relative to workdir) as a run at --block_size=16 from a parent of block 32 records it (the
    model keeps 32)."""
    checkpoint = torch.load(workdir / char_ckpt / 'ckpt.pt', weights_only=True)
    checkpoint['config']['block_size'] = 16
    torch.save(checkpoint, workdir / 'short-trained.pt')
    return 'short-trained.pt'


@pytest.fixture(scope='session')
def mdm_ckpt(workdir):
    """out_dir (relative to workdir) of a tiny char-level encoder (MDM) trained briefly on data/shakespeare_char."""
    train(workdir, 'out-mdm', '--architecture=encoder', '--max_iters=30', '--eval_interval=30', '--learning_rate=3e-3')
    return 'out-mdm'


def write_gpt2_dataset(workdir, name, n_train, n_val, seed):
    """workdir/data/<name> as GPT-2 ids (synthetic_gpt2_ids, train from seed, val from seed + 1), no meta.pkl."""
    folder = workdir / 'data' / name
    folder.mkdir(parents=True, exist_ok=True)
    synthetic_gpt2_ids(n_train, seed=seed).tofile(folder / 'train.bin')
    synthetic_gpt2_ids(n_val, seed=seed + 1).tofile(folder / 'val.bin')


@pytest.fixture(scope='session')
def bpe_ckpt(workdir):
    """out_dir of a tiny GPT-2-BPE model trained briefly on data/webtext: synthetic ids, 200 chunks of 32 in val.bin."""
    write_gpt2_dataset(workdir, 'webtext', 40_000, 6_410, seed=1)
    train(workdir, 'out-bpe', '--dataset=webtext', '--max_iters=10', '--eval_interval=10', '--learning_rate=3e-3')
    return 'out-bpe'


@pytest.fixture(scope='session')
def tiny_gpt2(tmp_path_factory):
    """A randomly initialised GPT-2 (GPT-2's vocabulary and 1024 positions, 16 wide) saved with
    save_pretrained: the offline stand-in for gpt2-medium / gpt2-large."""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp('tiny-gpt2')
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=1024)).save_pretrained(folder)
    return str(folder)


def save_gpt2(folder, **shape):
    """A small GPT-2 of random weights saved with save_pretrained: every weight and bias drawn at a scale where a wrong
    GELU, a shifted position or an untransposed matrix moves the logits by far more than 1e-4."""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**dict(n_layer=2, n_head=2, n_embd=16, n_positions=40) | shape))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    model.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope='session')
def gpt2_folder(tmp_path_factory):
    """A small GPT-2 of GPT-2's shape (a tied head, its 50257 ids, the tanh GELU), 40 positions: the offline
    stand-in for --init_from=gpt2."""
    return save_gpt2(tmp_path_factory.mktemp('gpt2-shaped'))


@pytest.fixture(scope='session')
def bpe_shakespeare(workdir):
    """data/shakespeare as GPT-2 ids (synthetic): the fine-tuning recipe's dataset."""
    write_gpt2_dataset(workdir, 'shakespeare', 20_000, 4_000, seed=3)
    return 'shakespeare'


# a short run on bpe_shakespeare, whose settings GPT-2's converted model does not fix
GPT2_RUN = ['--device=cpu', '--dtype=float32', '--compile=False', '--eval_iters=1', '--batch_size=2',
            '--gradient_accumulation_steps=1', '--dataset=shakespeare']


def peak_memory_run(script, *args, cwd):
    """Run a script to the end in a new process (run_forked's); return (its stdout, its peak RSS in MB, torch's
    import included)."""
    with tempfile.TemporaryDirectory() as tmp:
        peak = os.path.join(tmp, 'peak')
        result = run_forked([os.path.join(HERE, 'peak_rss.py'), peak, os.path.join(ROOT, script), *args], cwd)
        if result.returncode != 0:
            pytest.fail(f'{script} failed ({result.returncode}):\n{result.stderr[-3000:]}')
        with open(peak) as f:
            return result.stdout, float(f.read())


def one_line_error(script, *args, cwd):
    """run_here a script and return the one-line error it stops with; fail the test if it does not stop
    that way."""
    try:
        run_here(script, *args, cwd=cwd)
    except SystemExit as e:
        message = str(e.code)
    else:
        pytest.fail(f'{script} {" ".join(args)} ran to the end instead of stopping with an error')
    assert message.startswith('error: ') and '\n' not in message, message
    return message


def says(message, *parts):
    """Assert that an error message names each of parts (the setting or value at fault, the file, the fix)."""
    for part in parts:
        assert part in message, f'{part!r} is not in the message: {message!r}'


# -----------------------------------------------------------------------------
# tiny models and what the scripts print


TINY_BLOCK = 16  # tiny_model's block_size
# the decoders the exactness tests run: AO-GPT and sigma-GPT with each position encoding, and our two target settings
DECODERS = [dict(target_injection=injection, position_encoding=positions)
            for injection in ('adaln', 'add') for positions in ('learned', 'rotary', 'rotary_plain')] + \
           [dict(target_injection='adaln', position_encoding=p) for p in ('rotary_half_heads', 'rotary_upper_layers')] + \
           [dict(target_injection='two_stream', position_encoding='rotary'),
            dict(target_injection='queries', position_encoding='rotary')]


def decoder_id(kind):
    return f"{kind['target_injection']}-{kind['position_encoding']}"


def rotate(v, position):
    """RoPE of one head's query or key v (hs,) at `position`: the pair of channels (i, i + hs/2) turned by
    the 2x2 rotation matrix of angle position * 10000^(-2i/hs)."""
    hs, out = len(v), v.clone()
    for i in range(hs // 2):
        a = position * 10000 ** (-2 * i / hs)
        turn = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=v.dtype)
        out[[i, i + hs // 2]] = turn @ v[[i, i + hs // 2]]
    return out


def tiny_model(seed=0, **kw):
    """A small AO-GPT in eval mode (block TINY_BLOCK, 11 tokens) whose every weight matters. Two streams start with
    open gates: their query stream reads the context through attention alone, and nearly shut gates leave it
    nearly blind to it (a greedy speculation then keeps every draft, and the per-row paths go untried)."""
    from model import GPT, GPTConfig
    torch.manual_seed(seed)
    args = dict(block_size=TINY_BLOCK, vocab_size=11, n_layer=2, n_head=2, n_embd=32, cond_dim=8,
                gate_init=1.0 if kw.get('target_injection') == 'two_stream' else 0.0) | kw
    model = GPT(GPTConfig(**args)).eval()
    with torch.no_grad():  # random (not the init's small) norm weights and biases, so every path matters
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.fixture(scope='module')
def one_thread():
    """Tiny models, here and in the scripts run: a second thread only adds syncing, costly on shared cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv('OMP_NUM_THREADS', '1')
        yield
    torch.set_num_threads(threads)


def samples(stdout):
    """The printed samples: what follows the override lines and notes, each ended by a line of dashes."""
    text = ''.join(line for line in stdout.splitlines(keepends=True) if not line.startswith(('override: ', 'note: ')))
    return text.split('\n---------------\n')[:-1]


@pytest.fixture(scope='session')
def sized_data(workdir):
    """Datasets whose meta.pkl gives only vocab_size (a tokenizer of the user's own), holding the
    shakespeare_char ids: data/sized65 (as many ids as its characters) and data/sized96; and
    bad/sized96/big_ids.bin, ids past its 96."""
    for name, size in [('sized65', 65), ('sized96', 96)]:
        folder = workdir / 'data' / name
        folder.mkdir(exist_ok=True)
        for split in ('train', 'val'):
            shutil.copy(workdir / 'data' / 'shakespeare_char' / f'{split}.bin', folder)
        (folder / 'meta.pkl').write_bytes(pickle.dumps({'vocab_size': size}))
    folder = workdir / 'bad' / 'sized96'
    folder.mkdir(parents=True, exist_ok=True)
    np.arange(5000, dtype=np.uint16).tofile(folder / 'big_ids.bin')
    (folder / 'meta.pkl').write_bytes(pickle.dumps({'vocab_size': 96}))


# -----------------------------------------------------------------------------
# the encoder-only MDM, small enough to enumerate

N_EXACT, VOCAB_EXACT = 5, 5  # the exact encoder tests: every subset of 5 positions, 31 masks, 75 conditionals


def tiny_mdm(seed=0, **kw):
    """A small encoder in eval mode whose every weight matters (random norm weights and biases)."""
    from model import MDM, GPTConfig
    torch.manual_seed(seed)
    args = dict(block_size=N_EXACT, vocab_size=VOCAB_EXACT, n_layer=2, n_head=2, n_embd=16, cond_dim=8,
                architecture='encoder') | kw
    model = MDM(GPTConfig(**args)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def slow_length_logprobs(model, ids, known, at, lengths):
    """For each L a full forward over the template with the gap placed: the known tokens before the gap, then those
    after it, then the rest; the log-likelihood of those after, normalised over the lengths."""
    from aogpt.infilling import placed
    scores = []
    for L in lengths:
        row, row_known = placed(ids, known, at, L)
        before = [i for i in range(at) if row_known[i]]
        after = [i for i in range(at + L, len(row)) if row_known[i]]
        rest = [i for i in range(len(row)) if i not in before + after]
        order = torch.tensor(before + after + rest)
        with torch.no_grad():
            logits, _ = model(torch.tensor([row]), order[None])
        logp = logits[0].log_softmax(-1)
        scores.append(sum(float(logp[len(before) + j, row[i]]) for j, i in enumerate(after)))
    return torch.tensor(scores, dtype=torch.float64).log_softmax(0)


def one_forward_logprob(model, x, read, target):
    """log p(x[target] | x[read], read in that order), from a forward of those slots alone, every slot through the
    head."""
    positions = torch.cat([torch.tensor([-1]), read])
    logits = model.forward_slots(x[positions.clamp(min=0)][None], positions[None],
                                 torch.cat([read, torch.tensor([target])])[None])[0, -1]
    return F.log_softmax(logits.double(), -1)[x[target]].item()


def nll_given(model, x, context):
    """-log p(x_i | x at the positions in context) for every position i: (N,), float64."""
    mask = torch.tensor([i not in context for i in range(len(x))])
    logits = model.forward_masked(torch.where(mask, model.mask_id, x)[None])[0]
    return -F.log_softmax(logits.double(), -1).gather(1, x[:, None])[:, 0]


def exact_nelbo(model, x):
    """The NELBO per token by enumeration: each masked set M, of probability t^|M| (1-t)^(n-|M|) at
    level t, weighs (1/t) sum_{i in M} -log p(x_i | the rest); integrated over t in (0, 1) that weight
    is B(|M|, n-|M|+1) = (|M|-1)! (n-|M|)! / n!."""
    n, total = len(x), 0.0
    for m in range(1, n + 1):
        weight = math.factorial(m - 1) * math.factorial(n - m) / math.factorial(n)
        for masked in itertools.combinations(range(n), m):
            nll = nll_given(model, x, set(range(n)) - set(masked))
            total += weight * nll[list(masked)].sum().item()
    return total / n


def exact_any_order(model, x):
    """The any-order loss per token, averaged over all n! orders: -log p(x_o(j) | x_o(<j)) summed over j."""
    n = len(x)
    losses = [sum(nll_given(model, x, set(order[:j]))[order[j]].item() for j in range(n))
              for order in itertools.permutations(range(n))]
    return sum(losses) / len(losses) / n


def exact_l2r(model, x):
    return sum(nll_given(model, x, set(range(i)))[i].item() for i in range(len(x))) / len(x)
