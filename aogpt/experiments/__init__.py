"""
The findings that findings.py runs, one module per finding or family of findings, over shared machinery:

    presets.py    the kinds of model and the presets (model, data, grid, seeds, each finding's settings)
    jobs.py       training and evaluation jobs: resumable, run side by side by a pool of workers
    sweep.py      the sweep and the choice of each kind's settings
    measure.py    what the runs measured, and the claim helpers the verdicts use
    finding.py    what a finding is: the parts its module fills in
    registry.py   the findings in their order (--only, results.md, the README's table)
    pipeline.py   sweep, choose, plan, run, analyse, write: findings.py's steps

    left_to_right.py (1, 2, 3), ensembles.py (4), generation.py (6), adaln.py (8), plateau.py (plateau, long),
    length.py, infill.py, orders.py, adapt.py, streams.py (readings.py: how the last three read their runs), scarce.py

How to add a finding: docs/findings.md.
"""
