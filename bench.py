"""
Speed figures as ratios, measured side by side in one run on the same model and weights.

    python bench.py                 # a small model on the CPU
    python bench.py --device=cuda --dtype=bfloat16 --compile=True --n_layer=12 --n_head=12 --n_embd=768 \\
        --block_size=1024 --batch_size=16
    python bench.py --run=speculate --checkpoint=out-shakespeare-char/ckpt.pt   # speculative decoding, trained
    python bench.py --run=step --checkpoint=out-shakespeare-char/ckpt.pt        # eager against compiled steps
    python bench.py --run=infill                    # a gap of no length: AO-GPT's posterior and fill vs the FIM GPT

training: tokens/s of whole training steps (order sampling, forward, backward, AdamW) with
left-to-right orders ('l2r', a plain GPT) and with the any-order mix ('mixed', 90% random
permutations), each with learned and with rotary positions (model.py's position_encoding). The
four take turns, `rounds` times, and the median round of each is reported.

eval ensemble: eval_ppl.py's fast ensemble (of 8 context orders) against the authors' one full forward per
(target, member), per block length, with how close the fast path gets to the sum of prefix lengths.

sampling: sample.py's cached any-order sampler against the same model sampled encoder-style (no
cache: every step runs the model over the whole decoded prefix), at block size `sample_block_size`
for each of `sample_steps` (a comma list); then tokens/s of order=l2r vs random at
one token per step, and the cost of order=confidence vs random at the smallest of `sample_steps`.
step: decoding steps eager against compiled (engine.compile_decoding: static shapes, CUDA graphs on a GPU), one
token per step in a random order, the last `step_tokens` positions of the block after a prompt of the rest, at each
batch of `step_batches`, taking turns, with the first (compiling) call timed apart; beside them compiled speculative
decoding (--speculate=auto's k, where it is not 0). On a trained `checkpoint` first, then on the bench's random model
at block `sample_block_size`. --sync_check=True (CUDA) counts the host syncs of a compiled call; --step_profile=True
prints the costliest operations of one.
long: sample.py's sampler at block `sample_block_size`, batch `batch_size`, random order, for each of `sample_steps`:
eager against compiled steps (engine.compile_decoding), and with --authors_dir=path/to/AO-GPT-MDM the authors'
KV-cached generate on the same weights (their model_AOGPT_generate.py, run eagerly: their @torch.compile decorators
off, as tests/fixtures/make_fixtures.py runs it; their generate decodes 1,024 tokens, so the block must be 1024), all
at their sampling defaults (top_p 0.9, temperature 0.9); median of `rounds`, taking turns.
memory: the peak memory of eval_ppl.py's evaluation (after 1 and after 3 chunks: flat) and of
sample.py, at block size `sample_block_size` with the bench's vocabulary (GPT-2's by default).
arch: the paper's architectures at the same size: AO-GPT (a decoder, target_injection=adaln), the
sigma-GPT baseline (add) and the encoder-only MDM (architecture=encoder), and our two target settings
(two_stream, and queries with rotary positions). Training tok/s (mixed
orders; the encoder on its NELBO masks), taking turns as above; then generation wall time against
the number of steps (`sample_steps`) at block `sample_block_size`, random order, same batch: the
decoders with their KV cache (about flat in the steps), the encoder with a full forward per step
(growing with the steps), with the encoder / AO-GPT ratio (the paper's Figure 4). Each generation
is timed once, after a warm-up, the models taking turns.
generate: transformers' generate() on an exported folder's causal LM (aogpt/modeling_ao_gpt.py; needs transformers) at block
`sample_block_size`, greedy, `generate_tokens` new tokens after a prompt of one, at batch 1 and `batch_size`: with
its cache (a DynamicCache) against without (every step reads the whole input) and against the folder's own cached
sampler (model.sample, order='l2r', temperature 0), with whether the three give the same tokens; median of `rounds`.
speculate: sample.py's speculative decoding (--speculate=k, for each k of `speculate_k`, 'auto' the k
that --speculate=auto takes) against one token per step, the same samples' distribution: wall time
(median round, taking turns as above), forwards per token, the share of drafts kept, the share of the
time spent in the model's forwards and the speedup were the rest (sampling, bookkeeping) free, for each
top_p of `speculate_top_p`, in random and left-to-right order, at batch 1 and batch `batch_size`, 4
batches' worth of samples of `speculate_tokens` tokens drawn as gen_ppl.py draws them
(speculatively, the rows take turns: a row that finishes starts the next sample); on a trained
`checkpoint` first, then (unless --speculate_random=False) on the bench's random model at block
`sample_block_size` (GPT-2's vocabulary by default). How many drafts are kept depends on how much the
model's predictions depend on each other, so a random model's figures say little about a trained
one's: give a trained `checkpoint`.
infill: a gap of no given length, at batch 1 and 16 (`infill_batches`), block `sample_block_size`: AO-GPT's length
posterior over 1..`infill_cap` then its fill at the most likely length, left to right with its cache, against the FIM
GPT's cached generation of as many tokens after its prompt (the same network and weights), with the posterior's own
time and the ratio, and the ratio again with the posterior reading `infill_context` suffix tokens (--gap_context);
median of `rounds`, taking turns.
The defaults take several minutes on 2 CPU cores: --sample_steps=64 for a quick look, and
--run=train (or eval, sample, memory, arch, a comma list) for only some of the benchmarks.
"""
import copy
import dataclasses
import functools
import itertools
import math
import os
import time

import torch

from aogpt.checkpoints import token_count
from aogpt.common import (at_least, autocast, check_device, check_settings, find_checkpoint, hold_freed_memory,
                          peak_memory_mb, print_table, read_checkpoint, reset_peak_memory)
from aogpt.decoding import generate, generate_many
from aogpt.engine import Sampling, compile_decoding
from aogpt.fim import PROMPT_SENTINELS, SENTINELS
from aogpt.infilling import fill_gap, fim_fill, length_logprobs
from aogpt.sampling import TOP_P_RULE, parse_list
from aogpt.scoring import ensemble_logprobs, query_batches, random_context_orders, score_chunks
from aogpt.speculative import Speculation, auto_k
from aogpt.timing import (authors_generator, count_syncs, forward_share, median_seconds, profile_call,
                          sample_uncached, sync)
from aogpt.training import training_inputs
from configurator import configure, count_of, fail
from model import GPTConfig, build_model

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
train_steps = 4  # timed training steps per round
rounds = 5
run = 'train,eval,sample,step,memory,arch'  # which benchmarks, in order
sample_block_size = 1024
sample_steps = '64,256,1024'
speculate_k = '2,4,8,16,auto'  # speculate: the k to try ('auto': what --speculate=auto takes)
speculate_top_p = '1.0,0.9'  # speculate: each top_p to sample with
speculate_tokens = 256  # speculate: tokens per sample (at most the block)
generate_tokens = 200  # generate: new tokens a row (at most sample_block_size - 2)
infill_cap = 64  # infill: the longest gap tried (lengths 1 to it)
infill_context = 16  # infill: AO-GPT's posterior read again on this many suffix tokens (sample.py --gap_context)
infill_batches = '1,16'  # infill: the batch sizes
step_tokens = 256  # step: tokens decoded one per step, after a prompt of the rest of the block
step_batches = '1,16'  # step: the batch sizes
sync_check = False  # step, on CUDA: count the host syncs of a compiled call (at step_tokens and half as many steps)
step_profile = False  # step: the profiler's costliest operations in a compiled call at each batch (where time goes)
checkpoint = ''  # speculate and step: a trained checkpoint to decode with, before the bench's random model (a path,
# a model folder, hf:owner/repo/file or hf:owner/repo, as the other scripts' init_from)
speculate_random = True  # speculate: the bench's random model too (False: the checkpoint only)
arch_train = True  # arch: time the architectures' training too (False: their generation only)
authors_dir = ''  # long: a checkout of the authors' repository (github.com/scxue/AO-GPT-MDM), to time their generate
# -----------------------------------------------------------------------------


# the benchmarks that read each setting of the rules below: a setting is checked only where --run names one of them
READ_BY = {'sample_steps': ('sample', 'long', 'arch'), 'speculate_k': ('speculate',),
           'speculate_tokens': ('speculate',), 'step_tokens': ('step',), 'generate_tokens': ('generate',),
           'infill_cap': ('infill',), 'infill_context': ('infill',)}


def check_inputs():
    global checkpoint_file
    check_settings(globals(), {
        **dict.fromkeys(['n_layer', 'n_head', 'n_embd', 'cond_dim', 'block_size', 'batch_size', 'vocab_size',
                         'train_steps', 'rounds', 'sample_block_size'], at_least(1)),
        'run': (lambda v: v and set(v.split(',')) <= set(BENCHES), f"a comma list of {', '.join(BENCHES)}"),
    })
    runs = set(run.split(','))
    rules = {
        'sample_steps': (lambda v: all(1 <= count_of(s) <= sample_block_size for s in v.split(',')),
                         f'a comma list of step counts from 1 to sample_block_size ({sample_block_size})'),
        'speculate_k': (lambda v: all(s == 'auto' or count_of(s) for s in v.split(',')),
                        "a comma list of ints >= 1 and 'auto'"),
        'speculate_tokens': at_least(1), 'step_tokens': at_least(1),
        'generate_tokens': (lambda v: type(v) is int and 1 <= v <= sample_block_size - 2,
                            f'an int from 1 to sample_block_size - 2 ({sample_block_size - 2}): the prompt and a next '
                            f'position take the rest'),
        'infill_cap': (lambda v: type(v) is int and 1 <= v <= sample_block_size - 2 - PROMPT_SENTINELS,
                       f'an int from 1 to sample_block_size - {2 + PROMPT_SENTINELS} '
                       f'({sample_block_size - 2 - PROMPT_SENTINELS}): the sides (a token each at least) and the FIM '
                       f"GPT's {PROMPT_SENTINELS} sentinels take the rest"),
        'infill_context': at_least(1),
    }
    check_settings(globals(), {key: rule for key, rule in rules.items() if runs & set(READ_BY[key])})
    if 'speculate' in runs:
        parse_list('speculate_top_p', speculate_top_p, float, TOP_P_RULE)
        if not (checkpoint or speculate_random):
            fail('--speculate_random=False leaves --run=speculate no model: give it a --checkpoint')
    if checkpoint and not {'speculate', 'step'} & runs:
        fail(f'--checkpoint is read only by --run=speculate and --run=step, not by --run={run}: add one of them '
             f'to --run or drop --checkpoint')
    if 'step' in runs:
        parse_list('step_batches', step_batches, int, at_least(1))
    if 'infill' in runs:
        parse_list('infill_batches', infill_batches, int, at_least(1))
    if sync_check and not device.startswith('cuda'):
        fail('--sync_check counts what CUDA calls host syncs: it needs --device=cuda')
    if authors_dir and ('long' not in runs or sample_block_size != 1024 or cond_dim != 128):
        fail("--authors_dir times the authors' generate in --run=long, which decodes 1,024 tokens with a 128-wide "
             "target embedding: give --run=long --sample_block_size=1024 --cond_dim=128")
    if authors_dir and not os.path.isfile(os.path.join(authors_dir, 'model_AOGPT_generate.py')):
        fail(f'--authors_dir={authors_dir} has no model_AOGPT_generate.py: give a checkout of the authors\' repository')
    if n_embd % n_head:
        fail(f'--n_embd ({n_embd}) must be divisible by --n_head ({n_head})')
    check_device(device, dtype)
    checkpoint_file = find_checkpoint(checkpoint, '') if checkpoint else ''  # fetched (hf:...) before any work


ARCHITECTURES = {'AO-GPT': {}, 'sigma-GPT': dict(target_injection='add'), 'encoder MDM': dict(architecture='encoder'),
                 'two streams': dict(target_injection='two_stream'),
                 'target in queries': dict(target_injection='queries', position_encoding='rotary')}


def build(T, **kind):
    """The bench's model at block size T, freshly initialised: AO-GPT, or another of ARCHITECTURES."""
    return build_model(GPTConfig(block_size=T, vocab_size=vocab_size, n_layer=n_layer, n_head=n_head, n_embd=n_embd,
                                 cond_dim=cond_dim, **kind)).to(device)


def trainer(model):
    """run_steps(mode, n): n whole training steps (orders in `mode`, or the encoder's masks; forward,
    backward, AdamW) on one batch."""
    ctx = autocast(device, dtype)
    optimizer = model.configure_optimizers(0.05, 1e-4, (0.9, 0.95), torch.device(device).type)
    step_model = torch.compile(model) if compile else model
    x = torch.randint(vocab_size, (batch_size, block_size), device=device)

    def run_steps(mode, n):
        for _ in range(n):
            inputs = training_inputs(model, x, mode)
            with ctx:
                _, loss = step_model(*(t.to(device) for t in inputs))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        sync(device)
    return run_steps


def bench_training():
    """Training tok/s of left-to-right and any-order (mixed) orders, with learned and with rotary positions:
    two models from the same seed, the four runs taking turns."""
    encodings, modes = ('learned', 'rotary'), ('l2r', 'mixed')
    steps = {}
    for positions in encodings:
        torch.manual_seed(seed)
        model = build(block_size, position_encoding=positions)
        steps[positions] = trainer(model)
    seconds = median_seconds({(positions, mode): lambda run=steps[positions], mode=mode: run(mode, train_steps)
                              for positions in encodings for mode in modes}, rounds)
    tokens_per_sec = {run: train_steps * batch_size * block_size / s for run, s in seconds.items()}
    print(f'training: {model.get_num_params() / 1e6:.1f}M params (rotary), batch {batch_size} x {block_size}, '
          f'{device} {dtype}{" compiled" if compile else ""}')
    print_table(['positions', *(f'order={mode} tok/s' for mode in modes), 'any-order overhead'],
                [[positions, *(f'{tokens_per_sec[positions, mode]:,.0f}' for mode in modes),
                  f"{100 * (tokens_per_sec[positions, 'l2r'] / tokens_per_sec[positions, 'mixed'] - 1):+.1f}%"]
                 for positions in encodings])
    cost = tokens_per_sec['learned', 'mixed'] / tokens_per_sec['rotary', 'mixed'] - 1
    print(f'  rotary cost (learned tok/s / rotary tok/s - 1, mixed orders): {100 * cost:+.1f}%')


def bench_eval(ns=(128, 256), ensemble=8, slow_sample=16):
    """eval_ppl's ensemble: the fast path vs the authors' one full forward per (target, member).

    The slow path costs the same for every target, so it is timed on every slow_sample-th target
    and scaled up; n=1024 is extrapolated from the two measured lengths.
    """
    torch.manual_seed(seed)
    model = build(max(ns)).eval()
    print(f'eval ensemble: {model.get_num_params() / 1e6:.1f}M params, ensemble={ensemble}, {device} float32')
    times = {}
    for n in ns:
        x, order = torch.randint(vocab_size, (n,), device=device), torch.randperm(n)
        context_orders = random_context_orders(order, ensemble - 1, seed)
        t0 = time.perf_counter()
        ensemble_logprobs(model, x, order.to(device), context_orders, ensemble, max_tokens=32768)
        sync(device)
        fast = time.perf_counter() - t0
        t0 = time.perf_counter()
        with torch.no_grad():
            model(x[None], order[None].to(device))  # member 1: one forward for every target
            targets = range(0, n, slow_sample)
            for i in targets:
                for context in context_orders(i):
                    model(x[None], torch.cat([context, order[i:]])[None].to(device))
        sync(device)
        slow = time.perf_counter() - t0
        slow *= n / len(targets)
        minimum = (n + 1) + (ensemble - 1) * n * (n + 1) // 2  # sum of prefix lengths
        slow_slots = (n + 1) * (1 + (ensemble - 1) * n)
        lengths = [i for i in range(n - 1, 0, -1) for _ in range(ensemble - 1)]  # ensemble_logprobs' queries
        fast_slots = (n + 1) + sum(len(b) * (lengths[b[0]] + 1) for b in query_batches(lengths, 32768))
        ideal = slow * minimum / slow_slots  # the slow path's speed per slot, on the minimal slots
        times[n] = fast, slow
        print(f'  n={n:<5} fast {fast:7.2f}s  slow {slow:8.2f}s  ratio {slow / fast:5.1f}x | fast slots '
              f'{fast_slots / minimum:.2f}x the minimum; fast time {fast / ideal:.2f}x the minimum at slow-path speed')
    (n0, (f0, s0)), (n1, (f1, s1)) = sorted(times.items())[:2]
    scale = lambda t0, t1: t1 * (t1 / t0) ** (math.log(1024 / n1) / math.log(n1 / n0))  # power law through both
    print(f'  n=1024 (extrapolated) fast {scale(f0, f1):7.1f}s  slow {scale(s0, s1):8.1f}s  '
          f'ratio {scale(s0, s1) / scale(f0, f1):5.1f}x')


def bench_steps():
    """Decoding steps eager against compiled (engine.compile_decoding), one token per step in a random order, the
    last step_tokens positions of a block after a prompt of the rest, at each batch size of step_batches, taking
    turns; and compiled speculative decoding (--speculate=auto's k, where it is not 0) against the eager step. On a
    trained `checkpoint` first, then on the bench's random model at block sample_block_size (GPT-2's vocabulary by
    default). The compiled step's first call, which compiles it, is timed apart."""
    models = [('random model', build(sample_block_size).eval(), vocab_size)]
    if checkpoint:
        models.insert(0, (checkpoint, *decoder_checkpoint()))
    rows = []
    for what, eager, n_tokens in models:
        compiled = copy.deepcopy(eager)
        compile_decoding(compiled, dtype)
        T = eager.config.block_size
        n = min(step_tokens, T)
        for batch in parse_list('step_batches', step_batches, int, at_least(1)):
            def run(model, k=0, steps=n):
                x = torch.zeros(batch, T, dtype=torch.long, device=device)
                with autocast(device, dtype):
                    generate(model, x, torch.arange(T, device=device) < T - steps, steps, n_tokens=n_tokens,
                             generator=torch.Generator(device).manual_seed(seed), speculate=k)
                sync(device)
            k = auto_k(eager, 'random', batch)
            t0 = time.perf_counter()
            run(compiled)
            compiling = time.perf_counter() - t0
            runs = {'eager': lambda: run(eager), 'compiled': lambda: run(compiled)}
            if k:
                runs['speculative'] = lambda: run(compiled, k)
            ms = {name: 1e3 * s / n for name, s in median_seconds(runs, rounds).items()}
            if sync_check:
                print(f'{what}, batch {batch}: host syncs in a compiled call of {n} steps, of {n // 2} steps: '
                      f'{count_syncs(lambda: run(compiled))}, {count_syncs(lambda: run(compiled, steps=n // 2))}')
            if step_profile:
                profile_call(f'{what}, batch {batch}, a compiled call of {n} steps', lambda: run(compiled), device)
            rows.append([what, batch, f"{ms['eager']:.3f}", f"{ms['compiled']:.3f}",
                         f"{ms['eager'] / ms['compiled']:.2f}x", f'{compiling:.1f}s',
                         f"{ms['speculative']:.3f} (k={k})" if k else '-',
                         f"{ms['eager'] / ms['speculative']:.2f}x" if k else '-'])
    print(f'decoding steps: {step_tokens} tokens (at most the block) one per step in a random order after a prompt, '
          f'{device} {dtype}, ms a token, median of {rounds} rounds taking turns; compiled: engine.compile_decoding')
    print_table(['model', 'batch', 'eager', 'compiled', 'speedup', 'first call (compiles)', 'speculative compiled',
                 'vs eager'], rows)


def bench_long():
    """Eager, compiled and (with authors_dir) the authors' decoding of a whole block, for each of sample_steps."""
    torch.manual_seed(seed)
    T = sample_block_size
    eager = build(T).eval()
    compiled = copy.deepcopy(eager)
    compile_decoding(compiled, dtype)
    sampling = Sampling(temperature=0.9, top_p=0.9)  # the authors' defaults
    known = torch.zeros(T, dtype=torch.bool, device=device)

    def ours(model, n_steps):
        x = torch.zeros(batch_size, T, dtype=torch.long, device=device)
        with autocast(device, dtype):
            generate(model, x, known, n_steps, sampling, generator=torch.Generator(device).manual_seed(seed))
        sync(device)
    samplers = {'eager': functools.partial(ours, eager), 'compiled': functools.partial(ours, compiled)}
    if authors_dir:
        samplers['authors'] = functools.partial(authors_generator(authors_dir, eager, device), torch.zeros(batch_size, T))
    rows = []
    for n_steps in [count_of(s) for s in sample_steps.split(',')]:
        s = median_seconds({name: functools.partial(fn, n_steps) for name, fn in samplers.items()}, rounds)
        rows.append([n_steps] + [f'{s[name]:.2f}s' for name in samplers] +
                    [f"{s['authors'] / s[name]:.2f}x" for name in ('eager', 'compiled') if 'authors' in s] +
                    [f"{s['eager'] / s['compiled']:.2f}x"])
    print(f'long decoding: {eager.get_num_params() / 1e6:.1f}M params, batch {batch_size} x {T}, random order, '
          f'{device} {dtype}, median of {rounds} rounds taking turns')
    print_table(['steps', *samplers] + (['authors/eager', 'authors/compiled'] if authors_dir else []) +
                ['eager/compiled'], rows)


def decoder_checkpoint():
    """The decoder of --checkpoint and its token count."""
    model, stored = read_checkpoint(checkpoint_file, device)
    if model.config.is_encoder:
        fail(f'--checkpoint={checkpoint} is an encoder, and speculative decoding needs a decoder (the exact joint '
             f'of an order in one forward): give a decoder checkpoint')
    return model, token_count(stored, model.config.vocab_size)


def bench_sampling():
    torch.manual_seed(seed)
    ctx = autocast(device, dtype)
    T = sample_block_size
    model = build(T).eval()
    known = torch.zeros(T, dtype=torch.bool, device=device)

    def seconds(n_steps, order='random', cached=True):
        x = torch.zeros(batch_size, T, dtype=torch.long, device=device)
        generator = torch.Generator(device).manual_seed(seed)
        t0 = time.perf_counter()
        with ctx:
            if cached:
                generate(model, x, known, n_steps, order=order, generator=generator)
            else:
                sample_uncached(model, x, n_steps, generator)
        sync(device)
        return time.perf_counter() - t0

    seconds(8), seconds(8, cached=False)  # warm up
    all_steps = [count_of(s) for s in sample_steps.split(',')]
    print(f'sampling: {model.get_num_params() / 1e6:.1f}M params, batch {batch_size} x {T}, {device} {dtype}')
    print(f'  {"steps":>6} {"cached":>9} {"no cache":>9} {"speedup":>8}')
    for n_steps in all_steps:
        cached, uncached = seconds(n_steps), seconds(n_steps, cached=False)
        print(f'  {n_steps:>6} {cached:>8.2f}s {uncached:>8.2f}s {uncached / cached:>7.1f}x')
    l2r, random = (batch_size * T / seconds(T, order) for order in ('l2r', 'random'))
    print(f'  one token per step: order=l2r {l2r:,.0f} tok/s, order=random {random:,.0f} tok/s '
          f'(l2r/random - 1: {100 * (l2r / random - 1):+.1f}%)')
    n_steps = all_steps[0]
    confidence, random = seconds(n_steps, 'confidence'), seconds(n_steps)
    print(f'  {n_steps} steps: order=confidence {confidence:.2f}s, order=random {random:.2f}s '
          f'(confidence/random: {confidence / random:.1f}x)')


def bench_memory(chunk_counts=(1, 3), ensemble=2):
    """Peak memory of eval_ppl's evaluation (for 1 and 3 chunks: it must not grow) and of sample.py,
    at block sample_block_size with the bench's vocabulary. The ensemble's memory is bounded by
    max_tokens whatever its size, so a small ensemble keeps this quick."""
    torch.manual_seed(seed)
    T = sample_block_size
    ctx = autocast(device, dtype)
    model = build(T).eval()
    what = 'CUDA memory allocated' if device.startswith('cuda') else 'process RSS, the model and torch included'
    print(f'peak memory ({what}): {model.get_num_params() / 1e6:.1f}M params, block {T}, vocab {vocab_size}, '
          f'{device} {dtype}')
    for count in chunk_counts:
        chunks = torch.randint(vocab_size, (count, T))
        reset_peak_memory(device)
        score_chunks(model, chunks, ensemble, 32768, seed, ctx)
        print(f'  eval_ppl  ensemble={ensemble}, {count} chunk(s) of {T}: {peak_memory_mb(device):8,.0f} MB')
    x = torch.zeros(batch_size, T, dtype=torch.long, device=device)
    reset_peak_memory(device)
    with ctx:
        generate(model, x, torch.zeros(T, dtype=torch.bool, device=device), T, generator=torch.Generator(device))
    print(f'  sample.py batch {batch_size}, {T} tokens one per step: {peak_memory_mb(device):8,.0f} MB')


def bench_architectures():
    """The architectures with the same layers and width: sigma-GPT has no adaLN and a tied head, the
    encoder no target-position embedding; all do the same attention and MLP work per token but two streams,
    which do it twice."""
    torch.manual_seed(seed)
    if arch_train:
        bench_architectures_training()
    T = sample_block_size
    samplers = {name: build(T, **kind).eval() for name, kind in ARCHITECTURES.items()}
    if compile:
        for model in samplers.values():
            compile_decoding(model, dtype)
    known = torch.zeros(T, dtype=torch.bool, device=device)

    def sample(model, n_steps):
        x = torch.zeros(batch_size, T, dtype=torch.long, device=device)
        with autocast(device, dtype):
            generate(model, x, known, n_steps, generator=torch.Generator(device).manual_seed(seed))
        sync(device)

    all_steps = [count_of(s) for s in sample_steps.split(',')]
    times = {n_steps: median_seconds({name: lambda model=model, n_steps=n_steps: sample(model, n_steps)
                                      for name, model in samplers.items()}, rounds) for n_steps in all_steps}
    print(f'generation at n_layer={n_layer} n_head={n_head} n_embd={n_embd}: batch {batch_size} x {T}, random order, '
          f'median wall time of {rounds} rounds by steps (decoders with their KV cache, the encoder a full forward per '
          f'step), {device} {dtype}{" compiled" if compile else ""}')
    print_table(['steps', *samplers, 'encoder / AO-GPT'],
                [[n_steps, *(f'{s:.2f}s' for s in row.values()), f"{row['encoder MDM'] / row['AO-GPT']:.1f}x"]
                 for n_steps, row in times.items()])


def bench_architectures_training():
    """Training tok/s of the architectures (mixed orders; the encoder on its NELBO masks), taking turns."""
    models = {name: build(block_size, **kind) for name, kind in ARCHITECTURES.items()}
    trainers = {name: trainer(model) for name, model in models.items()}
    seconds = median_seconds({name: lambda run_steps=run_steps: run_steps('mixed', train_steps)
                              for name, run_steps in trainers.items()}, rounds)
    tokens_per_sec = {name: train_steps * batch_size * block_size / s for name, s in seconds.items()}
    print(f'architectures at n_layer={n_layer} n_head={n_head} n_embd={n_embd}, {device} {dtype}: training batch '
          f'{batch_size} x {block_size} (mixed orders; the encoder: NELBO masks)')
    print_table(['', 'params', 'train tok/s', 'vs AO-GPT'],
                [[name, f'{model.get_num_params() / 1e6:.2f}M', f'{tokens_per_sec[name]:,.0f}',
                  f"{tokens_per_sec[name] / tokens_per_sec['AO-GPT']:.2f}x"] for name, model in models.items()])


def bench_speculation():
    models = [('the random model', build(sample_block_size).eval(), vocab_size)] if speculate_random else []
    if checkpoint:
        models.insert(0, (checkpoint, *decoder_checkpoint()))
    for what, model, n_tokens in models:
        if compile:
            compile_decoding(model, dtype)
        T = min(speculate_tokens, model.config.block_size)
        rows = []
        top_ps = parse_list('speculate_top_p', speculate_top_p, float, TOP_P_RULE)
        for top_p, order, batch in itertools.product(top_ps, ('random', 'l2r'), sorted({1, batch_size})):
            rows += speculation_rows(model, n_tokens, T, Sampling(top_p=top_p), order, batch)
        print(f'speculative decoding: {what}, {model.get_num_params() / 1e6:.1f}M params, vocabulary {n_tokens:,}, '
              f'{T} tokens per sample, 4 batches of samples, {device} {dtype}; median of {rounds} rounds; one token '
              f'per step uses 1 forward per token')
        print('  in forwards: the share of the time in the model; ceiling: the speedup were the rest free')
        print_table(['top_p', 'order', 'batch', 'k', 'time', 'speedup', 'forwards/token', 'alone', 'kept',
                     'in forwards', 'ceiling'], rows)


def speculation_rows(model, n_tokens, T, sampling, order, batch):
    """The table's rows of one setting: each k of speculate_k (auto: speculative.auto_k's) against one token per step."""
    def run(k, stats=None):
        """4 x batch samples of T tokens in batches of `batch`, as gen_ppl.py draws them (generate_many: with k,
        the rows take turns), one token per step (k=0) or speculatively with k drafts per forward."""
        generate_many(model, [0] * T, [False] * T, 4 * batch, batch, T, sampling, ctx=autocast(device, dtype),
                      order=order, generator=torch.Generator(device).manual_seed(seed), n_tokens=n_tokens, speculate=k,
                      stats=stats)

    ks = {name: auto_k(model, order, batch) if name == 'auto' else count_of(name) for name in speculate_k.split(',')}
    seconds = median_seconds({k: lambda k=k: run(k) for k in {0, *ks.values()}}, rounds)
    rows = []
    for name, k in ks.items():
        stats = Speculation()
        share = forward_share(lambda: run(k, stats), device)
        s = stats.summary() if k else dict(tokens_per_forward=1, tokens_per_forward_alone=1)  # k=0: no drafts
        rows.append([sampling.top_p, order, batch, f'{name} ({k})' if name == 'auto' else k, f'{seconds[k]:.3f}s',
                     f'{seconds[0] / seconds[k]:.2f}x', f"{1 / s['tokens_per_forward']:.2f}",
                     f"{1 / s['tokens_per_forward_alone']:.2f}", f"{100 * s['acceptance']:.0f}%" if k else '-',
                     f'{100 * share:.0f}%', f'{seconds[0] / (seconds[k] * share):.2f}x'])
    return rows


def bench_generate():
    try:
        from aogpt.modeling_ao_gpt import AOGPTConfig, AOGPTForCausalLM
    except ImportError:
        fail('--run=generate times transformers\' generate(), which needs transformers: pip install transformers')
    torch.manual_seed(seed)
    T, n = sample_block_size, generate_tokens
    net = build(T).eval()
    model = AOGPTForCausalLM(AOGPTConfig(model_args=dataclasses.asdict(net.config))).to(device).eval()
    model.load_state_dict(net.state_dict())
    ctx = autocast(device, dtype)
    print(f'generate: {net.get_num_params() / 1e6:.1f}M params, block {T}, {n} new tokens a row, greedy, {device} '
          f'{dtype}')
    print(f'  {"batch":>6} {"cached":>9} {"no cache":>9} {"sample()":>9} {"no cache/cached":>16} '
          f'{"cached/sample()":>16} {"same tokens":>12}')
    for batch in sorted({1, batch_size}):
        prompt = torch.zeros(batch, 1, dtype=torch.long, device=device)
        known = (torch.arange(n + 1) < 1).to(device)

        def generate_ids(use_cache):
            return model.generate(prompt, max_new_tokens=n, do_sample=False, use_cache=use_cache)

        def sample_ids():  # each row alike (greedy): sample()'s rows are one template's samples
            return model.sample(torch.zeros(n + 1, dtype=torch.long), known, num_samples=batch, order='l2r',
                                temperature=0)
        runs = dict(cached=functools.partial(generate_ids, True), uncached=functools.partial(generate_ids, False),
                    sample=sample_ids)
        with ctx, torch.no_grad():
            ids = {name: fn() for name, fn in runs.items()}
            cached, uncached, sampled = median_seconds(runs, rounds).values()
        same = torch.equal(ids['cached'], ids['uncached']) and torch.equal(ids['cached'], ids['sample'])
        print(f'  {batch:>6} {cached:>8.2f}s {uncached:>8.2f}s {sampled:>8.2f}s {uncached / cached:>15.1f}x '
              f'{cached / sampled:>15.1f}x {"yes" if same else "no":>12}')


def bench_infill():
    """A gap of no given length: AO-GPT's length posterior over 1..infill_cap, then its fill at the most likely length
    (the prefix's cache shared; the fill cached), against the FIM GPT's cached generation of as many tokens after its
    prompt (its end token held to that length: the same tokens written), the same network and weights."""
    torch.manual_seed(seed)
    T, cap = sample_block_size, infill_cap
    model, n_tokens = build(T).eval(), min(vocab_size - len(SENTINELS), 50257)  # the FIM GPT's sentinels after them
    side = (T - cap - PROMPT_SENTINELS) // 2
    ids = torch.randint(n_tokens, (2 * side,)).tolist()
    sampling, ctx = Sampling(), autocast(device, dtype)
    print(f'infill: {model.get_num_params() / 1e6:.1f}M params, block {T}, a gap of 1 to {cap} tokens between '
          f'{side} and {side} known, {device} {dtype}')
    print(f'  {"batch":>6} {"length":>7} {"AO-GPT":>9} {"posterior":>10} {"FIM GPT":>9} {"AO-GPT/FIM":>11} '
          f'{f"context {infill_context}/FIM":>15}')
    for batch in parse_list('infill_batches', infill_batches, int, at_least(1)):
        posterior = functools.partial(length_logprobs, model, ids, [True] * len(ids), side, list(range(1, cap + 1)),
                                      n_tokens)
        with ctx, torch.no_grad():
            L = int(posterior().argmax()) + 1
        ao = lambda context: fill_gap(model, ids, [True] * len(ids), side, batch, sampling, n_tokens=n_tokens, cap=cap,
                                      choice='mode', context=context, order='l2r')
        runs = dict(posterior=posterior, ao=functools.partial(ao, None), short=functools.partial(ao, infill_context),
                    fim=lambda: fim_fill(model, ids[:side], ids[side:], n_tokens, L, L, batch, sampling))
        with ctx, torch.no_grad():
            seconds = median_seconds(runs, rounds)
        print(f"  {batch:>6} {L:>7} {seconds['ao']:>8.3f}s {seconds['posterior']:>9.3f}s {seconds['fim']:>8.3f}s "
              f"{seconds['ao'] / seconds['fim']:>10.2f}x {seconds['short'] / seconds['fim']:>14.2f}x")


BENCHES = {'train': bench_training, 'eval': bench_eval, 'sample': bench_sampling, 'step': bench_steps,
           'long': bench_long, 'memory': bench_memory,
           'arch': bench_architectures, 'speculate': bench_speculation, 'generate': bench_generate,
           'infill': bench_infill}

if __name__ == '__main__':
    configure(globals(), doc=__doc__)
    check_inputs()
    hold_freed_memory()
    for name in run.split(','):
        BENCHES[name]()
