"""
Train an Any-Order GPT (AO-GPT). On one CPU or GPU:

    python train.py config/train_shakespeare_char.py
    python train.py config/train_shakespeare_char.py --max_iters=500 --order=l2r

With DDP on the GPUs of one node (or `torchrun train.py ...` for a single process):

    torchrun --standalone --nproc_per_node=8 train.py config/train_ao_gpt_small.py

Any setting below can be overridden by a config file and by --key=value; --help lists them.
init_from: 'scratch', 'resume' (out_dir/ckpt.pt, exactly where it stopped), or the path of a
checkpoint (ours or the authors' released format) whose EMA weights start a new run.
"""
import json
import math
import os
import pickle
import time
from contextlib import nullcontext

import numpy as np
import torch
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

from model import GPT, GPTConfig, ORDER_MODES, load_checkpoint, make_ema, make_fixed_order, sample_orders

# -----------------------------------------------------------------------------
# default config values: GPT-2 small sized AO-GPT on OpenWebText
# I/O
out_dir = 'out'
eval_interval = 2000
log_interval = 10
eval_iters = 200
eval_only = False  # evaluate once and exit
init_from = 'scratch'
# wandb logging
wandb_log = False
wandb_project = 'ao-gpt'
wandb_run_name = 'ao-gpt'
# data
dataset = 'openwebtext'
gradient_accumulation_steps = 32  # summed over all processes
batch_size = 16  # micro-batch size per process
block_size = 1024
# training orders
order = 'mixed'  # one of ORDER_MODES
random_ratio = 0.9  # 'mixed': fraction of sequences in a random order (the rest left-to-right)
order_block = 16  # 'block_random': size of the blocks shuffled within
# model
n_layer = 12
n_head = 12
n_embd = 768
cond_dim = 128
dropout = 0.0
bias = True
target_injection = 'adaln'  # 'adaln' or 'add'
# AdamW
learning_rate = 6e-4
max_iters = 400000
weight_decay = 0.05
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0  # 0 disables
# learning rate schedule: linear warmup, then cosine down to min_lr
decay_lr = True
warmup_iters = 2500
lr_decay_iters = 400000
min_lr = 6e-5
# EMA of the weights, used for evaluation and saved in checkpoints
ema_decay = 0.9999
# system
device = 'cuda' if torch.cuda.is_available() else 'cpu'  # 'cpu', 'cuda', 'cuda:1', 'mps'
dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'float32'  # or 'float16'
compile = torch.cuda.is_available()
seed = 1337
peak_flops = 989e12  # per device, for MFU: H100 bf16 dense
# -----------------------------------------------------------------------------
config_keys = [k for k, v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))]
from configurator import configure, fail  # noqa: E402
configure(globals(), config_keys, doc=__doc__)
config = {k: globals()[k] for k in config_keys}
# -----------------------------------------------------------------------------


if order not in ORDER_MODES:
    fail(f"--order must be one of {', '.join(ORDER_MODES)}, got {order!r}")
if dtype not in ('float32', 'bfloat16', 'float16'):
    fail(f"--dtype must be float32, bfloat16 or float16, got {dtype!r}")
if init_from == 'resume' and not os.path.exists(os.path.join(out_dir, 'ckpt.pt')):
    fail(f'--init_from=resume but {os.path.join(out_dir, "ckpt.pt")} does not exist')

# distributed setup: torchrun sets RANK; one process per device
ddp = int(os.environ.get('RANK', -1)) != -1 and int(os.environ.get('WORLD_SIZE', 1)) > 1
if ddp:
    init_process_group(backend='nccl' if device.startswith('cuda') else 'gloo')
    ddp_rank, ddp_local_rank, ddp_world_size = (int(os.environ[k]) for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE'))
    if device.startswith('cuda'):
        device = f'cuda:{ddp_local_rank}'
        torch.cuda.set_device(device)
    if gradient_accumulation_steps % ddp_world_size:
        fail(f'gradient_accumulation_steps ({gradient_accumulation_steps}) must be divisible by '
             f'the number of processes ({ddp_world_size})')
    gradient_accumulation_steps //= ddp_world_size
else:
    ddp_rank, ddp_world_size = 0, 1
master_process = ddp_rank == 0
tokens_per_iter = gradient_accumulation_steps * ddp_world_size * batch_size * block_size
if master_process:
    print(f'tokens per iteration: {tokens_per_iter:,}')
    os.makedirs(out_dir, exist_ok=True)

device_type = 'cuda' if device.startswith('cuda') else 'cpu'
if device_type == 'cuda':
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
ctx = nullcontext() if dtype == 'float32' else torch.autocast(device_type=device_type, dtype=ptdtype)

# -----------------------------------------------------------------------------
# data: uint16 token memmaps; a sequence is block_size tokens read in a sampled order
data_dir = os.path.join('data', dataset)
for split in ('train', 'val'):
    path = os.path.join(data_dir, f'{split}.bin')
    if not os.path.exists(path):
        fail(f'{path} not found: run python data/{dataset}/prepare.py first')
    if os.path.getsize(path) // 2 <= block_size:
        fail(f'{path} holds fewer than block_size={block_size} tokens: use a smaller --block_size')


def get_batch(split, order_mode, generator=None):
    # a fresh memmap per batch avoids a memory leak (numpy keeps pages of an old one alive)
    data = np.memmap(os.path.join(data_dir, f'{split}.bin'), dtype=np.uint16, mode='r')
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator).tolist()
    x = torch.from_numpy(np.stack([data[i:i + block_size] for i in starts]).astype(np.int64))
    o = sample_orders(order_mode, batch_size, block_size, generator, random_ratio, fixed_order)
    if device_type == 'cuda':
        return x.pin_memory().to(device, non_blocking=True), o.pin_memory().to(device, non_blocking=True)
    return x.to(device), o.to(device)


def seed_iteration(iteration):
    # the batches, orders and dropout of an iteration depend only on (seed, rank, iteration),
    # so a resumed run sees exactly what an uninterrupted one would
    torch.manual_seed(hash((seed, ddp_rank, iteration)))


# -----------------------------------------------------------------------------
# model, optimizer, EMA
meta_path = os.path.join(data_dir, 'meta.pkl')
vocab_size = 50304
if os.path.exists(meta_path):
    with open(meta_path, 'rb') as f:
        vocab_size = pickle.load(f)['vocab_size']
model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size, bias=bias,
                  vocab_size=vocab_size, dropout=dropout, cond_dim=cond_dim, target_injection=target_injection)
iter_num = 0
resumed_at = None
checkpoint = None
fixed_order = make_fixed_order(order, block_size, order_block, torch.Generator().manual_seed(seed))
torch.manual_seed(seed)  # the same initial weights on every process and every run
if init_from == 'scratch':
    try:
        model = GPT(GPTConfig(**model_args))
    except ValueError as e:
        fail(e)
elif init_from == 'resume':
    checkpoint = torch.load(os.path.join(out_dir, 'ckpt.pt'), map_location='cpu', weights_only=True)
    model_args = checkpoint['model_args']  # the architecture is the checkpoint's, whatever the flags say
    model = GPT(GPTConfig(**model_args))
    model.load_state_dict(checkpoint['model'])
    iter_num = checkpoint['iter_num']
    resumed_at = iter_num  # already evaluated and saved there
    fixed_order = checkpoint['fixed_order']
else:
    pretrained, _ = load_checkpoint(init_from)  # its EMA weights; the architecture is the checkpoint's
    model_args = {k: getattr(pretrained.config, k) for k in model_args} | {'dropout': dropout}
    model = GPT(GPTConfig(**model_args))
    model.load_state_dict(pretrained.state_dict())
if block_size > model.config.block_size or (init_from == 'resume' and block_size != model.config.block_size):
    fail(f'--block_size={block_size} does not fit the checkpoint (block_size {model.config.block_size})')
if model.config.vocab_size < vocab_size:
    fail(f'the model has {model.config.vocab_size} tokens but {dataset} needs {vocab_size}')
model.to(device)
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
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank] if device_type == 'cuda' else None)


@torch.no_grad()
def estimate_losses():
    """Mean EMA-weight loss on train and val, left-to-right and any-order (random orders)."""
    generator = torch.Generator().manual_seed(seed)  # the same batches and orders every time
    out = {}
    for split in ('train', 'val'):
        for mode, name in (('l2r', 'l2r'), ('random', 'ao')):
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                x, o = get_batch(split, mode, generator)
                with ctx:
                    _, loss = eval_model(x, o)
                losses[k] = loss.item()
            out[f'{split}_{name}'] = losses.mean().item()
    return out


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


def save_checkpoint():
    checkpoint = {
        'model': raw_model.state_dict(),
        'ema': ema.module.state_dict(),
        'ema_updates': int(ema.n_averaged),
        'optimizer': optimizer.state_dict(),
        'scaler': scaler.state_dict(),
        'model_args': model_args,
        'iter_num': iter_num,
        'fixed_order': fixed_order,
        'config': config,
    }
    path = os.path.join(out_dir, 'ckpt.pt')
    torch.save(checkpoint, path + '.tmp')
    os.replace(path + '.tmp', path)  # atomic: a crash mid-write never leaves a broken ckpt.pt


def stop_on_nonfinite(what, value):
    if not math.isfinite(value):
        fail(f'{what} is {value} at iter {iter_num}; stopped without saving, the last good checkpoint in '
             f'{out_dir} is untouched (try a lower learning_rate, or dtype=bfloat16 instead of float16)')


if wandb_log and master_process:
    import wandb
    wandb.init(project=wandb_project, name=wandb_run_name, config=config)

# -----------------------------------------------------------------------------
# training loop
start_time = time.time()
log_time, log_iter = start_time, iter_num
tokens_per_sec = 0.0
train_loss = torch.zeros((), device=device)  # summed on the device between logs: no sync per step
while True:
    lr = get_lr(iter_num) if decay_lr else learning_rate
    for group in optimizer.param_groups:
        group['lr'] = lr

    evaluate_now = (iter_num % eval_interval == 0 or iter_num == max_iters) and iter_num != resumed_at
    if master_process and (evaluate_now or eval_only):
        losses = estimate_losses()
        print(f"iter {iter_num}: EMA loss l2r train {losses['train_l2r']:.4f} val {losses['val_l2r']:.4f} | "
              f"any-order train {losses['train_ao']:.4f} val {losses['val_ao']:.4f}")
        for name, value in losses.items():
            stop_on_nonfinite(f'EMA {name} loss', value)
        record = dict(iter=iter_num, elapsed=round(time.time() - start_time, 2), lr=lr,
                      tokens_per_sec=round(tokens_per_sec, 1), **losses)
        with open(os.path.join(out_dir, 'metrics.jsonl'), 'a') as f:
            f.write(json.dumps(record) + '\n')
        if wandb_log:
            wandb.log(record)
        if iter_num > 0 and not eval_only:
            save_checkpoint()
            print(f'saved checkpoint to {out_dir}')
    if eval_only or iter_num >= max_iters:
        break

    seed_iteration(iter_num)
    for micro_step in range(gradient_accumulation_steps):
        if ddp:  # all-reduce the gradients only once, on the last micro-step
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
        x, o = get_batch('train', order)
        with ctx:
            _, loss = model(x, o)
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
        mean_loss = train_loss.item() / (iter_num - log_iter)  # .item() waits for the device
        stop_on_nonfinite('the training loss', mean_loss)
        now = time.time()
        tokens_per_sec = tokens_per_iter * (iter_num - log_iter) / (now - log_time)
        mfu = raw_model.estimate_mfu(tokens_per_sec / ddp_world_size, peak_flops)
        if master_process:
            print(f'iter {iter_num}: loss {mean_loss:.4f}, {1000 * (now - log_time) / (iter_num - log_iter):.1f}ms/iter, '
                  f'{tokens_per_sec:,.0f} tok/s, mfu {100 * mfu:.2f}%, lr {lr:.2e}')
        log_time, log_iter = now, iter_num
        train_loss.zero_()

if master_process:
    print(f'done in {time.time() - start_time:.1f}s')
if ddp:
    destroy_process_group()
