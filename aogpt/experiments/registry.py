"""
The findings, in the order they run and report (results.md, results.json and the README's table): the paper's,
numbered by its figure that shows them (sample quality is its Table 2), then ours. --only names them.
"""
from configurator import fail
from aogpt.experiments import (adaln, adapt, ensembles, fim, generation, infill, left_to_right, length, orders, plateau,
                               scarce, streams)
from aogpt.experiments.presets import PRESETS

FINDINGS = {finding.name: finding for finding in (
    left_to_right.FINDING_1,
    left_to_right.FINDING_2,
    left_to_right.FINDING_3,
    ensembles.FINDING,
    generation.FINDING,
    adaln.FINDING,
    plateau.PLATEAU_FINDING,
    plateau.LONG_FINDING,
    length.FINDING,
    infill.FINDING,
    orders.FINDING,
    adapt.FINDING,
    streams.FINDING,
    scarce.FINDING,
    fim.FINDING,
)}
ALIASES = {'5': '4', '7': '6'}
# {run-name prefix: (name, final record) -> its own loss}: the runs the findings name otherwise than by their kind
RUN_LOSSES = {prefix: loss for finding in FINDINGS.values() for prefix, loss in finding.losses.items()}


def runs_on(preset, name):
    """Whether a preset has the entry a finding needs (every preset runs the findings that need none)."""
    needs = FINDINGS[name].needs
    return not needs or needs[0] in PRESETS[preset]


def selected_findings(text, preset):
    """The finding names of --only (text) for a preset, in the registry's order; one line for an unknown one, or for a
    finding the preset has no entry for."""
    if not text.strip():
        return [name for name in FINDINGS if runs_on(preset, name)]
    names = set()
    for entry in text.split(','):
        name = ALIASES.get(entry.strip(), entry.strip())
        if name not in FINDINGS:
            fail(f"--only takes findings among {', '.join(FINDINGS)} (5 and 7 are parts of 4 and 6), "
                 f"got {entry.strip()!r}")
        if not runs_on(preset, name):
            fail(f'--only={name}: the {preset} preset {FINDINGS[name].needs[1]}')
        names.add(name)
    return [name for name in FINDINGS if name in names]
