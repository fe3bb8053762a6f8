"""
The timing tools of bench.py: medians of runs taking turns, where a call's time goes (the profiler, CUDA's host
syncs, the share in the model's forwards), and the slow samplers the fast ones are timed against.
"""
import contextlib
import os
import sys
import time
import warnings

import torch

from aogpt.engine import Engine, Forward, Sampling, sample_tokens, step_sizes


def sync(device):
    if device.startswith('cuda'):
        torch.cuda.synchronize()


def median_seconds(runs, rounds):
    """Median seconds of each of runs (name -> function) over `rounds` rounds, the runs taking turns after one
    warm-up (and compile) call each, so that the machine's load falls on all of them alike."""
    for fn in runs.values():
        fn()
    seconds = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - t0)
    return {name: sorted(s)[len(s) // 2] for name, s in seconds.items()}


def profile_call(what, fn, device):
    """Print the operations that take the most device time (CPU time on a CPU) in fn()."""
    cuda = device.startswith('cuda')
    activities = [torch.profiler.ProfilerActivity.CPU] + [torch.profiler.ProfilerActivity.CUDA] * cuda
    with torch.profiler.profile(activities=activities) as prof:
        fn()
    print(f'{what}: the costliest operations')
    print(prof.key_averages().table(sort_by='self_device_time_total' if cuda else 'self_cpu_time_total',
                                    row_limit=15, max_name_column_width=70))


def count_syncs(fn):
    """The host syncs CUDA sees in fn() (torch.cuda.set_sync_debug_mode's warnings)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter('always')
        torch.cuda.set_sync_debug_mode('warn')
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode('default')
    return sum('synchronizing' in str(w.message) for w in seen)


def forward_share(fn, device):
    """The share of fn()'s wall time spent in the decoding forwards (engine.Forward; the rest: sampling and
    bookkeeping)."""
    inner, spent = Forward.__call__, [0.0]

    def timed(self, *args, **kwargs):
        sync(device)
        t0 = time.perf_counter()
        out = inner(self, *args, **kwargs)
        sync(device)
        spent[0] += time.perf_counter() - t0
        return out

    Forward.__call__ = timed
    try:
        t0 = time.perf_counter()
        fn()
        return spent[0] / (time.perf_counter() - t0)
    finally:
        Forward.__call__ = inner


@torch.no_grad()
def sample_uncached(model, x, n_steps, generator):
    """Encoder-style sampling in a random order: every step reads the start slot and all the tokens
    decoded so far again (the engine starts afresh at each step)."""
    B, T = x.shape
    order = torch.rand(B, T, generator=generator, device=x.device).argsort(1)
    start = torch.full((B, 1), -1, device=x.device)
    engine = Engine(model, B, T)
    done = 0
    for k in step_sizes(T, n_steps):
        engine.reset()
        positions, targets = torch.cat([start, order[:, :done]], 1), order[:, done:done + k]
        logits = engine.step(x.gather(1, positions.clamp(min=0)), positions, targets)
        x.scatter_(1, targets, sample_tokens(logits, Sampling(), generator))
        done += k
    return x


def authors_generator(authors_dir, model, device):
    """The authors' cached decoder (authors_dir's model_AOGPT_generate) with model's weights: generate(x) samples
    x's rows in a random order, eagerly."""
    sys.path.insert(0, os.path.abspath(authors_dir))
    import model_AOGPT_generate as theirs
    c = model.config
    with contextlib.redirect_stdout(None):  # their constructor prints the parameter count
        net = theirs.AOGPT(theirs.AOGPTConfig(block_size=c.block_size, vocab_size=c.vocab_size, n_layer=c.n_layer,
                                              n_head=c.n_head, n_embd=c.n_embd, bias=c.bias)).to(device).eval()
    net.load_state_dict(model.state_dict())

    def generate_theirs(x, n_steps):
        with torch._dynamo.config.patch(disable=True), contextlib.redirect_stdout(None):  # it prints the cache's shape
            net.clean_kv_cache()
            net.generate(x.size(0), n_steps, device)
    return generate_theirs
