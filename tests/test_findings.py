"""findings.py: the smoke preset end to end (the sweep, every figure, every claim with its interval, our
plateau and long-block findings), resuming instead of training again, a moved folder is the same run,
--only, the README section, the one-line errors; the sweep's grid and choice, runs with the same flags
trained once, the plateau measure, the timing claims' intervals; aogpt/report.py's figures on synthetic curves."""
import json
import math
import os
import shutil
import sys

import pytest
import torch

from conftest import ROOT, one_line_error, run_script, says

FIGURES = ['sweep.png', 'fig1_l2r_vs_random.png', 'fig2a_fixed_orders.png', 'fig2b_mixed_vs_nocl.png',
           'fig3_ensembles_vs_encoder.png', 'fig4_generation_time.png', 'fig4_time_vs_length.png',
           'table2_sample_quality.png', 'fig8_adaln_vs_sigma.png', 'ours_plateau.png', 'ours_long_blocks.png',
           'ours_length.png', 'ours_length_by_share.png', 'ours_length_by_distance.png', 'ours_infill.png']
VERDICTS = {'holds', 'does not hold', 'below the practical floor', 'not resolvable at this size',
            'not judged: a run it compares did not learn'}
PNG = b'\x89PNG\r\n\x1a\n'
README = 'intro\n\n## Findings\n\n<!-- findings:start -->\nold table\n<!-- findings:end -->\n\n## Tests\n'


def metrics_files(out):
    runs = out / 'runs'
    return {name: (runs / name / 'metrics.jsonl').read_text() for name in sorted(os.listdir(runs))
            if (runs / name / 'metrics.jsonl').exists()}


@pytest.fixture(scope='module')
def smoke(workdir, tmp_path_factory, one_thread):
    """The smoke preset run once, on the tests' synthetic play, rewriting a README: (out_dir, stdout, README, its
    findings {finding: entry in results.json}; a later call rewrites results.json).
    It trains two seeds of every kind, a minute or two: the tests that use it are marked slow."""
    out = tmp_path_factory.mktemp('findings') / 'smoke'
    readme = out.parent / 'README.md'
    readme.write_text(README)
    # all but finding orders, whose 18 runs would double the fixture's time (its own tests are below), and scarce;
    # adapt and streams train finding orders' GPT and FIM mix only
    result = run_script('findings.py', '--preset=smoke', f'--out_dir={out}', f'--readme={readme}',
                        '--only=1,2,3,4,6,8,plateau,long,length,infill,adapt,streams', cwd=workdir)
    findings = json.loads((out / 'results.json').read_text())['findings']
    return out, result.stdout, readme, {f['finding']: f for f in findings}


@pytest.mark.slow
def test_smoke_writes_the_sweep_every_figure_and_claim(smoke):
    out, stdout, _, _ = smoke
    for name in FIGURES:
        assert (out / name).read_bytes().startswith(PNG), name
    results = json.loads((out / 'results.json').read_text())
    assert [f['finding'] for f in results['findings']] == ['sweep', '1', '2', '3', '4', '6', '8', 'plateau', 'long',
                                                          'length', 'infill', 'adapt', 'streams']
    md = (out / 'results.md').read_text()
    for finding in results['findings'][1:]:
        assert f"## {finding['finding']}. {finding['title']}" in md
        for claim in finding['claims']:
            assert claim['verdict'] in VERDICTS
            assert f"| {finding['finding']} | {claim['claim']} | **{claim['verdict']}** |" in md
            interval = claim['numbers']['effect [95% interval] (n)']  # every claim, the timings' too
            assert interval['low'] <= interval['effect'] <= interval['high'] and interval['n']
        for name in finding['figures']:
            assert f'![{name}]({name})' in md
    # length: against the encoder at each block, and at the longer one each variant against the encoder and rotary
    assert [len(f['claims']) for f in results['findings']] == [1, 1, 2, 3, 2, 4, 2, 2, 2, 6, 2, 13, 12]
    timing = {c['claim']: c['numbers']['effect [95% interval] (n)'] for c in results['findings'][5]['claims']}
    assert [i['n'] for c, i in timing.items() if 'generates faster' in c or 'grows with the sequence' in c] == \
        ['2 timing repeats'] * 2
    assert 'verdict rule' in results['settings'] and results['settings']['preset'] == 'smoke'
    assert 'started' in stdout


@pytest.mark.slow
def test_the_sweep_trains_every_point_and_the_seeds_take_the_choice(smoke):
    out, _, _, _ = smoke
    runs = set(os.listdir(out / 'runs'))
    # the two position encodings of every kind (one rate, one gate_init in the smoke grid)
    assert {f'sweep-{kind}-lr0.01-gate1-{pe}' for kind in ('l2r', 'mixed', 'random', 'encoder')
            for pe in ('learned', 'rotary')} | {'sweep-sigma-lr0.01-learned', 'sweep-sigma-lr0.01-rotary'} <= runs
    assert not any(name.startswith('sweep-') and name.endswith('gate1') for name in runs)
    assert 'mixed-s1337' not in runs and 'mixed-s1' in runs  # the first seed is the sweep's winner
    sweep = json.loads((out / 'results.json').read_text())['findings'][0]['claims'][0]['numbers']
    for kind in ('l2r', 'mixed', 'random', 'sigma', 'encoder'):
        chosen = json.loads(sweep[next(k for k in sweep if k.startswith(f'chosen for {kind} '))])
        losses = {k: v for k, v in sweep.items() if k.startswith(f'{kind}, ')}
        assert sweep[f'{kind}, {json.dumps(chosen)}'] == min(losses.values())
        settings = json.loads((out / 'runs' / f'{kind}-s1' / 'args.json').read_text())
        assert {k: settings[k] for k in chosen} == chosen and settings['seed'] == 1
        assert settings['min_lr'] == chosen['learning_rate'] / 10


@pytest.mark.parametrize('preset', ['cpu', 'smoke', 'gpu'])
def test_the_dry_run_plans_the_jobs_it_planned_before_the_split(preset):
    """--dry_run prints the sweep's jobs with their flags and the runs after it, in the order of the fixture made
    before findings.py became the experiments package (tests/fixtures/make_dry_runs.py)."""
    from fixtures.make_dry_runs import FIXTURE, dry_run
    with open(FIXTURE) as f:
        assert dry_run(preset) == json.load(f)[preset]


def test_finding_8_alone_plans_the_ema_reading_its_claim_reads():
    """The EMA claim reads finding 4's one-order reading of the EMA weights (eval.json) beside the raw weights':
    --only=8 on a fresh out_dir plans both (it ended in a FileNotFoundError), and with 4 each runs once."""
    from aogpt.experiments.pipeline import evaluation_jobs
    from aogpt.experiments.presets import PRESETS
    folders = {f'{kind}-s{s}': f'runs/{kind}-s{s}' for kind in ('mixed', 'encoder') for s in (1337, 1)}
    alone = {job.log for job in evaluation_jobs(['8'], PRESETS['smoke'], [1337, 1], folders)}
    assert alone == {f'runs/mixed-s{s}/{log}' for s in (1337, 1) for log in ('eval.log', 'eval_raw.log')}
    both = [job.log for job in evaluation_jobs(['4', '8'], PRESETS['smoke'], [1337, 1], folders)]
    assert len(both) == len(set(both)) == 6


def test_the_script_lists_the_registrys_findings_in_order():
    """findings.py's docstring names every finding of aogpt/experiments/registry.py, one a line, in the registry's order."""
    import ast
    from aogpt.experiments.registry import FINDINGS
    with open(os.path.join(ROOT, 'findings.py')) as f:
        doc = ast.get_docstring(ast.parse(f.read()))
    listed = doc.split('The findings, in the order they run')[1].split(':\n', 1)[1]
    assert [line.split()[0] for line in listed.splitlines() if line.startswith('  ')] == list(FINDINGS)


def test_choose_picks_the_lowest_loss_in_the_kinds_objective(tmp_path):
    from aogpt.experiments.sweep import choose, own_loss, point_name
    p = dict(grid=dict(learning_rate=(1e-2, 3e-2), gate_init=(1.0,), position_encoding=('learned', 'rotary')))
    losses = {(0.01, 'learned'): (2.0, 3.0), (0.01, 'rotary'): (2.5, 1.0), (0.03, 'learned'): (1.0, 3.5),
              (0.03, 'rotary'): (3.0, 3.0)}  # (val_l2r, val_ao): the encoder is chosen by val_ao alone
    for (lr, positions), (l2r, ao) in losses.items():
        point = dict(learning_rate=lr, gate_init=1.0, position_encoding=positions)
        folder = tmp_path / point_name('encoder', point)
        folder.mkdir()
        (folder / 'metrics.jsonl').write_text(json.dumps(dict(iter=30, val_l2r=l2r, val_ao=ao)) + '\n')
    point, name, rows = choose(p, 'encoder', str(tmp_path))
    assert point == dict(learning_rate=0.01, gate_init=1.0, position_encoding='rotary')
    assert name == 'sweep-encoder-lr0.01-gate1-rotary' and len(rows) == 4
    assert own_loss('mixed', dict(val_l2r=2.0, val_ao=3.0)) == pytest.approx(2.9)


@pytest.mark.parametrize('preset, gates', [('cpu', (1.0,)), ('gpu', (0.0, 1.0)), ('smoke', (1.0,))])
def test_every_kind_sweeps_the_position_encoding(preset, gates):
    from aogpt.experiments.presets import KINDS, PRESETS
    from aogpt.experiments.sweep import grid_points, point_name, sweep_runs
    p = PRESETS[preset]
    for kind in KINDS:
        points = grid_points(kind, p['grid'])
        adaln = kind != 'sigma'
        assert len(points) == len(p['grid']['learning_rate']) * (len(gates) if adaln else 1) * 2
        assert {pt['position_encoding'] for pt in points} == {'learned', 'rotary'}
        assert {pt.get('gate_init') for pt in points} == (set(gates) if adaln else {None})
        assert all(point_name(kind, pt).endswith(('-learned', '-rotary')) for pt in points)
    assert len(sweep_runs(p, list(KINDS))) == {'cpu': 20, 'gpu': 36, 'smoke': 10}[preset]


def test_runs_with_the_flags_of_another_are_trained_once():
    from aogpt.experiments.length import block_sweep_runs, length_entries
    from aogpt.experiments.pipeline import seed_runs
    from aogpt.experiments.presets import PRESETS
    from aogpt.experiments.sweep import run_flags, same_runs, sweep_runs
    p, seeds = PRESETS['cpu'], [1337, 1, 2]
    sweep = sweep_runs(p, ['mixed'])
    point = dict(learning_rate=0.01, gate_init=1.0, position_encoding='rotary')
    runs = seed_runs(p, ['plateau', 'long'], seeds, {'mixed': (point, None, None)}, sweep)
    assert runs['mixed-s1337'] == runs['mixed-rotary-s1337'] == 'sweep-mixed-lr0.01-gate1-rotary'  # the winner
    assert runs['mixed-learned-s1337'] == 'sweep-mixed-lr0.01-gate1-learned'  # the sweep's other point, same rate
    assert runs['mixed-rotary-s1'] == 'mixed-s1' and runs['mixed-rotary-s2'] == 'mixed-s2'
    trained = {name for name, flags in runs.items() if isinstance(flags, dict)}
    assert trained == {'mixed-s1', 'mixed-s2', 'mixed-learned-s1', 'mixed-learned-s2',
                       *(f'mixed-rotary_plain-s{s}' for s in seeds),
                       *(f'mixed-long-{pe}-s{s}' for pe in ('learned', 'rotary') for s in (1337, 1))}
    assert runs['mixed-learned-s1'] == run_flags(p, 'mixed', point | dict(position_encoding='learned'), 1)
    assert runs['mixed-long-rotary-s1'] == run_flags(p, 'mixed', point, 1) | dict(block_size=256,
                                                                                          batch_size=4)
    assert seed_runs(p, ['long'], seeds, {'mixed': (point, None, None)}, sweep).keys() == \
        {f'mixed-long-{pe}-s{s}' for pe in ('learned', 'rotary') for s in (1337, 1)}  # no seeds of the kind
    chosen = {'mixed': (point, None, None), 'encoder': (point, None, None), 'l2r': (point | dict(learning_rate=3e-3),
                                                                                None, None)}
    block_sweep = block_sweep_runs(p, chosen)  # 2 blocks x (AO-GPT's 3 query settings, the encoder) x 2 rates
    assert len(block_sweep) == 16 and not any('l2r' in name for name in block_sweep)
    at_blocks = {(label, block): entry[1] for block, _ in p['lengths']
                 for label, entry in length_entries(chosen, block, 64).items()}
    runs = seed_runs(p, ['long', 'length'], seeds, chosen, sweep | block_sweep, {'length': at_blocks})
    # finding length: the base block's runs are the kinds' seeds, block 256's AO-GPT runs are finding long's rotary
    assert runs['encoder-block64-s1'] == 'encoder-s1' and runs['mixed-block256-s1'] == 'mixed-long-rotary-s1'
    # a longer block's first seed is its sweep's run at the chosen rate; the query-only variants there only
    assert runs['mixed-rotary_half_heads-block1024-s1337'] == 'sweep-mixed-lr0.01-gate1-rotary_half_heads-block1024'
    half = point | dict(position_encoding='rotary_half_heads')
    assert runs['mixed-rotary_half_heads-block1024-s1'] == run_flags(p, 'mixed', half, 1) | dict(
        block_size=1024, batch_size=1)
    assert not any(name.startswith('mixed-rotary_') and 'block64' in name for name in runs)
    assert runs['l2r-block1024-s1337'] == run_flags(p, 'l2r', chosen['l2r'][0], 1337) | dict(
        block_size=1024, batch_size=1)
    assert not any(name.startswith(('mixed-block', 'encoder-block', 'l2r-block')) and name.endswith('-s2')
                   for name in runs)  # two seeds
    assert same_runs({'a': dict(x=1), 'b': dict(x=1), 'c': dict(x=2)}, {'s': dict(x=2)}) == \
        {'a': dict(x=1), 'b': 'a', 'c': 's'}


def test_a_longer_block_takes_the_rate_whose_run_ends_lowest_in_the_kinds_own_objective(tmp_path):
    from aogpt.experiments.length import block_sweep_runs, choose_at_blocks
    from aogpt.experiments.presets import PRESETS
    p = PRESETS['cpu']
    point = dict(learning_rate=0.01, gate_init=1.0, position_encoding='rotary')
    chosen = {kind: (point, None, None) for kind in ('mixed', 'encoder', 'l2r')}
    for name, flags in block_sweep_runs(p, chosen).items():  # the low rate wins for the encoder only
        low = flags['learning_rate'] == 0.003
        loss = 2.0 + (-0.1 if low else 0.1) * (1 if flags.get('architecture') == 'encoder' else -1)
        (tmp_path / name).mkdir()
        (tmp_path / name / 'metrics.jsonl').write_text(json.dumps(dict(iter=2000, val_ao=loss, val_l2r=9.0)) + '\n')
    picked = choose_at_blocks(p, chosen, str(tmp_path))
    assert picked['encoder', 1024]['learning_rate'] == 0.003 and picked['encoder', 256]['learning_rate'] == 0.003
    assert picked['mixed-rotary_upper_layers', 1024] == point | dict(position_encoding='rotary_upper_layers')
    assert picked['mixed', 64] == point and picked['l2r', 1024] == point  # the base block, and l2r: the sweep's choice


def test_the_plateau_is_left_at_the_first_evaluation_a_tenth_of_a_nat_below_the_unigram_entropy():
    from aogpt.experiments.plateau import plateau_left
    records = [dict(iter=i, val_ao=v) for i, v in ((0, 4.2), (250, 3.30), (500, 3.25), (750, 3.2), (1000, 2.5))]
    assert plateau_left(records, unigram=3.34) == 750  # 3.25 is only 0.09 below
    assert plateau_left(records, unigram=3.5) == 250
    assert plateau_left(records[:3], unigram=3.34) == 'never'


def timing_file(ao, encoder, ao_by_length, encoder_by_length):
    return dict(block_size=32, steps=[4, 32], lengths=[8, 32], batch_size=2, repeats=len(ao[0]),
                seconds={'AO-GPT (KV cache)': ao, 'encoder MDM': encoder},
                seconds_by_length={'AO-GPT (KV cache)': ao_by_length, 'encoder MDM': encoder_by_length})


def test_the_timing_claims_have_a_t_interval_over_the_repeats():
    import math
    from aogpt.experiments.generation import length_claim, time_claim
    from aogpt.report import t_quantile
    ao = [[0.1, 0.1, 0.1], [0.2, 0.2, 0.2]]
    encoder = [[0.1, 0.1, 0.1], [0.4, 0.5, 0.45]]  # at the most steps log ratios ln 2, ln 2.5, ln 2.25
    timing = timing_file(ao, encoder, [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], [[2.0, 2.0, 3.0], [8.0, 4.0, 6.0]])
    made = time_claim(timing)
    interval = made['numbers']['effect [95% interval] (n)']
    ratios = [math.log(2), math.log(2.5), math.log(2.25)]
    mean, sd = sum(ratios) / 3, math.sqrt(sum((r - sum(ratios) / 3) ** 2 for r in ratios) / 2)
    half = t_quantile(0.975, 2) * sd / math.sqrt(3)
    assert (interval.effect, interval.low, interval.high) == pytest.approx((mean, mean - half, mean + half))
    assert interval.n == '3 timing repeats' and made['verdict'] == 'holds'
    assert made['numbers']['growth from 4 to 32 steps, encoder'] == pytest.approx(4.5)
    length = length_claim(timing)['numbers']['effect [95% interval] (n)']  # per repeat: log(8/2), log(4/2), log(6/3)
    assert length.effect == pytest.approx((math.log(4) + 2 * math.log(2)) / 3) and length.n == '3 timing repeats'
    assert length.low == pytest.approx(length.effect - t_quantile(0.975, 2) * math.log(2) / 3)  # sd ln 2 / sqrt 3
    slower = time_claim(timing_file(ao, [[0.1] * 3, [0.1, 0.11, 0.09]], *timing['seconds_by_length'].values()))
    assert slower['verdict'] == 'does not hold'  # the encoder faster at the most steps


def test_generation_time_is_measured_again_for_a_file_without_repeats(tmp_path, monkeypatch):
    from aogpt.experiments import generation
    from aogpt.experiments.generation import generation_times
    from aogpt.experiments.presets import PRESETS
    p = PRESETS['smoke']
    path = tmp_path / 'generation_time.json'
    path.write_text(json.dumps(dict(block_size=32, steps=[4, 32], lengths=[8, 32], batch_size=2,  # as kept before
                                    seconds={'AO-GPT (KV cache)': [0.1, 0.2], 'encoder MDM': [0.1, 0.4]},
                                    seconds_by_length={'AO-GPT (KV cache)': [1, 1], 'encoder MDM': [2, 8]})))
    timed = timing_file([[0.1, 0.1], [0.2, 0.2]], [[0.1, 0.1], [0.4, 0.5]], [[1, 1], [1, 1]], [[2, 2], [8, 7]])
    calls = []
    monkeypatch.setattr(generation, 'time_generation', lambda paths, steps, lengths, batch_size, repeats:
                        calls.append(repeats) or (timed['seconds'], timed['seconds_by_length'], 32))
    folders = {'mixed-s1337': 'm', 'encoder-s1337': 'e'}
    assert generation_times(p, folders, 1337, str(tmp_path)) == timed and calls == [2]
    assert json.loads(path.read_text()) == timed
    assert generation_times(p, folders, 1337, str(tmp_path)) == timed and calls == [2]  # kept now


def started_sweep(out):
    """The smoke preset's l2r sweep in out/runs as findings.py starts it: each run's args.json written by
    run_jobs itself, its training a no-op. Returns [(name, flags)]."""
    from aogpt.experiments.jobs import Job, run_jobs, train_job
    from aogpt.experiments.presets import PRESETS
    from aogpt.experiments.sweep import sweep_runs
    p = PRESETS['smoke']
    runs = list(sweep_runs(p, ['l2r']).items())
    jobs = [train_job(name, p, flags, str(out / 'runs' / name)) for name, flags in runs]
    (no_op := out.parent / 'no_op.py').write_text('')
    run_jobs([Job(job.name, [str(no_op)], job.log, False, job.settings) for job in jobs], 1, 0)
    return runs


def test_each_job_runs_on_the_threads_it_is_given(tmp_path):
    """run_jobs' threads reach torch in each job, as OMP_NUM_THREADS reaches a new interpreter, though the process
    it is forked from imported torch under other settings (the tests' workers: one thread)."""
    from aogpt.experiments.jobs import Job, run_jobs
    (script := tmp_path / 'threads.py').write_text('import torch; print(torch.get_num_threads())')
    for threads in (2, 3):
        log = tmp_path / f'{threads}.log'
        run_jobs([Job('threads', [str(script)], str(log), False)], 1, threads)
        assert log.read_text().split() == [str(threads)]


@pytest.mark.parametrize('methods', [None, ['spawn']])  # None: this platform's (forkserver); spawn: as on Windows
def test_run_python_is_a_new_interpreter(tmp_path, monkeypatch, methods):
    """processes.run_python gives a script's output (stdout and stderr in one file, or apart), its exit status, its
    arguments, folder and environment, and None past its timeout; without forkserver, through subprocess."""
    import multiprocessing
    from aogpt.experiments.processes import run_python
    if methods:
        monkeypatch.setattr(multiprocessing, 'get_all_start_methods', lambda: methods)
    (script := tmp_path / 'script.py').write_text(
        'import os, sys, time\nprint(sys.argv[1:], os.getcwd(), os.environ["WORD"])\nsys.stdout.flush()\n'
        'print("to stderr", file=sys.stderr)\nsys.stderr.flush()\nprint("after")\ntime.sleep(float(sys.argv[2]))\n'
        'sys.exit(int(sys.argv[1]))')
    env = dict(os.environ, WORD='hello')
    assert run_python([str(script), '3', '0'], tmp_path, env, str(tmp_path / 'both')) == 3
    assert (tmp_path / 'both').read_text() == f"['3', '0'] {tmp_path} hello\nto stderr\nafter\n"
    assert run_python([str(script), '0', '0'], tmp_path, env, str(tmp_path / 'out'), str(tmp_path / 'err')) == 0
    assert (tmp_path / 'err').read_text() == 'to stderr\n' and (tmp_path / 'out').read_text().endswith('after\n')
    assert run_python([str(script), '0', '60'], tmp_path, env, str(tmp_path / 'out'), timeout=1) is None


def test_a_copied_or_renamed_folder_holds_the_same_runs(tmp_path):
    from aogpt.experiments.jobs import train_job
    from aogpt.experiments.presets import PRESETS
    p = PRESETS['smoke']
    runs = started_sweep(tmp_path / 'first')
    shutil.copytree(tmp_path / 'first', tmp_path / 'copy')
    (tmp_path / 'first').rename(tmp_path / 'renamed')
    for out in ('copy', 'renamed'):
        for name, flags in runs:
            folder = tmp_path / out / 'runs' / name
            assert str(tmp_path) not in (folder / 'args.json').read_text()  # settings, not paths
            train_job(name, p, flags, str(folder))  # accepted
    with pytest.raises(SystemExit) as stop:  # while other settings are still refused
        train_job(runs[0][0], p, runs[0][1] | dict(seed=1), str(tmp_path / 'copy' / 'runs' / runs[0][0]))
    says(str(stop.value.code), 'holds a run with other settings')


def test_a_cut_args_json_is_one_line(tmp_path, workdir):
    name = started_sweep(tmp_path)[0][0]
    args = tmp_path / 'runs' / name / 'args.json'
    args.write_text(args.read_text()[:20])  # as a kill mid-write would leave it
    says(one_line_error('findings.py', '--preset=smoke', f'--out_dir={tmp_path}', '--only=2', '--dry_run', cwd=workdir),
         f'{args} is not JSON', f'delete the run folder {args.parent} to train it again')


def test_a_record_is_never_left_cut(tmp_path):
    """common.write_json (args.json, wall_minutes.json, eval_ppl.py's --out_json): a dump that fails partway leaves the
    file as it was, not the part written."""
    from aogpt.common import write_json
    path = str(tmp_path / 'best.json')
    write_json(path, dict(results=1))
    with pytest.raises(TypeError):
        write_json(path, dict(results=2, more=object()))  # json.dump writes "results": 2 before it fails
    assert json.loads((tmp_path / 'best.json').read_text()) == dict(results=1)


def test_finding_orders_without_its_second_corpus_is_one_line(tmp_path, workdir):
    says(one_line_error('findings.py', '--preset=cpu', '--only=orders', f'--out_dir={tmp_path}', cwd=workdir),
         'data/wikitext2_char/train.bin not found: run python data/wikitext2_char/prepare.py first')
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_our_plateau_findings_reuse_runs_and_measure_each_seed(smoke):
    out, _, _, findings = smoke
    runs = set(os.listdir(out / 'runs'))
    chosen = json.loads(findings['sweep']['claims'][0]['numbers'][
        'chosen for mixed (AO-GPT, 10% left to right)'])['position_encoding']
    other = ({'learned', 'rotary'} - {chosen}).pop()
    # the chosen encoding's runs are the kind's own; the other's first seed is the sweep's point beside the winner
    assert f'mixed-{chosen}-s1337' not in runs and f'mixed-{chosen}-s1' not in runs and 'mixed-s1' in runs
    assert f'mixed-{other}-s1337' not in runs and f'mixed-{other}-s1' in runs
    assert {'mixed-rotary_plain-s1337', 'mixed-rotary_plain-s1'} <= runs
    args = json.loads((out / 'runs' / 'mixed-rotary_plain-s1' / 'args.json').read_text())
    assert args['position_encoding'] == 'rotary_plain' and args['seed'] == 1 and args['block_size'] == 32
    args = json.loads((out / 'runs' / 'mixed-long-rotary-s1' / 'args.json').read_text())
    assert (args['block_size'], args['batch_size'], args['position_encoding']) == (64, 2, 'rotary')
    plateau, long, length, infill = (findings[name] for name in ('plateau', 'long', 'length', 'infill'))
    assert plateau['title'].startswith('(Ours)') and long['title'].startswith('(Ours)')
    args = json.loads((out / 'runs' / 'encoder-block64-s1' / 'args.json').read_text())
    assert (args['block_size'], args['batch_size'], args['architecture']) == (64, 2, 'encoder')
    assert 'mixed-block64-s1' not in runs  # it is mixed-long-rotary-s1
    by_context = json.loads((out / 'runs' / 'encoder-block64-s1' / 'by_context.json').read_text())
    assert len(by_context['share']) == 10 and all(math.isfinite(v) for v in by_context['share'])
    assert set(by_context['distance']) <= {'1', '2', '4', '8', '16', '32', '64', 'none'}
    for finding in (plateau, long, length, infill):
        for claim in finding['claims']:
            interval = claim['numbers']['effect [95% interval] (n)']
            assert claim['claim'].startswith('(Ours)') and interval['n'] == '2 vs 2 runs'
            assert interval['low'] <= interval['effect'] <= interval['high']
    numbers = plateau['claims'][0]['numbers']
    left = {k: v for k, v in numbers.items() if 'first iteration 0.1 nats below the unigram entropy' in k}
    assert len(left) == 6 and all(v == 'never' or v in (0, 10, 20, 30) for v in left.values())
    assert {f'final val {r} loss, {pe}' for r in ('any-order', 'left-to-right') for pe in
            ('learned', 'rotary', 'rotary_plain')} <= set(numbers)
    sigma = findings['8']['claims'][0]
    assert "position_encoding '" in sigma['claim'] and 'position encodings, AO-GPT / sigma-GPT' in ' '.join(
        sigma['numbers'])


@pytest.mark.slow
def test_the_readme_section_is_rewritten_from_the_results(smoke):
    out, _, readme, _ = smoke
    text = readme.read_text()
    assert text.startswith('intro\n\n## Findings\n\n<!-- findings:start -->\n')
    assert text.endswith('<!-- findings:end -->\n\n## Tests\n')
    assert 'old table' not in text and 'python findings.py --preset=smoke --out_dir=smoke' in text
    results = json.loads((out / 'results.json').read_text())
    for finding in results['findings'][1:]:
        for claim in finding['claims']:
            assert f"| {finding['finding']} | {claim['claim']} |" in text and f"**{claim['verdict']}**" in text


@pytest.mark.slow
def test_a_second_call_trains_nothing_and_only_selects(smoke, workdir):
    out, _, _, _ = smoke
    before = metrics_files(out)
    wall = json.loads((out / 'results.json').read_text())['settings']
    result = run_script('findings.py', '--preset=smoke', f'--out_dir={out}', '--only=1,7', cwd=workdir)
    assert 'started' not in result.stdout and 'train sweep-l2r-lr0.01-gate1-learned: done, skipped' in result.stdout
    assert 'train encoder-s1: done, skipped' in result.stdout  # finding 6's encoder samples (7 names 6)
    assert 'sigma' not in result.stdout  # finding 8's runs are not needed
    assert metrics_files(out) == before
    results = json.loads((out / 'results.json').read_text())
    # 1 and 6 drawn again, the first call's other findings kept, in the registry's order
    assert [f['finding'] for f in results['findings']] == ['sweep', '1', '2', '3', '4', '6', '8', 'plateau', 'long',
                                                          'length', 'infill', 'adapt', 'streams']
    key = 'wall minutes, summed over the calls that ran jobs'  # the first call's, not this one's few seconds
    assert results['settings'][key] == wall[key] > 0


@pytest.mark.slow
def test_a_moved_folder_is_the_same_run_and_an_interrupted_run_resumes(smoke, workdir, tmp_path):
    out, _, _, _ = smoke
    moved = tmp_path / 'moved'
    shutil.copytree(out, moved)
    run = moved / 'runs' / 'sweep-l2r-lr0.01-gate1-learned'
    lines = (run / 'metrics.jsonl').read_text().splitlines(keepends=True)
    (run / 'metrics.jsonl').write_text(''.join(lines[:-1]))  # stopped before max_iters
    plan = run_script('findings.py', '--preset=smoke', f'--out_dir={moved}', '--only=2', '--dry_run',
                      cwd=workdir).stdout
    jobs = [line for line in plan.splitlines() if line.startswith('train')]
    assert jobs[0].startswith('train sweep-l2r-lr0.01-gate1-learned (resume) [to run]')
    assert jobs[0].endswith('--init_from=resume')
    assert all('[done]' in line for line in jobs[1:]) and len(jobs) == 2  # only the l2r kind's sweep: finding 2's


@pytest.mark.slow
def test_bad_settings_stop_with_one_line(smoke, workdir, tmp_path):
    out, _, _, _ = smoke
    says(one_line_error('findings.py', '--only=9', cwd=workdir), '--only', '9', '1, 2, 3, 4, 6, 8, plateau, long, length')
    for name in ('long', 'length'):
        says(one_line_error('findings.py', '--preset=gpu', f'--only={name}', '--dry_run', cwd=workdir), f'--only={name}',
             'gpu preset', 'plateau')
    says(one_line_error('findings.py', '--preset=tiny', cwd=workdir), '--preset', 'cpu, gpu, smoke')
    says(one_line_error('findings.py', '--seeds=9', cwd=workdir), '--seeds', '9')
    says(one_line_error('findings.py', '--seeds=1', cwd=workdir), '--seeds', '[2, 5]')
    says(one_line_error('findings.py', '--preset=cpu', '--only=1', f'--out_dir={out}', cwd=workdir), 'other settings',
         'args.json')
    a_file = tmp_path / 'a_file'
    a_file.write_text('')
    says(one_line_error('findings.py', '--preset=smoke', f'--out_dir={a_file}', cwd=workdir), '--out_dir', 'a file')
    says(one_line_error('findings.py', '--preset=smoke', f'--out_dir={a_file}/x', cwd=workdir), '--out_dir',
         'cannot be made')
    (tmp_path / 'holds_runs').mkdir()
    (tmp_path / 'holds_runs' / 'runs').write_text('')
    says(one_line_error('findings.py', '--preset=smoke', f'--out_dir={tmp_path}/holds_runs', '--only=1', cwd=workdir),
         'holds a file named runs', 'move it')
    says(one_line_error('findings.py', '--preset=smoke', f'--readme={tmp_path}/none.md', cwd=workdir), '--readme')
    cut = tmp_path / 'cut'
    shutil.copytree(out / 'runs' / 'sweep-l2r-lr0.01-gate1-learned', cut / 'runs' / 'sweep-l2r-lr0.01-gate1-learned')
    args = cut / 'runs' / 'sweep-l2r-lr0.01-gate1-learned' / 'args.json'
    args.write_text(args.read_text()[:20])
    says(one_line_error('findings.py', '--preset=smoke', f'--out_dir={cut}', '--only=2', cwd=workdir), 'args.json',
         'not JSON', 'delete the run folder')
    no_markers = tmp_path / 'README.md'
    no_markers.write_text('# a readme\n')
    from aogpt.experiments.pipeline import write_readme
    with pytest.raises(SystemExit) as stop:
        write_readme(str(no_markers), str(out), [], {})
    says(str(stop.value.code), 'findings:start', 'markers')


def test_a_claim_on_a_run_that_did_not_learn_is_not_judged():
    from aogpt.experiments.measure import NOT_JUDGED, claim, comparable
    from aogpt.report import Interval
    interval = Interval(effect=0.5, low=0.3, high=0.7, n='3 vs 3 seeds', method='Welch')
    judged = claim('x', {}, interval)
    assert judged['verdict'] == 'holds'
    assert claim('x', {}, interval, stuck=['sigma-s1'])['verdict'] == NOT_JUDGED
    assert comparable(Interval(effect=0.0, low=-0.05, high=0.05, n='', method=''), 0.1) == 'holds'
    assert comparable(Interval(effect=0.3, low=0.2, high=0.4, n='', method=''), 0.1) == 'does not hold'
    assert comparable(Interval(effect=0.1, low=0.0, high=0.2, n='', method=''), 0.1) == 'not resolvable at this size'


def test_figures_need_matplotlib_before_any_run(monkeypatch, workdir):
    from aogpt.report import load_matplotlib
    monkeypatch.setitem(sys.modules, 'matplotlib', None)  # import matplotlib now raises ImportError
    with pytest.raises(SystemExit) as stop:
        load_matplotlib()
    assert str(stop.value.code) == 'error: matplotlib is needed for the figures: pip install matplotlib'
    says(one_line_error('findings.py', '--preset=smoke', f'--out_dir={workdir}/never', cwd=workdir), 'matplotlib')
    assert not os.path.exists(os.path.join(workdir, 'never', 'runs', 'sweep-l2r-lr0.01-gate1-learned'))


def test_line_figure_draws_the_curves_bands_and_lines(tmp_path):
    from aogpt.report import line_figure
    path = tmp_path / 'curves.png'
    fig = line_figure(path, 'synthetic', 'iteration', 'loss',
                      [('two seeds', [0, 10, 20], [[3.0, 3.2], [2.5, 2.9], [2.0, 2.2]]),
                       ('one seed', [0, 10, 20], [[3.1], [2.0], [1.5]])],
                      hlines=[('a bound', [1.8, 1.9])])
    assert path.read_bytes().startswith(PNG)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines) == ['two seeds', 'one seed', 'a bound']
    assert list(lines['two seeds'].get_ydata()) == pytest.approx([3.1, 2.7, 2.1])  # the mean over seeds
    assert len(ax.collections) == 1 and len(ax.patches) == 1  # a band for two seeds only; the bound's range
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ['two seeds', 'one seed', 'a bound']


# -----------------------------------------------------------------------------
# finding orders

def test_the_order_arms_train_at_their_kinds_choice_with_their_orders():
    from aogpt.experiments.orders import evaluations, order_runs
    from aogpt.experiments.presets import PRESETS
    from aogpt.experiments.sweep import run_flags
    p, seeds = PRESETS['cpu'], [1337, 1, 2]
    point = dict(learning_rate=3e-3, gate_init=1.0, position_encoding='rotary')
    chosen = {kind: (point | dict(learning_rate=lr), None, None) for kind, lr in
              (('mixed', 3e-3), ('l2r', 1e-2), ('encoder', 3e-3))}
    runs = order_runs(p, chosen, seeds)
    assert len(runs) == 7 * 3 + 2 * 2 + 3 * 3  # the arms, the longer pair, three arms on the second corpus
    base = run_flags(p, 'mixed', chosen['mixed'][0], 2) | dict(eval_gaps='span:4,span:16')
    assert runs['orders-paper-s2'] == base and base['random_ratio'] == 0.9
    assert runs['orders-l2r50-s2'] == base | dict(random_ratio=0.5)
    assert runs['orders-curriculum-s2'] == base | dict(order_curriculum=1000)
    without_ratio = {k: v for k, v in base.items() if k != 'random_ratio'}  # its shares are the whole mix
    assert runs['orders-fim-gpt-s2'] == without_ratio | dict(order_mix='l2r:0.5,fim:0.5')
    assert runs['orders-gpt-s1']['order'] == 'l2r' and runs['orders-gpt-s1']['learning_rate'] == 1e-2
    assert runs['orders-encoder-s1']['architecture'] == 'encoder'
    assert runs['orders-gpt-x4-s1'] == runs['orders-gpt-s1'] | dict(max_iters=8000, lr_decay_iters=8000,
                                                                     eval_interval=1000)
    for arm in ('gpt', 'paper', 'fim-mix'):  # the same flags on other text
        assert runs[f'orders-{arm}-wikitext2_char-s2'] == runs[f'orders-{arm}-s2'] | dict(dataset='wikitext2_char')
    assert list(runs)[0] == 'orders-gpt-s1337'  # the scorer first
    folders = {name: f'runs/{name}' for name in runs}
    jobs = evaluations(p, seeds, folders)
    gen = [job for job in jobs if job.name.startswith('gen-ppl')]
    assert len(gen) == 7 * 3 + 3 * 3
    scorer = lambda job: 'runs/orders-gpt-wikitext2_char-s1337' if 'wikitext2_char' in job.name else \
        'runs/orders-gpt-s1337'  # each corpus's samples scored by its own GPT
    assert all(job.needs == (scorer(job), job.needs[1]) and f'--scorer={scorer(job)}/ckpt.pt' in job.argv
               for job in gen)
    assert '--order=l2r' in next(job for job in gen if job.name == 'gen-ppl orders-gpt-s2').argv
    l2r = {job.name.split()[1].rsplit('-s', 1)[0] for job in gen if '--order=l2r' in job.argv}
    assert l2r == {'orders-gpt', 'orders-fim-gpt', 'orders-gpt-wikitext2_char'}  # the arms without random orders
    gaps = {job.name.split()[1]: job.argv for job in jobs if job.name.startswith('gaps')}
    assert len(gaps) == len(runs)
    assert all(f"--dataset={'wikitext2_char' if 'wikitext2_char' in name else 'shakespeare_char'}" in argv
               for name, argv in gaps.items())


def test_a_job_starts_only_after_the_training_it_needs(tmp_path):
    from aogpt.experiments.jobs import Job, run_jobs
    stamp = 'import sys, time; open(sys.argv[1], "a").write(sys.argv[2] + " %f\\n" % time.time()); time.sleep(0.3)'
    script = tmp_path / 'stamp.py'
    script.write_text(stamp)
    log = tmp_path / 'order.txt'
    folder = str(tmp_path / 'run')
    job = lambda name, needs=(), settings=None: Job(
        name, [str(script), str(log), name], str(tmp_path / (name + '.log')) if settings is None else
        os.path.join(folder, 'train.log'), False, settings, tuple(needs))
    # the evaluation first in the list, as findings.py lists them: it still waits for its run
    ran = run_jobs([job('eval', [folder]), job('other'), job('train', settings={})], 2, 1)
    order = [line.split()[0] for line in log.read_text().splitlines()]
    assert ran == 3 and order.index('train') < order.index('eval')


def test_sigterm_reaches_the_running_jobs_and_starts_no_more(workdir, tmp_path, monkeypatch):
    """kill <findings.py's pid>: the running training saves its checkpoint and exits 75 within seconds, the job
    waiting for a worker never starts, and run_jobs raises Stopped (the jobs' processes, forked from a server, went
    on training without findings.py before)."""
    import signal
    import threading
    import time
    from conftest import TINY
    from aogpt.experiments.jobs import Job, Stopped, run_jobs
    monkeypatch.chdir(workdir)
    folder = tmp_path / 'run'
    train = [os.path.join(ROOT, 'train.py'), '--dataset=shakespeare_char', *TINY, f'--out_dir={folder}',
             '--max_iters=3000', '--lr_decay_iters=3000', '--eval_interval=3000', '--log_interval=1']
    (no_op := tmp_path / 'no_op.py').write_text('')
    jobs = [Job('train', train, str(folder / 'train.log'), False, {}), Job('after', [str(no_op)],
                                                                          str(tmp_path / 'after.log'), False)]
    sent = []

    def signal_once_training():
        while 'iter 3:' not in ((folder / 'train.log').read_text() if (folder / 'train.log').exists() else ''):
            time.sleep(0.05)
        sent.append(time.time())
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=signal_once_training, daemon=True).start()
    with pytest.raises(Stopped):
        run_jobs(jobs, 1, 1)
    assert time.time() - sent[0] < 5
    assert 'stopped by SIGTERM' in (folder / 'train.log').read_text()
    assert torch.load(folder / 'ckpt.pt', weights_only=True)['iter_num'] >= 3
    assert not (tmp_path / 'after.log').exists()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # pytest's, given back


def test_a_stopped_call_says_how_to_go_on_and_exits_75(workdir, tmp_path, monkeypatch, capsys):
    """findings.py stopped by SIGTERM: one line, exit status 75 as train.py's, and its wall minutes counted."""
    from aogpt.experiments import pipeline
    from aogpt.experiments.jobs import Stopped

    def stopped(*args):
        raise Stopped
    monkeypatch.setattr(pipeline, 'train_and_evaluate', stopped)
    monkeypatch.chdir(workdir)  # its data/shakespeare_char
    with pytest.raises(SystemExit) as e:
        pipeline.main('smoke', '1', str(tmp_path), 0, 0, '', False)
    assert e.value.code == 75 and 'stopped by SIGTERM' in capsys.readouterr().out
    assert (tmp_path / 'runs' / 'wall_minutes.json').exists()


def write_arm(runs, name, l2r, ao, gap_both, gap_left, nll, column='gap_l2r'):
    """A run folder as finding orders reads it: final losses, gaps.json at spans 1, 4, 32, gen_orders.json."""
    folder = runs / name
    folder.mkdir(parents=True)
    records = [dict(iter=i, val_l2r=l2r + 1 / (i + 1), val_ao=ao + 1 / (i + 1), val_gap_span4=gap_both,
                    val_gap_span4_left=gap_left, elapsed=2 * i) for i in (0, 30)]
    (folder / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in records))
    nlls = {f'span:{L}': dict(nll={column: gap_both + L / 100, 'left': gap_left + L / 100}) for L in (1, 4, 32)}
    (folder / 'gaps.json').write_text(json.dumps(dict(block_size=32, results=dict(shakespeare_char=nlls))))
    rows = [dict(steps=k, gen_ppl=math.exp(nll), entropy=2.5, sample_nll=[nll - 0.1, nll + 0.1], order='random',
                 seconds_per_sample=0.064) for k in (4, 32)]
    (folder / 'gen_orders.json').write_text(json.dumps(dict(results=rows)))
    return str(folder)


def test_the_orders_claims_read_each_arms_numbers(tmp_path):
    """Synthetic arms with known numbers: the tax, the gaps against the GPT's left side, the l2r-FIM mix, the
    any-order cost, the samples and the longer pair's tax come out as built."""
    from aogpt.experiments.measure import Measured, NOT_JUDGED
    from aogpt.experiments.orders import ORDER_ARMS, finding_orders, order_run
    from aogpt.experiments.presets import PRESETS
    from aogpt.experiments.registry import RUN_LOSSES
    smoke = PRESETS['smoke']
    second = dict(dataset='prose', arms=('gpt', 'paper', 'fim-mix'))
    p, seeds = smoke | dict(orders=smoke['orders'] | dict(second=second)), [1337, 1]
    runs, folders = tmp_path / 'runs', {}
    # (l2r loss, any-order loss, gap NLL given both sides, from the left only, sample NLL) of each arm, seed 1337;
    # seed 1 adds 0.02 to every number
    arms = {'gpt': (1.6, 4.0, 3.0, 1.5, 1.7),  # the GPT's 'both sides' column is not what it reads of a gap
            'paper': (2.0, 2.2, 1.8, 2.0, 3.3), 'l2r50': (1.8, 2.23, 1.6, 1.7, 3.0),
            'curriculum': (2.0, 2.2, 1.8, 2.0, 3.3), 'fim-mix': (1.95, 2.21, 1.3, 2.0, 3.1),
            'fim-gpt': (1.65, 2.6, 1.35, 1.6, 2.5), 'encoder': (2.4, 2.3, 1.7, 9.0, 3.5)}
    for arm, numbers in arms.items():
        for i, s in enumerate(seeds):
            name = order_run(arm, s)
            folders[name] = write_arm(runs, name, *(v + 0.02 * i for v in numbers),
                                      column='revealed' if arm == 'encoder' else 'gap_l2r')
    for i, s in enumerate(seeds):  # the longer pair: a tax of 0.2 (at the preset's iterations: 0.4)
        for arm, l2r in (('paper', 1.7), ('gpt', 1.5)):
            name = order_run(arm, s, 2)
            folders[name] = write_arm(runs, name, l2r + 0.01 * i, 2.0, 1.5, 1.5, 2.0)
    # the second corpus: the FIM mix's tax 0.3 (0.35 above), its gaps 0.1 worse than the GPT's left side
    for arm, numbers in (('gpt', (1.2, 4.0, 3.0, 1.1, 1.3)), ('paper', (1.7, 1.9, 1.5, 1.8, 2.9)),
                         ('fim-mix', (1.5, 1.92, 1.2, 1.8, 2.8))):
        for i, s in enumerate(seeds):
            name = order_run(arm, s, corpus='prose')
            folders[name] = write_arm(runs, name, *(v + 0.02 * i for v in numbers))
    m = Measured(folders, str(tmp_path), seeds, unigram=4.2, run_losses=RUN_LOSSES)
    figures, claims = finding_orders(m, p)
    assert all((tmp_path / f).read_bytes().startswith(PNG) for f in figures)
    assert 'ours_orders_prose.png' in figures and len(figures) == 6
    effect = lambda start, arm: next(c['numbers']['effect [95% interval] (n)'].effect for c in claims
                                     if c['claim'].startswith(start.format(arm=ORDER_ARMS[arm][0])))
    verdict = lambda start, arm: next(c['verdict'] for c in claims
                                      if c['claim'].startswith(start.format(arm=ORDER_ARMS[arm][0])))
    tax = '(Ours) {arm} reads left to right within'
    assert effect(tax, 'paper') == pytest.approx(0.4) and verdict(tax, 'paper') == 'does not hold'
    assert effect(tax, 'fim-gpt') == pytest.approx(0.05)
    gaps = '(Ours) {arm} fills gaps better than'
    # the GPT's left side (1.5 + L/100) minus the arm's both sides, over spans 1 and 4 (32 is the block)
    assert effect(gaps, 'fim-mix') == pytest.approx(0.2) and effect(gaps, 'encoder') == pytest.approx(-0.2)
    assert effect('(Ours) {arm} fills gaps at least as well as the l2r-FIM mix', 'paper') == pytest.approx(-0.45)
    assert effect('(Ours) {arm} keeps its any-order loss', 'l2r50') == pytest.approx(0.03)
    assert effect("(Ours) {arm} fills gaps better than the paper's mix", 'fim-mix') == pytest.approx(0.5)
    assert effect("(Ours) {arm}'s samples at 32 steps", 'fim-gpt') == pytest.approx(0.8)
    on_prose = lambda start, arm: effect(start.replace('(Ours)', '(Ours, on prose)'), arm)
    assert sum(c['claim'].startswith('(Ours, on prose)') for c in claims) == 2 + 2 + 1 + 1 + 2  # tax and gaps of
    # two arms; the FIM mix's gaps, any-order cost and samples against the paper's mix
    assert on_prose(tax, 'fim-mix') == pytest.approx(0.3) and on_prose(gaps, 'fim-mix') == pytest.approx(-0.1)
    assert on_prose('(Ours) {arm} keeps its any-order loss', 'fim-mix') == pytest.approx(0.02)
    longer = claims[-1]
    assert longer['claim'].startswith('(Ours) The any-order tax shrinks with training')
    assert longer['numbers']['effect [95% interval] (n)'].effect == pytest.approx(0.2)
    # the encoder's NELBO is at the unigram
    stuck = Measured(folders, str(tmp_path), seeds, unigram=2.3, run_losses=RUN_LOSSES)
    claims = finding_orders(stuck, p)[1]
    assert all(c['verdict'] == NOT_JUDGED for c in claims if ORDER_ARMS['encoder'][0] in c['claim'])
    # the FIM GPT learned: it is judged by its left-to-right loss (1.65), not by the any-order loss it never trained
    fim_gpt = [c for c in claims if c['claim'].startswith('(Ours) ' + ORDER_ARMS['fim-gpt'][0])]
    assert len(fim_gpt) == 6 and all(c['verdict'] != NOT_JUDGED for c in fim_gpt)
    # each corpus's runs judged against the unigram entropy of its own text: the second's runs at theirs (1.3)
    other = {name: 1.3 for name in folders if 'prose' in name}
    claims = finding_orders(Measured(folders, str(tmp_path), seeds, 9.0, other, RUN_LOSSES), p)[1]
    assert [c['claim'].startswith('(Ours, on prose)') for c in claims if c['verdict'] == NOT_JUDGED] == \
        [True] * 8 and len(claims) > 8


# -----------------------------------------------------------------------------
# finding adapt

ADAPT_RATES = {'half-staged': 1e-3, 'half-plain': 3e-4, 'cheap': 3e-3}


def adapt_plan():
    from aogpt.experiments.presets import PRESETS
    p, seeds = PRESETS['cpu'], [1337, 1, 2]
    point = dict(learning_rate=3e-3, gate_init=1.0, position_encoding='rotary')
    chosen = {kind: (point | dict(learning_rate=lr), None, None) for kind, lr in
              (('mixed', 3e-3), ('l2r', 1e-2), ('encoder', 3e-3))}
    return p, seeds, chosen


def test_the_adaptations_start_from_their_parents_checkpoints():
    from aogpt.experiments.adapt import ADAPT_DRAWS, adapt_runs
    from aogpt.experiments.jobs import train_job
    from aogpt.experiments.orders import order_runs
    p, seeds, chosen = adapt_plan()
    runs = adapt_runs(p, chosen, seeds, ADAPT_RATES)
    # each corpus: the GPT, the FIM mix, two parents and three adaptations a seed; the larger size: 4 runs a seed, 2 seeds
    assert len(runs) == 2 * 3 * 7 + 2 * 4
    orders = order_runs(p, chosen, seeds)
    for corpus in ('', '-wikitext2_char'):  # finding orders' runs, not trained again
        assert {f'orders-{arm}{corpus}-s{s}' for arm in ('gpt', 'fim-mix') for s in seeds} <= runs.keys()
        assert all(runs[name] == orders[name] for name in runs if name.startswith('orders-'))
    parent = runs['adapt-parent-half-s2']
    assert parent == orders['orders-gpt-s2'] | dict(max_iters=1000, lr_decay_iters=1000)
    assert runs['adapt-parent-3q-s2'] == orders['orders-gpt-s2'] | dict(max_iters=1500, lr_decay_iters=1500)
    staged, plain, cheap = (runs[f'adapt-{arm}-s2'] for arm in ('half-staged', 'half-plain', 'cheap'))
    fim_gpt, fim_mix = 'l2r:0.5,fim:0.5', 'l2r:0.1,fim:0.4,random:0.5'
    assert staged['order_stages'] == f'{fim_gpt}@0/{fim_gpt}@333/{fim_mix}@666' and staged['max_iters'] == 1000
    assert cheap['order_stages'] == f'{fim_gpt}@0/{fim_gpt}@166/{fim_mix}@332' and cheap['lr_decay_iters'] == 500
    assert plain['order_mix'] == fim_mix and 'order_stages' not in plain
    assert staged['init_from'] == plain['init_from'] == 'adapt-parent-half-s2' and cheap['init_from'] == 'adapt-parent-3q-s2'
    free = {'learning_rate', 'min_lr', 'max_iters', 'lr_decay_iters', 'order', 'order_stages', 'order_mix', 'seed',
            'init_from'}  # what an adaptation may set afresh: the model is its parent's
    for child in (staged, plain, cheap):
        assert {k: v for k, v in child.items() if k not in free} == {k: v for k, v in parent.items() if k not in free}
        assert child['order'] == 'mixed' and child['seed'] == 2 + ADAPT_DRAWS
        assert not {'random_ratio', 'order_curriculum'} & child.keys()
    assert plain['learning_rate'] == 3e-4 and plain['min_lr'] == pytest.approx(3e-5)
    wide = runs['adapt-half-staged-w256-s1']
    assert wide == runs['adapt-half-staged-s1'] | dict(n_embd=256, init_from='adapt-parent-half-w256-s1')
    assert runs['adapt-gpt-w256-s1'] == orders['orders-gpt-s1'] | dict(n_embd=256)
    assert not any('w256' in name and name.endswith('-s2') for name in runs)  # the larger size: 2 seeds
    assert runs['adapt-cheap-wikitext2_char-s1'] == runs['adapt-cheap-s1'] | dict(
        dataset='wikitext2_char', init_from='adapt-parent-3q-wikitext2_char-s1')
    job = train_job('adapt-cheap-s1', p, runs['adapt-cheap-s1'], '/r/runs/adapt-cheap-s1')
    assert job.argv[-1] == '--init_from=/r/runs/adapt-parent-3q-s1/ckpt.pt' and job.needs == ('/r/runs/adapt-parent-3q-s1',)
    assert not any(arg.startswith('--init_from=adapt') for arg in job.argv)
    assert job.settings['init_from'] == 'adapt-parent-3q-s1'  # a run's name, not a path: a moved folder is the same run


def test_the_adaptations_first_seed_is_its_sweeps_choice_and_both_findings_share_their_runs():
    from aogpt.experiments.adapt import adapt_sweep_runs
    from aogpt.experiments import adapt
    from aogpt.experiments.pipeline import evaluation_jobs, seed_runs
    from aogpt.experiments.sweep import sweep_runs
    p, seeds, chosen = adapt_plan()
    sweep = adapt_sweep_runs(p, chosen)
    assert list(sweep)[:2] == ['adapt-parent-half-s1337', 'adapt-parent-3q-s1337']
    assert len(sweep) == 2 + 3 * len(p['adapt']['grid'])
    assert sweep['adapt-sweep-cheap-lr0.0003']['learning_rate'] == 3e-4
    planned = sweep_runs(p, ['mixed', 'encoder', 'l2r']) | sweep
    runs = seed_runs(p, ['orders', 'adapt'], seeds, chosen, planned, {'adapt': ADAPT_RATES})
    assert runs['adapt-half-staged-s1337'] == 'adapt-sweep-half-staged-lr0.001'
    assert runs['adapt-parent-half-s1337'] == 'adapt-parent-half-s1337'  # trained with the sweep: not planned again
    assert isinstance(runs['adapt-parent-half-s1'], dict) and isinstance(runs['orders-fim-mix-s1'], dict)
    folders = {name: f'runs/{flags if isinstance(flags, str) else name}' for name, flags in runs.items()}
    jobs = evaluation_jobs(['orders', 'adapt'], p, seeds, folders)
    assert len({job.log for job in jobs}) == len(jobs)  # a run of both findings evaluated once
    gen = {job.name.split()[1]: job for job in jobs if job.name.startswith('gen-ppl')}
    gaps = {job.name.split()[1] for job in jobs if job.name.startswith('gaps')}
    assert not any('parent' in name for name in gaps | set(gen))  # the parents are not read
    assert {'adapt-half-staged-s1337', 'adapt-cheap-wikitext2_char-s2', 'adapt-fim-mix-w256-s1'} <= gaps & set(gen)
    assert '--out_dir=runs/adapt-sweep-half-staged-lr0.001' in gen['adapt-half-staged-s1337'].argv
    assert '--scorer=runs/orders-gpt-s1337/ckpt.pt' in gen['adapt-half-staged-w256-s1'].argv  # one scorer a corpus
    assert '--order=l2r' in gen['adapt-gpt-w256-s1'].argv and '--order=l2r' not in gen['adapt-cheap-s1'].argv
    alone = seed_runs(p, ['adapt'], seeds, chosen, planned, {'adapt': ADAPT_RATES})
    folders = {name: f'runs/{flags if isinstance(flags, str) else name}' for name, flags in alone.items()}
    assert len(adapt.evaluations(p, seeds, folders)) == 2 * (2 * 3 * 5 + 2 * 3)  # gaps, samples


def test_dry_run_lists_the_adapt_runs(capsys):
    from aogpt.experiments.pipeline import dry_plan
    p, seeds, _ = adapt_plan()
    dry_plan(p, ['adapt'], seeds, ['mixed', 'l2r'], 8)
    out = capsys.readouterr().out
    assert "finding adapt's GPT parents and its sweep of the adaptations' learning rates, 14 runs" in out
    assert 'then 45 runs with the settings the sweeps choose' in out and '67 training runs in all' in out


def test_a_finished_run_whose_checkpoint_is_gone_trains_again_for_the_job_that_reads_it(tmp_path):
    from aogpt.experiments.jobs import script_job, train_job, with_checkpoints
    from aogpt.experiments.presets import PRESETS
    p = PRESETS['smoke']
    flags = dict(max_iters=30, seed=1)
    for name in ('parent', 'child'):  # both trained, as a committed run folder keeps them: no ckpt.pt
        (tmp_path / name).mkdir()
        (tmp_path / name / 'metrics.jsonl').write_text(json.dumps(dict(iter=30)) + '\n')
    parent = train_job('parent', p, flags, str(tmp_path / 'parent'))
    child = train_job('child', p, flags | dict(init_from='parent'), str(tmp_path / 'child'))
    evaluation = script_job('gaps child', 'eval_ppl.py', {}, str(tmp_path / 'child' / 'gaps.json'),
                                     needs=[str(tmp_path / 'child')])
    assert parent.done and child.done and not evaluation.done
    jobs = with_checkpoints([evaluation], earlier=[parent, child])
    assert [job.name for job in jobs] == ['train parent again (a job reads its checkpoint, which is gone)',
                                          'train child again (a job reads its checkpoint, which is gone)', 'gaps child']
    assert not any(job.done for job in jobs) and '--init_from=resume' not in jobs[1].argv
    (tmp_path / 'child' / 'ckpt.pt').write_bytes(b'')
    assert with_checkpoints([evaluation], earlier=[parent, child]) == [evaluation]


def test_the_adapt_claims_read_each_arms_numbers(tmp_path):
    """Synthetic arms with known numbers: each adaptation's tax, gaps at each span, any-order cost, its rate chosen
    by its sweep, the larger size's tax, on both corpora; the losses over the budget follow each adaptation's parent."""
    from aogpt.experiments.adapt import ADAPTATIONS, ADAPT_ARMS, adapt_point, adapt_run, finding_adapt
    from aogpt.experiments.measure import Measured, evaluations
    from aogpt.experiments.presets import PRESETS
    from aogpt.experiments.registry import RUN_LOSSES
    smoke = PRESETS['smoke']
    p = smoke | dict(orders=smoke['orders'] | dict(second=dict(dataset='prose', arms=('gpt', 'paper', 'fim-mix'))),
                     adapt=smoke['adapt'] | dict(grid=(1e-3, 1e-2)))
    seeds, runs, folders = [1337, 1], tmp_path / 'runs', {}
    # (l2r loss, any-order loss, gap NLL given both sides, from the left only, sample NLL), seed 1 adds 0.02
    arms = {'gpt': (1.6, 4.0, 3.0, 1.5, 1.7), 'fim-mix': (1.95, 2.21, 1.3, 2.0, 3.1),
            'half-staged': (1.7, 2.25, 1.3, 2.0, 3.0), 'half-plain': (1.8, 2.22, 1.4, 2.0, 3.0),
            'cheap': (1.65, 2.4, 1.45, 1.9, 3.2)}
    larger = {'gpt': (1.4, 3.9, 3.0, 1.3, 1.6), 'fim-mix': (1.7, 2.0, 1.2, 1.9, 3.0),
              'half-staged': (1.45, 2.1, 1.2, 1.9, 3.0)}
    for corpus, size, by_arm in (('', '', arms), ('prose', '', arms), ('', 'w64', larger)):
        for i, s in enumerate(seeds):
            for arm, numbers in by_arm.items():
                name = adapt_run(arm, s, corpus, size)
                folders[name] = write_arm(runs, name, *(v + 0.02 * i for v in numbers))
                if arm in ADAPTATIONS:
                    parent = adapt_run('parent-' + ADAPTATIONS[arm][0], s, corpus, size)
                    (runs / name / 'args.json').write_text(json.dumps(dict(init_from=parent)))
                    if not (runs / parent).exists():
                        write_arm(runs, parent, 1.9, 3.5, 3.0, 2.0, 2.0)
    for arm in ADAPTATIONS:  # the sweep: 1e-3 wins for the cheap arm only (0.9 any order + 0.1 l2r)
        for lr, ao in ((1e-3, 2.0 if arm == 'cheap' else 2.4), (1e-2, 2.2)):
            (runs / adapt_point(arm, lr)).mkdir()
            (runs / adapt_point(arm, lr) / 'metrics.jsonl').write_text(
                json.dumps(dict(iter=15, val_ao=ao, val_l2r=2.0)) + '\n')
    m = Measured(folders, str(tmp_path), seeds, unigram=4.2, run_losses=RUN_LOSSES)
    figures, claims = finding_adapt(m, p, str(runs))
    assert figures == ['ours_adapt.png', 'ours_adapt_budget.png', 'ours_adapt_prose.png', 'ours_adapt_budget_prose.png']
    assert all((tmp_path / f).read_bytes().startswith(PNG) for f in figures)
    assert len(claims) == 2 * 3 * (1 + 2 + 1) + 1  # each corpus: each adaptation's tax, gaps at spans 1 and 4, cost
    label = lambda arm: ADAPT_ARMS[arm][0]
    effect = lambda start: next(c['numbers']['effect [95% interval] (n)'].effect for c in claims
                                if c['claim'].startswith(start))
    assert effect(f'(Ours) {label("half-staged")} (adapted at learning rate 0.01,') == pytest.approx(0.1)
    assert effect(f'(Ours) {label("cheap")} (adapted at learning rate 0.001,') == pytest.approx(0.05)
    assert effect(f'(Ours, on prose) {label("half-plain")} (adapted at') == pytest.approx(0.2)
    # the GPT's left side (1.5 + L/100) minus the arm's both sides (1.45 + L/100), at each span
    assert effect(f'(Ours) {label("cheap")} fills gaps of 4 tokens') == pytest.approx(0.05)
    assert effect(f'(Ours, on prose) {label("half-staged")} fills gaps of 1 tokens') == pytest.approx(0.2)
    assert effect(f'(Ours) {label("half-plain")} keeps its any-order loss') == pytest.approx(0.01)
    size = claims[-1]
    assert size['claim'].startswith(f'(Ours) The tax of {label("half-staged")} shrinks with size') and \
        'n_embd=64' in size['claim']
    assert size['numbers']['effect [95% interval] (n)'].effect == pytest.approx(0.05)  # 0.1 at the smoke size, 0.05
    first = claims[0]['numbers']
    assert first[f'{label("cheap")}: learning rate 0.001, final val loss in the mixed objective'] == pytest.approx(2.0)
    # the losses over the budget: the parent's evaluations (iterations 0, 30), then its adaptation's from the parent's
    # last (its first evaluation: the parent's weights)
    assert evaluations(folders['adapt-cheap-s1'], 'val_ao') == pytest.approx(
        {0: 3.5 + 1, 30: 2.42 + 1, 60: 2.42 + 1 / 31})


@pytest.mark.slow
def test_smoke_adapt_end_to_end(smoke):
    """Finding adapt at toy size: the kinds' sweeps, the GPT parents, the adaptations' sweep, their seeds from the
    parents' checkpoints, the larger size, the evaluations, every claim."""
    out, stdout, _, findings = smoke
    adapt = findings['adapt']
    assert adapt['title'].startswith('(Ours)')
    assert len(adapt['claims']) == 3 * (1 + 2 + 1) + 1  # the smoke preset: one corpus, spans 1 and 4 inside the block
    for claim in adapt['claims']:
        interval = claim['numbers']['effect [95% interval] (n)']
        assert claim['verdict'] in VERDICTS and interval['low'] <= interval['effect'] <= interval['high']
    assert all((out / name).read_bytes().startswith(PNG) for name in adapt['figures'])
    runs = out / 'runs'
    args = json.loads((runs / 'adapt-cheap-s1' / 'args.json').read_text())
    assert args['init_from'] == 'adapt-parent-3q-s1' and args['order_stages'].endswith('@4') and args['max_iters'] == 8
    assert json.loads((runs / 'adapt-parent-3q-s1' / 'metrics.jsonl').read_text().splitlines()[-1])['iter'] == 22
    assert 'adapt-half-staged-s1337' not in os.listdir(runs)  # its sweep's run
    assert (runs / 'adapt-sweep-half-staged-lr0.01' / 'gen_orders.json').exists()
    assert (runs / 'adapt-half-staged-w64-s1' / 'gaps.json').exists() and 'started' in stdout


# -----------------------------------------------------------------------------
# finding streams


def test_the_stream_arms_are_the_fim_mix_with_their_target_settings():
    from aogpt.experiments.orders import ORDER_ARMS, order_flags
    from aogpt.experiments.pipeline import seed_runs
    from aogpt.experiments.readings import arm_of
    from aogpt.experiments.streams import STREAM_ARMS, stream_runs
    p, seeds, chosen = adapt_plan()
    runs = stream_runs(p, chosen, seeds)
    fim = order_flags(p, chosen, 'fim-mix', 1)
    assert runs['orders-fim-mix-s1'] == fim and runs['orders-gpt-s1'] == order_flags(p, chosen, 'gpt', 1)
    assert runs['streams-two-s1'] == fim | dict(target_injection='two_stream')
    assert runs['streams-two-half-s1'] == fim | dict(target_injection='two_stream', max_iters=1000, lr_decay_iters=1000)
    assert runs['streams-queries-s1'] == fim | dict(target_injection='queries', position_encoding='rotary')
    assert runs['streams-two-wikitext2_char-s2'] == runs['streams-two-s2'] | dict(dataset='wikitext2_char')
    assert 'orders-fim-mix-wikitext2_char-s2' in runs and 'streams-queries-wikitext2_char-s2' not in runs
    assert len(runs) == 3 * (5 + 3)  # a seed: every arm on the play, the GPT, the FIM mix and two streams on prose
    both = seed_runs(p, ['orders', 'streams'], seeds, chosen, {})
    assert len(both) == len(seed_runs(p, ['orders'], seeds, chosen, {})) + 3 * 4  # finding orders' shared
    tables = {'streams-two-half-s1': STREAM_ARMS, 'streams-two-wikitext2_char-s2': STREAM_ARMS,
              'orders-fim-mix-s1': ORDER_ARMS}
    assert [arm_of(name, arms) for name, arms in tables.items()] == ['two-half', 'two', 'fim-mix']


def test_the_streams_claims_read_each_arms_numbers(tmp_path):
    """Synthetic arms with known numbers: each arm's any-order gain and 4-token gap gain over the single stream, its
    gaps against the GPT's left side, its tax, on both corpora; the numbers carry each arm's ms a sampled
    token."""
    from aogpt.experiments.measure import Measured
    from aogpt.experiments.presets import PRESETS
    from aogpt.experiments.registry import RUN_LOSSES
    from aogpt.experiments.streams import STREAM_ARMS, finding_streams, stream_run
    smoke = PRESETS['smoke']
    p = smoke | dict(orders=smoke['orders'] | dict(second=dict(dataset='prose', arms=('gpt', 'fim-mix'))),
                     streams=dict(second_arms=('gpt', 'fim-mix', 'two')))
    seeds, runs, folders = [1337, 1], tmp_path / 'runs', {}
    # (l2r loss, any-order loss, gap NLL given both sides, from the left only, sample NLL), seed 1 adds 0.02
    arms = {'gpt': (1.6, 4.0, 3.0, 1.5, 1.7), 'fim-mix': (1.95, 2.31, 1.3, 2.0, 3.1),
            'two': (1.8, 2.21, 1.2, 2.0, 3.0), 'two-half': (2.0, 2.35, 1.4, 2.1, 3.2), 'queries': (1.9, 2.3, 1.3, 2.0, 3.0)}
    for corpus, names in (('', arms), ('prose', ('gpt', 'fim-mix', 'two'))):
        for i, s in enumerate(seeds):
            for arm in names:
                name = stream_run(arm, s, corpus)
                folders[name] = write_arm(runs, name, *(v + 0.02 * i + (0.1 if corpus else 0) for v in arms[arm]))
    m = Measured(folders, str(tmp_path), seeds, unigram=4.2, run_losses=RUN_LOSSES)
    figures, claims = finding_streams(m, p)
    assert figures == ['ours_streams.png', 'ours_streams_prose.png']
    assert all((tmp_path / f).read_bytes().startswith(PNG) for f in figures)
    assert len(claims) == 4 * (3 + 1)  # each arm but the GPT and the single stream: any order, 4-token gaps, GPT, tax
    label = lambda arm: STREAM_ARMS[arm][0]
    effect = lambda start: next(c['numbers']['effect [95% interval] (n)'].effect for c in claims
                                if c['claim'].startswith(start))
    assert effect(f'(Ours) {label("two")} ends with a lower any-order loss') == pytest.approx(0.1)
    assert effect(f'(Ours) {label("two-half")} ends with a lower any-order loss') == pytest.approx(-0.04)
    assert effect(f'(Ours) {label("two")} fills gaps of 4 tokens better than the single') == pytest.approx(0.1)
    # the GPT's left side (1.5 + L/100) minus the arm's both sides (1.3 + L/100), over spans 1 and 4
    assert effect(f'(Ours) {label("queries")} fills gaps better than the left-to-right GPT') == pytest.approx(0.2)
    assert effect(f'(Ours) {label("two")} reads left to right within') == pytest.approx(0.2)
    assert effect(f'(Ours, on prose) {label("two")} ends with a lower any-order loss') == pytest.approx(0.1)
    verdicts = {c['claim'][:60]: c['verdict'] for c in claims}
    assert verdicts[f'(Ours) {label("two")} ends with a lower any-order loss'[:60]] == 'holds'
    first = claims[0]['numbers']
    assert first[f'{label("two")}: 4 steps, ms a sampled token (batch 4)']['mean'] == pytest.approx(2.0)  # 64 ms / 32


@pytest.mark.slow
def test_smoke_streams_end_to_end(smoke):
    """Finding streams at toy size: the kinds' sweeps, finding orders' GPT and FIM mix, two streams at the same and
    half the iterations, the target in the queries, their evaluations, every claim."""
    out, _, _, findings = smoke
    streams = findings['streams']
    assert len(streams['claims']) == 3 * 4
    for claim in streams['claims']:
        interval = claim['numbers']['effect [95% interval] (n)']
        assert claim['verdict'] in VERDICTS and interval['low'] <= interval['effect'] <= interval['high']
    runs = out / 'runs'
    assert json.loads((runs / 'streams-two-half-s1' / 'args.json').read_text())['max_iters'] == 15
    assert json.loads((runs / 'streams-queries-s1' / 'args.json').read_text())['target_injection'] == 'queries'
    assert (runs / 'orders-fim-mix-s1' / 'gen_orders.json').exists() and (runs / 'streams-two-s1' / 'gaps.json').exists()


# finding scarce's synthetic arms: (selection reading, val reading) at 4 evaluations of epochs 0 to 3; the best is
# the lowest selection reading, and val is what the claims read there
SCARCE_CURVES = {'gpt': ([3.0, 2.0, 2.5, 2.9], [3.1, 2.1, 2.05, 3.0]),  # its lowest val is not its best
                 'fim-mix': ([3.0, 2.6, 1.9, 2.0], [3.1, 2.7, 1.95, 2.1]),
                 'paper': ([3.0, 2.6, 1.9, 2.0], [3.1, 2.7, 2.05, 2.2]),
                 'encoder': ([3.0, 2.4, 2.2, 2.3], [3.1, 2.5, 2.25, 2.35])}


def write_scarce_arm(runs, name, arm, shift, dataset='shakespeare_char'):
    """A run folder as finding scarce reads it: metrics.jsonl (the readings at every evaluation, the gaps of 1 and 4
    at 1.4 and 1.5 both sides, 0.3 more from the left) and best.json (two chunks' NLLs: left to right 2.0 and 2.2, an ensemble of 4
    0.2 lower)."""
    folder = runs / name
    folder.mkdir(parents=True)
    select, val = SCARCE_CURVES[arm]
    records = [dict(iter=10 * i, epochs=float(i), select_l2r=s + shift, select_ao=s + shift, val_l2r=v + shift,
                    val_ao=v + shift, val_gap_span1=1.4 + shift, val_gap_span1_left=1.7 + shift,
                    val_gap_span4=1.5 + shift, val_gap_span4_left=1.8 + shift)
               for i, (s, v) in enumerate(zip(select, val))]
    (folder / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in records))
    chunk_nll = {'l2r': [2.0 + shift, 2.2 + shift], '1': [1.9 + shift, 2.1 + shift], '4': [1.8 + shift, 2.0 + shift]}
    (folder / 'best.json').write_text(json.dumps(dict(block_size=32, results={dataset: dict(chunk_nll=chunk_nll)})))
    return str(folder)


def test_the_scarce_claims_read_each_run_at_its_best_evaluation(tmp_path):
    """Synthetic arms with known curves: each claim reads each run at its lowest selection reading (not its last, not
    its lowest val), the ensemble against the GPT and the mixture of its seeds has the seed as its unit, and the
    crossover is the first epoch whose best so far is below the GPT's ('never' against itself). A second corpus's prefix (two
    arms, the FIM mix 0.1 lower) gets its own figure and claims, named after it."""
    from aogpt.experiments.measure import Measured
    from aogpt.experiments.presets import PRESETS
    from aogpt.experiments.scarce import SCARCE_ARMS, crossover, finding_scarce, scarce_run
    second = ('wikitext2_char', 2000, ('gpt', 'fim-mix'))
    p = PRESETS['smoke'] | dict(scarce=PRESETS['smoke']['scarce'] | dict(
        prefixes=PRESETS['smoke']['scarce']['prefixes'] + (second,)))
    seeds, runs, folders = [1337, 1], tmp_path / 'runs', {}
    for i, s in enumerate(seeds):
        for arm in SCARCE_ARMS:
            name = scarce_run(arm, 2000, s)
            folders[name] = write_scarce_arm(runs, name, arm, 0.02 * i)
        for arm in second[2]:
            name = scarce_run(arm, 2000, s, second[0])
            folders[name] = write_scarce_arm(runs, name, arm, 0.02 * i - 0.1 * (arm == 'fim-mix'), second[0])
    m = Measured(folders, str(tmp_path), seeds, unigram=4.2)
    figures, claims = finding_scarce(m, p)
    assert figures == ['ours_scarce_2k.png', 'ours_scarce_2k_wikitext2_char.png']
    assert all((tmp_path / f).read_bytes().startswith(PNG) for f in figures)
    on_second = [c for c in claims if c['claim'].startswith('(Ours, on wikitext2_char) ')]
    # the FIM mix's five: left to right, the ensemble against the GPT and the mixture, the gaps of 4, the epoch
    assert len(on_second) == 5 and on_second[0]['numbers']['effect [95% interval] (n)'].effect == \
        pytest.approx(2.1 - 1.85)
    claims = claims[:len(claims) - len(on_second)]
    effect = lambda start, arm='fim-mix': next(c['numbers']['effect [95% interval] (n)'].effect for c in claims
                                               if c['claim'].startswith(start.format(arm=SCARCE_ARMS[arm][0])))
    assert effect('(Ours) On 2,000 characters repeated for 30 iterations (3 epochs), {arm} reads') == \
        pytest.approx(2.1 - 1.95)
    assert effect('(Ours) On 2,000 characters repeated for 30 iterations (3 epochs), {arm} reads', 'paper') == \
        pytest.approx(2.1 - 2.05)
    assert effect('(Ours) On 2,000 characters, {arm} with an ensemble of 4 context orders reads better than the '
                  'tuned GPT') == pytest.approx(0.2)
    # the mixture of two GPTs whose chunks read 0.02 apart: -log of the mean of their probabilities, per character
    mixture = [-(math.log((math.exp(-32 * g) + math.exp(-32 * (g + 0.02))) / 2)) / 32 for g in (2.0, 2.2)]
    expected = sum(m_ - (a + 0.01) for m_, a in zip(mixture, (1.8, 2.0))) / 2
    assert effect("(Ours) On 2,000 characters, {arm} with an ensemble of 4 context orders reads better than the "
                  'mixture') == pytest.approx(expected)
    ensembles = [c['numbers']['effect [95% interval] (n)'].n for c in claims if 'context orders' in c['claim']]
    assert ensembles[:2] == ['2 vs 2 runs', '1 vs 2 runs']  # seeds, not chunks: the mixture is one model
    cost = next(c['numbers'] for c in claims if 'mixture' in c['claim'])
    assert cost["slots read per chunk of 32: the ensemble of 4 / the mixture of the GPT's 2 seeds"] == \
        f'{33 + 3 * sum(range(2, 33)):,} / 66'
    assert effect('(Ours) On 2,000 characters, {arm} fills gaps of 4') == pytest.approx(0.3)
    assert effect('(Ours) On 2,000 characters, {arm} reaches its best evaluation later') == pytest.approx(1.0)
    assert effect('(Ours) On 2,000 characters, the encoder MDM') == pytest.approx(1.95 - 2.25)
    numbers = claims[0]['numbers']
    assert numbers[f"{SCARCE_ARMS['fim-mix'][0]}: epochs after which its best so far reads left to right below the "
                   "GPT's"] == 2.0
    assert crossover(m, {'gpt': [scarce_run('gpt', 2000, s) for s in seeds]}, 'gpt') == 'never'
    assert numbers[f"{SCARCE_ARMS['gpt'][0]}: at its best evaluation, epoch"]['mean'] == 1.0
    gaps = {k: v['mean'] for k, v in numbers.items() if 'gaps of 1,' in k}
    assert gaps == pytest.approx({f"{SCARCE_ARMS['gpt'][0]}: at its best evaluation, gaps of 1, left side": 1.71,
                                  f"{SCARCE_ARMS['fim-mix'][0]}: at its best evaluation, gaps of 1, both sides": 1.41,
                                  f"{SCARCE_ARMS['fim-mix'][0]}: at its best evaluation, gaps of 1, left side": 1.71,
                                  f"{SCARCE_ARMS['paper'][0]}: at its best evaluation, gaps of 1, both sides": 1.41,
                                  f"{SCARCE_ARMS['paper'][0]}: at its best evaluation, gaps of 1, left side": 1.71,
                                  f"{SCARCE_ARMS['encoder'][0]}: at its best evaluation, gaps of 1, both sides": 1.41})


@pytest.mark.slow
def test_finding_fim_sweeps_steps_past_the_edge_and_reports_fresh_seeds(workdir, tmp_path, one_thread):
    """The smoke preset's finding fim: its grid (one learning rate, dropout 0) puts the winner on the dropout's upper
    edge, so a run one step past it (0.1) trains too; the reported seeds are fresh runs at the winner, none of them
    the sweep's seed; every claim has its interval. The second regime hides single lines too, and stops early: each
    run keeps best.pt at its arm's own objective on val's first half, the sweep chooses there at each run's best, and
    the evaluations read best.pt."""
    from aogpt.experiments.fim import SWEEP_SEED
    from aogpt.experiments.presets import PRESETS
    out = tmp_path / 'fim'
    run_script('findings.py', '--preset=smoke', f'--out_dir={out}', '--only=fim', cwd=workdir)
    objective = {'ao-fim-mix': {'l2r': 0.1, 'ao': 0.9}}
    for arm in PRESETS['smoke']['fim']['arms']:
        weights = objective.get(arm, {'l2r': 1.0})
        records = lambda regime, dropout: [json.loads(line) for line in (
            out / 'runs' / f'fim-sweep-{arm}-{regime}-lr0.01-d{dropout:g}' / 'metrics.jsonl').read_text().splitlines()]
        final = lambda dropout: sum(w * records('play', dropout)[-1][f'val_{k}'] for k, w in weights.items())
        best = lambda dropout: min(sum(w * r[f'select_{k}'] for k, w in weights.items())
                                   for r in records('lines', dropout))
        for seed in (1337, 1):
            args = json.loads((out / 'runs' / f'fim-{arm}-play-s{seed}' / 'args.json').read_text())
            assert args['seed'] == seed != SWEEP_SEED and args['eval_gaps'] == '' and 'keep_best' not in args
            assert args['dropout'] == min((0.0, 0.1), key=final)
            args = json.loads((out / 'runs' / f'fim-{arm}-lines-s{seed}' / 'args.json').read_text())
            assert args['keep_best'] == {'ao-fim-mix': 'l2r:0.1,ao:0.9'}.get(arm, 'l2r')
            assert args['dropout'] == min((0.0, 0.1), key=best)
            assert 'best.pt' in (out / 'runs' / f'fim-{arm}-lines-s{seed}' / 'fim_line.log').read_text()
    finding = next(f for f in json.loads((out / 'results.json').read_text())['findings'] if f['finding'] == 'fim')
    # the sweep; then per regime FIM for free and per AO-GPT arm the gaps given (span, range, line), the gaps unknown
    # (range, line), 3 fills of each, the tax; then per FIM GPT and AO-GPT arm the gaps given against the GPT's left side
    assert len(finding['claims']) == 1 + (1 + (2 + 1 + 3 + 1) + 2 * 2) + (1 + (3 + 2 + 6 + 1) + 2 * 3)
    assert sum('single lines of up to 10 characters' in c['claim'] for c in finding['claims']) == (1 + 1 + 3) + 2
    for c in finding['claims'][1:]:
        interval = c['numbers']['effect [95% interval] (n)']
        assert interval['low'] <= interval['effect'] <= interval['high'] and interval['n'] == '2 vs 2 runs'
    assert (out / 'ours_fim_play.png').read_bytes().startswith(PNG)
    assert (out / 'ours_fim_lines.png').read_bytes().startswith(PNG)


def test_a_ladder_sweep_steps_past_its_grids_edge_and_chooses_over_both():
    """sweep.Ladders: the grid is each ladder's inner values crossed; the grid's winner gets the step past each edge
    it sits on (none where the ladder has no rung there, none for an inner value), once every grid point has run; the
    winner is the lowest over the grid and the steps that have run."""
    from aogpt.experiments.sweep import Ladders
    sweep = Ladders(dict(learning_rate=(1e-3, 3e-3, 1e-2, 3e-2), dropout=(None, 0.0, 0.1, 0.2, 0.3)))
    assert [(pt['learning_rate'], pt['dropout']) for pt in sweep.grid()] == \
        [(3e-3, 0.0), (3e-3, 0.1), (3e-3, 0.2), (1e-2, 0.0), (1e-2, 0.1), (1e-2, 0.2)]
    losses = {(3e-3, 0.0): 1.0, (3e-3, 0.1): 1.2, (3e-3, 0.2): 1.4, (1e-2, 0.0): 1.1, (1e-2, 0.1): 1.3, (1e-2, 0.2): 1.5}
    loss_of = lambda pt: losses.get((pt['learning_rate'], pt['dropout']))
    assert sweep.steps(lambda pt: None if pt['dropout'] == 0.2 else loss_of(pt)) == []
    assert sweep.steps(loss_of) == [dict(learning_rate=1e-3, dropout=0.0)]  # no dropout below 0
    assert sweep.winner(loss_of) == dict(learning_rate=3e-3, dropout=0.0)  # its step has not run
    losses[1e-3, 0.0] = 0.9
    assert sweep.winner(loss_of) == dict(learning_rate=1e-3, dropout=0.0)
    losses[1e-2, 0.1] = 0.5  # the learning rate on its upper edge, dropout inside: one step
    assert sweep.steps(loss_of) == [dict(learning_rate=3e-2, dropout=0.1)]
    assert sweep.winner(loss_of) == dict(learning_rate=1e-2, dropout=0.1)


def test_finding_scarce_sweeps_the_learning_rate_with_the_regularizers_on_a_seed_of_its_own(tmp_path):
    """Finding scarce's sweep (the cpu preset): each swept arm's learning rate, dropout and weight decay crossed on
    SWEEP_SEED (min_lr a tenth), whatever rate its kind chose; the grid's winner on edges gets the steps past them,
    the winner over both is what every reported seed trains fresh, and the paper's mix takes the FIM mix's."""
    import itertools
    from aogpt.experiments.presets import PRESETS, SWEEP_SEED
    from aogpt.experiments.scarce import choose_points, edge_runs, scarce_runs, sweep_run, sweep_runs
    p = PRESETS['cpu']
    chosen = {kind: (dict(learning_rate=lr, gate_init=1.0, position_encoding='rotary'),)
              for kind, lr in (('l2r', 1e-2), ('mixed', 3e-3), ('encoder', 3e-3))}
    grid = sweep_runs(p, chosen)
    assert all(f['seed'] == SWEEP_SEED and f['min_lr'] == f['learning_rate'] / 10 and f['train_tokens'] == 50_000
               for f in grid.values())
    for arm in ('gpt', 'fim-mix', 'encoder'):
        points = {(f['learning_rate'], f['dropout'], f['weight_decay']) for name, f in grid.items()
                  if name.startswith(f'scarce-sweep-{arm}-lr')}
        assert points == set(itertools.product((3e-3, 1e-2), (0.1, 0.3), (0.05, 0.5)))
    assert len(grid) == 24

    def record(name, reading):  # one evaluation: the selection readings, the arm's own read by its best
        os.makedirs(tmp_path / name, exist_ok=True)
        (tmp_path / name / 'metrics.jsonl').write_text(json.dumps(dict(iter=4000, select_l2r=reading,
                                                                         select_ao=reading)) + '\n')
    point = lambda lr, d, wd: dict(learning_rate=lr, dropout=d, weight_decay=wd)
    for arm in ('gpt', 'fim-mix', 'encoder'):
        for lr, d, wd in itertools.product((3e-3, 1e-2), (0.1, 0.3), (0.05, 0.5)):
            record(sweep_run(arm, point(lr, d, wd)), 2.0 + (lr == 3e-3) + (d == 0.3) + (wd == 0.05) / 2)
    steps = edge_runs(p, chosen, str(tmp_path))
    assert {n for n in steps if n.startswith('scarce-sweep-gpt-')} == {
        sweep_run('gpt', pt) for pt in (point(3e-2, 0.1, 0.5), point(1e-2, 0.0, 0.5), point(1e-2, 0.1, 1.0))}
    assert steps[sweep_run('gpt', point(3e-2, 0.1, 0.5))]['min_lr'] == 3e-3
    record(sweep_run('gpt', point(1e-2, 0.1, 1.0)), 1.5)
    choice = choose_points(p, chosen, str(tmp_path))
    assert choice['gpt'] == point(1e-2, 0.1, 1.0) and choice['fim-mix'] == point(1e-2, 0.1, 0.5)
    runs = scarce_runs(p, chosen, (1337, 1, 2), choice)
    gpt = runs['scarce-gpt-50k-s1337']
    assert (gpt['seed'], gpt['learning_rate'], gpt['dropout'], gpt['weight_decay']) == (1337, 1e-2, 0.1, 1.0)
    assert runs['scarce-paper-50k-s2']['weight_decay'] == runs['scarce-fim-mix-50k-s2']['weight_decay'] == 0.5
    assert not set(runs) & set(grid)


def test_a_call_with_only_keeps_the_other_findings_of_the_folder(tmp_path):
    """--only=fim rewrites fim's section: an earlier call's other findings at the same preset are kept, the sweep's
    section is drawn again, and another preset's results are not mixed in."""
    from aogpt.experiments.pipeline import earlier_findings
    entries = [dict(finding=name, title=name, figures=[], claims=[]) for name in ('sweep', 'plateau', 'fim', 'scarce')]
    (tmp_path / 'results.json').write_text(json.dumps(dict(title='t', settings=dict(preset='cpu'), findings=entries)))
    assert [f['finding'] for f in earlier_findings(str(tmp_path), 'cpu', ['fim'])] == ['plateau', 'scarce']
    assert earlier_findings(str(tmp_path), 'smoke', ['fim']) == []
    assert earlier_findings(str(tmp_path / 'new'), 'cpu', ['fim']) == []
