"""
What a finding is, as the pipeline runs it: the parts a finding's module fills in, and registry.py lists.
"""
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Sweep:
    """A finding's own sweep, run after the kinds' (it starts from their choices) and before every other run."""
    what: str  # what the dry run calls it: "then <what>, N runs: ..."
    runs: Callable  # (preset, chosen) -> {run name: train.py flags}
    choose: Callable  # (preset, chosen, runs folder) -> its choice, from its runs' losses
    first: Callable  # (preset, chosen) -> the choice the dry run plans with (the grid's first point)
    more: Callable = None  # (preset, chosen, runs folder) -> {run name: flags} once runs are done: edge steps


@dataclass(frozen=True)
class Finding:
    """One finding: what --only calls it and the title results.md gives it; the kinds of model it compares (each is
    swept first, sweep.py; chosen: {kind: (point, run name, rows)}); the runs, evaluations and analysis it adds."""
    name: str
    title: str
    kinds: tuple
    analyse: Callable  # (Measured, preset, runs folder) -> ([figure files], [claims]): its figures and verdicts
    runs: Callable = None  # (preset, chosen, seeds[, its sweep's choice]) -> {run name: train.py flags}
    evaluations: Callable = None  # (preset, seeds, {run name: folder}) -> [jobs.Job]
    sweep: Sweep = None
    kind_seeds: bool = True  # it reads the kinds' own seeds (<kind>-s<seed>), not only their chosen settings
    # (a preset entry it runs only with, what a preset without it lacks), e.g. ('long', 'has no longer blocks')
    needs: tuple = ()
    corpora: Callable = None  # (preset, seeds) -> [(dataset, {arm: run names})]: the runs it scores, by their corpus
    # {run-name prefix: (name, final metrics record) -> its loss in its own objective}, for runs not named by kind
    losses: dict = field(default_factory=dict)
