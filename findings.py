"""
The paper's findings (Xue et al., arXiv 2506.19935) reproduced by one command and judged as a
reviewer would: every kind of model gets its own settings from one small sweep, the comparisons
run over seeds, and every claim gets its effect, a 95% interval, its n and a verdict by one rule.

    python findings.py --preset=cpu               # tiny Shakespeare, characters, 2 CPU cores (about 3 hours)
    python findings.py --preset=cpu --out_dir=docs/findings-cpu --readme=README.md   # as committed
    python findings.py --preset=smoke             # every finding at toy size in a minute or two (the tests)
    python findings.py --preset=gpu               # OpenWebText at GPT-2 small size on one GPU (days; see README)
    python findings.py --preset=cpu --only=1,3    # some findings only: their runs and their figures
    python findings.py --preset=cpu --only=plateau,long,length,infill,orders,adapt,streams   # ours (kinds' sweeps first)
    python findings.py --preset=cpu --dry_run     # the sweep's jobs, the runs after it and their count; nothing is run

What it does, each run in its own folder out_dir/runs/<name> through train.py, eval_ppl.py and gen_ppl.py:
1. Sweep. For each kind of model the findings compare (left-to-right GPT, AO-GPT with 10% left to
   right, AO-GPT on random orders only (NoCL), sigma-GPT, the encoder MDM), one run per point of the
   preset's grid on the first seed: the learning rate (min_lr a tenth of it), gate_init for the
   networks with adaLN gates (the cpu preset keeps it at the quick start's 1.0), and for every kind
   its position encoding: 'learned' (the authors' absolute table) or 'rotary' (RoPE; a decoder's
   queries at the target position, model.py). Every other setting is the preset's and shared by all
   kinds (warm-up, EMA decay, batch, iterations). The point with the lowest final validation loss in
   the kind's own training objective wins, and its run is the kind's first seed.
2. Seeds. The kind's other seeds with the chosen settings; finding 2's fixed-order and block-wise
   runs with the left-to-right kind's settings (they too train in one order); our findings' runs with
   the mixed kind's settings but the position encoding. A run with exactly the flags of a run already
   planned (a sweep point, a kind's seed) is that run, not trained twice.
3. Evaluations: eval_ppl.py (ensembles of context orders, the raw weights beside the EMA ones, the
   encoder's NELBO), gen_ppl.py (AO-GPT's and the encoder's samples, one scorer), generation times
   (every repeat kept, the two models taking turns).
4. One PNG per figure, results.md and results.json in out_dir; with --readme, the README's
   Findings section (between its findings markers) rewritten from them.
The findings, the kinds, the presets and the text of every claim are data in experiments.py.

The findings are numbered by the paper's figure that shows them (sample quality is its Table 2):
  1  any-order training converges slower than left-to-right (Fig. 1)
  2  language has a left-to-right bias: fixed random orders and block-wise random orders against
     left to right, each run's loss in its own order (Fig. 2a)
  3  10% left-to-right training improves both the left-to-right and the any-order loss (Fig. 2b)
  4  context-order ensembles lower AO-GPT's perplexity, towards the encoder's NELBO bound (Figs. 3, 5)
  6  generation: AO-GPT's KV cache against the encoder's forward per step, in steps and in sequence
     length (Fig. 4); sample quality against steps, and AO-GPT's samples against the encoder's (Table 2)
  8  adaLN against sigma-GPT's additive injection (each with the position encoding its sweep chose,
     named in the claim), and EMA against the raw weights
(--only=5 and --only=7 name 4 and 6.) Ours, not the paper's, labelled "(Ours)":
  plateau  queries at the target position remove AO-GPT's plateau: the mixed kind at its chosen
           settings with position_encoding 'learned', 'rotary' and 'rotary_plain' (the query at its own
           position, as in a GPT), every seed; when each run's any-order loss first fell 0.1 nats below the
           unigram entropy; rotary against learned, and rotary against rotary_plain
  long     the same at block 256 (batch 4: the tokens per iteration of 64 x 16), 'learned' against
           'rotary', 2 seeds, any-order and left-to-right losses (cpu and smoke presets; on the gpu
           preset's block of 1,024 the plateau finding is already the long one)
  length   AO-GPT with queries at the target ('rotary', the mixed kind's settings) against the
           encoder's NELBO and the l2r GPT, each with its swept settings, at blocks 64, 256 and 1,024
           (the tokens of an iteration kept: batch 16, 4, 1), 2 seeds; at the longer blocks also our
           query-only variants ('rotary_half_heads', 'rotary_upper_layers'), and AO-GPT's and the encoder's
           learning rates swept again there by the sweep's rule (the l2r GPT keeps its choice); final losses
           against the block size, losses by the share known and by the distance to the nearest known
           token (cpu and smoke presets)
  infill   each kind's NLL of a span of 1, 4, 16 and 64 tokens given the rest of its val chunk (eval_ppl.py
           --gaps): AO-GPT exactly (the rest, then the gap left to right; ensembles of the gap's orders),
           the l2r GPT from the left side only, the encoder's gap revealed left to right and its NELBO
           bound on the gap; AO-GPT against the l2r GPT and against the encoder, on the mean over the
           spans shorter than the block
  orders   the any-order tax: AO-GPT trained on other distributions over orders (train.py's --order_mix,
           --order_curriculum: the paper's mix, 50% left to right, a curriculum, a mix with FIM orders, a FIM
           GPT), each at the mixed kind's chosen settings, beside the l2r GPT and the encoder at theirs, all trained
           here with their gap NLLs recorded in training; their losses, gaps (both sides and left only), and samples
           at a few steps scored by the GPT's first run; each arm against the GPT, the FIM GPT and the paper's mix;
           and the longer pair (the paper's mix and the GPT at a multiple of the iterations): does the tax shrink;
           and some arms again on a second corpus at the same settings (cpu: WikiText-2's characters, prepared by
           data/wikitext2_char/prepare.py), the same claims there
  adapt    AO-GPT from a GPT: a left-to-right GPT trained for half (or 3/4) of the budget, then AO-GPT from its
           checkpoint (train.py --init_from) for the rest, its orders staged (--order_stages: the FIM GPT for a third,
           moving linearly to finding orders' FIM mix over the next third) or the FIM mix from the start, each
           adaptation at the learning rate its own sweep (on the first seed) chose; against finding orders' GPT and FIM
           mix trained for the whole budget (its runs), at the same total iterations: its gaps against the GPT's left
           side, its left-to-right loss against the GPT's, its any-order loss against the FIM mix's; on the second
           corpus too, and at a larger size (no sweep there): does the tax shrink (cpu and smoke presets)
  streams  two streams (model.py's target_injection='two_stream': keys and values from a content stream without
           targets) against the single stream: finding orders' FIM mix (its runs) against the same with two streams
           at its iterations and at half of them (about its training compute), and with the target in the rotary
           queries only ('queries'), each at the mixed kind's chosen settings, beside finding orders' GPT; finding
           orders' readings (losses, gaps both sides and left only, samples scored by the GPT) and ms a sampled token;
           each arm against the single stream (any-order loss, gaps of 4 and 16 tokens, by at least 0.05 nats) and
           the GPT (gaps from the left, the tax); the same-iteration two streams again on the second corpus (cpu and
           smoke presets)

Verdicts (report.RULE): a paired comparison (the same model on the same chunks or samples: one
order against an ensemble, EMA against raw weights, few against many steps) is judged on its per-chunk or
per-sample differences, a bootstrap interval within each seed, then over seeds; a comparison between
runs on the per-seed numbers, by Welch's t interval of the difference of the means; a timing on its
per-repeat log ratios, by a t interval over the repeats. A claim that rests on a run whose loss ended
at the unigram entropy of the validation text (it did not learn) is not judged, and says so; our
plateau findings measure that plateau, so only their rotary runs are held to it (the claims say so).

Resumable: a run whose metrics.jsonl reached max_iters is not trained again, one with a ckpt.pt short
of it resumes (--init_from=resume), an evaluation whose json exists is kept; a second call only
redraws. A run folder remembers its settings (args.json): other settings in the same folder stop
the script with one line (a folder moved or copied elsewhere is the same run).
"""
import itertools
import json
import math
import os
import statistics
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from checkpoints import load_checkpoint
from common import (at_least, autocast, check_settings, default_device, default_dtype, fail, one_of, read_jsonl,
                    run_python)
from configurator import configure
from engine import generate
from experiments import (ADAPT_ARMS, ADAPT_DRAWS, ADAPT_PARENTS, ADAPTATIONS, ALIASES, AO_COST, CLAIMS, FIM_MIX,
                         FINDING_KINDS, FINDINGS, FLOOR, KINDS, LONG_POSITIONS, NEEDS, ORDER_ARMS, PLATEAU, POSITIONS,
                         PRESETS, QUERY_POSITIONS, SAME, SEEDS, STREAM_ARMS, STREAM_GAIN, STREAM_SPANS, STUCK, TAX,
                         adapt_stages, order_arms, stream_arms)
from scoring import losses_by_context
from training import parse_mix
from report import (RULE, line_figure, mean_interval, number, paired_interval, point_figure, spread, unpaired_interval,
                    verdict, write_results)

ROOT = os.path.dirname(os.path.abspath(__file__))

# -----------------------------------------------------------------------------
preset = 'cpu'  # 'cpu', 'gpu' or 'smoke'
only = ''  # comma list of findings (1, 2, 3, 4, 6, 8, plateau, long, length, infill, orders, adapt; 5, 7: 4, 6); '' all
out_dir = ''  # '': findings-<preset>
seeds = 0  # seeds of every kind; 0: the preset's
workers = 0  # runs side by side; 0: the preset's
readme = ''  # a README.md whose Findings section (between its findings markers) is rewritten; '' none
dry_run = False  # list the jobs (done, to resume, to run) and their commands; run nothing
# -----------------------------------------------------------------------------

@dataclass
class Job:
    """One script run: its folder, its log, the json or metrics that say it is done, and for a
    training run the settings its folder records (args.json) when it starts."""
    name: str
    argv: list
    log: str
    done: bool
    settings: dict = None
    needs: tuple = ()  # the run folders whose checkpoint it reads


def check_inputs():
    check_settings(globals(), {'preset': one_of(*PRESETS), 'workers': at_least(0),
                               'seeds': (lambda v: v == 0 or 2 <= v <= len(SEEDS),
                                         f"0 (the preset's) or in [2, {len(SEEDS)}]: comparisons between runs need "
                                         'seeds')})
    chosen = selected_findings(only)
    if preset == 'gpu' and not torch.cuda.is_available() and not dry_run:
        fail('--preset=gpu needs a CUDA GPU: use --preset=cpu here (or --dry_run to see its jobs)')
    for dataset in datasets(PRESETS[preset], chosen):
        train_bin = os.path.join('data', dataset, 'train.bin')
        if not os.path.exists(train_bin) and not dry_run:
            fail(f'{train_bin} not found: run python data/{dataset}/prepare.py first')
    if readme and not os.path.isfile(readme):
        fail(f'--readme={readme} is not a file: name the README.md whose Findings section to rewrite')
    out = out_dir or f'findings-{preset}'
    if os.path.exists(out) and not os.path.isdir(out):
        fail(f'--out_dir={out} is a file: name a folder (it is made if missing)')
    if not dry_run:
        runs = os.path.join(out, 'runs')
        if os.path.exists(runs) and not os.path.isdir(runs):
            fail(f'--out_dir={out} holds a file named runs, where the runs go: move it, or name another folder')
        try:
            os.makedirs(runs, exist_ok=True)
        except OSError as e:
            fail(f'--out_dir={out} cannot be made ({e.strerror}): name a folder you can write')
        report_ready()
    return chosen, out


def datasets(p, findings):
    """The data/ folders the findings train on: the preset's, and findings orders' and adapt's second corpus."""
    return list(dict.fromkeys([p['dataset']] + [dataset for dataset, _ in scored_corpora(p, findings, [])]))


def report_ready():
    """The figures need matplotlib: say so before any run trains, not after."""
    from report import load_matplotlib
    load_matplotlib()


def selected_findings(text):
    """The finding names of --only, in the paper's order, ours last; one line for an unknown one, or for
    a finding of longer blocks on a preset without them."""
    runs_here = lambda name: NEEDS.get(name, 'config') in PRESETS[preset]
    if not text.strip():
        return [name for name in FINDINGS if runs_here(name)]
    names = set()
    for entry in text.split(','):
        name = ALIASES.get(entry.strip(), entry.strip())
        if name not in FINDINGS:
            fail(f"--only takes findings among {', '.join(FINDINGS)} (5 and 7 are parts of 4 and 6), "
                 f"got {entry.strip()!r}")
        if not runs_here(name):
            fail(f'--only={name}: the {preset} preset has no longer blocks (its block is already long: its finding '
                 'plateau is the long-block one)' if name not in ('orders', 'adapt', 'streams') else
                 f'--only={name}: the {preset} preset has no order arms (its runs take days each): use --preset=cpu')
        names.add(name)
    return [name for name in FINDINGS if name in names]


# -----------------------------------------------------------------------------
# the runs: the sweep of each kind, then its other seeds; name -> train.py flags

def grid_points(kind, grid):
    """The sweep's points for a kind: {setting: value} for every combination of the axes it has (every
    kind has the learning rate and the position encoding; the networks with adaLN gates gate_init)."""
    axes = {'learning_rate': grid['learning_rate']}
    if KINDS[kind].adaln:
        axes['gate_init'] = grid['gate_init']
    axes['position_encoding'] = grid['position_encoding']
    return [dict(zip(axes, values)) for values in itertools.product(*axes.values())]


def point_name(kind, point):
    short = {'learning_rate': 'lr', 'gate_init': 'gate', 'position_encoding': ''}
    return f'sweep-{kind}-' + '-'.join(f'{short[k]}{v:g}' if isinstance(v, float) else f'{short[k]}{v}'
                                       for k, v in point.items())


def run_flags(p, kind, point, seed):
    """train.py's flags of one run: the preset's, the kind's, the point's (min_lr a tenth of the rate)."""
    return p['train'] | KINDS[kind].flags | point | dict(min_lr=point['learning_rate'] / 10, seed=seed)


def sweep_runs(p, kinds):
    """{name: flags} of the sweep: every grid point of every kind, on the first seed."""
    return {point_name(kind, point): run_flags(p, kind, point, SEEDS[0])
            for kind in kinds for point in grid_points(kind, p['grid'])}


def own_loss(kind, record):
    """A kind's validation loss in its own training objective, from one metrics.jsonl record."""
    return sum(weight * record[key] for key, weight in KINDS[kind].objective.items())


def choose(p, kind, runs_dir):
    """(the winning point, its run's name, [(point, name, final own loss)] of the whole sweep)."""
    names = [(point, point_name(kind, point)) for point in grid_points(kind, p['grid'])]
    rows = [(point, name, own_loss(kind, read_metrics(os.path.join(runs_dir, name))[-1])) for point, name in names]
    best = min(rows, key=lambda row: row[2])
    return best[0], best[1], rows


def seed_runs(p, findings, seed_list, chosen, sweep, at_blocks=None, adapt_rates=None):
    """{name: flags, or the name of the run with the same flags} of the runs after the sweep: the kinds'
    seeds (the first is the sweep's winner), finding 2's, ours (the mixed kind's settings, each position
    encoding; finding length's at at_blocks' points, choose_at_blocks; finding adapt's at adapt_rates,
    choose_adapt); sweep: the sweeps' {name: flags}."""
    runs = {}
    # long, adapt and streams need the kinds' choices only
    seeded = {kind for f in findings if f not in ('long', 'adapt', 'streams') for kind in FINDING_KINDS[f]}
    for kind, (point, _, _) in chosen.items():
        if kind in seeded:
            runs.update({f'{kind}-s{s}': run_flags(p, kind, point, s) for s in seed_list})
    if '2' in findings:
        point = chosen['l2r'][0]
        for i, order in enumerate(p['fixed_orders'], 1):
            runs[f'fixed{i}'] = run_flags(p, 'l2r', point, SEEDS[0]) | dict(order='fixed_random') | order
        runs.update({f'block-s{s}': run_flags(p, 'l2r', point, s) | dict(order='block_random') for s in seed_list})
    at = lambda positions: chosen['mixed'][0] | dict(position_encoding=positions)
    if 'plateau' in findings:
        runs.update({f'mixed-{pe}-s{s}': run_flags(p, 'mixed', at(pe), s) for pe in POSITIONS for s in seed_list})
    if 'long' in findings:
        runs.update({f'mixed-long-{pe}-s{s}': run_flags(p, 'mixed', at(pe), s) | p['long']
                     for pe in LONG_POSITIONS for s in seed_list[:2]})
    if 'length' in findings:
        base = p['lengths'][0][0]
        runs.update({length_run(label, block, s): run_flags(p, kind, at_blocks[label, block], s) | flags
                     for block, flags in p['lengths'] for label, (kind, _) in length_entries(chosen, block, base).items()
                     for s in seed_list[:2]})
    if 'orders' in findings:
        runs.update(order_runs(p, chosen, seed_list))
    if 'adapt' in findings:
        runs.update(adapt_runs(p, chosen, seed_list, adapt_rates))
    if 'streams' in findings:
        runs.update(stream_runs(p, chosen, seed_list))
    return same_runs(runs, sweep)


def order_runs(p, chosen, seed_list):
    """finding orders' runs, {name: flags}: each arm on every seed at its kind's chosen settings with its order flags
    (an arm that gives the whole mix drops the paper's random_ratio), and the longer pair: the paper's mix and the
    GPT for `longer` times the iterations."""
    o, runs = p['orders'], {}
    flags = lambda arm, seed: order_flags(p, chosen, arm, seed)
    runs.update({order_run(arm, s): flags(arm, s) for s in seed_list for arm in ORDER_ARMS})  # a seed at a time
    times, train = o['longer'], p['train']
    longer = dict(max_iters=train['max_iters'] * times, lr_decay_iters=train['lr_decay_iters'] * times,
                  eval_interval=train['eval_interval'] * times)
    runs.update({order_run(arm, s, times): flags(arm, s) | longer
                 for arm in ('paper', 'gpt') for s in seed_list[:o['longer_seeds']]})
    if 'second' in o:
        corpus = o['second']['dataset']
        runs.update({order_run(arm, s, corpus=corpus): flags(arm, s) | dict(dataset=corpus)
                     for s in seed_list for arm in o['second']['arms']})
    return runs


def order_flags(p, chosen, arm, seed):
    """train.py's flags of one of finding orders' arms on a seed."""
    kind, arms = ORDER_ARMS[arm][1], order_arms(p['train']['max_iters'])
    flags = run_flags(p, kind, chosen[kind][0], seed) | p['orders']['train']
    if 'order_mix' in arms[arm]:
        del flags['random_ratio']
    return flags | arms[arm]


def order_run(arm, seed, times=1, corpus=''):
    """A run's name: its arm, its multiple of the iterations (when not 1), its corpus (when not the preset's)."""
    return f"orders-{arm}{f'-x{times}' if times != 1 else ''}{f'-{corpus}' if corpus else ''}-s{seed}"


def order_corpora(p, seed_list):
    """finding orders' [(dataset, {arm: its run names})]: every arm on the preset's corpus, then the arms of its
    second corpus where the preset has one."""
    corpora = [(p['dataset'], {arm: [order_run(arm, s) for s in seed_list] for arm in ORDER_ARMS})]
    if 'second' in p['orders']:
        corpus = p['orders']['second']['dataset']
        corpora.append((corpus, {arm: [order_run(arm, s, corpus=corpus) for s in seed_list]
                                 for arm in p['orders']['second']['arms']}))
    return corpora


def order_arm(name):
    """The arm of a run of finding orders, adapt or streams: orders-fim-mix-s1 and adapt-fim-mix-w256-s1 are FIM
    mixes, streams-two-half-s1 is two streams at half the iterations (the longest arm name that fits)."""
    finding, _, rest = name.partition('-')
    arms = {'orders': ORDER_ARMS, 'adapt': ADAPT_ARMS, 'streams': STREAM_ARMS}[finding]
    return max((arm for arm in arms if rest.startswith(f'{arm}-')), key=len)


# finding adapt: GPT parents, each continued as AO-GPT (an adaptation) from its checkpoint

def adapt_settings(p, seed_list):
    """finding adapt's [(corpus, size, seeds, arms)]: every arm on the preset's corpus ('') and on finding orders'
    second one where the preset has one, every seed; the larger size's arms (size: its tag) on its seeds."""
    larger, arms = p['adapt']['larger'], list(ADAPT_ARMS)
    second = [p['orders']['second']['dataset']] if 'second' in p['orders'] else []
    return [(corpus, '', seed_list, arms) for corpus in [''] + second] + \
        [('', larger['tag'], seed_list[:larger['seeds']], list(larger['arms']))]


def adapt_run(arm, seed, corpus='', size=''):
    """A run's name: finding orders' for its GPT and FIM mix at the preset's size (they are its runs), else
    adapt-<arm>[-<size>][-<corpus>]-s<seed>; a parent's arm is parent-<its name in ADAPT_PARENTS>."""
    if arm in ORDER_ARMS and not size:
        return order_run(arm, seed, corpus=corpus)
    return f"adapt-{arm}{f'-{size}' if size else ''}{f'-{corpus}' if corpus else ''}-s{seed}"


def adapt_point(arm, lr):
    return f'adapt-sweep-{arm}-lr{lr:g}'


def adapt_flags(p, chosen, arm, seed, rates, corpus='', size=''):
    """train.py's flags of one of finding adapt's runs (rates: {adaptation: its learning rate}): finding orders' GPT
    and FIM mix; a parent ('parent-<name>'): finding orders' GPT for its share of the budget (its own schedule); an
    adaptation: its parent's flags (the checkpoint fixes the model, which no flag may contradict) for the rest of
    the budget, from its parent's checkpoint (init_from: the parent run's name), with its own orders, learning rate
    (min_lr a tenth) and batches (ADAPT_DRAWS)."""
    where = (dict(dataset=corpus) if corpus else {}) | (p['adapt']['larger']['train'] if size else {})
    if arm in ORDER_ARMS:
        return order_flags(p, chosen, arm, seed) | where
    budget = p['train']['max_iters']
    iterations = lambda n: dict(max_iters=n, lr_decay_iters=n)
    if arm.startswith('parent-'):
        return order_flags(p, chosen, 'gpt', seed) | where | iterations(round(budget * ADAPT_PARENTS[arm[7:]]))
    parent, staged = ADAPTATIONS[arm]
    iters, lr = budget - round(budget * ADAPT_PARENTS[parent]), rates[arm]
    orders = dict(order_stages=adapt_stages(iters)) if staged else dict(order_mix=FIM_MIX)
    return adapt_flags(p, chosen, f'parent-{parent}', seed, rates, corpus, size) | iterations(iters) | \
        dict(order='mixed', **orders, learning_rate=lr, min_lr=lr / 10, seed=seed + ADAPT_DRAWS,
             init_from=adapt_run(f'parent-{parent}', seed, corpus, size))


def adapt_runs(p, chosen, seed_list, rates):
    """finding adapt's runs, {name: flags}: each setting's arms on its seeds (adapt_settings), each adaptation after
    the parent it starts from (one per share of the budget, seed, corpus and size, shared by its adaptations)."""
    runs = {}
    for corpus, size, seeds, arms in adapt_settings(p, seed_list):
        for s in seeds:
            for arm in arms:
                if arm in ADAPTATIONS:
                    parent = 'parent-' + ADAPTATIONS[arm][0]
                    runs[adapt_run(parent, s, corpus, size)] = adapt_flags(p, chosen, parent, s, rates, corpus, size)
                runs[adapt_run(arm, s, corpus, size)] = adapt_flags(p, chosen, arm, s, rates, corpus, size)
    return runs


def adapt_sweep_runs(p, chosen):
    """finding adapt's sweep, {name: flags}: each adaptation at each learning rate of the preset's grid, on the first
    seed and the preset's corpus, after the parents they start from."""
    parents = {adapt_run(f'parent-{parent}', SEEDS[0]): adapt_flags(p, chosen, f'parent-{parent}', SEEDS[0], {})
               for parent in ADAPT_PARENTS}
    return parents | {adapt_point(arm, lr): adapt_flags(p, chosen, arm, SEEDS[0], {arm: lr})
                      for arm in ADAPTATIONS for lr in p['adapt']['grid']}


def adapt_sweep_losses(p, runs_dir):
    """{adaptation: {learning rate: its sweep run's final loss in the mixed kind's objective}}: the rule the FIM mix
    was chosen by."""
    return {arm: {lr: own_loss('mixed', read_metrics(os.path.join(runs_dir, adapt_point(arm, lr)))[-1])
                  for lr in p['adapt']['grid']} for arm in ADAPTATIONS}


def choose_adapt(p, runs_dir):
    """{adaptation: the learning rate of its lowest sweep loss}: its sweep run is its first seed."""
    return {arm: min(losses, key=losses.get) for arm, losses in adapt_sweep_losses(p, runs_dir).items()}


def adapt_corpora(p, seed_list):
    """finding adapt's [(corpus, size, {arm: run names})], as adapt_settings."""
    return [(corpus, size, {arm: [adapt_run(arm, s, corpus, size) for s in seeds] for arm in arms})
            for corpus, size, seeds, arms in adapt_settings(p, seed_list)]


# finding streams: finding orders' GPT and FIM mix (one stream) against two streams and the target in the queries

def stream_run(arm, seed, corpus=''):
    """A run's name: finding orders' for its GPT and FIM mix (they are its runs), else streams-<arm>[-<corpus>]-s<seed>."""
    if arm in ('gpt', 'fim-mix'):
        return order_run(arm, seed, corpus=corpus)
    return f"streams-{arm}{f'-{corpus}' if corpus else ''}-s{seed}"


def stream_flags(p, chosen, arm, seed, corpus=''):
    """train.py's flags of one of finding streams' runs: finding orders' GPT, or its FIM mix with the arm's own."""
    base = order_flags(p, chosen, 'gpt' if arm == 'gpt' else 'fim-mix', seed)
    return base | stream_arms(p['train']['max_iters'])[arm] | (dict(dataset=corpus) if corpus else {})


def stream_settings(p):
    """finding streams' [(corpus, arms)]: every arm on the preset's corpus (''), then its second arms on finding
    orders' second corpus where the preset has one."""
    second = p['orders'].get('second', {}).get('dataset')
    return [('', list(STREAM_ARMS))] + ([(second, list(p['streams']['second_arms']))] if second else [])


def stream_corpora(p, seed_list):
    """finding streams' [(dataset, {arm: its run names})], as stream_settings."""
    return [(corpus or p['dataset'], {arm: [stream_run(arm, s, corpus) for s in seed_list] for arm in arms})
            for corpus, arms in stream_settings(p) if arms]


def stream_runs(p, chosen, seed_list):
    """finding streams' runs, {name: flags}: each arm of each corpus on every seed."""
    return {stream_run(arm, s, corpus): stream_flags(p, chosen, arm, s, corpus)
            for corpus, arms in stream_settings(p) for s in seed_list for arm in arms}


def length_run(label, block_size, seed):
    return f'{label}-block{block_size}-s{seed}'


def length_entries(chosen, block, base_block):
    """finding length's models at a block: {label: (kind, point)}. AO-GPT with queries at the target ('mixed': the
    mixed kind's chosen settings, position_encoding 'rotary'), at the longer blocks also each query-only variant
    ('mixed-<position_encoding>'); the encoder and the l2r GPT at their chosen settings."""
    at = lambda positions: chosen['mixed'][0] | dict(position_encoding=positions)
    return ({query_label(pe): ('mixed', at(pe)) for pe in block_queries(block, base_block)} |
            {kind: (kind, chosen[kind][0]) for kind in ('encoder', 'l2r')})


def block_queries(block, base_block):
    """AO-GPT's query settings finding length runs at a block: the variants at the longer blocks only."""
    return QUERY_POSITIONS if block != base_block else QUERY_POSITIONS[:1]


def query_label(positions):
    return 'mixed' if positions == 'rotary' else f'mixed-{positions}'


BLOCK_SWEPT = ('mixed', 'encoder')  # finding length: the kinds whose learning rate is swept again at each longer block


def block_sweep_runs(p, chosen):
    """finding length, {name: flags}: at each block beyond the preset's own, the learning rate of AO-GPT's entries
    and the encoder's swept again over the grid's rates (their other settings as chosen), on the first seed."""
    base = p['lengths'][0][0]
    return {block_point_name(kind, point | dict(learning_rate=lr), block):
            run_flags(p, kind, point | dict(learning_rate=lr), SEEDS[0]) | flags
            for block, flags in p['lengths'][1:] for kind, point in length_entries(chosen, block, base).values()
            if kind in BLOCK_SWEPT for lr in p['grid']['learning_rate']}


def block_point_name(kind, point, block):
    return f'{point_name(kind, point)}-block{block}'


def choose_at_blocks(p, chosen, runs_dir):
    """{(label, block): point} of finding length: at the preset's own block the sweep's choice; at a longer one, for
    the block-swept kinds, the learning rate whose run ends with the lowest loss in the kind's own objective."""
    base, picked = p['lengths'][0][0], {}
    for block, _ in p['lengths']:
        for label, (kind, point) in length_entries(chosen, block, base).items():
            rates = p['grid']['learning_rate'] if block != base and kind in BLOCK_SWEPT else [point['learning_rate']]
            loss = lambda lr: own_loss(kind, read_metrics(os.path.join(
                runs_dir, block_point_name(kind, point | dict(learning_rate=lr), block)))[-1])
            picked[label, block] = point | dict(learning_rate=min(rates, key=loss) if len(rates) > 1 else rates[0])
    return picked


def same_runs(runs, planned):
    """runs with each one whose flags are those of a planned run ({name: flags}) or of an earlier one in
    runs replaced by that run's name: it is that run, not trained twice (a planned run's own name too)."""
    key = lambda flags: json.dumps(flags, sort_keys=True)
    first = {}
    for name, flags in planned.items():
        first.setdefault(key(flags), name)
    out = {}
    for name, flags in runs.items():
        out[name] = first.setdefault(key(flags), name)
        if out[name] == name and name not in planned:
            out[name] = flags
    return out


# -----------------------------------------------------------------------------
# jobs: training, then evaluations, each a process of one of the scripts (common.run_python)

def read_metrics(folder):
    """A run's metrics.jsonl records, [] before its first evaluation."""
    path = os.path.join(folder, 'metrics.jsonl')
    return [r for _, r in read_jsonl(path, "one evaluation's losses")] if os.path.exists(path) else []


def read_json(path, fix='delete it and run again (its step is redone)'):
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        fail(f'{path} is not JSON ({e.msg}), cut by a kill perhaps: {fix}')


def train_job(name, p, flags, folder):
    """train.py for one run: done when its metrics reach max_iters, resumed when it left a checkpoint; a run whose
    flags name a parent run (init_from) starts from that run's checkpoint, once it is trained."""
    settings = dict(config=p['config'], **flags)
    check_same_run(folder, settings)
    records = read_metrics(folder)
    done = bool(records) and records[-1]['iter'] >= flags['max_iters']
    resume = os.path.exists(os.path.join(folder, 'ckpt.pt'))
    parent = os.path.join(os.path.dirname(folder), flags['init_from']) if 'init_from' in flags else None
    start = ['--init_from=resume'] if resume else [f"--init_from={os.path.join(parent, 'ckpt.pt')}"] if parent else []
    argv = [os.path.join(ROOT, 'train.py'), os.path.join(ROOT, p['config']),
            *(f'--{k}={os.path.join(ROOT, v) if k == "order_file" else v}' for k, v in flags.items() if k != 'init_from'),
            f'--out_dir={folder}', *start]
    return Job(f'train {name}' + (' (resume)' if resume and not done else ''), argv, os.path.join(folder, 'train.log'),
               done, settings, (parent,) if parent else ())


def with_checkpoints(jobs, earlier=()):
    """jobs, with the training of each finished run whose checkpoint a job still to run reads (needs) but which kept
    no ckpt.pt (a committed run folder keeps its records only: .gitignore) done again from the start: the same
    flags, so the same run, and that job finds its checkpoint. earlier: the training jobs of the calls before."""
    trained = {os.path.dirname(job.log): job for job in [*earlier, *jobs] if job.settings is not None}
    while True:
        gone = sorted({folder for job in jobs if not job.done for folder in job.needs if folder in trained and
                       trained[folder].done and not os.path.exists(os.path.join(folder, 'ckpt.pt'))})
        if not gone:
            return jobs
        again = [replace(trained[folder], name=f'{trained[folder].name} again (a job reads its checkpoint, which is '
                                                'gone)', done=False) for folder in gone]
        trained |= {os.path.dirname(job.log): job for job in again}
        jobs = again + [job for job in jobs if job.settings is None or os.path.dirname(job.log) not in gone]


def check_same_run(folder, settings):
    """A run folder holds one run: its args.json says which settings (not paths, so a moved folder is the
    same run); other settings there stop the script."""
    path = os.path.join(folder, 'args.json')
    fix = f'the settings of its run are unknown, so delete the run folder {folder} to train it again'
    if os.path.exists(path) and read_json(path, fix) != settings:
        fail(f'{folder} holds a run with other settings (see its args.json): use another --out_dir, or delete '
             f'that run folder to train it again')


def script_job(name, script, flags, out_json, needs=()):
    """An evaluation script with --out_json: done when that file exists; needs: the run folders whose checkpoint it
    reads."""
    return Job(name, [os.path.join(ROOT, script), *(f'--{k}={v}' for k, v in flags.items()), f'--out_json={out_json}'],
               out_json.replace('.json', '.log'), os.path.exists(out_json), needs=tuple(needs))


def eval_jobs(findings, p, seed_list, folders):
    """eval_ppl.py on AO-GPT (ensembles; raw weights for finding 8) and the encoder, with --gaps on both and the l2r
    GPT for finding infill; gen_ppl.py on AO-GPT and the encoder."""
    jobs, data = [], dict(dataset=p['dataset']) | p['eval']
    for s in seed_list:
        mixed, encoder = folders.get(f'mixed-s{s}'), folders.get(f'encoder-s{s}')  # None where no finding needs them
        if '4' in findings:
            jobs.append(script_job(f'eval mixed-s{s}', 'eval_ppl.py', dict(out_dir=mixed) | data,
                                   os.path.join(mixed, 'eval.json'), needs=[mixed]))
            jobs.append(script_job(f'eval encoder-s{s}', 'eval_ppl.py',
                                   dict(out_dir=encoder) | data | dict(ensemble=1, encoder_l2r=False),
                                   os.path.join(encoder, 'eval.json'), needs=[encoder]))
        if '8' in findings:
            jobs.append(script_job(f'eval mixed-s{s} raw weights', 'eval_ppl.py',
                                   dict(out_dir=mixed) | data | dict(ensemble=1, use_ema=False),
                                   os.path.join(mixed, 'eval_raw.json'), needs=[mixed]))
        if 'infill' in findings:
            jobs += [gaps_job(p, f'{kind}-s{s}', folders[f'{kind}-s{s}']) for kind in FINDING_KINDS['infill']]
        if '6' in findings:
            scorer = os.path.join(folders[f'l2r-s{seed_list[0]}'], 'ckpt.pt') if p['scorer'] == 'l2r' else p['scorer']
            for kind, folder in (('mixed', mixed), ('encoder', encoder)):
                samples = os.path.join(folder, 'samples.jsonl')
                flags = dict(out_dir=folder, scorer=scorer, samples_out=samples) | p['gen']
                jobs.append(script_job(f'gen-ppl {kind}-s{s}', 'gen_ppl.py', flags, os.path.join(folder, 'gen.json'),
                                       needs=[folder, os.path.dirname(scorer)] if p['scorer'] == 'l2r' else [folder]))
    if {'orders', 'adapt', 'streams'} & set(findings):
        jobs += order_eval_jobs(p, seed_list, folders, findings)
    return jobs


def gaps_job(p, name, folder, dataset=None):
    """eval_ppl.py --gaps at the preset's spans on one run (gaps.json), on the val text of its dataset (the
    preset's unless given)."""
    infill = p['infill']
    flags = dict(out_dir=folder, dataset=dataset or p['dataset'],
                 gaps=','.join(f'span:{L}' for L in infill['spans'])) | \
        {k: v for k, v in infill.items() if k != 'spans'}
    return script_job(f'gaps {name}', 'eval_ppl.py', flags, os.path.join(folder, 'gaps.json'), needs=[folder])


def order_eval_jobs(p, seed_list, folders, findings=('orders',)):
    """findings orders and adapt (those among findings): the gaps of each of finding orders' runs and of finding
    adapt's arms' runs, and the samples of each run of their arms (gen_orders.json) at finding orders' steps, scored
    by the GPT's first run on the same corpus; an arm trained without random orders (the GPT, the FIM GPT) samples
    left to right, the others in random orders. A run of both findings is evaluated once."""
    corpora = scored_corpora(p, findings, seed_list)
    on = {name: dataset for dataset, runs in corpora for names in runs.values() for name in names}
    jobs = [gaps_job(p, name, folder, on.get(name)) for name, folder in folders.items()
            if name.startswith('orders-') or name in on]
    scorers, sampled = {}, set()
    for dataset, runs in corpora:
        scorer = scorers.setdefault(dataset, folders[runs['gpt'][0]])
        for arm, names in runs.items():
            for name in [name for name in names if name not in sampled]:
                flags = dict(out_dir=folders[name], scorer=os.path.join(scorer, 'ckpt.pt'),
                             samples_out=os.path.join(folders[name], 'samples_orders.jsonl')) | p['orders']['gen'] | \
                    (dict(order='l2r') if arm in without_random_orders() else {})
                jobs.append(script_job(f'gen-ppl {name}', 'gen_ppl.py', flags,
                                       os.path.join(folders[name], 'gen_orders.json'), needs=[scorer, folders[name]]))
                sampled.add(name)
    return jobs


def scored_corpora(p, findings, seed_list):
    """[(dataset, {arm: run names})] whose runs findings orders, adapt and streams (those among findings) score:
    finding orders' corpora, then finding adapt's settings, then finding streams' corpora."""
    return (order_corpora(p, seed_list) if 'orders' in findings else []) + \
        ([(corpus or p['dataset'], runs) for corpus, _, runs in adapt_corpora(p, seed_list)] if 'adapt' in findings
         else []) + (stream_corpora(p, seed_list) if 'streams' in findings else [])


def without_random_orders():
    """finding orders' decoder arms trained on no random orders (the GPT, the FIM GPT): they sample left to right,
    and their left-to-right loss says whether they learned."""
    arms = order_arms(max_iters=0)  # the curriculum's length does not matter here
    return {arm for arm in ORDER_ARMS if arm != 'encoder' and (ORDER_ARMS[arm][1] == 'l2r' or
            'order_mix' in arms[arm] and not parse_mix(arms[arm]['order_mix'])['random'])}


def run_jobs(jobs, n_workers, threads):
    """Run the jobs not done yet, n_workers at a time, the first ready one in the list next: a job is ready once
    the training jobs here of the run folders it needs have finished. Return how many ran; stop with one line
    naming the log of a failed one (after the running ones end)."""
    env = os.environ | ({'OMP_NUM_THREADS': str(threads)} if threads else {})
    for job in jobs:
        if job.done:
            print(f'{job.name}: done, skipped')

    def launch(job):
        print(f'{job.name}: started')
        if job.settings is not None:
            os.makedirs(os.path.dirname(job.log), exist_ok=True)
            path = os.path.join(os.path.dirname(job.log), 'args.json')
            with open(path + '.tmp', 'w') as f:  # then renamed: a kill never leaves it cut
                json.dump(job.settings, f)
            os.replace(path + '.tmp', path)
        t0 = time.time()
        code = run_python(job.argv, os.getcwd(), env, job.log)
        print(f'{job.name}: ' + ('finished' if code == 0 else f'failed ({code})') + f' in {time.time() - t0:.0f}s')
        return code

    pending = [job for job in jobs if not job.done]
    training = {os.path.dirname(job.log): job for job in pending if job.settings is not None}
    finished, failed, running, n_ran = set(), [], {}, len(pending)
    ready = lambda job: all(training[f].name in finished for f in job.needs if f in training)
    with ThreadPoolExecutor(n_workers) as pool:
        while running or (pending and not failed):
            for job in [job for job in pending if ready(job)][:n_workers - len(running)] if not failed else []:
                pending.remove(job)
                running[pool.submit(launch, job)] = job
            if not running:
                fail(f'{pending[0].name} waits for a training job that is not planned (a bug)')
            for future in wait(running, return_when=FIRST_COMPLETED).done:
                job = running.pop(future)
                (finished.add(job.name) if future.result() == 0 else failed.append(job))
    if failed:
        fail(f'{failed[0].name} failed: {last_line(failed[0].log)} (the whole log: {failed[0].log})')
    return n_ran


def add_wall_minutes(runs_dir, minutes):
    """The wall minutes of every call that ran jobs, this one's added (kept in runs/wall_minutes.json), so a
    call that only redraws reports the time the results took, not its own few seconds."""
    path = os.path.join(runs_dir, 'wall_minutes.json')
    total = (read_json(path) if os.path.exists(path) else 0) + minutes
    with open(path, 'w') as f:
        json.dump(round(total, 1), f)
    return round(total, 1)


def last_line(path):
    with open(path) as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[-1] if lines else 'no output'


def time_generation(paths, steps, lengths, batch_size, repeats, seed=SEEDS[0]):
    """Wall seconds of generating batch_size sequences in a random order, through the library as bench.py
    --run=arch (decoders with their KV cache, the encoder a forward per step), every repeat kept, the
    models taking turns at each point so that a repeat's ratio compares timings under the same load:
    ({label: [[seconds of each repeat] per number of steps, at the block size]}, {label: the same per
    sequence length, one token per step}, the block size)."""
    device, dtype = default_device(), default_dtype()
    models = {label: load_checkpoint(path, device)[0] for label, path in paths.items()}

    def once(model, length, n_steps):
        x = torch.zeros(batch_size, length, dtype=torch.long, device=device)
        known = torch.zeros(length, dtype=torch.bool, device=device)
        t0 = time.perf_counter()
        with autocast(device, dtype):
            generate(model, x, known, n_steps, generator=torch.Generator(device).manual_seed(seed))
        if device == 'cuda':
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    def timed(points):
        seconds = {label: [[] for _ in points] for label in models}
        for _ in range(repeats):
            for i, (length, n_steps) in enumerate(points):
                for label, model in models.items():
                    seconds[label][i].append(once(model, length, n_steps))
        return seconds

    block = next(iter(models.values())).config.block_size
    for model in models.values():
        once(model, block, steps[0])  # warm-up
    return timed([(block, k) for k in steps]), timed([(n, n) for n in lengths]), block


def generation_times(p, folders, seed, runs_dir):
    """Finding 6's timings, measured once and kept in runs/generation_time.json; measured again when that
    file is of other settings (an older one kept no repeats)."""
    path = os.path.join(runs_dir, 'generation_time.json')
    timing = p['timing']
    wanted = dict(steps=list(timing['steps']), lengths=list(timing['lengths']), batch_size=timing['batch_size'],
                  repeats=timing['repeats'])
    if os.path.exists(path):
        kept = read_json(path)
        if {k: kept.get(k) for k in wanted} == wanted:
            print('generation time: done, skipped')
            return kept
        print(f'generation time: {path} is of other settings or kept no repeats, measuring again')
    print('generation time: measuring')
    if p['threads']:
        torch.set_num_threads(p['threads'])  # as the runs: one thread each on the CPU
    paths = {'AO-GPT (KV cache)': os.path.join(folders[f'mixed-s{seed}'], 'ckpt.pt'),
             'encoder MDM': os.path.join(folders[f'encoder-s{seed}'], 'ckpt.pt')}
    by_steps, by_length, block = time_generation(paths, timing['steps'], timing['lengths'], timing['batch_size'],
                                                 timing['repeats'])
    result = dict(block_size=block, **wanted, seconds=by_steps, seconds_by_length=by_length)
    with open(path, 'w') as f:
        json.dump(result, f)
    return result


def unigram_entropy(dataset):
    """Entropy (nats) of the validation text's own unigram distribution: the loss of a model that
    ignores its context."""
    counts = np.bincount(np.memmap(os.path.join('data', dataset, 'val.bin'), dtype=np.uint16, mode='r'))
    q = counts[counts > 0] / counts.sum()
    return float(-(q * np.log(q)).sum())


def other_unigrams(p, findings, seed_list):
    """{run: the unigram entropy of its val text} for the runs on findings orders' and adapt's second corpus."""
    corpora = [(dataset, runs) for dataset, runs in scored_corpora(p, findings, seed_list) if dataset != p['dataset']]
    entropies = {dataset: unigram_entropy(dataset) for dataset, _ in corpora}
    return {name: entropies[dataset] for dataset, runs in corpora for names in runs.values() for name in names}


# -----------------------------------------------------------------------------
# what the runs measured, and the verdicts

@dataclass
class Measured:
    """Where the runs are and what did not train: the figures' folder, the seeds, the run folders."""
    folders: dict
    out_dir: str
    seed_list: list
    unigram: float
    unigrams: dict = field(default_factory=dict)  # {run: unigram entropy of its corpus} where not the preset's

    def each(self, kind):
        return [f'{kind}-s{s}' for s in self.seed_list]

    def metrics(self, name):
        return read_metrics(self.folders[name])

    def curves(self, label, names, key):
        """A figure series: key's value at every evaluation the runs share, over the runs."""
        records = [evaluations(self.folders[n], key) for n in names]
        iters = sorted(set.intersection(*(set(r) for r in records)))
        return label, iters, [[r[i] for r in records] for i in iters]

    def finals(self, names, key):
        return [self.metrics(n)[-1][key] for n in names]

    def stuck(self, names):
        """The runs among names whose final loss in their own objective sits at the unigram entropy of their
        corpus: they did not learn."""
        return [n for n in names if self.own_loss(n) > self.unigrams.get(n, self.unigram) - STUCK]

    def own_loss(self, name):
        """A run's final loss in its own objective: a fixed-order run's in its order; an arm of findings orders and
        adapt trained on no random orders, left to right; else its kind's (its name's first part: mixed-rotary-s1 is
        a mixed run)."""
        final = self.metrics(name)[-1]
        if name.startswith(('fixed', 'block')):
            return final['val_fixed']
        if name.startswith(('orders-', 'adapt-', 'streams-')):
            arm = order_arm(name)
            return final['val_l2r'] if arm in without_random_orders() else \
                own_loss((ORDER_ARMS | ADAPT_ARMS | STREAM_ARMS)[arm][1], final)
        return own_loss(name.split('-')[0], final)

    def read(self, name, file):
        return read_json(os.path.join(self.folders[name], file))

    def positions(self, names):
        """The position encoding the runs trained with (their args.json), one text for all of them."""
        return ', '.join(dict.fromkeys(self.read(n, 'args.json')['position_encoding'] for n in names))

    def chunk_nll(self, name, file, column):
        """Per-chunk NLL (nats per token) of one column of eval_ppl.py's one dataset."""
        return next(iter(self.read(name, file)['results'].values()))['chunk_nll'][column]

    def figure(self, name, *args, **kw):
        line_figure(os.path.join(self.out_dir, name), *args, **kw)
        return name

    def point_figure(self, name, *args, **kw):
        point_figure(os.path.join(self.out_dir, name), *args, **kw)
        return name


def evaluations(folder, key):
    """{iteration: key's value} at a run's evaluations; a run started from a parent run's checkpoint (finding adapt)
    after its parent's, its iterations counted on from the parent's last."""
    path = os.path.join(folder, 'args.json')
    parent = read_json(path).get('init_from') if os.path.exists(path) else None
    before = evaluations(os.path.join(os.path.dirname(folder), parent), key) if parent else {}
    return before | {max(before, default=0) + r['iter']: r[key] for r in read_metrics(folder)}


NOT_JUDGED = 'not judged: a run it compares did not learn'


def claim(text, numbers, interval, floor=FLOOR, stuck=(), decide=verdict):
    """A claim with its numbers, its effect's 95% interval and its verdict; not judged when a run it
    rests on did not learn (its loss stayed at the unigram entropy)."""
    numbers = numbers | {'effect [95% interval] (n)': interval}
    if stuck:
        return dict(claim=text, numbers=numbers | {'runs at the unigram entropy': ', '.join(stuck)}, verdict=NOT_JUDGED)
    return dict(claim=text, numbers=numbers, verdict=decide(interval, floor))


def comparable(interval, tolerance):
    """Equivalence: holds if the interval lies within +-tolerance, does not hold if it lies wholly
    outside it, else not resolvable."""
    if -tolerance < interval.low and interval.high < tolerance:
        return 'holds'
    if interval.low > tolerance or interval.high < -tolerance:
        return 'does not hold'
    return 'not resolvable at this size'


def between_runs(m, a_names, a_key, b_names, b_key):
    """Claim helpers' common case: the interval of mean(a) - mean(b) over runs, and the stuck runs."""
    return (unpaired_interval(m.finals(a_names, a_key), m.finals(b_names, b_key)),
            m.stuck(a_names + b_names))


LOSS = 'val loss (nats/token)'


def finding_1(m):
    l2r, random = m.each('l2r'), m.each('random')
    fig = m.figure('fig1_l2r_vs_random.png', FINDINGS['1'], 'iteration', LOSS,
                   [m.curves('order=l2r: left-to-right loss', l2r, 'val_l2r'),
                    m.curves('order=random: any-order loss', random, 'val_ao')])
    interval, stuck = between_runs(m, random, 'val_ao', l2r, 'val_l2r')
    return [fig], [claim(CLAIMS['1'],
                         {'final val loss, l2r runs, left to right': spread(m.finals(l2r, 'val_l2r')),
                          'final val loss, random runs, any order': spread(m.finals(random, 'val_ao'))},
                         interval, stuck=stuck)]


def finding_2(m, n_fixed):
    l2r, block, fixed = m.each('l2r'), m.each('block'), [f'fixed{i}' for i in range(1, n_fixed + 1)]
    fig = m.figure('fig2a_fixed_orders.png', FINDINGS['2'], 'iteration', f"{LOSS}, in the run's order",
                   [m.curves('left to right', l2r, 'val_l2r'),
                    *(m.curves(f'fixed random order {i + 1}', [n], 'val_fixed') for i, n in enumerate(fixed)),
                    m.curves('block-wise random orders', block, 'val_fixed')])
    numbers = {'final val loss, left to right': spread(m.finals(l2r, 'val_l2r')),
               'final val loss, block-wise random orders': spread(m.finals(block, 'val_fixed')),
               **{f'final val loss, fixed random order {i + 1}': v for i, v in enumerate(m.finals(fixed, 'val_fixed'))}}
    vs_l2r, stuck_l2r = between_runs(m, fixed, 'val_fixed', l2r, 'val_l2r')
    vs_block, stuck_block = between_runs(m, fixed, 'val_fixed', block, 'val_fixed')
    return [fig], [
        claim(CLAIMS['2 l2r'], numbers, vs_l2r, stuck=stuck_l2r),
        claim(CLAIMS['2 block'], {}, vs_block, stuck=stuck_block)]


def finding_3(m):
    mix, nocl = m.each('mixed'), m.each('random')
    fig = m.figure('fig2b_mixed_vs_nocl.png', FINDINGS['3'], 'iteration', LOSS,
                   [m.curves('10% l2r: left-to-right loss', mix, 'val_l2r'),
                    m.curves('10% l2r: any-order loss', mix, 'val_ao'),
                    m.curves('NoCL: left-to-right loss', nocl, 'val_l2r'),
                    m.curves('NoCL: any-order loss', nocl, 'val_ao')])
    numbers = {f'final val {reading} loss, {label}': spread(m.finals(names, key))
               for reading, key in (('l2r', 'val_l2r'), ('any-order', 'val_ao'))
               for label, names in (('10% l2r', mix), ('NoCL', nocl))}
    l2r, stuck = between_runs(m, nocl, 'val_l2r', mix, 'val_l2r')
    ao, _ = between_runs(m, nocl, 'val_ao', mix, 'val_ao')
    cost = unpaired_interval(m.finals(mix, 'val_ao'), m.finals(nocl, 'val_ao'))
    return [fig], [
        claim(CLAIMS['3 l2r'], numbers, l2r, stuck=stuck),
        claim(CLAIMS['3 ao'], {}, ao, stuck=stuck),
        claim(CLAIMS['3 cost'].format(floor=FLOOR), {}, cost, stuck=stuck,
              decide=lambda interval, floor: 'holds' if interval.high < floor else
              'does not hold' if interval.low > floor else 'not resolvable at this size')]


def finding_4(m):
    mixed, encoder = m.each('mixed'), m.each('encoder')
    ao = [next(iter(m.read(n, 'eval.json')['results'].values()))['ppl'] for n in mixed]
    bounds = [next(iter(m.read(n, 'eval.json')['results'].values()))['ppl'] for n in encoder]
    sizes = sorted(int(k) for k in ao[0] if k.isdigit())
    fig = m.figure('fig3_ensembles_vs_encoder.png', FINDINGS['4'], 'orders in the ensemble', 'val perplexity',
                   [('AO-GPT, an ensemble of context orders', sizes, [[r[str(k)] for r in ao] for k in sizes])],
                   hlines=[('encoder MDM: NELBO bound, over seeds', [b['nelbo_bound'] for b in bounds])], logx=True)
    top = sizes[-1]
    falls = paired_interval([[a - b for a, b in zip(m.chunk_nll(n, 'eval.json', '1'),
                                                     m.chunk_nll(n, 'eval.json', str(top)))] for n in mixed])
    log_ppl = {k: statistics.mean(math.log(r[str(k)]) for r in ao) for k in sizes}
    trend = all(log_ppl[a] >= log_ppl[b] for a, b in zip(sizes, sizes[1:]))
    stuck = m.stuck(mixed + encoder)
    ao_nll = {k: [statistics.mean(m.chunk_nll(n, 'eval.json', str(k))) for n in mixed] for k in (1, top)}
    nelbo = [statistics.mean(m.chunk_nll(n, 'eval.json', 'nelbo')) for n in encoder]
    seed_by_seed = {f'seed {s}: AO-GPT ppl ensemble=1 / ensemble={top} / encoder bound':
                    f"{r['1']:.4g} / {r[str(top)]:.4g} / {b['nelbo_bound']:.4g} ± {b['nelbo_bound_se']:.2g}"
                    for s, r, b in zip(m.seed_list, ao, bounds)}
    return [fig], [
        claim(CLAIMS['4 ensemble'].format(top=top),
              {f'AO-GPT ppl, ensemble={k}': spread([r[str(k)] for r in ao]) for k in sizes} |
              {'falls at every doubling of the ensemble (mean over seeds)': trend}, falls, stuck=m.stuck(mixed)),
        claim(CLAIMS['4 premise'],
              seed_by_seed | {f'gap left with ensemble={top} (nats)': unpaired_interval(ao_nll[top], nelbo)},
              unpaired_interval(ao_nll[1], nelbo), stuck=stuck)]


def finding_6(m, timing, gen):
    return ([generation_time(m, timing), time_against_length(m, timing), sample_quality_figure(m, gen)],
            [time_claim(timing), length_claim(timing), steps_claim(m, gen), encoder_claim(m, gen)])


def generation_time(m, timing):
    return m.figure('fig4_generation_time.png',
                    f"Generation time against steps, {timing['block_size']} tokens (Fig. 4)", 'steps',
                    f"seconds for {timing['batch_size']} samples (band: the {timing['repeats']} repeats)",
                    [(label, timing['steps'], times) for label, times in timing['seconds'].items()],
                    logx=True, logy=True)


def time_against_length(m, timing):
    return m.figure('fig4_time_vs_length.png', 'Generation time against length, one token per step', 'tokens',
                    f"seconds for {timing['batch_size']} samples (band: the {timing['repeats']} repeats)",
                    [(label, timing['lengths'], times) for label, times in timing['seconds_by_length'].items()],
                    logx=True, logy=True)


def log_ratios(seconds, i):
    """log(encoder seconds / AO-GPT seconds) of each repeat at point i (the repeats taken in turn)."""
    return [math.log(e / a) for a, e in zip(seconds['AO-GPT (KV cache)'][i], seconds['encoder MDM'][i])]


def time_claim(timing):
    steps, seconds = timing['steps'], timing['seconds']
    mean = {label: [statistics.mean(t) for t in times] for label, times in seconds.items()}
    ao, encoder = mean['AO-GPT (KV cache)'], mean['encoder MDM']
    numbers = {f'seconds at {n} steps, AO-GPT / encoder (mean over repeats)': f'{a:.3g} / {e:.3g}'
               for n, a, e in zip(steps, ao, encoder)}
    numbers |= {f'growth from {steps[0]} to {steps[-1]} steps, AO-GPT': ao[-1] / ao[0],
                f'growth from {steps[0]} to {steps[-1]} steps, encoder': encoder[-1] / encoder[0]}
    return claim(CLAIMS['6 time'].format(steps=steps[-1], block=timing['block_size']), numbers, mean_interval(log_ratios(seconds, -1), 'timing repeats'))


def length_claim(timing):
    seconds, lengths = timing['seconds_by_length'], timing['lengths']
    short, long = log_ratios(seconds, 0), log_ratios(seconds, -1)
    return claim(CLAIMS['6 length'].format(short=lengths[0], long=lengths[-1]),
                 {f'encoder / AO-GPT at {n} tokens (geometric mean over repeats)':
                  math.exp(statistics.mean(log_ratios(seconds, i))) for i, n in enumerate(lengths)},
                 mean_interval([b - a for a, b in zip(short, long)], 'timing repeats'))


def gen_rows(m, kind):
    """{(temperature, top_p): [rows by steps]} of gen_ppl.py's grid, for each of the kind's seeds."""
    out = []
    for name in m.each(kind):
        by_setting = {}
        for r in m.read(name, 'gen.json')['results']:
            by_setting.setdefault((r['temperature'], r['top_p']), []).append(r)
        out.append(by_setting)
    return out


def sample_quality_figure(m, gen):
    series = []
    for kind, label in (('mixed', 'AO-GPT'), ('encoder', 'encoder')):
        seeds = gen[kind]
        for setting, rows in seeds[0].items():
            series.append((f'{label}, temperature {setting[0]}, top_p {setting[1]}', [r['steps'] for r in rows],
                           [[s[setting][i]['gen_ppl'] for s in seeds] for i in range(len(rows))]))
    return m.figure('table2_sample_quality.png', 'Sample quality against steps (Table 2)', 'steps', 'gen PPL', series,
                    logx=True, logy=True)


def steps_claim(m, gen):
    """More steps, better samples: AO-GPT's per-sample log gen PPL at the fewest minus at the most steps."""
    setting = next(iter(gen['mixed'][0]))
    differences = [[a - b for a, b in zip(s[setting][0]['sample_nll'], s[setting][-1]['sample_nll'])]
                   for s in gen['mixed']]
    rows = gen['mixed'][0][setting]
    return claim(CLAIMS['6 steps'].format(fewest=rows[0]['steps'], most=rows[-1]['steps'], temperature=setting[0],
                                          top_p=setting[1]),
                 {f"steps {r['steps']}: gen PPL, entropy": spread_pair([s[setting][i] for s in gen['mixed']])
                  for i, r in enumerate(rows)}, paired_interval(differences), stuck=m.stuck(m.each('mixed')))


def spread_pair(rows):
    return f"{statistics.mean(r['gen_ppl'] for r in rows):.4g}, {statistics.mean(r['entropy'] for r in rows):.3f}"


def encoder_claim(m, gen):
    """AO-GPT's samples against the encoder's at the most steps and the lowest temperature of the grid."""
    setting = min(gen['mixed'][0], key=lambda s: s[0])
    mean_nll = lambda kind: [statistics.mean(s[setting][-1]['sample_nll']) for s in gen[kind]]
    most = gen['mixed'][0][setting][-1]['steps']
    table = {f'{label}, temperature {t}, top_p {p}, steps {r["steps"]}: gen PPL, entropy':
             spread_pair([s[(t, p)][i] for s in gen[kind]])
             for kind, label in (('mixed', 'AO-GPT'), ('encoder', 'encoder'))
             for (t, p), rows in gen[kind][0].items() for i, r in enumerate(rows)}
    return claim(CLAIMS['6 encoder'].format(temperature=setting[0], top_p=setting[1], most=most, same=SAME), table, unpaired_interval(mean_nll('mixed'), mean_nll('encoder')),
                 floor=SAME, stuck=m.stuck(m.each('mixed') + m.each('encoder')),
                 decide=comparable)


def finding_8(m):
    mixed, sigma = m.each('mixed'), m.each('sigma')
    fig = m.figure('fig8_adaln_vs_sigma.png', FINDINGS['8'], 'iteration', f'{LOSS}, any order',
                   [m.curves('AO-GPT (adaLN), EMA weights', mixed, 'val_ao'),
                    m.curves('sigma-GPT (additive), EMA weights', sigma, 'val_ao')])
    interval, stuck = between_runs(m, sigma, 'val_ao', mixed, 'val_ao')
    positions = {'AO-GPT': m.positions(mixed), 'sigma-GPT': m.positions(sigma)}
    differ = '; the two differ, so the comparison includes the position encoding' \
        if positions['AO-GPT'] != positions['sigma-GPT'] else ''
    ema = paired_interval([[raw - avg for raw, avg in zip(m.chunk_nll(n, 'eval_raw.json', '1'),
                                                           m.chunk_nll(n, 'eval.json', '1'))] for n in mixed])
    return [fig], [
        claim(CLAIMS['8 adaln'].format(ao=positions['AO-GPT'], sigma=positions['sigma-GPT'], differ=differ),
              {'final val any-order loss, AO-GPT': spread(m.finals(mixed, 'val_ao')),
               'final val any-order loss, sigma-GPT': spread(m.finals(sigma, 'val_ao')),
               'position encodings, AO-GPT / sigma-GPT' + (' (they differ)' if differ else ''):
                   ' / '.join(positions.values())}, interval, stuck=stuck),
        claim(CLAIMS['8 ema'], {}, ema, stuck=m.stuck(mixed))]


def plateau_left(records, unigram):
    """The first evaluated iteration at which the any-order val loss is PLATEAU nats or more below the
    unigram entropy, or 'never'."""
    return next((r['iter'] for r in records if r['val_ao'] <= unigram - PLATEAU), 'never')


def ours_numbers(m, runs):
    """Our findings' numbers: {setting: run names} -> when each run left the plateau, the final losses."""
    numbers = {f'{pe}, seed {n.rsplit("-s", 1)[1]}: first iteration {PLATEAU} nats below the unigram entropy':
               plateau_left(m.metrics(n), m.unigram) for pe, names in runs.items() for n in names}
    return numbers | {f'final val {reading} loss, {pe}': spread(m.finals(names, key)) for pe, names in runs.items()
                      for reading, key in (('any-order', 'val_ao'), ('left-to-right', 'val_l2r'))}


def ours_claim(m, text, a, b, key, numbers=None):
    """Ours: mean(a) - mean(b) of the final val key over runs; judged unless a rotary run (b) did not learn (the
    text says so: experiments.AT_PLATEAU)."""
    at_entropy = [n for n in m.stuck(a) if n not in b]
    numbers = (numbers or {}) | ({'other runs at the unigram entropy (the plateau: kept)': ', '.join(at_entropy)}
                                 if at_entropy else {})
    return claim(text, numbers, unpaired_interval(m.finals(a, key), m.finals(b, key)),
                 stuck=m.stuck(b))


def finding_plateau(m):
    runs = {pe: m.each(f'mixed-{pe}') for pe in POSITIONS}
    fig = m.figure('ours_plateau.png', FINDINGS['plateau'], 'iteration', f'{LOSS}, any order',
                   [m.curves(f"AO-GPT (10% l2r), position_encoding '{pe}'", names, 'val_ao')
                    for pe, names in runs.items()],
                   hlines=[('unigram entropy of the val text', [m.unigram])])
    return [fig], [
        ours_claim(m, CLAIMS['plateau learned'], runs['learned'], runs['rotary'], 'val_ao', ours_numbers(m, runs)),
        ours_claim(m, CLAIMS['plateau plain'], runs['rotary_plain'], runs['rotary'], 'val_ao')]


def finding_long(m, long):
    runs = {pe: [f'mixed-long-{pe}-s{s}' for s in m.seed_list[:2]] for pe in LONG_POSITIONS}
    fig = m.figure('ours_long_blocks.png', f"{FINDINGS['long']}: block {long['block_size']}", 'iteration', LOSS,
                   [m.curves(f"'{pe}': {reading} loss", names, key) for pe, names in runs.items()
                    for reading, key in (('any-order', 'val_ao'), ('left-to-right', 'val_l2r'))],
                   hlines=[('unigram entropy of the val text', [m.unigram])])
    at = dict(block=long['block_size'], batch=long['batch_size'])
    return [fig], [
        ours_claim(m, CLAIMS['long learned'].format(**at), runs['learned'], runs['rotary'], 'val_ao',
                   ours_numbers(m, runs)),
        ours_claim(m, CLAIMS['long l2r'].format(**at), runs['learned'], runs['rotary'], 'val_l2r')]


SHARES = 10  # finding length: the known share of a block, in bins of a tenth


def context_losses(folder, dataset, block, chunks, per_share, seed=SEEDS[0]):
    """A run's val losses by the share of the block known and by the distance from the nearest known token
    (scoring.losses_by_context, the first `chunks` val chunks of its block, each in a random order; the encoder at
    per_share known counts evenly within each tenth): {'share': mean nll per tenth known, 'distance': {d: mean nll} for
    d = 1, 2, 4, ... (up to the next power of two) and 'none'}. Kept in folder/by_context.json, so that the
    figure redraws without the checkpoint."""
    path = os.path.join(folder, 'by_context.json')
    if os.path.exists(path):
        return read_json(path)
    if not os.path.exists(os.path.join(folder, 'ckpt.pt')):
        fail(f'{folder} has neither by_context.json nor ckpt.pt: train the run again (delete its folder) to measure it')
    model = load_checkpoint(os.path.join(folder, 'ckpt.pt'))[0]
    val = np.memmap(os.path.join('data', dataset, 'val.bin'), dtype=np.uint16, mode='r')
    generator = torch.Generator().manual_seed(seed)
    grid = [int((i + (j + 0.5) / per_share) * block / SHARES) for i in range(SHARES) for j in range(per_share)]
    parts = [losses_by_context(model, torch.from_numpy(val[i * block:(i + 1) * block].astype(np.int64)),
                               torch.randperm(block, generator=generator), grid) for i in range(chunks)]
    known, distances, nlls = (torch.cat(p) for p in zip(*parts))
    # each known count weighs as one prediction, as a decoder's slot does (the encoder predicts block - c at c)
    weights = 1 / torch.bincount(known)[known].double()
    mean = lambda where: ((weights * nlls)[where].sum() / weights[where].sum()).item()
    share = known * SHARES // block
    # distance d goes to the power of two at or above it: 1, 2, 4 (3 and 4), 8 (5 to 8), ...
    rounded = torch.where(distances < block, 2 ** torch.ceil(torch.log2(distances.double())).long(), -1)
    result = dict(share=[mean(share == i) for i in range(SHARES)],
                  distance={('none' if d == -1 else str(d)): mean(rounded == d) for d in rounded.unique().tolist()})
    with open(path + '.tmp', 'w') as f:  # then renamed: a kill never leaves it cut
        json.dump(result, f)
    os.replace(path + '.tmp', path)
    return result


def finding_length(m, lengths, dataset, context):
    """AO-GPT (queries at the target; at the longer blocks also the query-only variants) against the encoder's NELBO
    and the l2r GPT at each block; the any-order loss of AO-GPT and the encoder by the share of the block known and
    by the distance from the nearest known token."""
    base = lengths[0][0]
    readings = {query_label(pe): ('val_ao', f"AO-GPT, '{pe}', any-order loss") for pe in QUERY_POSITIONS} | {
        'encoder': ('val_ao', 'encoder MDM, NELBO'), 'l2r': ('val_l2r', 'left-to-right GPT, left-to-right loss')}
    runs = {block: {label: [length_run(label, block, s) for s in m.seed_list[:2]]
                    for label in [query_label(pe) for pe in block_queries(block, base)] + ['encoder', 'l2r']}
            for block, _ in lengths}
    blocks = list(runs)
    fig = m.figure('ours_length.png', FINDINGS['length'], 'block size (tokens; the tokens of an iteration kept)',
                   f'final {LOSS}', [(text, [b for b in blocks if label in runs[b]],
                                      [m.finals(runs[b][label], key) for b in blocks if label in runs[b]])
                                     for label, (key, text) in readings.items()], logx=True)
    final = lambda block, label: m.finals(runs[block][label], readings[label][0])
    claims = []
    for block, by_label in runs.items():
        numbers = {f'final val loss, {readings[label][1]}, learning rate '
                   f"{m.read(names[0], 'args.json')['learning_rate']:g}": spread(final(block, label))
                   for label, names in by_label.items()}
        for pe in block_queries(block, base):
            label = query_label(pe)
            swept = '' if block == base else ', the rate swept again at this block'
            claims.append(claim(CLAIMS['length encoder'].format(block=block, positions=pe, swept=swept),
                                numbers if pe == 'rotary' else {},
                                unpaired_interval(final(block, 'encoder'), final(block, label)),
                                stuck=m.stuck(by_label[label] + by_label['encoder'])))
        for pe in block_queries(block, base)[1:]:
            claims.append(claim(CLAIMS['length variant'].format(block=block, positions=pe), {},
                                unpaired_interval(final(block, 'mixed'), final(block, query_label(pe))),
                                stuck=m.stuck(by_label[query_label(pe)] + by_label['mixed'])))
    by_context = {(block, label): [context_losses(m.folders[name], dataset, block, **context)
                                   for name in runs[block][label]] for block in blocks for label in ('mixed', 'encoder')}
    labels = {'mixed': 'AO-GPT', 'encoder': 'encoder'}
    shares = [(i + 0.5) / SHARES for i in range(SHARES)]
    by_share = m.figure('ours_length_by_share.png', '(Ours) AO-GPT and the encoder: loss by the share known',
                        'share of the block known (the place in the order, over the block)', LOSS,
                        [(f'{labels[kind]}, block {block}', shares, [[r['share'][i] for r in rows] for i in range(SHARES)])
                         for (block, kind), rows in by_context.items()])
    by_distance = m.figure('ours_length_by_distance.png', '(Ours) AO-GPT and the encoder: loss by the nearest known token',
                           'distance to the nearest known token (up to; none known: drawn at twice the block)', LOSS,
                           [distance_series(f'{labels[kind]}, block {block}', block, rows)
                            for (block, kind), rows in by_context.items()], logx=True)
    return [fig, by_share, by_distance], claims


def finding_infill(m, infill):
    """Gap NLL against the span's length for each kind (eval_ppl.py --gaps, gaps.json), and the two claims, each on
    the mean over the spans shorter than the block (a span of the whole block has no other side)."""
    mixed, encoder, l2r = m.each('mixed'), m.each('encoder'), m.each('l2r')
    block = m.read(mixed[0], 'gaps.json')['block_size']
    spans, inner = list(infill['spans']), [L for L in infill['spans'] if L < block]

    def nll(name, column, span):
        return next(iter(m.read(name, 'gaps.json')['results'].values()))[f'span:{span}']['nll'][column]

    def over_spans(names, column):  # each run's NLL per gap token averaged over the inner spans
        return [statistics.mean(nll(n, column, L) for L in inner) for n in names]
    top = infill['ensemble']
    series = [('AO-GPT: the rest, then the gap left to right', mixed, 'gap_l2r'),
              (f'AO-GPT: an ensemble of {top} random orders of the gap', mixed, str(top)),
              ('AO-GPT: the left side only', mixed, 'left'), ('left-to-right GPT: the left side only', l2r, 'left'),
              ('encoder: the gap revealed left to right', encoder, 'revealed'),
              ('encoder: its NELBO bound on the gap', encoder, 'nelbo')]
    fig = m.figure('ours_infill.png', FINDINGS['infill'], 'span (tokens hidden, one span per val chunk)',
                   'NLL per gap token (nats)',
                   [(label, spans, [[nll(n, column, L) for n in names] for L in spans]) for label, names, column in series],
                   logx=True)
    numbers = {f'{label}, span {L}': spread([nll(n, column, L) for n in names])
               for label, names, column in series for L in spans}
    text = dict(spans=', '.join(map(str, inner)), floor=FLOOR)
    non_inferior = lambda interval, floor: ('holds' if interval.low > -floor else
                                            'does not hold' if interval.high < -floor else 'not resolvable at this size')
    return [fig], [
        claim(CLAIMS['infill right'].format(**text), numbers,
              unpaired_interval(over_spans(l2r, 'left'), over_spans(mixed, 'gap_l2r')), stuck=m.stuck(mixed + l2r)),
        claim(CLAIMS['infill encoder'].format(**text),
              {'encoder NELBO bound minus AO-GPT (nats per gap token)':
               unpaired_interval(over_spans(encoder, 'nelbo'), over_spans(mixed, 'gap_l2r'))},
              unpaired_interval(over_spans(encoder, 'revealed'), over_spans(mixed, 'gap_l2r')),
              stuck=m.stuck(mixed + encoder), decide=non_inferior)]


def finding_orders(m, p):
    """finding orders on the preset's corpus, then on its second one (the same claims, for the arms run there); the
    tax at the longer pair."""
    figures, claims = [], []
    for i, (dataset, runs) in enumerate(order_corpora(p, m.seed_list)):
        more = order_results(m, p, runs, corpus=dataset if i else '')
        figures, claims = figures + more[0], claims + more[1]
    return figures, claims + [longer_claim(m, p)]


def order_results(m, p, runs, corpus=''):
    """Each arm's left-to-right and any-order losses, gap NLLs (gaps.json: both sides and the left side only) and
    sample quality (gen_orders.json); the trade-off figure, the gap curves over training, and the claims against
    the GPT, the FIM GPT and the paper's mix (those of them whose arms ran): (figures, claims). runs: {arm: names};
    corpus: a second corpus, named in the figures' files and the claims."""
    label = {arm: text for arm, (text, _) in ORDER_ARMS.items()}
    spans, inner = list(p['infill']['spans']), inner_spans(m, p, runs['paper'][0])
    gap = lambda name, L, column=None: gap_nll(m, name, L, column)
    gaps = lambda arm, column=None: mean_gaps(m, runs[arm], inner, column)
    samples = lambda arm, steps: sample_nlls(m, runs[arm], steps)
    sampled_in = lambda name: f"{m.read(name, 'gen_orders.json')['results'][0]['order']} order"
    numbers = {}
    for arm in runs:
        numbers |= arm_numbers(m, p, label[arm], runs[arm])
    named, title = lambda file: corpus_file(file, corpus), lambda text: corpus_title(text, corpus)
    trade = trade_off_figure(m, named('ours_orders.png'), title(FINDINGS['orders']), inner,
                             [(label[arm], runs[arm]) for arm in runs])
    by_span = m.figure(named('ours_orders_gaps.png'), title('(Ours) Gap NLL by span, each arm'), 'span (tokens hidden)',
                       'NLL per gap token (nats)',
                       [(f'{label[arm]}, ' + ('left only' if arm == 'gpt' else 'both sides'), spans,
                         [[gap(n, L) for n in runs[arm]] for L in spans]) for arm in runs], logx=True)
    key = f"val_gap_span{p['orders']['train']['eval_gaps'].split(',')[-1].split(':')[1]}"
    curves = m.figure(named('ours_orders_training.png'), title(f'(Ours) In training: {key[8:]} given both sides'),
                      'iteration', 'NLL per gap token (nats)',
                      [m.curves(label[arm], runs[arm], key) for arm in runs if arm != 'gpt'] +
                      [m.curves(f"{label['gpt']}, left only", runs['gpt'], f'{key}_left')])
    text = dict(tax=TAX, cost=AO_COST, floor=FLOOR, spans=', '.join(map(str, inner)))
    non_inferior = lambda interval, floor: ('holds' if interval.low > -floor else 'does not hold'
                                            if interval.high < -floor else 'not resolvable at this size')
    stuck = lambda *arms: m.stuck([n for arm in arms for n in runs[arm]])
    decoders = [arm for arm in runs if arm not in ('gpt', 'encoder')]
    said = lambda key, **kw: said_on(corpus, key, **kw)
    claims = [claim(said('orders tax', arm=label[arm], **text), numbers if arm == decoders[0] else {},
                    between_runs(m, runs[arm], 'val_l2r', runs['gpt'], 'val_l2r')[0], stuck=stuck(arm, 'gpt'),
                    decide=within(TAX)) for arm in decoders]
    claims += [claim(said('orders gaps', arm=label[arm], reading='revealed left to right' if arm == 'encoder'
                                                  else 'the rest, then the gap left to right', **text),
                     {f'span {L}': unpaired_interval([gap(n, L, 'left') for n in runs['gpt']],
                                                     [gap(n, L) for n in runs[arm]]) for L in inner},
                     unpaired_interval(gaps('gpt'), gaps(arm)), stuck=stuck(arm, 'gpt'))
               for arm in runs if arm != 'gpt']
    claims += [claim(said('orders fim', arm=label[arm], **text), {},
                     unpaired_interval(gaps('fim-gpt'), gaps(arm)), stuck=stuck(arm, 'fim-gpt'), decide=non_inferior)
               for arm in decoders if arm != 'fim-gpt' and 'fim-gpt' in runs]
    claims += [claim(said('orders gaps paper', arm=label[arm], **text), {},
                     unpaired_interval(gaps('paper'), gaps(arm)), stuck=stuck(arm, 'paper'))
               for arm in runs if arm not in ('gpt', 'paper')]
    claims += [claim(said('orders ao', arm=label[arm], **text), {},
                     between_runs(m, runs[arm], 'val_ao', runs['paper'], 'val_ao')[0], stuck=stuck(arm, 'paper'),
                     decide=within(AO_COST)) for arm in decoders if arm != 'paper']
    claims += [claim(said('orders samples', arm=label[arm], steps=k, order=sampled_in(runs[arm][0])), {},
                     unpaired_interval(samples('paper', k)[0], samples(arm, k)[0]), stuck=stuck(arm, 'paper'))
               for arm in runs if arm not in ('gpt', 'paper') for k in order_steps(p)]
    return [trade, by_span, curves], claims


def finding_streams(m, p):
    """finding streams on each of its corpora (stream_corpora): the same claims on each."""
    figures, claims = [], []
    for i, (dataset, runs) in enumerate(stream_corpora(p, m.seed_list)):
        more = stream_results(m, p, runs, corpus=dataset if i else '')
        figures, claims = figures + more[0], claims + more[1]
    return figures, claims


def stream_results(m, p, runs, corpus=''):
    """Each arm's numbers (finding orders' readings and its samples' ms a token; not training minutes: a run's
    wall clock counts pauses and whatever else ran beside it, and the cpu runs' restarted at each resume), the
    trade-off figure, and the claims of each arm but the GPT and the single stream: against the single stream (the
    any-order loss, gaps of STREAM_SPANS) by STREAM_GAIN, against the GPT (gaps from the left, the tax)."""
    label = {arm: text for arm, (text, _) in STREAM_ARMS.items()}
    inner = inner_spans(m, p, runs['fim-mix'][0])
    numbers = {}
    for arm in runs:
        numbers |= arm_numbers(m, p, label[arm], runs[arm])
        numbers |= {f"{label[arm]}: {k} steps, ms a sampled token (batch {p['orders']['gen']['batch_size']})":
                    spread([1000 * r['seconds_per_sample'] / m.read(n, 'gaps.json')['block_size']
                            for n, r in zip(runs[arm], sample_nlls(m, runs[arm], k)[1])]) for k in order_steps(p)}
    named, title = lambda file: corpus_file(file, corpus), lambda text: corpus_title(text, corpus)
    trade = trade_off_figure(m, named('ours_streams.png'), title(FINDINGS['streams']), inner,
                             [(label[arm], runs[arm]) for arm in runs])
    gap = lambda name, L, column=None: gap_nll(m, name, L, column)
    text = dict(gain=STREAM_GAIN, tax=TAX, spans=', '.join(map(str, inner)))
    stuck = lambda *arms: m.stuck([n for arm in arms for n in runs[arm]])
    said = lambda key, **kw: said_on(corpus, key, **kw)
    claims = []
    for arm in [arm for arm in runs if arm not in ('gpt', 'fim-mix')]:
        claims.append(claim(said('streams ao', arm=label[arm], **text), numbers if not claims else {},
                            between_runs(m, runs['fim-mix'], 'val_ao', runs[arm], 'val_ao')[0], floor=STREAM_GAIN,
                            stuck=stuck(arm, 'fim-mix')))
        claims += [claim(said('streams gaps', arm=label[arm], span=L, **text), {},
                         unpaired_interval([gap(n, L) for n in runs['fim-mix']], [gap(n, L) for n in runs[arm]]),
                         floor=STREAM_GAIN, stuck=stuck(arm, 'fim-mix')) for L in STREAM_SPANS if L in inner]
        claims.append(claim(said('orders gaps', arm=label[arm], reading='the rest, then the gap left to right', **text),
                            {}, unpaired_interval(mean_gaps(m, runs['gpt'], inner, 'left'),
                                                  mean_gaps(m, runs[arm], inner)), stuck=stuck(arm, 'gpt')))
        claims.append(claim(said('orders tax', arm=label[arm], **text), {},
                            between_runs(m, runs[arm], 'val_l2r', runs['gpt'], 'val_l2r')[0], stuck=stuck(arm, 'gpt'),
                            decide=within(TAX)))
    return [trade], claims


# findings orders', adapt's and streams' readings of their runs

BOTH_SIDES = {'gpt': 'left', 'encoder': 'revealed'}  # what an arm reads of a gap given both sides: a decoder 'gap_l2r'


def gap_nll(m, name, span, column=None):
    """A run's NLL per gap token at a span (gaps.json): column's, else what its arm reads given both sides."""
    result = next(iter(m.read(name, 'gaps.json')['results'].values()))[f'span:{span}']['nll']
    return result[column or BOTH_SIDES.get(order_arm(name), 'gap_l2r')]


def inner_spans(m, p, name):
    """The preset's spans shorter than a run's block (a span of the whole block has no other side)."""
    block = m.read(name, 'gaps.json')['block_size']
    return [L for L in p['infill']['spans'] if L < block]


def mean_gaps(m, names, spans, column=None):
    """Each run's NLL per gap token given both sides (or column), averaged over the spans."""
    return [statistics.mean(gap_nll(m, n, L, column) for L in spans) for n in names]


def order_steps(p):
    return [int(k) for k in p['orders']['gen']['steps'].split(',')]


def sample_nlls(m, names, steps):
    """Each run's mean per-sample NLL at `steps` (gen_orders.json), and its rows there."""
    rows = [next(r for r in m.read(n, 'gen_orders.json')['results'] if r['steps'] == steps) for n in names]
    return [statistics.mean(r['sample_nll']) for r in rows], rows


def arm_numbers(m, p, label, names):
    """An arm's numbers over its runs: its final losses, its gap NLLs at each span given both sides (and, but for the
    encoder, from the left only), its samples' gen PPL and entropy at each number of steps."""
    spans = p['infill']['spans']
    numbers = {f'{label}: final val loss, {reading}': spread(m.finals(names, key))
               for reading, key in (('left to right', 'val_l2r'), ('any order', 'val_ao'))}
    numbers |= {f'{label}: gap NLL, span {L}, both sides': spread([gap_nll(m, n, L) for n in names]) for L in spans}
    if order_arm(names[0]) != 'encoder':
        numbers |= {f'{label}: gap NLL, span {L}, left only': spread([gap_nll(m, n, L, 'left') for n in names])
                    for L in spans}
    return numbers | {f'{label}: {k} steps, gen PPL, entropy': spread_pair(sample_nlls(m, names, k)[1])
                      for k in order_steps(p)}


def trade_off_figure(m, file, title, inner, points):
    """Each arm's final left-to-right loss against its gap NLL given both sides (the mean over the inner spans);
    points: [(label, run names)]."""
    return m.point_figure(file, title, 'final val left-to-right loss (nats/char)',
                          f"gap NLL given both sides (nats/char; mean over spans {', '.join(map(str, inner))})",
                          [(label, m.finals(names, 'val_l2r'), mean_gaps(m, names, inner)) for label, names in points])


def corpus_file(file, corpus):
    """A figure's file on a corpus other than the preset's: named after it."""
    return file.replace('.png', f'_{corpus}.png' if corpus else '.png')


def corpus_title(text, corpus):
    return f'{text} ({corpus})' if corpus else text


def said_on(corpus, key, **kw):
    """A claim's text, on a corpus other than the preset's: its (Ours) names it."""
    return CLAIMS[key].format(**kw).replace('(Ours)', f'(Ours, on {corpus})' if corpus else '(Ours)')


def within(bound):
    """The verdict of an effect that should stay under bound: holds if the interval lies below it, does not hold if
    above it."""
    return lambda interval, _: ('holds' if interval.high < bound else 'does not hold' if interval.low > bound
                                else 'not resolvable at this size')


def finding_adapt(m, p, runs_dir):
    """finding adapt on each corpus at the preset's size (the larger size's arms drawn beside the preset corpus's),
    then the tax at the larger size against the preset's."""
    settings = adapt_corpora(p, m.seed_list)
    larger = next((size, runs) for _, size, runs in settings if size)
    figures, claims = [], []
    for corpus, size, runs in settings:
        if not size:
            more = adapt_results(m, p, runs, corpus, adapt_sweep_losses(p, runs_dir), None if corpus else larger)
            figures, claims = figures + more[0], claims + more[1]
    return figures, claims + size_claims(m, p, settings)


def adapt_results(m, p, runs, corpus, sweep, larger=None):
    """Each arm's numbers (as finding orders'), the trade-off figure and the losses over the whole budget, and each
    adaptation's claims against the GPT (its gaps at each inner span, its tax) and the FIM mix (its any-order loss):
    (figures, claims). runs: {arm: names}; corpus: a second corpus, named in the figures' files and the claims;
    sweep: adapt_sweep_losses (the rates are chosen on the preset's corpus); larger: (size, {arm: names}) of the
    larger size, drawn in the trade-off figure."""
    label = {arm: text for arm, (text, _) in ADAPT_ARMS.items()}
    inner = inner_spans(m, p, runs['fim-mix'][0])
    rates = {arm: min(losses, key=losses.get) for arm, losses in sweep.items()}
    numbers = {} if corpus else {f'{label[arm]}: learning rate {lr:g}, final val loss in the mixed objective': loss
                                 for arm, losses in sweep.items() for lr, loss in losses.items()}
    for arm in runs:
        numbers |= arm_numbers(m, p, label[arm], runs[arm])
    title = corpus_title(FINDINGS['adapt'], corpus)
    points = [(label[arm], names) for arm, names in runs.items()]
    trade = trade_off_figure(m, corpus_file('ours_adapt.png', corpus), title, inner, points + (
        [(f'{label[arm]}, {larger[0]}', names) for arm, names in larger[1].items()] if larger else []))
    budget = m.figure(corpus_file('ours_adapt_budget.png', corpus), f'{title}: the budget', 'iteration (of the budget)',
                      f'{LOSS}, any order', [m.curves(text, names, 'val_ao') for text, names in points])
    claims = []
    for arm in ADAPTATIONS:
        stuck = lambda other: m.stuck(runs[arm] + runs[other])
        claims.append(claim(said_on(corpus, 'adapt tax', arm=label[arm], rate=rates[arm], tax=TAX),
                            numbers if not claims else {},
                            between_runs(m, runs[arm], 'val_l2r', runs['gpt'], 'val_l2r')[0], stuck=stuck('gpt'),
                            decide=within(TAX)))
        claims += [claim(said_on(corpus, 'adapt gaps', arm=label[arm], span=L), {},
                         unpaired_interval([gap_nll(m, n, L, 'left') for n in runs['gpt']],
                                           [gap_nll(m, n, L) for n in runs[arm]]), stuck=stuck('gpt')) for L in inner]
        claims.append(claim(said_on(corpus, 'adapt ao', arm=label[arm], cost=AO_COST), {},
                            between_runs(m, runs[arm], 'val_ao', runs['fim-mix'], 'val_ao')[0],
                            stuck=stuck('fim-mix'), decide=within(AO_COST)))
    return [trade, budget], claims


def size_claims(m, p, settings):
    """Each adaptation of the larger size: its tax (its left-to-right loss minus the GPT's of the same seed) at the
    preset's size against the larger's, on each size's seeds; the FIM mix's taxes in the numbers."""
    larger = p['adapt']['larger']
    by_size = {size: runs for corpus, size, runs in settings if not corpus}
    tax = lambda runs, arm: [a - g for a, g in zip(m.finals(runs[arm], 'val_l2r'), m.finals(runs['gpt'], 'val_l2r'))]
    flags = ', '.join(f'{k}={v}' for k, v in larger['train'].items())
    claims = []
    for arm in [arm for arm in larger['arms'] if arm in ADAPTATIONS]:
        numbers = {f"tax of {ADAPT_ARMS[a][0]}, {f'at {flags}' if size else 'at the preset size'}, per seed":
                   tax(runs, a) for size, runs in by_size.items() for a in (arm, 'fim-mix')}
        claims.append(claim(CLAIMS['adapt size'].format(arm=ADAPT_ARMS[arm][0], larger=flags), numbers,
                            unpaired_interval(tax(by_size[''], arm), tax(by_size[larger['tag']], arm)),
                            stuck=m.stuck([n for runs in by_size.values() for a in ('gpt', arm) for n in runs[a]])))
    return claims


def longer_claim(m, p):
    """The tax (the paper's mix's left-to-right loss minus the GPT's of the same seed) at the preset's iterations
    against `longer` times them, on the longer pair's seeds."""
    times, seeds = p['orders']['longer'], m.seed_list[:p['orders']['longer_seeds']]
    final = lambda arm, s, t: m.metrics(order_run(arm, s, t))[-1]['val_l2r']
    tax = lambda t: [final('paper', s, t) - final('gpt', s, t) for s in seeds]
    iters = p['train']['max_iters']
    names = [order_run(arm, s, t) for arm in ('paper', 'gpt') for s in seeds for t in (1, times)]
    return claim(CLAIMS['orders longer'].format(times=times, iters=iters, longer=iters * times),
                 {f'tax at {iters} iterations, per seed': tax(1),
                  f'tax at {iters * times} iterations, per seed': tax(times)},
                 unpaired_interval(tax(1), tax(times)), stuck=m.stuck(names))


def distance_series(label, block, rows):
    """A figure series of runs' losses by distance: the distances every run has, 'none' drawn at 2 x block."""
    keys = sorted(set.intersection(*(set(r['distance']) for r in rows)), key=lambda d: 2 * block if d == 'none' else int(d))
    return label, [2 * block if d == 'none' else int(d) for d in keys], [[r['distance'][d] for r in rows] for d in keys]


def sweep_section(p, chosen, runs_dir, out):
    """The sweep as a finding-like entry: a figure of the final own losses and the choices."""
    series = []
    for kind, (_, _, rows) in chosen.items():
        others = sorted({tuple((k, v) for k, v in pt.items() if k != 'learning_rate') for pt, _, _ in rows})
        for rest in others:
            picked = [(pt['learning_rate'], loss) for pt, _, loss in rows
                      if tuple((k, v) for k, v in pt.items() if k != 'learning_rate') == rest]
            label = kind + ''.join(f', {k} {v}' for k, v in rest)
            series.append((label, [lr for lr, _ in picked], [[loss] for _, loss in picked]))
    line_figure(os.path.join(out, 'sweep.png'), 'Sweep: final validation loss in each kind\'s own objective',
                'learning rate', 'final val loss (nats/token)', series, logx=True)
    numbers = {f'{kind}, {json.dumps(pt)}': loss for kind, (_, _, rows) in chosen.items() for pt, _, loss in rows}
    numbers |= {f'chosen for {kind} ({KINDS[kind].label})': json.dumps(pt) for kind, (pt, _, _) in chosen.items()}
    return dict(finding='sweep', title='Each kind\'s settings, by one rule', figures=['sweep.png'],
                claims=[dict(claim=f"grid {json.dumps(p['grid'])} on seed {SEEDS[0]}; the lowest final validation loss "
                                   'in the kind\'s own objective wins (mixed and sigma-GPT: 0.9 any-order + 0.1 '
                                   'left-to-right); gate_init for the networks with adaLN gates, position_encoding for '
                                   'every kind; everything else the preset\'s, shared', numbers=numbers,
                             verdict='chosen')])


def analyse(findings, p, m, chosen, runs_dir):
    """Draw the figures and judge the claims of the findings."""
    analyses = {'1': lambda: finding_1(m), '2': lambda: finding_2(m, len(p['fixed_orders'])),
                '3': lambda: finding_3(m), '4': lambda: finding_4(m),
                '6': lambda: finding_6(m, generation_times(p, m.folders, m.seed_list[0], runs_dir),
                                       {kind: gen_rows(m, kind) for kind in ('mixed', 'encoder')}),
                '8': lambda: finding_8(m), 'plateau': lambda: finding_plateau(m),
                'long': lambda: finding_long(m, p.get('long')), 'length': lambda: finding_length(m, p.get('lengths'), p['dataset'], p.get('context')),
                'infill': lambda: finding_infill(m, p['infill']), 'orders': lambda: finding_orders(m, p),
                'adapt': lambda: finding_adapt(m, p, runs_dir), 'streams': lambda: finding_streams(m, p)}
    results = [sweep_section(p, chosen, runs_dir, m.out_dir)]
    for name in findings:
        figures, claims = analyses[name]()
        results.append(dict(finding=name, title=FINDINGS[name], figures=figures, claims=claims))
    return results


def write_readme(path, out, results, settings):
    """Rewrite the Findings section of the README at path (between its markers) from the results."""
    start, end = '<!-- findings:start -->', '<!-- findings:end -->'
    with open(path) as f:
        text = f.read()
    if start not in text or end not in text:
        fail(f'{path} has no {start} ... {end} markers: put them around its Findings section')
    folder = os.path.relpath(out, os.path.dirname(os.path.abspath(path)))
    wall = settings['wall minutes, summed over the calls that ran jobs']
    training = settings['training minutes, summed over runs']
    lines = [start, '', f"Written by `python findings.py --preset={settings['preset']} --out_dir={folder} "
             f"--readme={os.path.basename(path)}` ({wall} wall minutes, {training} minutes of training summed "
             f"over {settings['runs']} runs; seeds {settings['seeds']}). Rule: {settings['verdict rule']} The details, "
             f'figures and every per-seed number: [{folder}/results.md]({folder}/results.md).', '',
             '| finding | claim | effect [95% interval] (n) | verdict |', '|---|---|---|---|']
    for f in results[1:]:
        for c in f['claims']:
            effect = c['numbers'].get('effect [95% interval] (n)', '')
            lines.append(f"| {f['finding']} | {c['claim']} | {number(effect) if effect != '' else '-'} | "
                         f"**{c['verdict']}** |")
    lines += ['', end]
    with open(path, 'w') as f:
        f.write(text[:text.index(start)] + '\n'.join(lines) + text[text.index(end) + len(end):])


def dry_plan(p, findings, seed_list, kinds, n_sweep):
    """Print the runs after the sweep and the count: their settings wait for the sweep, their number does not
    (counted here as if every kind chose its first grid point)."""
    first = {kind: (grid_points(kind, p['grid'])[0], None, None) for kind in kinds}
    planned, at_blocks, adapt_rates = sweep_runs(p, kinds), None, None
    if 'length' in findings:
        block_sweep = block_sweep_runs(p, first)
        print(f"then finding length's sweep at the longer blocks, {len(block_sweep)} runs: {', '.join(block_sweep)}")
        planned, n_sweep = planned | block_sweep, n_sweep + len(block_sweep)
        at_blocks = {(label, block): point for block, _ in p['lengths']
                     for label, (_, point) in length_entries(first, block, p['lengths'][0][0]).items()}
    if 'adapt' in findings:
        adapt_sweep = adapt_sweep_runs(p, first)
        print(f"then finding adapt's GPT parents and its sweep of the adaptations' learning rates, {len(adapt_sweep)} "
              f"runs: {', '.join(adapt_sweep)}")
        planned, n_sweep = planned | adapt_sweep, n_sweep + len(adapt_sweep)
        adapt_rates = {arm: p['adapt']['grid'][0] for arm in ADAPTATIONS}
    runs = seed_runs(p, findings, seed_list, first, planned, at_blocks, adapt_rates)
    new = [name for name, flags in runs.items() if not isinstance(flags, str)]
    print(f"then {len(new)} runs with the settings the sweeps choose: {', '.join(new)}; "
          f"{len(runs) - len(new)} more are runs above or there with the same flags "
          f"({', '.join(name for name in runs if name not in new)}); {n_sweep + len(new)} training runs in all, "
          'then the evaluations')


def main():
    t0 = time.time()
    findings, out = check_inputs()
    p = PRESETS[preset]
    seed_list = list(SEEDS[:seeds or p['seeds']])
    runs_dir = os.path.join(out, 'runs')
    n_workers = workers or p['workers']
    kinds = list(dict.fromkeys(kind for f in findings for kind in FINDING_KINDS[f]))
    folder = lambda name: os.path.join(runs_dir, name)
    sweep = [train_job(name, p, flags, folder(name)) for name, flags in sweep_runs(p, kinds).items()]
    if dry_run:
        for job in sweep:
            print(f"{job.name} [{'done' if job.done else 'to run'}]: python {' '.join(job.argv)}")
        dry_plan(p, findings, seed_list, kinds, len(sweep))
        return
    ran = run_jobs(sweep, n_workers, p['threads'])
    chosen = {kind: choose(p, kind, runs_dir) for kind in kinds}
    planned, at_blocks, adapt_rates, trained = sweep_runs(p, kinds), None, None, sweep
    # the sweeps that start from the choices: finding length's at the longer blocks, finding adapt's (after its parents)
    if 'length' in findings:
        block_sweep = block_sweep_runs(p, chosen)
        jobs = [train_job(name, p, flags, folder(name)) for name, flags in block_sweep.items()]
        ran, trained = ran + run_jobs(jobs, n_workers, p['threads']), trained + jobs
        planned, at_blocks = planned | block_sweep, choose_at_blocks(p, chosen, runs_dir)
    if 'adapt' in findings:
        adapt_sweep = adapt_sweep_runs(p, chosen)
        jobs = with_checkpoints([train_job(name, p, flags, folder(name)) for name, flags in adapt_sweep.items()])
        ran, trained = ran + run_jobs(jobs, n_workers, p['threads']), trained + jobs
        planned, adapt_rates = planned | adapt_sweep, choose_adapt(p, runs_dir)
    runs = seed_runs(p, findings, seed_list, chosen, planned, at_blocks, adapt_rates)
    folders = {name: folder(flags if isinstance(flags, str) else name) for name, flags in runs.items()}
    # the evaluations first in the list: each runs as soon as the runs it reads are trained, while its checkpoints exist
    evaluations = eval_jobs(findings, p, seed_list, folders)
    training = [train_job(name, p, flags, folders[name]) for name, flags in runs.items() if not isinstance(flags, str)]
    ran += run_jobs(with_checkpoints(evaluations + training, trained), n_workers, p['threads'])
    m = Measured(folders, out, seed_list, unigram_entropy(p['dataset']), other_unigrams(p, findings, seed_list))
    results = analyse(findings, p, m, chosen, runs_dir)
    trained = list(dict.fromkeys([folder(n) for n in planned] + list(folders.values())))
    training = sum(read_metrics(f)[-1]['elapsed'] for f in trained) / 60
    settings = {'preset': preset, 'seeds': ', '.join(map(str, seed_list)), 'runs': len(trained),
                'iterations per run': p['train']['max_iters'], 'training minutes, summed over runs': round(training, 1),
                'wall minutes, summed over the calls that ran jobs':
                    add_wall_minutes(runs_dir, (time.time() - t0) / 60 if ran else 0),
                'unigram entropy of the validation text (nats/token)': round(m.unigram, 4),
                'verdict rule': f'{RULE}; practical floor {FLOOR} nats. A claim is "{NOT_JUDGED}" when a run it '
                                f'rests on ended within {STUCK} nats of the unigram entropy, or above it.'}
    write_results(out, f'AO-GPT findings, preset {preset}', settings, results)
    if readme:
        write_readme(readme, out, results, settings)
    print(f"wrote {os.path.join(out, 'results.md')}, results.json and {sum(len(r['figures']) for r in results)} "
          f"figures ({training:.1f} minutes of training in the runs; this call {time.time() - t0:.0f}s)")


if __name__ == '__main__':
    configure(globals(), doc=__doc__)
    main()
