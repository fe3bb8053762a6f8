"""
What the runs measured, and the helpers of the verdicts that every finding's claims use.

Verdicts (report.RULE): a paired comparison (the same model on the same chunks or samples: one
order against an ensemble, EMA against raw weights, few against many steps) is judged on its per-chunk or
per-sample differences, a bootstrap interval within each seed, then over seeds; a comparison between
runs on the per-seed numbers, by Welch's t interval of the difference of the means; a timing on its
per-repeat log ratios, by a t interval over the repeats. A claim that rests on a run whose loss ended
at the unigram entropy of the validation text (it did not learn) is not judged, and says so; our
plateau findings measure that plateau, so only their rotary runs are held to it (the claims say so).
"""
import os
import statistics
from dataclasses import dataclass, field

import numpy as np

from aogpt.experiments.jobs import read_json, read_metrics
from aogpt.experiments.sweep import own_loss
from aogpt.report import line_figure, point_figure, unpaired_interval, verdict

FLOOR = 0.01  # nats: the practical floor of an effect (1% in perplexity)
STUCK = 0.05  # nats: a final loss this close to the unigram entropy (or above) means the run did not learn
LOSS = 'val loss (nats/token)'
NOT_JUDGED = 'not judged: a run it compares did not learn'


@dataclass
class Measured:
    """Where the runs are and what did not train: the figures' folder, the seeds, the run folders."""
    folders: dict
    out_dir: str
    seed_list: list
    unigram: float
    unigrams: dict = field(default_factory=dict)  # {run: unigram entropy of its corpus} where not the preset's
    # {run-name prefix: (name, final metrics record) -> the run's own loss}: the findings' own (registry.RUN_LOSSES)
    run_losses: dict = field(default_factory=dict)

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
        """A run's final loss in its own objective: as the finding whose runs' names start with a prefix of run_losses
        reads it (finding 2's fixed-order runs in their order; an arm of findings orders and adapt trained on no random
        orders, left to right), else its kind's (its name's first part: mixed-rotary-s1 is a mixed run)."""
        final = self.metrics(name)[-1]
        loss = next((loss for prefix, loss in self.run_losses.items() if name.startswith(prefix)), None)
        return loss(name, final) if loss else own_loss(name.split('-')[0], final)

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


def within(bound):
    """The verdict of an effect that should stay under bound: holds if the interval lies below it, does not hold if
    above it."""
    return lambda interval, _: ('holds' if interval.high < bound else 'does not hold' if interval.low > bound
                                else 'not resolvable at this size')


def non_inferior(interval, floor):
    """The verdict of an effect that should not fall below minus the floor: holds if the interval lies above it, does
    not hold if below it."""
    return ('holds' if interval.low > -floor else 'does not hold' if interval.high < -floor
            else 'not resolvable at this size')


def between_runs(m, a_names, a_key, b_names, b_key):
    """Claim helpers' common case: the interval of mean(a) - mean(b) over runs, and the stuck runs."""
    return (unpaired_interval(m.finals(a_names, a_key), m.finals(b_names, b_key)),
            m.stuck(a_names + b_names))


def spread_pair(rows):
    return f"{statistics.mean(r['gen_ppl'] for r in rows):.4g}, {statistics.mean(r['entropy'] for r in rows):.3f}"


def unigram_entropy(dataset):
    """Entropy (nats) of the validation text's own unigram distribution: the loss of a model that
    ignores its context."""
    counts = np.bincount(np.memmap(os.path.join('data', dataset, 'val.bin'), dtype=np.uint16, mode='r'))
    q = counts[counts > 0] / counts.sum()
    return float(-(q * np.log(q)).sum())
