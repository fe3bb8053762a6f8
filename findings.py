"""
The paper's findings (Xue et al., arXiv 2506.19935) reproduced by one command: it trains the runs
with train.py, evaluates them with eval_ppl.py and gen_ppl.py (each run in its own folder,
out_dir/runs/<name>), times generation, then writes one PNG per figure, results.md and results.json
into out_dir (default: findings-<preset>).

    python findings.py --preset=cpu               # tiny Shakespeare, characters, 2 CPU cores (57 minutes)
    python findings.py --preset=smoke             # every finding at toy size in about a minute (the tests run it)
    python findings.py --preset=gpu               # OpenWebText at GPT-2 small size on one GPU (hours; see README)
    python findings.py --preset=cpu --only=1,3    # some findings only: their runs and their figures
    python findings.py --preset=cpu --dry_run     # the jobs and their commands; nothing is run

The findings, named by the paper's figure numbers; 4 and 5 are one finding, "4", and 6 and 7 one,
"6" (--only=5 and --only=7 name them too):
  1  any-order training converges slower than left-to-right: order=l2r vs order=random, each run's own loss (Fig. 1)
  2  language has a left-to-right bias: one fixed order per run, left-to-right, fixed random orders and
     block-wise random, the loss in the run's own order (Fig. 2a)
  3  a little left-to-right goes a long way: 10% left-to-right (order=mixed, random_ratio=0.9) vs none
     (NoCL: the order=random runs of finding 1), left-to-right and any-order losses (Fig. 2b)
  4  context-order ensembles close the gap to the encoder: AO-GPT (the 10% run) over ensembles of
     1, 2, 4, ... orders, the encoder's NELBO bound as a line (Figs. 3, 5)
  6  generation: wall time against steps, AO-GPT with its KV cache and the encoder (Fig. 4), and sample
     quality (gen PPL, entropy) against steps and temperature (Table 2; on the CPU scored by the l2r run)
  8  adaLN and EMA: sigma-GPT (target_injection=add) vs AO-GPT, each with EMA (the preset's ema_decay)
     and without (ema_decay=0: the evaluated weights are the raw ones), any-order losses. Both train on
     the same 10% left-to-right mix, so only the injection and the EMA differ.
A run shared by findings runs once. Findings 3, 4 and 8, whose effects at small sizes are not far
larger than the seed noise, run `seeds` seeds each (finding 1's random runs are those of 3); the
figures draw the range over seeds as a band, the tables give mean and range.

Verdicts, by one stated rule per claim (results.md says which): an effect in the claim's direction
holds if it exceeds the margin, does not hold if it is below minus the margin, and is not resolvable
at this size in between. The margin is the largest min-to-max range over seeds of the numbers
compared, and never less than `noise_floor` (nats per token), the seed noise where one seed was run.

Resumable: a run whose metrics.jsonl reached max_iters is not trained again, one with a ckpt.pt short
of it resumes (--init_from=resume), an evaluation whose json exists is kept; a second call only
redraws. A run folder remembers its command (args.json): another preset's or size's run in the same
folder stops the script with one line.

Time of the cpu preset (17 runs of 2,500 iterations, the quick start's model, one thread per run,
two runs side by side): a run's iteration took 0.19 s on 2 cores loaded by other jobs, so
17 x 2,500 x 0.19 s / 2 workers = 67 minutes of training; the M=16 ensemble of 100 chunks took
1.8 s a chunk (3 minutes for each of 2 seeds, side by side), the encoders' NELBO and the samples
about a minute each: about 75 minutes in all, less on idle cores (measured on a clean clone: 57).
"""
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from checkpoints import load_checkpoint
from common import autocast, default_device, default_dtype, read_jsonl
from configurator import at_least, check_settings, configure, fail, one_of
from engine import generate
from report import line_figure, spread, write_results

ROOT = os.path.dirname(os.path.abspath(__file__))

# -----------------------------------------------------------------------------
preset = 'cpu'  # 'cpu', 'gpu' or 'smoke'
only = ''  # comma list of findings (1, 2, 3, 4, 6, 8; 5 and 7 name 4 and 6); '' all
out_dir = ''  # '': findings-<preset>
seeds = 0  # seeds of findings 3, 4 and 8; 0: the preset's
workers = 0  # runs side by side; 0: the preset's
dry_run = False  # list the jobs (done, to resume, to run) and their commands; run nothing
# -----------------------------------------------------------------------------

SEEDS = (1337, 1, 2, 3, 4)  # train.py's default first, then the README's other quick-start seeds
FINDINGS = {'1': 'Any-order training converges slower than left-to-right (Fig. 1)',
            '2': 'Language has a left-to-right bias (Fig. 2a)',
            '3': 'A little left-to-right goes a long way (Fig. 2b)',
            '4': 'Context-order ensembles close the gap to the encoder (Figs. 3, 5)',
            '6': 'Generation: time against steps and sample quality (Fig. 4, Table 2)',
            '8': 'AdaLN and EMA: sigma-GPT vs AO-GPT, with and without EMA'}
ALIASES = {'5': '4', '7': '6'}
MIX = dict(order='mixed', random_ratio=0.9)  # the paper's 10% left-to-right

PRESETS = {
    # the quick start's model and data; 2,500 iterations so that 17 runs fit 90 minutes on 2 cores
    'cpu': dict(
        config='config/train_shakespeare_char.py', encoder_config='config/train_mdm_shakespeare_char.py',
        dataset='shakespeare_char',
        train=dict(max_iters=2500, lr_decay_iters=2500, eval_interval=250, log_interval=250),
        seeds=2, workers=2, threads=1, noise_floor=0.05,
        fixed_orders=[dict(seed=s) for s in (11, 12, 13)],  # order=fixed_random draws its order from the seed
        eval=dict(ensemble=16, max_chunks=100),
        gen=dict(steps='8,16,64', temperature='1.0,0.9,0.7', top_p='1.0,0.95,0.95', pair_settings=True,
                 top_p_mode='authors', num_samples=32, batch_size=32),
        scorer='l2r',  # the l2r run's checkpoint
        timing=dict(steps=(4, 8, 16, 32, 64), batch_size=16, repeats=3)),
    # GPT-2 small's recipe, shortened: 2,000 iterations of 131,072 tokens (262M tokens a run)
    'gpu': dict(
        config='config/train_ao_gpt_small.py', encoder_config='config/train_mdm_small.py', dataset='openwebtext',
        train=dict(max_iters=2000, lr_decay_iters=2000, warmup_iters=200, gradient_accumulation_steps=8,
                   eval_interval=200, eval_iters=20, ema_decay=0.999),
        seeds=2, workers=1, threads=0, noise_floor=0.02,
        fixed_orders=[dict(order_file=os.path.join(ROOT, 'config', 'orders', f'authors_order{i}.txt'))
                      for i in (1, 2, 3)],
        eval=dict(ensemble=64, max_chunks=32),
        gen=dict(steps='64,128,256,512,1024', temperature='1.0,0.9,0.7', top_p='1.0,0.95,0.95', pair_settings=True,
                 top_p_mode='authors', num_samples=64, batch_size=32),
        scorer='gpt2-large',
        timing=dict(steps=(64, 128, 256, 512, 1024), batch_size=4, repeats=3)),
    # everything end to end at toy size, for the tests
    'smoke': dict(
        config='config/train_shakespeare_char.py', encoder_config='config/train_mdm_shakespeare_char.py',
        dataset='shakespeare_char',
        train=dict(n_layer=1, n_head=2, n_embd=32, cond_dim=16, block_size=32, batch_size=4, max_iters=30,
                   lr_decay_iters=30, warmup_iters=5, eval_interval=10, eval_iters=2, log_interval=10, order_block=8),
        seeds=1, workers=2, threads=1, noise_floor=0.05,
        fixed_orders=[dict(seed=s) for s in (11, 12)],
        eval=dict(ensemble=4, max_chunks=2, mc_samples=4),
        gen=dict(steps='4,32', temperature='1.0,0.7', top_p='1.0,0.95', pair_settings=True, num_samples=2,
                 batch_size=2),
        scorer='l2r',
        timing=dict(steps=(4, 32), batch_size=2, repeats=1)),
}


@dataclass
class Job:
    """One script run: its folder, its log and the json or metrics that say it is done."""
    name: str
    argv: list
    log: str
    done: bool


def check_inputs():
    check_settings(globals(), {'preset': one_of(*PRESETS), 'seeds': (lambda v: 0 <= v <= len(SEEDS),
                                                                      f'in [0, {len(SEEDS)}]'),
                               'workers': at_least(0)})
    chosen = selected_findings(only)
    if preset == 'gpu' and not torch.cuda.is_available() and not dry_run:
        fail('--preset=gpu needs a CUDA GPU: use --preset=cpu here (or --dry_run to see its jobs)')
    train_bin = os.path.join('data', PRESETS[preset]['dataset'], 'train.bin')
    if not os.path.exists(train_bin) and not dry_run:
        fail(f"{train_bin} not found: run python data/{PRESETS[preset]['dataset']}/prepare.py first")
    return chosen


def selected_findings(text):
    """The finding names of --only, in the paper's order; one line for an unknown one."""
    if not text.strip():
        return list(FINDINGS)
    names = set()
    for entry in text.split(','):
        name = ALIASES.get(entry.strip(), entry.strip())
        if name not in FINDINGS:
            fail(f"--only takes finding numbers among {', '.join(FINDINGS)} (5 and 7 are parts of 4 and 6), "
                 f"got {entry.strip()!r}")
        names.add(name)
    return [name for name in FINDINGS if name in names]


# -----------------------------------------------------------------------------
# the runs: name -> (config file, train.py settings)

def all_runs(p, seed_list):
    runs = {'l2r': (p['config'], dict(order='l2r', seed=SEEDS[0])),
            'block': (p['config'], dict(order='block_random', seed=SEEDS[0]))}
    for i, order in enumerate(p['fixed_orders'], 1):
        runs[f'fixed{i}'] = (p['config'], dict(order='fixed_random', seed=SEEDS[0]) | order)
    for s in seed_list:
        runs[f'random-s{s}'] = (p['config'], dict(order='random', seed=s))
        runs[f'mixed-s{s}'] = (p['config'], MIX | dict(seed=s))
        runs[f'mixed-noema-s{s}'] = (p['config'], MIX | dict(ema_decay=0.0, seed=s))
        runs[f'sigma-s{s}'] = (p['config'], MIX | dict(target_injection='add', seed=s))
        runs[f'sigma-noema-s{s}'] = (p['config'], MIX | dict(target_injection='add', ema_decay=0.0, seed=s))
        runs[f'encoder-s{s}'] = (p['encoder_config'], dict(seed=s))
    return {name: (config, p['train'] | flags) for name, (config, flags) in runs.items()}


def runs_of(finding, p, seed_list):
    """The names of the runs a finding reads."""
    each = lambda *kinds: [f'{kind}-s{s}' for kind in kinds for s in seed_list]
    first = seed_list[0]
    return {'1': ['l2r', *each('random')],
            '2': ['l2r', *(f'fixed{i}' for i in range(1, len(p['fixed_orders']) + 1)), 'block'],
            '3': each('mixed', 'random'),
            '4': each('mixed', 'encoder'),
            '6': [f'mixed-s{first}', f'encoder-s{first}'] + (['l2r'] if p['scorer'] == 'l2r' else []),
            '8': each('mixed', 'mixed-noema', 'sigma', 'sigma-noema')}[finding]


# -----------------------------------------------------------------------------
# jobs: training, then evaluations, each a subprocess of one of the scripts

def read_metrics(folder):
    """A run's metrics.jsonl records, [] before its first evaluation."""
    path = os.path.join(folder, 'metrics.jsonl')
    return [r for _, r in read_jsonl(path, "one evaluation's losses")] if os.path.exists(path) else []


def train_job(name, config, flags, folder, record):
    """train.py for one run: done when its metrics reach max_iters, resumed when it left a checkpoint.
    record: write the run's command into its folder (not in a dry run)."""
    args = [os.path.join(ROOT, config), *(f'--{k}={v}' for k, v in flags.items()), f'--out_dir={folder}']
    check_same_run(folder, args, record)
    records = read_metrics(folder)
    done = bool(records) and records[-1]['iter'] >= flags['max_iters']
    resume = os.path.exists(os.path.join(folder, 'ckpt.pt'))
    return Job(f'train {name}' + (' (resume)' if resume and not done else ''),
               [os.path.join(ROOT, 'train.py'), *args, *(['--init_from=resume'] if resume else [])],
               os.path.join(folder, 'train.log'), done)


def check_same_run(folder, args, record):
    """A run folder holds one run: args.json says which; other settings there stop the script."""
    path = os.path.join(folder, 'args.json')
    if os.path.exists(path):
        with open(path) as f:
            if json.load(f) != args:
                fail(f'{folder} holds a run with other settings (see its args.json): delete it or use another '
                     f'--out_dir')
    elif record:
        os.makedirs(folder, exist_ok=True)
        with open(path, 'w') as f:
            json.dump(args, f)


def script_job(name, script, flags, out_json):
    """An evaluation script with --out_json: done when that file exists."""
    return Job(name, [os.path.join(ROOT, script), *(f'--{k}={v}' for k, v in flags.items()), f'--out_json={out_json}'],
               out_json.replace('.json', '.log'), os.path.exists(out_json))


def eval_jobs(findings, p, seed_list, runs_dir):
    """eval_ppl.py on the AO-GPT and encoder runs of finding 4; gen_ppl.py on the AO-GPT run of finding 6."""
    jobs = []
    if '4' in findings:
        for s in seed_list:
            for kind, extra in (('mixed', {}), ('encoder', dict(ensemble=1, encoder_l2r=False))):
                folder = os.path.join(runs_dir, f'{kind}-s{s}')
                flags = dict(out_dir=folder, dataset=p['dataset']) | p['eval'] | extra
                jobs.append(script_job(f'eval {kind}-s{s}', 'eval_ppl.py', flags, os.path.join(folder, 'eval.json')))
    if '6' in findings:
        folder = os.path.join(runs_dir, f'mixed-s{seed_list[0]}')
        scorer = os.path.join(runs_dir, 'l2r', 'ckpt.pt') if p['scorer'] == 'l2r' else p['scorer']
        flags = dict(out_dir=folder, scorer=scorer, samples_out=os.path.join(folder, 'samples.jsonl')) | p['gen']
        jobs.append(script_job(f'gen-ppl mixed-s{seed_list[0]}', 'gen_ppl.py', flags, os.path.join(folder, 'gen.json')))
    return jobs


def run_jobs(jobs, n_workers, threads):
    """Run the jobs not done yet, n_workers at a time; stop with one line naming the log of a failed one."""
    env = os.environ | ({'OMP_NUM_THREADS': str(threads)} if threads else {})
    for job in jobs:
        if job.done:
            print(f'{job.name}: done, skipped')

    def launch(job):
        print(f'{job.name}: started')
        t0 = time.time()
        with open(job.log, 'w') as log:
            code = subprocess.run([sys.executable, *job.argv], stdout=log, stderr=subprocess.STDOUT, env=env).returncode
        print(f'{job.name}: ' + ('finished' if code == 0 else f'failed ({code})') + f' in {time.time() - t0:.0f}s')
        return code

    todo = [job for job in jobs if not job.done]
    with ThreadPoolExecutor(n_workers) as pool:
        codes = list(pool.map(launch, todo))
    failed = [job for job, code in zip(todo, codes) if code != 0]
    if failed:
        fail(f'{failed[0].name} failed: {last_line(failed[0].log)} (the whole log: {failed[0].log})')


def last_line(path):
    with open(path) as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[-1] if lines else 'no output'


def time_generation(paths, steps, batch_size, repeats, seed=SEEDS[0]):
    """{label: median wall seconds of generating batch_size whole blocks in a random order, per number of
    steps}, through the library as bench.py --run=arch (decoders with their KV cache, the encoder a
    forward per step)."""
    device, dtype = default_device(), default_dtype()
    times = {}
    for label, path in paths.items():
        model, _ = load_checkpoint(path, device)
        known = torch.zeros(model.config.block_size, dtype=torch.bool, device=device)

        def once(n_steps):
            x = torch.zeros(batch_size, model.config.block_size, dtype=torch.long, device=device)
            t0 = time.perf_counter()
            with autocast(device, dtype):
                generate(model, x, known, n_steps, generator=torch.Generator(device).manual_seed(seed))
            if device == 'cuda':
                torch.cuda.synchronize()
            return time.perf_counter() - t0

        once(steps[0])  # warm-up
        times[label] = [statistics.median(once(n) for _ in range(repeats)) for n in steps]
    return times


def generation_times(p, seed_list, runs_dir):
    """Finding 6's timings, measured once and kept in runs/generation_time.json."""
    path = os.path.join(runs_dir, 'generation_time.json')
    if os.path.exists(path):
        print('generation time: done, skipped')
    else:
        print('generation time: measuring')
        if p['threads']:
            torch.set_num_threads(p['threads'])  # as the runs: one thread each on the CPU
        s = seed_list[0]
        paths = {'AO-GPT (KV cache)': os.path.join(runs_dir, f'mixed-s{s}', 'ckpt.pt'),
                 'encoder MDM': os.path.join(runs_dir, f'encoder-s{s}', 'ckpt.pt')}
        times = time_generation(paths, p['timing']['steps'], p['timing']['batch_size'], p['timing']['repeats'])
        with open(path, 'w') as f:
            json.dump(dict(steps=list(p['timing']['steps']), batch_size=p['timing']['batch_size'], seconds=times), f)
    with open(path) as f:
        return json.load(f)


# -----------------------------------------------------------------------------
# what the runs measured, and the verdicts

@dataclass
class Measured:
    """Where the runs are and how to judge them: the figures' folder, the seeds, the noise floor."""
    runs_dir: str
    out_dir: str
    seed_list: list
    noise_floor: float

    def each(self, kind):
        return [f'{kind}-s{s}' for s in self.seed_list]

    def curves(self, label, names, key):
        """A figure series: key's value at every evaluation the runs share, over the runs."""
        records = [{r['iter']: r[key] for r in read_metrics(os.path.join(self.runs_dir, n))} for n in names]
        iters = sorted(set.intersection(*(set(r) for r in records)))
        return label, iters, [[r[i] for r in records] for i in iters]

    def final(self, names, key):
        return spread([read_metrics(os.path.join(self.runs_dir, n))[-1][key] for n in names])

    def margin(self, *spreads):
        return max([self.noise_floor] + [s['max'] - s['min'] for s in spreads])

    def figure(self, name, *args, **kw):
        line_figure(os.path.join(self.out_dir, name), *args, **kw)
        return name


RULE = 'holds if the effect exceeds the margin, does not hold if it is below minus the margin, else not resolvable'


def verdict(effect, margin):
    if effect > margin:
        return 'holds'
    return 'does not hold' if effect < -margin else 'not resolvable at this size'


def claim(text, numbers, rule, decided):
    return dict(claim=text, numbers=numbers, rule=rule, verdict=decided)


def by_margin(text, numbers, effect, margin, rule=RULE):
    """A claim judged by RULE: its numbers, the effect (in the claim's direction) and the margin."""
    return claim(text, numbers | {'effect (claim direction)': effect, 'margin': margin}, rule, verdict(effect, margin))


LOSS = 'val loss (nats/token)'


def finding_1(m):
    fig = m.figure('fig1_l2r_vs_random.png', FINDINGS['1'], 'iteration', LOSS,
                   [m.curves('order=l2r: left-to-right loss', ['l2r'], 'val_l2r'),
                    m.curves('order=random: any-order loss', m.each('random'), 'val_ao')])
    l2r, ao = m.final(['l2r'], 'val_l2r'), m.final(m.each('random'), 'val_ao')
    return [fig], [by_margin('Trained on the same tokens, the any-order model ends with a higher loss in its own '
                         '(random) orders than the left-to-right model in its one order.',
                         {'final val loss, l2r run, left to right': l2r, 'final val loss, random run, any order': ao},
                         ao['mean'] - l2r['mean'], m.margin(l2r, ao))]


def finding_2(m, n_fixed):
    fixed = [f'fixed{i}' for i in range(1, n_fixed + 1)]
    fig = m.figure('fig2a_fixed_orders.png', FINDINGS['2'], 'iteration', f'{LOSS}, in the run\'s order',
                   [m.curves('left to right', ['l2r'], 'val_l2r'),
                    *(m.curves(f'fixed random order {i + 1}', [n], 'val_fixed') for i, n in enumerate(fixed)),
                    m.curves('block-wise random', ['block'], 'val_fixed')])
    l2r, block = m.final(['l2r'], 'val_l2r')['mean'], m.final(['block'], 'val_fixed')['mean']
    random_orders = [m.final([n], 'val_fixed')['mean'] for n in fixed]
    numbers = {'final val loss, left to right': l2r, 'final val loss, block-wise random': block,
               **{f'final val loss, fixed random order {i + 1}': v for i, v in enumerate(random_orders)}}
    return [fig], [
        by_margin('A model trained in the left-to-right order reaches a lower loss than one trained in any fixed '
              'random order.', numbers, min(random_orders) - l2r, m.noise_floor),
        by_margin('Block-wise random orders (left to right between blocks) are easier than fully random ones.',
              {}, min(random_orders) - block, m.noise_floor)]


def finding_3(m):
    mix, nocl = m.each('mixed'), m.each('random')
    fig = m.figure('fig2b_mixed_vs_nocl.png', FINDINGS['3'], 'iteration', LOSS,
                   [m.curves('10% l2r: left-to-right loss', mix, 'val_l2r'),
                    m.curves('10% l2r: any-order loss', mix, 'val_ao'),
                    m.curves('NoCL: left-to-right loss', nocl, 'val_l2r'),
                    m.curves('NoCL: any-order loss', nocl, 'val_ao')])
    mix_l2r, nocl_l2r = m.final(mix, 'val_l2r'), m.final(nocl, 'val_l2r')
    mix_ao, nocl_ao = m.final(mix, 'val_ao'), m.final(nocl, 'val_ao')
    cost, cost_margin = mix_ao['mean'] - nocl_ao['mean'], m.margin(mix_ao, nocl_ao)
    return [fig], [
        by_margin('Training 10% of the sequences left to right lowers the left-to-right loss below that of a model '
              'trained in random orders only (NoCL).',
              {'final val l2r loss, 10% l2r': mix_l2r, 'final val l2r loss, NoCL': nocl_l2r},
              nocl_l2r['mean'] - mix_l2r['mean'], m.margin(mix_l2r, nocl_l2r)),
        claim('... at little cost to the any-order loss.',
              {'final val any-order loss, 10% l2r': mix_ao, 'final val any-order loss, NoCL': nocl_ao,
               'any-order cost of the mix': cost, 'margin': cost_margin},
              'holds if the any-order loss is not higher than NoCL\'s by more than the margin, else does not hold',
              'holds' if cost <= cost_margin else 'does not hold')]


def read_eval(runs_dir, name):
    """The perplexities of eval_ppl.py's one dataset for a run."""
    return next(iter(read_json(os.path.join(runs_dir, name, 'eval.json'))['results'].values()))['ppl']


def finding_4(m):
    ao = [read_eval(m.runs_dir, n) for n in m.each('mixed')]
    encoder = [read_eval(m.runs_dir, n) for n in m.each('encoder')]
    sizes = sorted(int(k) for k in ao[0] if k.isdigit())
    bounds = [e['nelbo_bound'] for e in encoder]
    fig = m.figure('fig3_ensembles_vs_encoder.png', FINDINGS['4'], 'orders in the ensemble (M)', 'val perplexity',
                   [('AO-GPT, ensemble of M orders', sizes, [[r[str(k)] for r in ao] for k in sizes])],
                   hlines=[('encoder MDM: NELBO bound (± s.e.)',
                            [b + sign * e['nelbo_bound_se'] for b, e in zip(bounds, encoder) for sign in (-1, 1)])],
                   logx=True)
    log_ppl = {k: spread([math.log(r[str(k)]) for r in ao]) for k in sizes}
    log_bound = spread([math.log(b) for b in bounds])
    se = max(e['nelbo_bound_se'] / e['nelbo_bound'] for e in encoder)  # the bound's s.e., in nats
    margin = max(m.margin(log_ppl[sizes[-1]], log_bound), 2 * se)
    before, after = log_ppl[1]['mean'] - log_bound['mean'], log_ppl[sizes[-1]]['mean'] - log_bound['mean']
    decided = ('does not hold' if before < -margin or after > margin else
               'holds' if before > margin else 'not resolvable at this size')
    numbers = {**{f'AO-GPT ppl, M={k}': spread([r[str(k)] for r in ao]) for k in sizes},
               'encoder NELBO bound (ppl)': spread(bounds), 'gap before the ensemble (nats)': before,
               'gap after (nats)': after, 'margin': margin}
    return [fig], [claim(f'Averaging AO-GPT over M context orders (up to {sizes[-1]}) brings its perplexity down to '
                         'the encoder MDM\'s NELBO bound.', numbers,
                         'gaps in nats, log AO-GPT ppl minus log bound; holds if the gap before the ensemble '
                              'exceeds the margin (the seed ranges, at least the noise floor and 2 s.e. of the '
                              'bound) and the ensemble\'s is within it; does not hold if the gap after exceeds the '
                              'margin or AO-GPT is below the bound by more than it from the start; else not '
                              'resolvable', decided)]


def finding_6(m, timing, gen):
    time_figure, time_claim = generation_time(m, timing)
    quality_figure, quality_claim = sample_quality(m, gen['results'])
    return [time_figure, quality_figure], [time_claim, quality_claim]


def generation_time(m, timing):
    steps, seconds = timing['steps'], timing['seconds']
    ao, encoder = seconds['AO-GPT (KV cache)'], seconds['encoder MDM']
    fig = m.figure('fig4_generation_time.png', 'Generation time against steps (Fig. 4)', 'steps',
                   f"seconds for {timing['batch_size']} samples",
                   [(label, steps, [[t] for t in times]) for label, times in seconds.items()], logx=True)
    grows_faster = encoder[-1] / encoder[0] > ao[-1] / ao[0]
    numbers = {f'seconds at {n} steps, AO-GPT / encoder': f'{a:.3g} / {e:.3g}' for n, a, e in zip(steps, ao, encoder)}
    return fig, claim('With its KV cache AO-GPT\'s generation time grows more slowly with the number of steps than '
                      'the encoder\'s (a full forward per step), and is the faster at one token per step.',
                      numbers | {'encoder / AO-GPT at the most steps': encoder[-1] / ao[-1]},
                      'holds if the encoder is slower at the most steps and its time grows by a larger factor from '
                      'the fewest to the most steps, else does not hold',
                      'holds' if encoder[-1] > ao[-1] and grows_faster else 'does not hold')


def sample_quality(m, rows):
    """gen_ppl.py's grid: a line of gen PPL against steps per sampling setting; the claim on the first setting."""
    by_setting = {}
    for r in rows:
        by_setting.setdefault((r['temperature'], r['top_p']), []).append(r)
    fig = m.figure('fig7_sample_quality.png', 'Sample quality against steps (Table 2)', 'steps',
                   'gen PPL (AO-GPT samples)',
                   [(f'temperature {t}, top_p {p}', [r['steps'] for r in group], [[r['gen_ppl']] for r in group])
                    for (t, p), group in by_setting.items()], logx=True, logy=True)
    (t, p), group = next(iter(by_setting.items()))
    few, most = group[0], group[-1]
    se = lambda r: r['gen_ppl_std'] / math.sqrt(r['n'])
    table = {f"steps {r['steps']}, temperature {r['temperature']}, top_p {r['top_p']}":
             f"gen PPL {r['gen_ppl']:.2f} ± {r['gen_ppl_std']:.2f}, entropy {r['entropy']:.3f}" for r in rows}
    return fig, by_margin(f"More steps give better samples: lower gen PPL at the most steps ({most['steps']}) than at "
                          f"the fewest ({few['steps']}), at temperature {t}, top_p {p}.",
                          table, few['gen_ppl'] - most['gen_ppl'], se(few) + se(most),
                          RULE + '; the margin here is the sum of the two gen PPLs\' standard errors over samples')


def finding_8(m):
    kinds = {'mixed': 'AO-GPT (adaLN), EMA', 'mixed-noema': 'AO-GPT (adaLN), no EMA',
             'sigma': 'sigma-GPT (add), EMA', 'sigma-noema': 'sigma-GPT (add), no EMA'}
    fig = m.figure('fig8_adaln_ema.png', FINDINGS['8'], 'iteration', f'{LOSS}, any order',
                   [m.curves(label, m.each(kind), 'val_ao') for kind, label in kinds.items()])
    finals = {kind: m.final(m.each(kind), 'val_ao') for kind in kinds}
    numbers = {f'final val any-order loss, {label}': finals[kind] for kind, label in kinds.items()}
    # two claims, so that an effect too small to resolve (EMA on a short run) does not hide the other
    return [fig], [
        by_margin('With EMA on both, AO-GPT\'s adaLN reaches a lower any-order loss than sigma-GPT\'s additive '
                  'injection.', numbers, finals['sigma']['mean'] - finals['mixed']['mean'],
                  m.margin(finals['sigma'], finals['mixed'])),
        by_margin('EMA lowers AO-GPT\'s any-order loss (its EMA weights against its raw ones).', {},
                  finals['mixed-noema']['mean'] - finals['mixed']['mean'],
                  m.margin(finals['mixed-noema'], finals['mixed']))]


def analyse(findings, p, seed_list, runs_dir, out):
    """Draw the figures and judge the claims of the findings."""
    m = Measured(runs_dir, out, seed_list, p['noise_floor'])
    analyses = {'1': lambda: finding_1(m), '2': lambda: finding_2(m, len(p['fixed_orders'])),
                '3': lambda: finding_3(m), '4': lambda: finding_4(m),
                '6': lambda: finding_6(m, generation_times(p, seed_list, runs_dir),
                                       read_json(os.path.join(runs_dir, f'mixed-s{seed_list[0]}', 'gen.json'))),
                '8': lambda: finding_8(m)}
    results = []
    for name in findings:
        figures, claims = analyses[name]()
        results.append(dict(finding=name, title=FINDINGS[name], figures=figures, claims=claims))
    return results


def read_json(path):
    with open(path) as f:
        return json.load(f)


def main():
    t0 = time.time()
    findings = check_inputs()
    p = PRESETS[preset]
    seed_list = list(SEEDS[:seeds or p['seeds']])
    out = out_dir or f'findings-{preset}'
    runs_dir = os.path.join(out, 'runs')
    needed = [name for f in findings for name in runs_of(f, p, seed_list)]
    runs = all_runs(p, seed_list)
    train = [train_job(name, *runs[name], os.path.join(runs_dir, name), not dry_run) for name in dict.fromkeys(needed)]
    if dry_run:
        for job in train + eval_jobs(findings, p, seed_list, runs_dir):
            print(f"{job.name} [{'done' if job.done else 'to run'}]: python {' '.join(job.argv)}")
        return
    run_jobs(train, workers or p['workers'], p['threads'])
    run_jobs(eval_jobs(findings, p, seed_list, runs_dir), workers or p['workers'], p['threads'])
    results = analyse(findings, p, seed_list, runs_dir, out)
    training = sum(read_metrics(os.path.join(runs_dir, n))[-1]['elapsed'] for n in dict.fromkeys(needed)) / 60
    settings = {'preset': preset, 'seeds': ', '.join(map(str, seed_list)), 'runs': len(train),
                'iterations per run': p['train']['max_iters'], 'training minutes, summed over runs': round(training, 1),
                'wall minutes of this call (runs already done are skipped)': round((time.time() - t0) / 60, 1)}
    write_results(out, f'AO-GPT findings, preset {preset}', settings, results)
    print(f"wrote {os.path.join(out, 'results.md')}, results.json and {sum(len(r['figures']) for r in results)} "
          f"figures ({training:.1f} minutes of training in the runs; this call {time.time() - t0:.0f}s)")


if __name__ == '__main__':
    configure(globals(), doc=__doc__)
    main()
