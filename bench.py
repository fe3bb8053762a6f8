"""
Speed figures as ratios, measured side by side in one run on the same model and weights.

    python bench.py                 # a small model on the CPU
    python bench.py --device=cuda --dtype=bfloat16 --compile=True --n_layer=12 --n_head=12 --n_embd=768 \\
        --block_size=1024 --batch_size=16

training: tokens/s of whole training steps (order sampling, forward, backward, AdamW) with
left-to-right orders ('l2r', a plain GPT) and with the any-order mix ('mixed', 90% random
permutations). The modes take turns, `rounds` times, and the median round of each is reported.
"""
import time
from contextlib import nullcontext

import torch

from model import GPT, GPTConfig, sample_orders

device = 'cpu'
dtype = 'float32'  # 'float32', 'bfloat16' or 'float16'
compile = False
seed = 1337
n_layer = 4
n_head = 4
n_embd = 128
cond_dim = 64
block_size = 256
batch_size = 4
vocab_size = 50304
steps = 4  # timed training steps per round
rounds = 5
config_keys = [k for k, v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))]
from configurator import configure  # noqa: E402
configure(globals(), config_keys, doc=__doc__)
# -----------------------------------------------------------------------------


def sync():
    if device.startswith('cuda'):
        torch.cuda.synchronize()


def bench_training():
    torch.manual_seed(seed)
    device_type = 'cuda' if device.startswith('cuda') else 'cpu'
    ctx = nullcontext() if dtype == 'float32' else torch.autocast(device_type, dtype=getattr(torch, dtype))
    model = GPT(GPTConfig(block_size=block_size, vocab_size=vocab_size, n_layer=n_layer, n_head=n_head,
                          n_embd=n_embd, cond_dim=cond_dim)).to(device)
    optimizer = model.configure_optimizers(0.05, 1e-4, (0.9, 0.95), device_type)
    step_model = torch.compile(model) if compile else model
    x = torch.randint(vocab_size, (batch_size, block_size), device=device)

    def train_steps(mode, n):
        for _ in range(n):
            order = sample_orders(mode, batch_size, block_size, random_ratio=0.9).to(device)
            with ctx:
                _, loss = step_model(x, order)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        sync()

    modes = ('l2r', 'mixed')
    for mode in modes:  # warm up (and compile) before timing
        train_steps(mode, 2)
    seconds = {mode: [] for mode in modes}
    for _ in range(rounds):
        for mode in modes:
            t0 = time.perf_counter()
            train_steps(mode, steps)
            seconds[mode].append(time.perf_counter() - t0)
    tokens_per_sec = {m: steps * batch_size * block_size / sorted(s)[len(s) // 2] for m, s in seconds.items()}
    print(f'training: {model.get_num_params() / 1e6:.1f}M params, batch {batch_size} x {block_size}, '
          f'{device} {dtype}{" compiled" if compile else ""}')
    for mode in modes:
        print(f'  order={mode:<6} {tokens_per_sec[mode]:>12,.0f} tok/s')
    overhead = tokens_per_sec['l2r'] / tokens_per_sec['mixed'] - 1
    print(f'  any-order overhead (l2r tok/s / mixed tok/s - 1): {100 * overhead:+.1f}%')


bench_training()
