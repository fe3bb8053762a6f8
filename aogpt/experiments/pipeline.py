"""
The findings as findings.py runs them, each run in its own folder out_dir/runs/<name> through train.py, eval_ppl.py
and gen_ppl.py (jobs.py):
1. Sweep. For each kind of model the findings compare, one run per point of the preset's grid on the first seed: the
   point with the lowest final validation loss in the kind's own training objective wins, and its run is the kind's
   first seed (sweep.py). Then the sweeps of the findings that have their own (finding.Sweep: finding length's at the
   longer blocks, finding adapt's), from the kinds' choices.
2. Seeds. The kind's other seeds with the chosen settings; finding 2's fixed-order and block-wise
   runs with the left-to-right kind's settings (they too train in one order); our findings' runs with
   the mixed kind's settings but the position encoding. A run with exactly the flags of a run already
   planned (a sweep point, a kind's seed) is that run, not trained twice.
3. Evaluations: eval_ppl.py (ensembles of context orders, the raw weights beside the EMA ones, the
   encoder's NELBO), gen_ppl.py (AO-GPT's and the encoder's samples, one scorer), generation times
   (every repeat kept, the two models taking turns).
4. One PNG per figure, results.md and results.json in out_dir (a call with --only keeps the other findings of an
   earlier call's results.json at the same preset); with --readme, the README's Findings section (between its
   findings markers) rewritten from them.
"""
import os
import sys
import time

import torch

from aogpt.common import at_least, check_settings, one_of
from configurator import fail
from aogpt.experiments.jobs import (PREEMPTED, Stopped, add_wall_minutes, read_json, read_metrics, run_jobs, train_job,
                                    unique, with_checkpoints)
from aogpt.experiments.measure import FLOOR, NOT_JUDGED, STUCK, Measured, unigram_entropy
from aogpt.experiments.presets import KINDS, PRESETS, SEEDS
from aogpt.experiments.registry import FINDINGS, RUN_LOSSES, selected_findings
from aogpt.experiments.sweep import choose, grid_points, run_flags, same_runs, sweep_runs, sweep_section
from aogpt.report import RULE, number, write_results


def check_inputs(preset, only, out_dir, seeds, workers, readme, dry_run):
    """(the findings --only names, the out_dir), once every setting is checked: one line for a bad one, before any
    run trains."""
    check_settings(dict(preset=preset, workers=workers, seeds=seeds),
                   {'preset': one_of(*PRESETS), 'workers': at_least(0),
                    'seeds': (lambda v: v == 0 or 2 <= v <= len(SEEDS),
                              f"0 (the preset's) or in [2, {len(SEEDS)}]: comparisons between runs need seeds")})
    chosen = selected_findings(only, preset)
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


def scored_corpora(p, findings, seed_list):
    """[(dataset, {arm: run names})] of the runs findings (those that have some) score on their corpus (finding.Finding
    .corpora), in the registry's order."""
    return [corpus for name in findings if FINDINGS[name].corpora for corpus in FINDINGS[name].corpora(p, seed_list)]


def datasets(p, findings):
    """The data/ folders the findings train on: the preset's, and findings orders' and adapt's second corpus."""
    return list(dict.fromkeys([p['dataset']] + [dataset for dataset, _ in scored_corpora(p, findings, [])]))


def report_ready():
    """The figures need matplotlib: say so before any run trains, not after."""
    from aogpt.report import load_matplotlib
    load_matplotlib()


def seed_runs(p, findings, seed_list, chosen, planned, choices=None):
    """{name: flags, or the name of the run with the same flags} of the runs after the sweeps: the kinds' seeds (the
    first is the sweep's winner), then each finding's runs (a finding with its own sweep at its choice in choices);
    planned: the sweeps' {name: flags}."""
    runs = {}
    seeded = {kind for name in findings if FINDINGS[name].kind_seeds for kind in FINDINGS[name].kinds}
    for kind, (point, _, _) in chosen.items():
        if kind in seeded:
            runs.update({f'{kind}-s{s}': run_flags(p, kind, point, s) for s in seed_list})
    for finding in [FINDINGS[name] for name in findings if FINDINGS[name].runs]:
        choice = [choices[finding.name]] if finding.sweep else []
        runs.update(finding.runs(p, chosen, seed_list, *choice))
    return same_runs(runs, planned)


def evaluation_jobs(findings, p, seed_list, folders):
    """Each finding's evaluations, in the registry's order: one that two findings read runs once."""
    return unique([job for name in findings if FINDINGS[name].evaluations
                   for job in FINDINGS[name].evaluations(p, seed_list, folders)])


def other_unigrams(p, findings, seed_list):
    """{run: the unigram entropy of its val text} for the runs the findings score on a corpus not the preset's (findings
    orders', adapt's and streams' second corpus)."""
    corpora = [(dataset, runs) for dataset, runs in scored_corpora(p, findings, seed_list) if dataset != p['dataset']]
    entropies = {dataset: unigram_entropy(dataset) for dataset, _ in corpora}
    return {name: entropies[dataset] for dataset, runs in corpora for names in runs.values() for name in names}


def analyse(findings, p, m, chosen, runs_dir):
    """Draw the figures and judge the claims of the findings."""
    results = [sweep_section(p, chosen, runs_dir, m.out_dir)]
    for name in findings:
        figures, claims = FINDINGS[name].analyse(m, p, runs_dir)
        results.append(dict(finding=name, title=FINDINGS[name].title, figures=figures, claims=claims))
    return results


def earlier_findings(out, preset, findings):
    """The findings of an earlier call's results.json in out, at the same preset, that this call does not run: kept,
    so that --only=X rewrites X's section and leaves the others as they were."""
    path = os.path.join(out, 'results.json')
    if not os.path.exists(path):
        return []
    earlier = read_json(path, 'delete it, or run every finding again')
    if earlier['settings'].get('preset') != preset:
        return []
    return [r for r in earlier['findings'] if r['finding'] not in ('sweep', *findings)]


def swept(p, kind, runs_dir):
    """Whether every run of a kind's sweep is done in runs_dir."""
    return all(read_metrics(os.path.join(runs_dir, name))[-1:] and
               read_metrics(os.path.join(runs_dir, name))[-1]['iter'] >= p['train']['max_iters']
               for name in sweep_runs(p, [kind]))


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
    planned, choices = sweep_runs(p, kinds), {}
    for finding in [FINDINGS[name] for name in findings if FINDINGS[name].sweep]:
        runs = finding.sweep.runs(p, first)
        print(f"then {finding.sweep.what}, {len(runs)} runs: {', '.join(runs)}" +
              (', then the steps past its grid\'s edges that these call for' if finding.sweep.more else ''))
        planned, n_sweep = planned | runs, n_sweep + len(runs)
        choices[finding.name] = finding.sweep.first(p, first)
    runs = seed_runs(p, findings, seed_list, first, planned, choices)
    new = [name for name, flags in runs.items() if not isinstance(flags, str)]
    print(f"then {len(new)} runs with the settings the sweeps choose: {', '.join(new)}; "
          f"{len(runs) - len(new)} more are runs above or there with the same flags "
          f"({', '.join(name for name in runs if name not in new)}); {n_sweep + len(new)} training runs in all, "
          'then the evaluations')


def train_and_evaluate(p, findings, seed_list, kinds, sweep, runs_dir, n_workers):
    """Steps 1 to 3, each job not yet done: (jobs run, {kind: its choice}, the sweeps' runs, {run: its folder})."""
    folder = lambda name: os.path.join(runs_dir, name)
    ran = run_jobs(sweep, n_workers, p['threads'])
    chosen = {kind: choose(p, kind, runs_dir) for kind in kinds}
    planned, choices, trained = sweep_runs(p, kinds), {}, sweep
    # the findings' own sweeps, which start from the choices (finding adapt's after its parents)
    for finding in [FINDINGS[name] for name in findings if FINDINGS[name].sweep]:
        runs = finding.sweep.runs(p, chosen)
        jobs = with_checkpoints([train_job(name, p, flags, folder(name)) for name, flags in runs.items()])
        ran, trained = ran + run_jobs(jobs, n_workers, p['threads']), trained + jobs
        if finding.sweep.more:  # the steps its runs call for (past the grid's edge), once they are done
            more = finding.sweep.more(p, chosen, runs_dir)
            jobs = [train_job(name, p, flags, folder(name)) for name, flags in more.items()]
            ran, trained, runs = ran + run_jobs(jobs, n_workers, p['threads']), trained + jobs, runs | more
        planned, choices[finding.name] = planned | runs, finding.sweep.choose(p, chosen, runs_dir)
    runs = seed_runs(p, findings, seed_list, chosen, planned, choices)
    folders = {name: folder(flags if isinstance(flags, str) else name) for name, flags in runs.items()}
    # the evaluations first in the list: each runs as soon as the runs it reads are trained, while its checkpoints exist
    evaluations = evaluation_jobs(findings, p, seed_list, folders)
    training = [train_job(name, p, flags, folders[name]) for name, flags in runs.items() if not isinstance(flags, str)]
    ran += run_jobs(with_checkpoints(evaluations + training, trained), n_workers, p['threads'])
    return ran, chosen, planned, folders


def main(preset, only, out_dir, seeds, workers, readme, dry_run):
    """findings.py with these settings: the steps above."""
    t0 = time.time()
    findings, out = check_inputs(preset, only, out_dir, seeds, workers, readme, dry_run)
    p = PRESETS[preset]
    seed_list = list(SEEDS[:seeds or p['seeds']])
    runs_dir = os.path.join(out, 'runs')
    n_workers = workers or p['workers']
    kinds = list(dict.fromkeys(kind for name in findings for kind in FINDINGS[name].kinds))
    folder = lambda name: os.path.join(runs_dir, name)
    sweep = [train_job(name, p, flags, folder(name)) for name, flags in sweep_runs(p, kinds).items()]
    if dry_run:
        for job in sweep:
            print(f"{job.name} [{'done' if job.done else 'to run'}]: python {' '.join(job.argv)}")
        dry_plan(p, findings, seed_list, kinds, len(sweep))
        return
    try:
        ran, chosen, planned, folders = train_and_evaluate(p, findings, seed_list, kinds, sweep, runs_dir, n_workers)
    except Stopped:
        minutes = add_wall_minutes(runs_dir, (time.time() - t0) / 60)
        print(f'stopped by SIGTERM: the running jobs saved where they were ({minutes} wall minutes in the calls so '
              'far); the same command goes on')
        sys.exit(PREEMPTED)
    m = Measured(folders, out, seed_list, unigram_entropy(p['dataset']), other_unigrams(p, findings, seed_list),
                 RUN_LOSSES)
    earlier = earlier_findings(out, preset, findings)
    if earlier:  # the sweep's section shows every kind swept here, the earlier calls' too
        chosen = {kind: choose(p, kind, runs_dir) for kind in KINDS if swept(p, kind, runs_dir)}
    results = analyse(findings, p, m, chosen, runs_dir)
    results = sorted(results + earlier, key=lambda r: ['sweep', *FINDINGS].index(r['finding']))
    trained = list(dict.fromkeys([folder(n) for n in planned] + list(folders.values())))
    if earlier:  # the runs of every call, as the findings kept rest on them too
        trained = [f for f in (folder(n) for n in sorted(os.listdir(runs_dir))) if read_metrics(f)]
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
