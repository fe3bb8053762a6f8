"""
The sweep, and the choice of each kind's settings by one rule.

For each kind of model the findings compare (left-to-right GPT, AO-GPT with 10% left to
right, AO-GPT on random orders only (NoCL), sigma-GPT, the encoder MDM), one run per point of the
preset's grid on the first seed: the learning rate (min_lr a tenth of it), gate_init for the
networks with adaLN gates (the cpu preset keeps it at the quick start's 1.0), and for every kind
its position encoding: 'learned' (the authors' absolute table) or 'rotary' (RoPE; a decoder's
queries at the target position, model.py). Every other setting is the preset's and shared by all
kinds (warm-up, EMA decay, batch, iterations). The point with the lowest final validation loss in
the kind's own training objective wins, and its run is the kind's first seed. A run with exactly the flags of a run
already planned (a sweep point, a kind's seed) is that run, not trained twice (same_runs).
"""
import itertools
import json
import os
from dataclasses import dataclass

from aogpt.experiments.jobs import read_metrics
from aogpt.experiments.presets import KINDS, SEEDS
from aogpt.report import line_figure


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


def ladder_grid(ladders):
    """The grid of ladders ({setting: (the step below, grid values ..., the step above)}, a step None where there is
    none, as no dropout below 0): [{setting: value}] over the grid values, the steps left out."""
    inner = [ladder[1:-1] for ladder in ladders.values()]
    return [dict(zip(ladders, values)) for values in itertools.product(*inner)]


def edge_points(ladders, best):
    """The points one step past the grid's edge from its winner best: for each setting where best sits on the
    grid's first or last value, best with that setting moved one rung out (where the ladder has that rung)."""
    points = []
    for key, ladder in ladders.items():
        i = ladder.index(best[key])
        steps = ([ladder[0]] if i == 1 else []) + ([ladder[-1]] if i == len(ladder) - 2 else [])
        points += [best | {key: step} for step in steps if step is not None]
    return points


@dataclass(frozen=True)
class Ladders:
    """The findings' protocol for one arm's own sweep (fim, scarce): the grid of its ladders (ladder_grid); the grid's
    winner on an edge gets the step past it (edge_points); the lowest loss over the grid and the steps wins.
    loss_of(point): the loss of the point's run, None before it has run; steps and winner are read once the grid's
    runs are done (pipeline.train_and_evaluate)."""
    ladders: dict

    def grid(self):
        return ladder_grid(self.ladders)

    def steps(self, loss_of):
        """The points past the edge from the grid's winner, [] until every grid run has finished."""
        losses = [loss_of(point) for point in self.grid()]
        if None in losses:
            return []
        return edge_points(self.ladders, self.grid()[losses.index(min(losses))])

    def winner(self, loss_of):
        """The point with the lowest loss among the grid's and its steps' finished runs (the first of a tie)."""
        finished = [(loss_of(point), i, point) for i, point in enumerate(self.grid() + self.steps(loss_of))]
        return min((row for row in finished if row[0] is not None), key=lambda row: row[:2])[2]


SHORT = {'learning_rate': 'lr', 'dropout': 'd', 'weight_decay': 'wd', 'input_mask': 'mask'}


def point_tag(point):
    """A point's part of a run name: lr0.003-d0.1-wd0.5."""
    return '-'.join(f'{SHORT[k]}{v:g}' for k, v in point.items())


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
