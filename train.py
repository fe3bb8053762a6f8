"""
Train an Any-Order GPT (AO-GPT), or a baseline: a left-to-right GPT, sigma-GPT, the encoder-only MDM.
On one CPU or GPU:

    python train.py config/train_shakespeare_char.py
    python train.py config/train_shakespeare_char.py --max_iters=500 --order=l2r
    python train.py config/train_mdm_shakespeare_char.py            # the encoder (architecture=encoder)

With DDP on the GPUs of one node (or `torchrun train.py ...` for a single process):

    torchrun --standalone --nproc_per_node=8 train.py config/train_ao_gpt_small.py

Any setting below can be overridden by a config file and by --key=value; --help lists them.
init_from: 'scratch', 'resume' (out_dir/ckpt.pt, exactly where it stopped), 'auto' (resume when
out_dir/ckpt.pt exists, else scratch: one command for a cluster job's first start and every requeue),
or a checkpoint (a path or hf:owner/repo/path, ours or the authors' released format) whose EMA weights
start a new run. A scratch run refuses an out_dir that already holds a ckpt.pt unless --overwrite=True.
SIGTERM (or SIGUSR1, which some clusters send first) ends the run after the current iteration with a
checkpoint and exit code 75 (EX_TEMPFAIL: run it again); the same command with --init_from=auto goes on.
--eval_only evaluates the checkpoint (out_dir/ckpt.pt, or init_from) and writes nothing.
"""
import json
import math
import os
import signal
import sys
import time
from collections import Counter
from dataclasses import fields

import numpy as np
import torch
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

from benchmarks import load_tokens, make_chunks, paper_chunks
from checkpoints import (CheckpointError, checkpoint_tokens, gpt2_checkpoint, is_gpt2, load_weights_only,
                         save_checkpoint, training_record)
from common import (above, at_least, autocast, between, check_device, check_settings, check_vocab, check_writable,
                    dataset_vocab, default_device, default_dtype, fail, find_checkpoint, one_of, peak_memory_mb, rank,
                    read_checkpoint)
from configurator import configure, setting_keys
from engine import parse_number
from model import ARCHITECTURES, GELUS, GPTConfig, POSITION_ENCODINGS, TARGET_INJECTIONS, build_model
from scoring import (check_gap_sizes, chunk_gap, decoder_gap_logprobs, decoder_l2r_logprobs, encoder_l2r_logprobs,
                     left_gap_logprobs, parse_gaps)
from training import (ORDER_MODES, make_ema, make_fixed_order, mean_loss, mix_stages, paper_mix, parse_mix,
                      parse_stages, run_stages, shares_at, training_inputs)

# -----------------------------------------------------------------------------
# default config values: GPT-2 small sized AO-GPT on OpenWebText
# I/O
out_dir = 'out'
eval_interval = 2000
log_interval = 10
eval_iters = 200
eval_gaps = ''  # also each gap's val NLL given the rest, as eval_ppl.py --gaps, e.g. span:4,span:16 (on eval_iters x
# batch_size val chunks)
eval_only = False  # evaluate the checkpoint once and exit
keep_best = ''  # '' or a reading, 'l2r' or 'ao' (the encoder's NELBO): keep out_dir/best.pt at its lowest on the first
# half of val.bin (select_* in metrics.jsonl); val_* and the gaps are then read on the second half, which chose nothing
init_from = 'scratch'  # 'scratch', 'resume', 'auto' (resume if out_dir has a ckpt.pt), a checkpoint path / hf:..., or
# GPT-2: gpt2, gpt2-medium, gpt2-large, gpt2-xl or a folder saved by transformers (sigma-GPT's recipe: checkpoints.py)
overwrite = False  # let a scratch run replace the checkpoint already in out_dir
# wandb logging
wandb_log = False
wandb_project = 'ao-gpt'
wandb_run_name = 'ao-gpt'
# data
dataset = 'openwebtext'
gradient_accumulation_steps = 64  # summed over all processes: 16 x 1024 x 64 = 1,048,576 tokens per iteration
batch_size = 16  # micro-batch size per process
block_size = 1024  # from a checkpoint (init_from): when not set, the parent's
train_tokens = 0  # train on the first train_tokens tokens of train.bin only (0: all): data-constrained runs, in epochs
val_dataset = ''  # '': val losses on the dataset's val.bin; or a benchmark set (e.g. wikitext103, as the authors)
data_dir = os.environ.get('AOGPT_DATA_DIR', '')  # with val_dataset: local copies, as eval_ppl.py; '': the Hub
# training orders
order = 'mixed'  # one of ORDER_MODES
random_ratio = 0.9  # 'mixed': fraction of sequences in a random order (the rest left-to-right); the encoder: unused
order_block = 16  # 'block_random': size of the blocks shuffled within
order_file = ''  # 'fixed_random': read the order from a .pt/.npy/.txt permutation of 0..block_size-1 instead
order_mix = ''  # 'mixed': each family's share of the rows, e.g. 'l2r:0.1,fim:0.4,random:0.5' ('': random_ratio's)
order_curriculum = 0  # 'mixed': iterations from all left to right to the mix, linearly (0: the mix from the start)
order_stages = ''  # 'mixed': the shares in stages MIX@ITER/MIX@ITER/..., linear between them (ITER: an iteration, or
# a percentage of max_iters), e.g. 'l2r:0.5,fim:0.5@0/l2r:0.5,fim:0.5@33%/l2r:0.1,fim:0.4,random:0.5@67%' (replaces
# order_mix and order_curriculum)
fim_max_span = 0  # 'fim' orders: a span of 1..fim_max_span tokens (0: block_size) read after the rest
# model
n_layer = 12
n_head = 12
n_embd = 768
cond_dim = 128
target_init_std = 0.02  # init std of the target-position embedding (the authors'); see train_shakespeare_char.py
gate_init = 0.0  # initial bias of adaLN's gates (the authors': 0); see train_shakespeare_char.py
dropout = 0.0
input_mask = 0.0  # a decoder's training inputs: the share of tokens hidden (read as the start slot's [None]), targets
# kept: the regularizer of a GPT on repeated data
bias = True
target_injection = 'adaln'  # 'adaln' (AO-GPT), 'add' (sigma-GPT), ours: 'two_stream', 'queries' (model.py)
architecture = 'decoder'  # 'decoder' (the above) or 'encoder' (the masked diffusion model, trained on its NELBO)
position_encoding = 'learned'  # 'learned' (the authors'), 'rotary' (queries at the target), or an ablation (model.py)
gelu = 'none'  # the MLP's GELU: 'none' (exact) or 'tanh' (GPT-2's)
mask_eps = 1e-3  # encoder: the masking levels t are drawn from [mask_eps, 1), as MDLM
# AdamW
learning_rate = 6e-4
max_iters = 500000
weight_decay = 0.05
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0  # 0 disables
# learning rate schedule: linear warmup from 0, then cosine down to min_lr
decay_lr = True
warmup_iters = 2000
lr_decay_iters = 500000
min_lr = 6e-5
# EMA of the weights, used for evaluation and saved in checkpoints
ema_decay = 0.9999
# system
device = default_device()  # 'cpu', 'cuda', 'cuda:1', 'mps'
dtype = default_dtype()  # 'float32', 'bfloat16' or 'float16'
compile = torch.cuda.is_available()
seed = 1337
peak_flops = 989e12  # per device, for MFU: H100 bf16 dense
# -----------------------------------------------------------------------------
overridden = configure(globals(), doc=__doc__)  # what a config file or flag set
config = {k: globals()[k] for k in setting_keys(globals())}
# -----------------------------------------------------------------------------
# every setting is checked before any work (and, under torchrun, before the processes meet)

VAL_SETS = ('wikitext2', 'wikitext103', 'ptb')  # the benchmark sets with a validation split
check_settings(globals(), {
    **dict.fromkeys(['batch_size', 'block_size', 'gradient_accumulation_steps', 'eval_interval', 'log_interval',
                     'eval_iters', 'n_layer', 'n_head', 'n_embd', 'cond_dim', 'order_block'], at_least(1)),
    'max_iters': at_least(0), 'train_tokens': at_least(0), 'order_curriculum': at_least(0), 'fim_max_span': at_least(0),
    'warmup_iters': at_least(0), 'lr_decay_iters': at_least(1),
    'learning_rate': above(0), 'min_lr': at_least(0), 'weight_decay': at_least(0), 'grad_clip': at_least(0),
    'beta1': (lambda v: 0 <= v < 1, 'in [0, 1)'), 'beta2': (lambda v: 0 <= v < 1, 'in [0, 1)'),
    'dropout': (lambda v: 0 <= v < 1, 'in [0, 1)'), 'input_mask': (lambda v: 0 <= v < 1, 'in [0, 1)'),
    'keep_best': (lambda v: v in ('', 'l2r', 'ao'), "'' (no best checkpoint), 'l2r' or 'ao'"),
    'random_ratio': between(0, 1), 'ema_decay': between(0, 1),
    'target_init_std': above(0),
    # adaLN's gate multiplies its block's output (no sigmoid; model.AdaLNBlock): 0 shuts the block, 1 opens it.
    # A start past ±10 has no use, and a huge one overflows float16 (max 65504): NaN before the first step
    'gate_init': (lambda v: -10 <= v <= 10, "in [-10, 10] (0 shuts adaLN's gates, 1 opens them)"),
    'peak_flops': above(0), 'order': one_of(*ORDER_MODES), 'target_injection': one_of(*TARGET_INJECTIONS),
    'architecture': one_of(*ARCHITECTURES), 'position_encoding': one_of(*POSITION_ENCODINGS), 'gelu': one_of(*GELUS),
    'mask_eps': (lambda v: 0 <= v < 1, 'in [0, 1)'),
    'val_dataset': (lambda v: v in ('', *VAL_SETS), f"'' (the dataset's val.bin) or one of {', '.join(VAL_SETS)}"),
})
if decay_lr and lr_decay_iters <= warmup_iters:
    fail(f'--lr_decay_iters ({lr_decay_iters}) must be larger than --warmup_iters ({warmup_iters})')
if min_lr > learning_rate:
    fail(f'--min_lr ({min_lr}) must not exceed --learning_rate ({learning_rate})')
check_device(device, dtype)
try:  # the model's own rules (model.GPTConfig): which settings go together
    GPTConfig(**{f.name: config[f.name] for f in fields(GPTConfig) if f.name in config})
except ValueError as e:
    fail(e)
if order_file and order != 'fixed_random':
    fail(f'--order_file gives the one order of a fixed-order run: add --order=fixed_random (got --order={order})')
INIT_MODES = ('scratch', 'resume', 'auto')
if init_from.lower() in INIT_MODES and init_from not in INIT_MODES and not os.path.exists(init_from):
    fail(f'--init_from={init_from} is read as a checkpoint path, and there is none: the modes are lower case, '
         f'--init_from={init_from.lower()}')


ORDER_FLAGS = ('order_mix', 'order_curriculum', 'order_stages', 'fim_max_span')  # the orders of a mixed run


def given_shares(keys):
    """Those of `keys` (settings that give the order families' shares) set for this run, less a config file's when the
    command line gives the shares (--order_mix or --order_stages): a flag replaces what the config file chose."""
    from_flags = any(k in overridden.flags for k in ('order_mix', 'order_stages'))
    return [k for k in keys if k in overridden and (k in overridden.flags or not from_flags)]


def read_stages():
    """The stages of a 'mixed' run's order families (training.parse_stages): --order_stages, or --order_mix (or the
    paper's two from random_ratio) reached over --order_curriculum."""
    if order != 'mixed':
        given = [k for k in ORDER_FLAGS if k in overridden]
        if given:
            fail(f'--{given[0]} sets the orders of a mixed run: add --order=mixed (got --order={order})')
        return None
    if order_stages:
        given = given_shares(('order_mix', 'random_ratio', 'order_curriculum'))
        if given:
            fail(f'--order_stages gives the shares of every stage: drop --{given[0]}')
        try:
            stages = parse_stages(order_stages, max_iters)
        except ValueError as e:
            fail(e)
        if stages[-1][0] > max_iters:
            fail(f'--order_stages reaches its last stage at iteration {stages[-1][0]}, after training ends '
                 f'(--max_iters={max_iters}): end the stages by max_iters')
        return stages
    if not order_mix:
        return mix_stages(paper_mix(random_ratio), order_curriculum)
    if given_shares(('random_ratio',)):
        fail(f'--order_mix={order_mix} and --random_ratio={random_ratio} both give the shares: drop --random_ratio '
             f'(its mix is random:{random_ratio:g},l2r:{1 - random_ratio:g})')
    try:
        return mix_stages(parse_mix(order_mix), order_curriculum)
    except ValueError as e:
        fail(e)


ckpt_path = os.path.join(out_dir, 'ckpt.pt')
auto = init_from == 'auto'
if auto:  # a requeued job's command: go on with the run it started, or start it
    init_from = 'resume' if os.path.exists(ckpt_path) else 'scratch'
if eval_only and init_from == 'scratch':
    init_from = 'resume'  # evaluate the run in out_dir
if init_from != 'resume' and not eval_only and os.path.exists(ckpt_path) and not overwrite:
    fail(f'{ckpt_path} already exists: continue it with --init_from=resume, write elsewhere with '
         f'--out_dir=..., or replace it with --overwrite=True')
from_gpt2 = is_gpt2(init_from)
if init_from != 'scratch':
    init_path = init_from if from_gpt2 else find_checkpoint(init_from, out_dir)


def check_same_data(saved):
    """A resumed run goes on with the tokens, the selection and the order stages it started with (an older checkpoint
    records none of the first two: all of train.bin, no best kept)."""
    for key, default in (('train_tokens', 0), ('keep_best', '')):
        if saved.get(key, default) != config[key]:
            fail(f"--{key}={config[key]!r} is not the run's ({saved.get(key, default)!r} in {ckpt_path}): resume "
                 f"with --{key}={saved.get(key, default)!r}, or start a new out_dir")
    if order_stages and order_stages == saved.get('order_stages') and stages != saved_stages(saved):
        fail(f'--order_stages: the stages at --max_iters={max_iters} are not the ones {ckpt_path} was trained on '
             f"(--max_iters={saved['max_iters']}): a percentage moves with max_iters; give the knots in iterations")


def saved_stages(saved):
    """The order stages a checkpoint's run was trained on (training.run_stages); None where they no longer parse."""
    try:
        return run_stages(saved)
    except ValueError:
        return None


def read_parent(path):
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


if init_from not in ('scratch', 'resume'):
    pretrained, pretrained_checkpoint = read_parent(init_path)  # its EMA weights and architecture
    if 'block_size' not in overridden:  # a fine-tune reads the parent's block unless told to read shorter ones
        block_size = config['block_size'] = pretrained.config.block_size
        if rank() == 0:
            print(f'block_size = {block_size}, the block of {init_path} (--block_size=N trains on shorter sequences)')


stages = read_stages()
if order_curriculum > max_iters:
    fail(f'--order_curriculum={order_curriculum} is longer than training (--max_iters={max_iters}): the mix would '
         'never be reached; use at most max_iters')
if fim_max_span > block_size:
    fail(f'--fim_max_span={fim_max_span} is longer than the block (--block_size={block_size}): use at most '
         f'{block_size}, or 0 for any length')
try:
    gap_settings = parse_gaps(eval_gaps, '--eval_gaps')
    check_gap_sizes(gap_settings, block_size, '--eval_gaps')
except ValueError as e:
    fail(e)


def read_order_file(path):
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


explicit_order = read_order_file(order_file) if order_file else None
# data: uint16 token memmaps; a sequence is block_size tokens read in a sampled order
if not dataset:
    found = sorted(d.name for d in os.scandir('data') if d.is_dir()) if os.path.isdir('data') else []
    fail(f"--dataset is empty: name a folder of data/ ({', '.join(found) or 'there is none here'})")
dataset_dir = os.path.join('data', dataset)
for split in ('train', 'val'):
    path = os.path.join(dataset_dir, f'{split}.bin')
    if not os.path.exists(path):
        fail(f'{path} not found: run python data/{dataset}/prepare.py first')
    if os.path.getsize(path) // 2 <= block_size:
        fail(f'{path} holds fewer than block_size={block_size} tokens: use a smaller --block_size')
data_vocab, data_size = dataset_vocab(dataset_dir)
train_size = os.path.getsize(os.path.join(dataset_dir, 'train.bin')) // 2
if train_tokens > train_size:
    fail(f'--train_tokens={train_tokens:,} is more than {dataset_dir}/train.bin holds ({train_size:,} tokens): use '
         'at most that, or 0 for all of it')
if 0 < train_tokens <= block_size:
    fail(f'--train_tokens={train_tokens} holds no training window of block_size + 1 tokens: use at least '
         f'{block_size + 1}')
train_size = train_tokens or train_size  # the unique tokens a run trains on: its epochs are counted in them
if keep_best and val_dataset:
    fail(f'--keep_best chooses on the first half of {dataset_dir}/val.bin and reports on the second: drop '
         f'--val_dataset={val_dataset}, or --keep_best')
if keep_best and os.path.getsize(os.path.join(dataset_dir, 'val.bin')) // 4 <= block_size:
    fail(f'--keep_best cuts {dataset_dir}/val.bin in halves, each no longer than block_size={block_size}: use a '
         'smaller --block_size')
vocab_size = GPTConfig.vocab_size if data_vocab == 'gpt2' else data_size  # GPT-2's table is padded


if not eval_only:
    check_writable(out_dir, f'--out_dir={out_dir}')


def benchmark_chunks():
    """The paper's chunks of val_dataset's validation split, in whole batches, at most eval_iters of them."""
    if data_vocab != 'gpt2':
        fail(f'--val_dataset={val_dataset} is GPT-2 BPE text but {dataset} has its own vocabulary '
             f'({dataset_dir}/meta.pkl): use a GPT-2 BPE dataset, or no --val_dataset')
    docs, _ = load_tokens(val_dataset, 'validation', data_dir)
    chunks = paper_chunks(docs, block_size)
    n_batches = min(len(chunks) // batch_size, eval_iters)
    if n_batches == 0:
        fail(f'{val_dataset} validation makes {len(chunks)} chunks of {block_size} tokens, fewer than '
             f'--batch_size={batch_size}: use a smaller --batch_size or --block_size')
    return chunks[:n_batches * batch_size]


val_chunks = benchmark_chunks() if val_dataset else None
GAP_SEED = 1337  # eval_ppl.py's default --seed: every run hides the same tokens of the same chunks
GAP_MAX_TOKENS = 32768  # slots per forward of the gap scoring, as eval_ppl.py's default --max_tokens


def gap_eval_chunks():
    """The chunks of the in-training gap NLLs: the first eval_iters x batch_size of the val split (with keep_best, of
    its second half), cut as eval_ppl.py cuts them (val_dataset's, with one)."""
    if val_chunks is not None:
        return val_chunks
    tokens = load_tokens(os.path.join(dataset_dir, 'val.bin'))[0][0]
    report = tokens[len(tokens) // 2:] if keep_best else tokens  # the half that chose nothing
    return make_chunks([report], block_size)[:eval_iters * batch_size]


gap_chunks = gap_eval_chunks() if gap_settings else None

# distributed setup: torchrun sets RANK; one process per device
ddp = int(os.environ.get('RANK', -1)) != -1 and int(os.environ.get('WORLD_SIZE', 1)) > 1
if ddp and gradient_accumulation_steps % int(os.environ['WORLD_SIZE']):
    fail(f'gradient_accumulation_steps ({gradient_accumulation_steps}) must be divisible by the number of '
         f'processes ({os.environ["WORLD_SIZE"]}): e.g. --gradient_accumulation_steps={os.environ["WORLD_SIZE"]}')
if ddp:
    init_process_group(backend='nccl' if device.startswith('cuda') else 'gloo')
    ddp_rank, ddp_local_rank, ddp_world_size = (int(os.environ[k]) for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE'))
    if device.startswith('cuda'):
        device = f'cuda:{ddp_local_rank}'
        torch.cuda.set_device(device)
    gradient_accumulation_steps //= ddp_world_size
    # the stop flag is all-reduced on the CPU: by gloo beside NCCL (on the CPU the default group is gloo already)
    stop_group = torch.distributed.new_group(backend='gloo') if device.startswith('cuda') else None
else:
    ddp_rank, ddp_world_size = 0, 1
master_process = ddp_rank == 0
tokens_per_iter = gradient_accumulation_steps * ddp_world_size * batch_size * block_size
if master_process:
    print(f'tokens per iteration: {tokens_per_iter:,}')
    if val_dataset:
        print(f'val losses on {val_dataset} validation: {len(val_chunks)} chunks of {block_size} tokens')

device_type = torch.device(device).type
if device_type == 'cuda':
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
ctx = autocast(device, dtype)


# -----------------------------------------------------------------------------
# model, optimizer, EMA

INIT_ONLY = ('target_init_std', 'gate_init')


def check_model_settings(config, free=()):
    """Fail if a model setting given in a config file or flag differs from the checkpoint's that the run
    starts from: its model is the one that goes on. target_init_std and gate_init shape only the initial
    weights, which the checkpoint replaces; `free` names the settings the run may change."""
    names = [f.name for f in fields(GPTConfig) if f.name in overridden and f.name not in INIT_ONLY + free]
    given = {k: overridden[k] for k in names}
    differ = [k for k, v in given.items() if v != getattr(config, k)]
    if differ:
        flags = ', '.join(f'--{k}={given[k]}' for k in differ)
        saved = ', '.join(f'{k}={getattr(config, k)}' for k in differ)
        verb, pronoun = ('differs', 'it') if len(differ) == 1 else ('differ', 'them')
        fix = f'drop {pronoun} to resume, or start a new out_dir' if init_from == 'resume' else \
            f'a run started from a checkpoint takes its model: drop {pronoun}, or train from scratch'
        fail(f"{flags} {verb} from the checkpoint's {saved} ({init_path}); {fix}")


# settings a run may take on afresh when it goes on: where it is, and how it was started
RESTART_FREE = ('out_dir', 'init_from', 'overwrite', 'eval_only')


def check_same_run(saved):
    """--init_from=auto goes on only with the run's own settings (a requeue repeats its command): fail on others."""
    differ = [k for k in config if k not in RESTART_FREE and k in saved and saved[k] != config[k]]
    if differ:
        fail(f"--init_from=auto: {ckpt_path} was written with other settings ("
             f"{', '.join(f'{k}={saved[k]!r}, now {config[k]!r}' for k in differ)}): go on with --init_from=resume "
             f'and those settings, or start a new out_dir')


def parent_record(path, checkpoint):
    """What a run started from, for its checkpoint, metrics.jsonl and model card: the path, what trained it, and its
    own parent."""
    trained = training_record(checkpoint)
    return dict(init_from=path, iterations=trained['iterations'], tokens=trained['tokens'], orders=trained['orders'],
                parent=checkpoint.get('parent'))


model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size, bias=bias,
                  vocab_size=vocab_size, dropout=dropout, cond_dim=cond_dim, target_init_std=target_init_std,
                  gate_init=gate_init, target_injection=target_injection, architecture=architecture,
                  position_encoding=position_encoding, gelu=gelu)
iter_num = 0
evaluated_at = None  # the last iteration whose evaluation is in metrics.jsonl
best = None  # with keep_best: {'iter', 'loss'} of the lowest selection reading so far, the one in best.pt
trained_seconds = 0.0  # the training before this process's start, so a resumed run's `elapsed` goes on from it
checkpoint = None
parent = None  # a new run's parent_record
vocab_note = ''
fixed_order = explicit_order if explicit_order is not None else \
    make_fixed_order(order, block_size, order_block, torch.Generator().manual_seed(seed))
torch.manual_seed(seed)  # the same initial weights on every process and every run
if init_from == 'scratch':
    model = build_model(GPTConfig(**model_args))
elif init_from == 'resume':
    model, checkpoint = read_checkpoint(init_path, use_ema=False)
    if not {'ema', 'optimizer', 'iter_num'} <= checkpoint.keys():
        fail(f'{init_path} was not written by train.py, so it cannot be resumed: start a new run from its '
             f'weights with --init_from=<its path> and another --out_dir')
    check_model_settings(model.config)
    if auto:
        check_same_run(checkpoint['config'])
    if not eval_only:
        check_same_data(checkpoint['config'])
    vocab_note = check_vocab(checkpoint_tokens(checkpoint, model.config.vocab_size), (data_vocab, data_size), dataset)
    model.train()
    model_args = checkpoint['model_args']  # the architecture is the checkpoint's (no flag says otherwise)
    iter_num = checkpoint['iter_num']
    parent = checkpoint.get('parent')
    evaluated_at = checkpoint.get('evaluated_at', iter_num)  # a run stopped before an evaluation evaluates on resume
    best = checkpoint.get('best')
    trained_seconds = checkpoint.get('elapsed', 0.0)
    if checkpoint.get('world_size', ddp_world_size) != ddp_world_size:
        message = (f"{init_path} was trained by {checkpoint['world_size']} processes, now {ddp_world_size}: each "
                   'process draws its own batches, so the run goes on with other data than it would have')
        if auto:  # a requeue repeats its command: another world size is another job
            fail(f'--init_from=auto: {message}; resume with the same number of processes, or start a new out_dir')
        if master_process:
            print(f'note: {message}')
    fixed_order = checkpoint['fixed_order']
    if explicit_order is not None and not torch.equal(explicit_order, fixed_order):
        fail(f'--order_file={order_file} is not the order {init_path} was trained with: resume without it')
else:
    parent = parent_record(init_path, pretrained_checkpoint)
    vocab_note = check_vocab(checkpoint_tokens(pretrained_checkpoint, pretrained.config.vocab_size),
                             (data_vocab, data_size), dataset)
    check_model_settings(pretrained.config, free=('dropout', 'block_size'))
    model_args = {k: getattr(pretrained.config, k) for k in model_args} | {'dropout': dropout}
    model = build_model(GPTConfig(**model_args))
    model.load_state_dict(pretrained.state_dict())
# the stored config says what is trained; its block_size stays the sequences' length (a finetune may train shorter)
config |= {k: v for k, v in model_args.items() if k in config and k != 'block_size'}
if model.config.is_encoder and (order not in ('mixed', 'random') or order_file):  # random_ratio: ignored, as the orders
    fail(f'the encoder trains on random masks (its NELBO), not in an order: drop --order={order} and --order_file')
if model.config.is_encoder and input_mask:
    fail('--input_mask hides a decoder\'s inputs; the encoder\'s objective masks its inputs already: drop it')
ordered = [k for k in ORDER_FLAGS if k in overridden]
if model.config.is_encoder and ordered:  # its honest equivalent, masks of spans, is not built
    fail(f'the encoder trains on random masks (its NELBO), not on a mix of orders: drop --{ordered[0]}')
# after the encoder's check: the encoder is told to drop --fim_max_span, not to add fim
if 'fim_max_span' in overridden and stages is not None and not any(mix['fim'] for _, mix in stages):
    fail(f"--fim_max_span sets the spans of FIM orders, but the mix has none: add fim to "
         f"--{'order_stages' if order_stages else 'order_mix'}, e.g. --order_mix=l2r:0.5,fim:0.5")
if block_size > model.config.block_size or (init_from == 'resume' and block_size != model.config.block_size):
    fail(f'--block_size={block_size} does not fit the checkpoint (block_size {model.config.block_size}): use '
         f'--block_size={model.config.block_size}' + ('' if init_from == 'resume' else ' or less'))
if model.config.vocab_size < data_size:  # GPT-2's converted table is not padded (checkpoints.gpt2_checkpoint)
    fail(f'the model has {model.config.vocab_size} tokens but {dataset} needs {data_size}')
model.to(device)
if master_process and vocab_note:
    print(vocab_note)
if master_process:
    print(f'number of parameters: {model.get_num_params() / 1e6:.2f}M')

scaler = torch.amp.GradScaler(device_type, enabled=dtype == 'float16')
optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)
ema = make_ema(model, ema_decay)
if checkpoint is not None:
    optimizer.load_state_dict(checkpoint['optimizer'])
    scaler.load_state_dict(checkpoint['scaler'])
    ema.module.load_state_dict(checkpoint['ema'])
    ema.n_averaged.fill_(checkpoint['ema_updates'])
    checkpoint = None  # free the memory

raw_model = model
eval_model = ema.module.eval()
if compile:
    if master_process:
        print('compiling the model... (takes a minute)')
    model = torch.compile(model)
    eval_model = torch.compile(eval_model)
if ddp:  # no buffer to broadcast: the rotary tables are made from the config on every process
    model = DDP(model, device_ids=[ddp_local_rank] if device_type == 'cuda' else None, broadcast_buffers=False)


# -----------------------------------------------------------------------------
# batches: block_size tokens of the data, each row read in an order of the run's order mode (a
# decoder) or seen through a random mask (the encoder); a batch is the model's arguments

def to_device(t):
    return t.pin_memory().to(device, non_blocking=True) if device_type == 'cuda' else t.to(device)


def model_inputs(x, order_mode, generator=None, shares=None, hide=0.0):
    """The model's arguments for the rows x, on the device (training.training_inputs); shares: a mixed run's; hide:
    the share of input tokens hidden (training only)."""
    inputs = training_inputs(raw_model, x, order_mode, generator, shares, fixed_order, mask_eps, fim_max_span, hide)
    return tuple(to_device(t) for t in inputs)


def split_tokens(split):
    """The tokens a split's windows are drawn from: train.bin, or its first train_tokens; val.bin, or with keep_best
    its first half ('select': the best is chosen there) and its second ('val': what is reported)."""
    # a fresh memmap per batch avoids a memory leak (numpy keeps pages of an old one alive)
    data = np.memmap(os.path.join(dataset_dir, f"{'train' if split == 'train' else 'val'}.bin"), dtype=np.uint16,
                     mode='r')
    if split == 'train':
        return data[:train_size]
    half = len(data) // 2 if keep_best else 0
    return data[:half] if split == 'select' else data[half:]


def get_batch(split, order_mode, generator=None, shares=None, hide=0.0):
    data = split_tokens(split)
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator).tolist()
    x = torch.from_numpy(np.stack([data[i:i + block_size] for i in starts]).astype(np.int64))
    return model_inputs(x, order_mode, generator, shares, hide)


def eval_batches(split, order_mode, generator):
    """The batches of one evaluation: eval_iters random windows of the split, or for val with
    val_dataset its chunks, in order."""
    if split == 'val' and val_chunks is not None:
        for x in val_chunks.split(batch_size):
            yield model_inputs(x, order_mode, generator)
    else:
        for _ in range(eval_iters):
            yield get_batch(split, order_mode, generator)


def seed_iteration(iteration):
    # the batches, orders and dropout of an iteration depend only on (seed, rank, iteration),
    # so a resumed run sees exactly what an uninterrupted one would
    torch.manual_seed(hash((seed, ddp_rank, iteration)))


EVAL_LOGITS = 2**25  # logits held at once in an evaluation (128 MiB in float32), whatever the vocabulary


@torch.no_grad()
def estimate_losses():
    """Mean EMA-weight loss on train and val (or val_dataset), with keep_best also on val.bin's selection half
    ('select'), left-to-right and any-order (random orders; the encoder's: its NELBO, equal to the any-order loss in
    expectation; its left-to-right loss is estimated at one position per row); in a fixed-order run also in its own
    order ('fixed', which the authors' ablation trainer records), read on the left-to-right batches."""
    generator = torch.Generator().manual_seed(seed)  # the same batches and orders every time
    fixed = None if fixed_order is None else fixed_order.to(device)
    out = {}
    for split in ('train', 'val', 'select') if keep_best else ('train', 'val'):
        for mode, name in (('l2r', 'l2r'), ('random', 'ao')):
            losses = {}
            for x, *rest in eval_batches(split, mode, generator):
                readings = {name: rest}
                if fixed is not None and mode == 'l2r':
                    readings['fixed'] = [fixed.expand_as(x)]
                for key, args in readings.items():
                    losses.setdefault(key, []).append(mean_loss(eval_model, (x, *args), ctx, EVAL_LOGITS))
            out.update({f'{split}_{key}': sum(v) / len(v) for key, v in losses.items()})
    return out | gap_losses()


@torch.no_grad()
def gap_losses():
    """The val NLL per gap token of each eval_gaps setting given the rest of its chunk, as eval_ppl.py --gaps
    reads it: a decoder's gap after the rest, left to right ('gap l2r'), and from the left side only ('_left');
    the encoder's gap revealed left to right ('revealed l2r')."""
    model, out = ema.module, {}
    if not gap_settings:
        return out
    l2r = None if model.config.is_encoder else \
        torch.stack([decoder_l2r_logprobs(model, x.to(device), ctx) for x in gap_chunks])
    for kind, size in gap_settings:
        gaps = [chunk_gap(x, kind, size, GAP_SEED) for x in gap_chunks]
        n_tokens, name = sum(len(g) for g in gaps), f'val_gap_{kind}{size:g}'
        if model.config.is_encoder:
            logp = encoder_l2r_logprobs(model, gap_chunks, GAP_MAX_TOKENS, ctx, gaps=gaps)[0]
            out[name] = -logp.double().sum().item() / n_tokens
            continue
        both = decoder_gap_logprobs(model, gap_chunks, gaps, 0, GAP_MAX_TOKENS, GAP_SEED, ctx)[:, 0]
        out[name] = -both.sum().item() / n_tokens
        out[f'{name}_left'] = -left_gap_logprobs(l2r, gaps).sum().item() / n_tokens
    return out


def get_lr(it):
    if it < warmup_iters:  # the authors' warmup: 0 at the first iteration
        return learning_rate * it / warmup_iters
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


def elapsed_now():
    """Seconds of training over every resume, as metrics.jsonl and the checkpoint written with it both say."""
    return round(time.time() - start_time, 2)


def checkpoint_now(elapsed):
    """Everything a resume needs, and what the other scripts read (the EMA weights, the vocabulary)."""
    return {
        'model': raw_model.state_dict(),
        'ema': ema.module.state_dict(),
        'ema_updates': int(ema.n_averaged),
        'optimizer': optimizer.state_dict(),
        'scaler': scaler.state_dict(),
        'model_args': model_args,
        'iter_num': iter_num,
        'fixed_order': fixed_order,
        'evaluated_at': evaluated_at,
        'best': best,  # keep_best's reading in best.pt, or None
        'elapsed': elapsed,
        'world_size': ddp_world_size,  # each process draws its own batches: another count is another run
        'vocab': data_vocab,  # what the token ids mean: 'gpt2' or the dataset's characters
        'config': config,
        'parent': parent,  # the checkpoint a run started from (parent_record), or None
    }


metrics_path = os.path.join(out_dir, 'metrics.jsonl')
best_path = os.path.join(out_dir, 'best.pt')


def start_metrics():
    """A new run starts a fresh metrics.jsonl; a resumed one keeps the records up to its checkpoint."""
    kept = []
    if init_from == 'resume' and os.path.exists(metrics_path):
        kept = [line for line, record in read_metrics() if record['iter'] <= iter_num]
    with open(metrics_path, 'w') as f:
        f.writelines(kept)


def read_metrics():
    """(line, record) of each line of metrics.jsonl. A kill while it was written leaves its last line cut:
    that line is dropped, with a note; a bad line before it stops the run."""
    with open(metrics_path) as f:
        lines = [line if line.endswith('\n') else line + '\n' for line in f if line.strip()]
    records = []
    for i, line in enumerate(lines, start=1):
        try:
            records.append((line, json.loads(line)))
        except json.JSONDecodeError:
            if i < len(lines):
                fail(f'{metrics_path}, line {i}, is not a metrics record: mend or delete that line to resume')
            print(f'note: the last line of {metrics_path} was cut (killed while writing it): dropped')
    return records


def stop_on_nonfinite(what, value):
    if not math.isfinite(value):
        kept = f'{ckpt_path}, the last good checkpoint, is untouched' if os.path.exists(ckpt_path) else \
            'no checkpoint was written'
        if iter_num == 0:  # no optimizer step yet: the starting weights in this dtype, not the learning rate
            start = 'the initial weights of gate_init and target_init_std' if init_from == 'scratch' else \
                f'the weights of {init_path}'
            cause = f'no optimizer step was taken yet, so not the learning rate: {start} give it in {dtype}' + \
                ('; try dtype=float32' if dtype != 'float32' else '')
        else:
            cause = 'try a lower learning_rate, or dtype=bfloat16 instead of float16'
        fail(f'{what} is {value} at iter {iter_num}; stopped without saving, {kept} ({cause})')


stop_signal = None  # the signal that asked the run to stop (request_stop)
evaluating = False  # an evaluation is running: a stop signal drops it at once


class EvaluationDropped(Exception):
    """A stop signal came during an evaluation, which can outlast a scheduler's grace period: it is not recorded."""


def request_stop(signum, frame):
    """SIGTERM / SIGUSR1: finish the iteration, or drop the evaluation, then save and exit (stop_agreed); a second
    signal changes nothing."""
    global stop_signal
    first, stop_signal = stop_signal is None, signum
    if evaluating and first:  # the second signal may land while the first one's exception is handled
        raise EvaluationDropped


def evaluate():
    """estimate_losses, or None when a stop signal dropped it (request_stop)."""
    global evaluating
    evaluating = True
    try:
        return None if stop_signal is not None else estimate_losses()
    except EvaluationDropped:
        return None
    finally:
        evaluating = False


def stop_agreed():
    """Whether any process was asked to stop: under DDP every rank learns it at the same iteration, from a flag
    all-reduced on the CPU (stop_group), so the loop never waits for the GPU to learn it."""
    if not ddp:
        return stop_signal is not None
    asked = torch.tensor(float(stop_signal is not None))
    torch.distributed.all_reduce(asked, op=torch.distributed.ReduceOp.MAX, group=stop_group)
    return asked.item() > 0


def stop():
    """Save the iteration the run stopped at (unless out_dir/ckpt.pt holds it) and exit with PREEMPTED."""
    if master_process and saved_at != iter_num:
        save_checkpoint(checkpoint_now(elapsed_now()), ckpt_path)
    if master_process:
        by = signal.Signals(stop_signal).name if stop_signal else "another process's signal"
        print(f'stopped by {by} at iter {iter_num}: saved {ckpt_path}; the same command with --init_from=auto '
              'goes on')
    if ddp:  # every process leaves once the checkpoint is written: torchrun stops the rest when one exits
        torch.distributed.barrier()
        destroy_process_group()
    sys.exit(PREEMPTED)


PREEMPTED = 75  # EX_TEMPFAIL: stopped by a signal with a checkpoint; the same command with --init_from=auto goes on
for name in ('SIGTERM', 'SIGUSR1'):
    if hasattr(signal, name) and not eval_only:
        signal.signal(getattr(signal, name), request_stop)
if master_process and not eval_only:
    start_metrics()
if wandb_log and master_process and not eval_only:
    import wandb
    wandb.init(project=wandb_project, name=wandb_run_name, config=config)

# -----------------------------------------------------------------------------
# training loop
start_time = time.time() - trained_seconds
written_only = max_iters == 0 and init_from != 'resume' and not eval_only  # a conversion (GPT-2's, say): no evaluation
if written_only and master_process:
    save_checkpoint(checkpoint_now(0.0), ckpt_path)
    print(f'--max_iters=0: wrote the starting weights to {ckpt_path}, not evaluated (--eval_only evaluates them)')
log_time, log_iter = time.time(), iter_num
tokens_per_sec = 0.0
train_loss = torch.zeros((), device=device)  # summed on the device between logs: no sync per step
saved_at = iter_num if init_from == 'resume' else None  # the iteration out_dir/ckpt.pt holds
while not written_only:
    lr = get_lr(iter_num) if decay_lr else learning_rate
    for group in optimizer.param_groups:
        group['lr'] = lr

    if not eval_only and stop_agreed():
        stop()
    evaluate_now = (iter_num % eval_interval == 0 or iter_num == max_iters) and iter_num != evaluated_at
    losses = evaluate() if master_process and (evaluate_now or eval_only) else None
    if losses is not None:
        epochs = iter_num * tokens_per_iter / train_size
        print(f"iter {iter_num}: EMA loss l2r train {losses['train_l2r']:.4f} val {losses['val_l2r']:.4f} | "
              f"any-order train {losses['train_ao']:.4f} val {losses['val_ao']:.4f}" +
              (f" | fixed order train {losses['train_fixed']:.4f} val {losses['val_fixed']:.4f}"
               if 'val_fixed' in losses else '') +
              ''.join(f" | {key[4:]} {value:.4f}" for key, value in losses.items() if key.startswith('val_gap')) +
              ''.join(f" | {key.replace('_', ' ')} {value:.4f}" for key, value in losses.items()
                      if key.startswith('select')) + (f' | epoch {epochs:.2f}' if train_tokens else ''))
        if eval_only:
            break
        for name, value in losses.items():
            stop_on_nonfinite(f'EMA {name} loss', value)
        elapsed = elapsed_now()
        record = dict(iter=iter_num, epochs=round(epochs, 4), elapsed=elapsed, lr=lr,
                      tokens_per_sec=round(tokens_per_sec, 1), **losses)
        if iter_num == 0 and parent is not None:  # a new run's first record says what it started from
            record['parent'] = parent['init_from']
        with open(metrics_path, 'a') as f:
            f.write(json.dumps(record) + '\n')
        evaluated_at = iter_num
        if wandb_log:
            wandb.log(record)
        if keep_best and (best is None or losses[f'select_{keep_best}'] < best['loss']):
            best = dict(iter=iter_num, loss=losses[f'select_{keep_best}'])
            save_checkpoint(checkpoint_now(elapsed), best_path)  # before ckpt.pt: a resume re-evaluates, not skips
            print(f'saved the best {keep_best} reading so far to {best_path}')
        if iter_num > 0:
            save_checkpoint(checkpoint_now(elapsed), ckpt_path)
            saved_at = iter_num
            print(f'saved checkpoint to {out_dir}')
    if evaluate_now and not eval_only and stop_agreed():  # a stop signal dropped the evaluation
        stop()
    if eval_only or iter_num >= max_iters:
        break

    seed_iteration(iter_num)
    shares = None if stages is None else shares_at(stages, iter_num)
    for micro_step in range(gradient_accumulation_steps):
        if ddp:  # all-reduce the gradients only once, on the last micro-step
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
        inputs = get_batch('train', order, shares=shares, hide=input_mask)
        with ctx:
            _, loss = model(*inputs)
            loss = loss / gradient_accumulation_steps
        scaler.scale(loss).backward()
        train_loss += loss.detach()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    ema.update_parameters(raw_model)
    iter_num += 1

    if iter_num % log_interval == 0 or iter_num == max_iters:
        logged_loss = train_loss.item() / (iter_num - log_iter)  # .item() waits for the device
        stop_on_nonfinite('the training loss', logged_loss)
        now = time.time()
        tokens_per_sec = tokens_per_iter * (iter_num - log_iter) / (now - log_time)
        mfu = raw_model.estimate_mfu(tokens_per_sec / ddp_world_size, peak_flops)
        if master_process:
            print(f'iter {iter_num}: loss {logged_loss:.4f}, '
                  f'{1000 * (now - log_time) / (iter_num - log_iter):.1f}ms/iter, '
                  f'{tokens_per_sec:,.0f} tok/s, mfu {100 * mfu:.2f}%, lr {lr:.2e}')
        log_time, log_iter = now, iter_num
        train_loss.zero_()

if master_process and not written_only:
    print(f'done: {time.time() - start_time:.1f}s of training (over its resumes), '
          f'peak memory {peak_memory_mb(device):,.0f} MiB' if not eval_only else
          f'evaluated: peak memory {peak_memory_mb(device):,.0f} MiB')
if ddp:
    destroy_process_group()
