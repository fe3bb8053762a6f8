"""
The paper's findings 1 to 3 (Xue et al., arXiv 2506.19935), numbered by the paper's figure that shows them: what
training in one order or in any does to the losses.
  1  any-order training converges slower than left-to-right (Fig. 1)
  2  language has a left-to-right bias: fixed random orders and block-wise random orders against
     left to right, each run's loss in its own order (Fig. 2a); the fixed-order and block-wise runs take the
     left-to-right kind's settings (they too train in one order)
  3  10% left-to-right training improves both the left-to-right and the any-order loss (Fig. 2b)
"""
from aogpt.experiments.finding import Finding
from aogpt.experiments.measure import FLOOR, LOSS, between_runs, claim, within
from aogpt.experiments.presets import SEEDS
from aogpt.experiments.sweep import run_flags
from aogpt.report import spread, unpaired_interval

CLAIMS = {
    '1': 'Trained on the same tokens, the any-order model ends with a higher loss in its own (random) orders than the '
         'left-to-right model in its one order.',
    '2 l2r': 'A model trained in the left-to-right order reaches a lower loss than models trained in fixed random '
             'orders (the mean over those orders).',
    '2 block': 'Block-wise random orders (left to right between blocks) are easier than fully random ones (the mean '
               'over the fixed random orders).',
    '3 l2r': 'Training 10% of the sequences left to right lowers the left-to-right loss below that of a model '
             'trained in random orders only (NoCL).',
    '3 ao': '... and lowers the any-order loss too (the paper: it improves both).',
    '3 cost': "(Ours, weaker) ... the any-order loss is at least not worse than NoCL's by more than the floor "
              '({floor} nats): holds if the interval of its excess lies below the floor.',
}


def fixed_order_runs(p, chosen, seed_list):
    """finding 2's runs, {name: flags}, at the left-to-right kind's settings: each of the preset's fixed random
    orders on the first seed, block-wise random orders on every seed."""
    point = chosen['l2r'][0]
    runs = {f'fixed{i}': run_flags(p, 'l2r', point, SEEDS[0]) | dict(order='fixed_random') | order
            for i, order in enumerate(p['fixed_orders'], 1)}
    return runs | {f'block-s{s}': run_flags(p, 'l2r', point, s) | dict(order='block_random') for s in seed_list}


def in_its_order(name, final):
    """A fixed-order or block-wise run's final loss in its own order."""
    return final['val_fixed']


def finding_1(m):
    l2r, random = m.each('l2r'), m.each('random')
    fig = m.figure('fig1_l2r_vs_random.png', FINDING_1.title, 'iteration', LOSS,
                   [m.curves('order=l2r: left-to-right loss', l2r, 'val_l2r'),
                    m.curves('order=random: any-order loss', random, 'val_ao')])
    interval, stuck = between_runs(m, random, 'val_ao', l2r, 'val_l2r')
    return [fig], [claim(CLAIMS['1'],
                         {'final val loss, l2r runs, left to right': spread(m.finals(l2r, 'val_l2r')),
                          'final val loss, random runs, any order': spread(m.finals(random, 'val_ao'))},
                         interval, stuck=stuck)]


def finding_2(m, n_fixed):
    l2r, block, fixed = m.each('l2r'), m.each('block'), [f'fixed{i}' for i in range(1, n_fixed + 1)]
    fig = m.figure('fig2a_fixed_orders.png', FINDING_2.title, 'iteration', f"{LOSS}, in the run's order",
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
    fig = m.figure('fig2b_mixed_vs_nocl.png', FINDING_3.title, 'iteration', LOSS,
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
              decide=within(FLOOR))]


FINDING_1 = Finding('1', 'Any-order training converges slower than left-to-right (Fig. 1)', ('l2r', 'random'),
                    lambda m, p, runs_dir: finding_1(m))
FINDING_2 = Finding('2', 'Language has a left-to-right bias (Fig. 2a)', ('l2r',),
                    lambda m, p, runs_dir: finding_2(m, len(p['fixed_orders'])), runs=fixed_order_runs,
                    losses={'fixed': in_its_order, 'block': in_its_order})
FINDING_3 = Finding('3', 'A little left-to-right goes a long way (Fig. 2b)', ('mixed', 'random'),
                    lambda m, p, runs_dir: finding_3(m))
