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
import os
import sys
import time

import numpy as np
import torch
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

from aogpt.checkpoints import checkpoint_tokens, is_gpt2, save_checkpoint
from aogpt.common import (autocast, check_vocab, check_writable, default_device, default_dtype, find_checkpoint,
                          peak_memory_mb, read_checkpoint, trained_block)
from aogpt.fim import fim_batch, fim_vocab_size
from aogpt.runs import (PREEMPTED, Preemption, append_metrics, benchmark_chunks, check_data, check_files, check_finite,
                        check_fit, check_model_settings, check_resume, check_run_settings, gap_eval_chunks, is_best,
                        keep_best_note, metrics_record, parent_record, read_parent, run_files, run_order,
                        selection_reading, start_metrics, start_mode, world_size_note)
from aogpt.scoring import parse_gaps
from aogpt.training import (check_orders, describe_losses, gap_losses, learning_rate_at, make_ema, mean_loss,
                            order_settings, shares_at, training_inputs, val_half)
from configurator import configure, fail, rank, setting_keys
from model import GPTConfig, build_model

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
keep_best = ''  # '' or a reading, 'l2r' or 'ao' (the encoder's NELBO), or both weighted ('l2r:0.1,ao:0.9'): keep
# out_dir/best.pt at its lowest on the first half of val.bin (select_* in metrics.jsonl); val_* and the gaps are then
# read on the second half, which chose nothing
init_from = 'scratch'  # 'scratch', 'resume', 'auto' (resume if out_dir has a ckpt.pt), a checkpoint path / hf:..., or
# GPT-2: gpt2, gpt2-medium, gpt2-large, gpt2-xl or a folder saved by transformers (sigma-GPT's recipe)
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
fim_rate = 0.0  # order='l2r': a FIM GPT, the share of pieces rearranged for infilling (aogpt/fim.py; not fim orders)
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
# every setting is checked before any work (and, under torchrun, before the processes meet); what is cheap to check
# (the settings, the data's files, out_dir) before a parent is read or downloaded

check_run_settings(config)


stages = order_settings(config, overridden, architecture == 'encoder')  # a mixed run's; None for the others
check_orders(config, overridden, stages)
fim_max_span = config['fim_max_span']  # 0 where a config file's was dropped
try:
    gap_settings = parse_gaps(eval_gaps, '--eval_gaps')
except ValueError as e:
    fail(e)
ckpt_path, best_path, metrics_path = run_files(out_dir)
auto = init_from == 'auto'
init_from = start_mode(init_from, ckpt_path, eval_only, overwrite)
from_gpt2 = is_gpt2(init_from)
init_path = None if init_from == 'scratch' else init_from if from_gpt2 else find_checkpoint(init_from, out_dir)
check_files(dataset, init_from, from_gpt2)
if not eval_only:
    check_writable(out_dir, f'--out_dir={out_dir}')

# distributed setup: torchrun sets RANK; one process per device
ddp = int(os.environ.get('RANK', -1)) != -1 and int(os.environ.get('WORLD_SIZE', 1)) > 1
if ddp and gradient_accumulation_steps % int(os.environ['WORLD_SIZE']):
    fail(f'gradient_accumulation_steps ({gradient_accumulation_steps}) must be divisible by the number of '
         f'processes ({os.environ["WORLD_SIZE"]}): e.g. --gradient_accumulation_steps={os.environ["WORLD_SIZE"]}')
ddp_rank, ddp_local_rank, ddp_world_size = (int(os.environ[k]) for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE')) \
    if ddp else (0, 0, 1)
stop_group = None  # under DDP on GPUs: the group that agrees on a stop (Preemption.agreed)
master_process = ddp_rank == 0

# -----------------------------------------------------------------------------
# model: from scratch, resumed from out_dir/ckpt.pt, or started from a parent's EMA weights

model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size, bias=bias,
                  vocab_size=0, dropout=dropout, cond_dim=cond_dim, target_init_std=target_init_std,
                  gate_init=gate_init, target_injection=target_injection, architecture=architecture,
                  position_encoding=position_encoding, gelu=gelu)
# evaluated_at: the last iteration whose evaluation is in metrics.jsonl; best: with keep_best, {'iter', 'loss'} of the
# lowest selection reading so far (best.pt's); trained_seconds: the training before this process, over its resumes
iter_num, evaluated_at, best, trained_seconds = 0, None, None, 0.0
# parent: a new run's parent_record; block_from: whose block it reads; world_note: another world size's
checkpoint, parent, block_from, world_note = None, None, '', ''
if init_from == 'resume':
    model, checkpoint = read_checkpoint(init_path, use_ema=False)
    model.train()
    if 'block_size' not in overridden:  # the block the run trained on (a conversion's is its parent's)
        block_size = config['block_size'] = trained_block(model, checkpoint)
    check_resume(checkpoint, model.config, config, overridden, stages, auto, init_path)
    model_args = checkpoint['model_args']  # the architecture is the checkpoint's (no flag says otherwise)
    iter_num, parent, best = checkpoint['iter_num'], checkpoint.get('parent'), checkpoint.get('best')
    evaluated_at = checkpoint.get('evaluated_at', iter_num)  # a run stopped before an evaluation evaluates on resume
    trained_seconds = checkpoint.get('elapsed', 0.0)
    world_note = world_size_note(checkpoint, ddp_world_size, auto, init_path)
elif init_from != 'scratch':
    pretrained, pretrained_checkpoint = read_parent(init_path, from_gpt2)  # its EMA weights and architecture
    parent = parent_record(init_path, pretrained_checkpoint)
    if 'block_size' not in overridden:  # a fine-tune reads the parent's block unless told to read shorter ones
        block_size = config['block_size'] = trained_block(pretrained, pretrained_checkpoint)
        block_from = init_path
        if rank() == 0:
            print(f'block_size = {block_size}, the block of {init_path} (--block_size=N trains on shorter sequences)')
dataset_dir, (data_vocab, data_size), train_size = check_data(dataset, block_size, train_tokens, keep_best,
                                                              val_dataset, block_from)
vocab_note = '' if init_from == 'scratch' else check_vocab(checkpoint_tokens(
    checkpoint or pretrained_checkpoint, (model if checkpoint else pretrained).config.vocab_size),
    (data_vocab, data_size), dataset)
if init_from == 'scratch':
    torch.manual_seed(seed)  # the same initial weights on every process and every run
    table = GPTConfig.vocab_size if data_vocab == 'gpt2' else data_size  # GPT-2's table is padded
    model_args['vocab_size'] = fim_vocab_size(data_size, table) if fim_rate else table
    model = build_model(GPTConfig(**model_args))
elif init_from != 'resume':
    check_model_settings(pretrained.config, overridden, False, init_path, free=('dropout', 'block_size'))
    model_args = {k: getattr(pretrained.config, k) for k in model_args} | {'dropout': dropout}
    model = build_model(GPTConfig(**model_args))
    model.load_state_dict(pretrained.state_dict())
    pretrained = None  # free the memory
# the stored config says what is trained; its block_size stays the sequences' length (a finetune may train shorter)
config |= {k: v for k, v in model_args.items() if k in config and k != 'block_size'}
if model.config.is_encoder != (architecture == 'encoder'):  # the architecture came from the checkpoint
    stages = order_settings(config, overridden, model.config.is_encoder)
check_fit(model.config, config, trained_block(model, checkpoint) if checkpoint else model.config.block_size,
          init_from == 'resume', data_size, gap_settings)
fixed_order = run_order(checkpoint, order_file, config, init_path)
val_chunks = benchmark_chunks(val_dataset, data_vocab, dataset, data_dir, block_size, batch_size, eval_iters) \
    if val_dataset else None
gap_chunks = gap_eval_chunks(val_chunks, dataset_dir, keep_best, block_size, eval_iters * batch_size) \
    if gap_settings else None

if ddp:
    init_process_group(backend='nccl' if device.startswith('cuda') else 'gloo')
    if device.startswith('cuda'):
        device = f'cuda:{ddp_local_rank}'
        torch.cuda.set_device(device)
    gradient_accumulation_steps //= ddp_world_size
    # the stop flag is all-reduced on the CPU: by gloo beside NCCL (on the CPU the default group is gloo already)
    stop_group = torch.distributed.new_group(backend='gloo') if device.startswith('cuda') else None
tokens_per_iter = gradient_accumulation_steps * ddp_world_size * batch_size * block_size
device_type = torch.device(device).type
if device_type == 'cuda':
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
ctx = autocast(device, dtype)
model.to(device)
if master_process:
    print(f'tokens per iteration: {tokens_per_iter:,}')
    if val_dataset:
        print(f'val losses on {val_dataset} validation: {len(val_chunks)} chunks of {block_size} tokens')
    for note in filter(None, (vocab_note, world_note, keep_best_note(model.config.is_encoder, keep_best))):
        print(note)
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

raw_model, eval_model = model, ema.module.eval()
if compile:
    if master_process:
        print('compiling the model... (takes a minute)')
    model = torch.compile(model)
    eval_model = torch.compile(eval_model)
if ddp:  # no buffer to broadcast: the rotary tables are made from the config on every process
    model = DDP(model, device_ids=[ddp_local_rank] if device_type == 'cuda' else None, broadcast_buffers=False)


# -----------------------------------------------------------------------------
# batches: block_size tokens of the data, read in an order of the run's order mode (a decoder) or seen through a
# random mask (the encoder); a batch is the model's arguments

def model_inputs(x, order_mode, generator=None, shares=None, hide=0.0):
    """The model's arguments for the rows x, on the device (training.training_inputs); shares: a mixed run's; hide:
    the share of input tokens hidden (training only)."""
    inputs = training_inputs(raw_model, x, order_mode, generator, shares, fixed_order, mask_eps, fim_max_span, hide)
    return tuple(t.pin_memory().to(device, non_blocking=True) if device_type == 'cuda' else t.to(device)
                 for t in inputs)


def get_batch(split, order_mode, generator=None, shares=None, hide=0.0, fim=0.0):
    """Random windows of train.bin (its first train_size tokens), or of val.bin; with keep_best, 'select' and 'val'
    read its halves (training.val_half). fim: the FIM GPT's rate (training only: every reading is of plain windows)."""
    # a fresh memmap per batch avoids a memory leak (numpy keeps pages of an old one alive)
    data = np.memmap(os.path.join(dataset_dir, f"{'train' if split == 'train' else 'val'}.bin"), dtype=np.uint16,
                     mode='r')
    data = data[:train_size] if split == 'train' else \
        val_half(data, ('select' if split == 'select' else 'report') if keep_best else '')
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator).tolist()
    x = torch.from_numpy(np.stack([data[i:i + block_size] for i in starts]).astype(np.int64))
    if fim:
        x = fim_batch(x, fim, data_size, generator)
    return model_inputs(x, order_mode, generator, shares, hide)


def eval_batches(split, order_mode, generator):
    """One evaluation's batches: eval_iters random windows of the split, or for val with val_dataset its chunks."""
    if split == 'val' and val_chunks is not None:
        for x in val_chunks.split(batch_size):
            yield model_inputs(x, order_mode, generator)
    else:
        for _ in range(eval_iters):
            yield get_batch(split, order_mode, generator)


EVAL_LOGITS = 2**25  # logits held at once in an evaluation (128 MiB in float32), whatever the vocabulary


@torch.no_grad()
def estimate_losses():
    """Mean EMA-weight loss on train and val (or val_dataset), with keep_best also on val.bin's selection half
    ('select'), left-to-right and any-order (random orders; the encoder's NELBO, its l2r loss at one position a row),
    a fixed-order run's in its order ('fixed', as the authors' trainer), and the gaps (gap_losses). None when a stop
    was asked before it ended (read between batches): it is not recorded."""
    generator = torch.Generator().manual_seed(seed)  # the same batches and orders every time
    fixed = None if fixed_order is None else fixed_order.to(device)
    out = {}
    for split in ('train', 'val', 'select') if keep_best else ('train', 'val'):
        for mode, name in (('l2r', 'l2r'), ('random', 'ao')):
            losses = {}
            for x, *rest in eval_batches(split, mode, generator):
                if preemption.asked():
                    return None
                readings = {name: rest}
                if fixed is not None and mode == 'l2r':
                    readings['fixed'] = [fixed.expand_as(x)]
                for key, args in readings.items():
                    losses.setdefault(key, []).append(mean_loss(eval_model, (x, *args), ctx, EVAL_LOGITS))
            out.update({f'{split}_{key}': sum(v) / len(v) for key, v in losses.items()})
    gaps = gap_losses(ema.module, gap_chunks, gap_settings, ctx, batch_size, preemption.asked) if gap_settings else {}
    return None if gaps is None or preemption.asked() else out | gaps


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


def stop():
    """Save the iteration the run stopped at (unless out_dir/ckpt.pt holds it) and exit with PREEMPTED."""
    if master_process and saved_at != iter_num:
        save_checkpoint(checkpoint_now(round(time.time() - start_time, 2)), ckpt_path)
    if master_process:
        print(f'stopped by {preemption.by()} at iter {iter_num}: saved {ckpt_path}; the same command with '
              '--init_from=auto goes on')
    if ddp:  # every process leaves once the checkpoint is written: torchrun stops the rest when one exits
        torch.distributed.barrier()
        destroy_process_group()
    sys.exit(PREEMPTED)


preemption = Preemption()  # SIGTERM / SIGUSR1: finish the iteration, or drop the evaluation, then save and exit
if not eval_only:
    preemption.install()
if master_process and not eval_only:
    start_metrics(metrics_path, init_from == 'resume', iter_num)
if wandb_log and master_process and not eval_only:
    import wandb
    wandb.init(project=wandb_project, name=wandb_run_name, config=config)

# -----------------------------------------------------------------------------
# training loop
start_time = time.time() - trained_seconds  # elapsed: seconds of training over every resume
written_only = max_iters == 0 and init_from != 'resume' and not eval_only  # a conversion (GPT-2's, say): no evaluation
if written_only and master_process:
    save_checkpoint(checkpoint_now(0.0), ckpt_path)
    print(f'--max_iters=0: wrote the starting weights to {ckpt_path}, not evaluated (--eval_only evaluates them)')
log_time, log_iter, tokens_per_sec = time.time(), iter_num, 0.0
train_loss = torch.zeros((), device=device)  # summed on the device between logs: no sync per step
saved_at = iter_num if init_from == 'resume' else None  # the iteration out_dir/ckpt.pt holds
while not written_only:
    lr = learning_rate_at(iter_num, learning_rate, warmup_iters, lr_decay_iters, min_lr) if decay_lr else learning_rate
    for group in optimizer.param_groups:
        group['lr'] = lr

    if not eval_only and preemption.agreed(ddp, stop_group):
        stop()
    evaluate_now = (iter_num % eval_interval == 0 or iter_num == max_iters) and iter_num != evaluated_at
    losses = estimate_losses() if master_process and (evaluate_now or eval_only) else None
    if losses is not None:
        epochs = iter_num * tokens_per_iter / train_size
        print(f'iter {iter_num}: ' + describe_losses(losses) + (f' | epoch {epochs:.2f}' if train_tokens else ''))
        if eval_only:
            break
        for name, value in losses.items():
            check_finite(f'EMA {name} loss', value, iter_num, ckpt_path, init_path, dtype)
        elapsed = round(time.time() - start_time, 2)
        record = metrics_record(iter_num, epochs, elapsed, lr, tokens_per_sec, losses, parent, fim_rate)
        append_metrics(metrics_path, record)
        evaluated_at = iter_num
        if wandb_log:
            wandb.log(record)
        if is_best(best, losses, keep_best):
            best = dict(iter=iter_num, loss=selection_reading(losses, keep_best))
            save_checkpoint(checkpoint_now(elapsed), best_path)  # before ckpt.pt: a resume re-evaluates, not skips
            print(f'saved the best {keep_best} reading so far to {best_path}')
        if iter_num > 0:
            save_checkpoint(checkpoint_now(elapsed), ckpt_path)
            saved_at = iter_num
            print(f'saved checkpoint to {out_dir}')
    if evaluate_now and not eval_only and preemption.agreed(ddp, stop_group):  # a stop signal dropped the evaluation
        stop()
    if eval_only or iter_num >= max_iters:
        break

    # an iteration's batches, orders and dropout hang on (seed, rank, iteration) alone: a resume sees what a run would
    torch.manual_seed(hash((seed, ddp_rank, iter_num)))
    shares = None if stages is None else shares_at(stages, iter_num)
    for micro_step in range(gradient_accumulation_steps):
        if ddp:  # all-reduce the gradients only once, on the last micro-step
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
        inputs = get_batch('train', order, shares=shares, hide=input_mask, fim=fim_rate)
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
        check_finite('the training loss', logged_loss, iter_num, ckpt_path, init_path, dtype)
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
