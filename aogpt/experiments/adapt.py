"""
Ours, not the paper's: finding adapt, AO-GPT from a GPT. A left-to-right GPT trained for half (or 3/4) of the budget,
then AO-GPT from its checkpoint (train.py --init_from) for the rest, its orders staged (--order_stages: the l2r-FIM mix
for a third, moving linearly to finding orders' FIM mix over the next third) or the FIM mix from the start, each
adaptation at the learning rate its own sweep (on the first seed) chose; against finding orders' GPT and FIM mix
trained for the whole budget (its runs), at the same total iterations: its gaps against the GPT's left side, its
left-to-right loss against the GPT's, its any-order loss against the FIM mix's; on the second corpus too, and at a
larger size (no sweep there): does the tax shrink (cpu and smoke presets).
"""
import os

from aogpt.experiments.finding import Finding, Sweep
from aogpt.experiments.jobs import read_metrics
from aogpt.experiments.measure import LOSS, between_runs, claim, within
from aogpt.experiments.orders import (AO_COST, L2R_FIM, FIM_MIX, ORDER_ARMS, TAX, arm_loss, order_flags, order_run,
                                      scored_jobs)
from aogpt.experiments.presets import SEEDS
from aogpt.experiments.readings import (arm_numbers, corpus_file, corpus_title, gap_nll, inner_spans, said_on,
                                        trade_off_figure)
from aogpt.experiments.sweep import own_loss
from aogpt.report import unpaired_interval

# a left-to-right GPT trained for part of the budget, then AO-GPT from its checkpoint for the rest, against finding
# orders' GPT and FIM mix trained for the whole budget (its runs): {arm: (label, kind)}, the GPT first
ADAPT_ARMS = {'gpt': ORDER_ARMS['gpt'], 'fim-mix': ORDER_ARMS['fim-mix'],
              'half-staged': ('GPT for half the budget, then AO-GPT, orders staged from the l2r-FIM mix to the FIM mix',
                              'mixed'),
              'half-plain': ('GPT for half the budget, then AO-GPT on the FIM mix', 'mixed'),
              'cheap': ('GPT for 3/4 of the budget, then AO-GPT, orders staged from the l2r-FIM mix to the FIM mix',
                        'mixed')}
# the adaptations: {arm: (its parent, staged orders)}; the parents: {parent: the GPT's share of the budget}
ADAPTATIONS = {'half-staged': ('half', True), 'half-plain': ('half', False), 'cheap': ('3q', True)}
ADAPT_PARENTS = {'half': 1 / 2, '3q': 3 / 4}
# train.py draws an iteration's batch from (seed, iteration): an adaptation draws from its seed plus this, so that
# it reads new batches, not its parent's first ones again
ADAPT_DRAWS = 1000
CLAIMS = {
    'adapt gaps': '(Ours) {arm} fills gaps of {span} tokens better than the left-to-right GPT reading the left side: '
                  'its exact NLL per gap token given both sides (the rest, then the gap left to right) is below the '
                  "GPT's from the left only (each on every seed, the same total iterations; effect: the GPT's NLL "
                  'minus its own, nats per gap token).',
    'adapt tax': "(Ours) {arm} (adapted at learning rate {rate:g}, its own sweep's choice) reads left to right "
                 'within {tax} nats of the left-to-right GPT trained for the whole budget (each on every seed, the '
                 "same total iterations; effect: its final EMA val left-to-right loss minus the GPT's; holds if the "
                 'interval lies below {tax}, does not hold if above it).',
    'adapt ao': '(Ours) {arm} keeps its any-order loss within {cost} nats of the FIM mix (10% left to right, 40% FIM, '
                '50% random) trained from scratch for the whole budget (effect: its final EMA val any-order loss minus '
                "the FIM mix's; holds if the interval lies below {cost}, does not hold if above it).",
    'adapt size': "(Ours) The tax of {arm} shrinks with size: its left-to-right loss above the GPT's (same seed) is "
                  "smaller at {larger} (the preset's other settings kept) than at the preset's size (effect: the tax "
                  "at the preset's size minus the tax at the larger one, nats). At the larger size each arm trains at "
                  'the learning rate chosen at the smaller one: no sweep there.',
}


def adapt_stages(iters):
    """--order_stages of a staged adaptation of `iters` iterations: the l2r-FIM mix for the first third, moving linearly
    to the FIM mix over the second, the FIM mix for the last."""
    third = iters // 3
    return f'{L2R_FIM}@0/{L2R_FIM}@{third}/{FIM_MIX}@{2 * third}'


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


def first_rates(p, chosen):
    """{adaptation: the grid's first learning rate}: the dry run's stand-in for choose_adapt."""
    return {arm: p['adapt']['grid'][0] for arm in ADAPTATIONS}


def adapt_corpora(p, seed_list):
    """finding adapt's [(corpus, size, {arm: run names})], as adapt_settings."""
    return [(corpus, size, {arm: [adapt_run(arm, s, corpus, size) for s in seeds] for arm in arms})
            for corpus, size, seeds, arms in adapt_settings(p, seed_list)]


def scored_corpora(p, seed_list):
    """finding adapt's [(dataset, {arm: run names})], as adapt_corpora."""
    return [(corpus or p['dataset'], runs) for corpus, _, runs in adapt_corpora(p, seed_list)]


def evaluations(p, seed_list, folders):
    """finding adapt's evaluations: every arm's of every setting (finding orders' runs among them evaluated once)."""
    return scored_jobs(p, folders, scored_corpora(p, seed_list))


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
    title = corpus_title(FINDING.title, corpus)
    points = [(label[arm], names) for arm, names in runs.items()]
    trade = trade_off_figure(m, corpus_file('ours_adapt.png', corpus), title, inner, points + (
        [(f'{label[arm]}, {larger[0]}', names) for arm, names in larger[1].items()] if larger else []))
    budget = m.figure(corpus_file('ours_adapt_budget.png', corpus), f'{title}: the budget', 'iteration (of the budget)',
                      f'{LOSS}, any order', [m.curves(text, names, 'val_ao') for text, names in points])
    claims = []
    for arm in ADAPTATIONS:
        stuck = lambda other: m.stuck(runs[arm] + runs[other])
        claims.append(claim(said_on(corpus, CLAIMS['adapt tax'], arm=label[arm], rate=rates[arm], tax=TAX),
                            numbers if not claims else {},
                            between_runs(m, runs[arm], 'val_l2r', runs['gpt'], 'val_l2r')[0], stuck=stuck('gpt'),
                            decide=within(TAX)))
        claims += [claim(said_on(corpus, CLAIMS['adapt gaps'], arm=label[arm], span=L), {},
                         unpaired_interval([gap_nll(m, n, L, 'left') for n in runs['gpt']],
                                           [gap_nll(m, n, L) for n in runs[arm]]), stuck=stuck('gpt')) for L in inner]
        claims.append(claim(said_on(corpus, CLAIMS['adapt ao'], arm=label[arm], cost=AO_COST), {},
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


FINDING = Finding('adapt', '(Ours) AO-GPT from a GPT: left to right first, any order after', ('mixed', 'l2r'),
                  finding_adapt, runs=adapt_runs, evaluations=evaluations, kind_seeds=False,
                  needs=('adapt', 'has no adaptation arms: use --preset=cpu'), corpora=scored_corpora,
                  losses={'adapt-': arm_loss(ADAPT_ARMS)},
                  sweep=Sweep("finding adapt's GPT parents and its sweep of the adaptations' learning rates",
                              adapt_sweep_runs, lambda p, chosen, runs_dir: choose_adapt(p, runs_dir), first_rates))
