"""
The paper's findings (Xue et al., arXiv 2506.19935) reproduced by one command and judged as a
reviewer would: every kind of model gets its own settings from one small sweep, the comparisons
run over seeds, and every claim gets its effect, a 95% interval, its n and a verdict by one rule.

    python findings.py --preset=cpu               # tiny Shakespeare, characters, 2 CPU cores (4.1 hours: README.md)
    python findings.py --preset=cpu --out_dir=docs/findings-cpu --readme=docs/findings.md   # as committed
    python findings.py --preset=smoke             # every finding at toy size in a minute or two (the tests)
    python findings.py --preset=gpu               # OpenWebText at GPT-2 small size on one GPU (days; see README)
    python findings.py --preset=cpu --only=1,3    # some findings only: their runs and their figures
    python findings.py --preset=cpu --only=plateau,long,length,infill,orders,adapt,streams,scarce,fim   # ours
    python findings.py --preset=cpu --only=fim --out_dir=docs/findings-cpu-ours   # one finding: the others kept
    python findings.py --preset=cpu --dry_run     # the sweep's jobs, the runs after it and their count; nothing is run

The findings, in the order they run and report (aogpt/experiments/registry.py); what each runs and claims is in its module
of aogpt/experiments/ (1 to 3: left_to_right.py, 4: ensembles.py, 6: generation.py, 8: adaln.py, plateau and long:
plateau.py, the others: <name>.py), how they are run and judged in aogpt/experiments/pipeline.py and docs/findings.md:
  1        any-order training converges slower than left-to-right (Fig. 1)
  2        language has a left-to-right bias (Fig. 2a)
  3        10% left-to-right training improves both losses (Fig. 2b)
  4        context-order ensembles lower AO-GPT's perplexity, towards the encoder (Figs. 3, 5; --only=5 too)
  6        generation: time and sample quality against the encoder (Fig. 4, Table 2; --only=7 too)
  8        adaLN against sigma-GPT's additive injection, and EMA against raw weights
  plateau  (ours) queries at the target position remove AO-GPT's plateau
  long     (ours) the same at longer blocks
  length   (ours) AO-GPT with target queries against the encoder as blocks grow
  infill   (ours) infilling: AO-GPT against the GPT's left side and the encoder
  orders   (ours) the any-order tax: which training orders make AO-GPT worth picking
  adapt    (ours) AO-GPT from a GPT: left to right first, any order after
  streams  (ours) two streams, keys and values that carry no target, against one
  scarce   (ours) data-constrained training: AO-GPT against a tuned GPT as the data repeats
  fim      (ours) infilling against the FIM GPT, the length given and not
Resumable: a second call trains only what is missing, and only redraws once everything ran (aogpt/experiments/jobs.py).
SIGTERM stops the running jobs (each training run saves its checkpoint) and exits with 75: the same command goes on.
"""
from configurator import configure
from aogpt.experiments.pipeline import main

# -----------------------------------------------------------------------------
preset = 'cpu'  # 'cpu', 'gpu' or 'smoke'
only = ''  # comma list of the findings above (5 and 7: parts of 4 and 6); '' all
out_dir = ''  # '': findings-<preset>
seeds = 0  # seeds of every kind; 0: the preset's
workers = 0  # runs side by side; 0: the preset's
readme = ''  # a README.md whose Findings section (between its findings markers) is rewritten; '' none
dry_run = False  # list the jobs (done, to resume, to run) and their commands; run nothing
# -----------------------------------------------------------------------------

if __name__ == '__main__':
    configure(globals(), doc=__doc__)
    main(preset, only, out_dir, seeds, workers, readme, dry_run)
