"""findings.py: the smoke preset end to end (every figure, every finding's verdict), resuming instead of
training again, --only, the one-line errors; report.py's figures on synthetic curves."""
import json
import os
import sys

import pytest

from conftest import one_line_error, run_script, says

FIGURES = ['fig1_l2r_vs_random.png', 'fig2a_fixed_orders.png', 'fig2b_mixed_vs_nocl.png',
           'fig3_ensembles_vs_encoder.png', 'fig4_generation_time.png', 'fig7_sample_quality.png', 'fig8_adaln_ema.png']
VERDICTS = {'holds', 'does not hold', 'not resolvable at this size'}
PNG = b'\x89PNG\r\n\x1a\n'


def metrics_files(out):
    runs = out / 'runs'
    return {name: (runs / name / 'metrics.jsonl').read_text() for name in sorted(os.listdir(runs))
            if (runs / name / 'metrics.jsonl').exists()}


@pytest.fixture(scope='module')
def smoke(workdir, tmp_path_factory, one_thread):
    """The smoke preset run once, on the tests' synthetic play: (its out_dir, its stdout)."""
    out = tmp_path_factory.mktemp('findings') / 'smoke'
    result = run_script('findings.py', '--preset=smoke', f'--out_dir={out}', cwd=workdir)
    return out, result.stdout


def test_smoke_writes_every_figure_and_verdict(smoke):
    out, stdout = smoke
    for name in FIGURES:
        assert (out / name).read_bytes().startswith(PNG), name
    results = json.loads((out / 'results.json').read_text())
    assert [f['finding'] for f in results['findings']] == ['1', '2', '3', '4', '6', '8']
    md = (out / 'results.md').read_text()
    for finding in results['findings']:
        assert f"## {finding['finding']}. {finding['title']}" in md
        assert finding['claims'] and {c['verdict'] for c in finding['claims']} <= VERDICTS
        for claim in finding['claims']:
            assert f"| {finding['finding']} | {claim['claim']} | **{claim['verdict']}** |" in md
        for name in finding['figures']:
            assert f'![{name}]({name})' in md
    assert results['settings']['preset'] == 'smoke'
    assert 'started' in stdout


def test_a_second_call_trains_nothing_and_only_selects(smoke, workdir):
    out, _ = smoke
    before = metrics_files(out)
    result = run_script('findings.py', '--preset=smoke', f'--out_dir={out}', '--only=1,7', cwd=workdir)
    assert 'started' not in result.stdout and 'train l2r: done, skipped' in result.stdout
    assert 'train mixed-s1337: done, skipped' in result.stdout  # finding 6's sampler (7 names 6)
    assert 'train sigma-s1337' not in result.stdout  # finding 8's runs are not needed
    assert metrics_files(out) == before
    results = json.loads((out / 'results.json').read_text())
    assert [f['finding'] for f in results['findings']] == ['1', '6']


def test_an_interrupted_run_resumes(smoke, workdir, tmp_path):
    out, _ = smoke
    copy = tmp_path / 'copy'
    os.makedirs(copy / 'runs' / 'l2r')
    for name in ('ckpt.pt', 'args.json'):
        (copy / 'runs' / 'l2r' / name).write_bytes((out / 'runs' / 'l2r' / name).read_bytes())
    lines = (out / 'runs' / 'l2r' / 'metrics.jsonl').read_text().splitlines(keepends=True)
    (copy / 'runs' / 'l2r' / 'metrics.jsonl').write_text(''.join(lines[:-1]))  # stopped before max_iters
    args = json.loads((copy / 'runs' / 'l2r' / 'args.json').read_text())
    (copy / 'runs' / 'l2r' / 'args.json').write_text(json.dumps([a.replace(str(out), str(copy)) for a in args]))
    plan = run_script('findings.py', '--preset=smoke', f'--out_dir={copy}', '--only=2', '--dry_run', cwd=workdir).stdout
    l2r = next(line for line in plan.splitlines() if line.startswith('train l2r'))
    assert '(resume) [to run]' in l2r and l2r.endswith('--init_from=resume')
    assert [line.split(' [')[0] for line in plan.splitlines() if line.startswith('train')] == \
        ['train l2r (resume)', 'train fixed1', 'train fixed2', 'train block']


def test_bad_settings_stop_with_one_line(smoke, workdir):
    out, _ = smoke
    says(one_line_error('findings.py', '--only=9', cwd=workdir), '--only', '9', '1, 2, 3, 4, 6, 8')
    says(one_line_error('findings.py', '--preset=tiny', cwd=workdir), '--preset', 'cpu, gpu, smoke')
    says(one_line_error('findings.py', '--seeds=9', cwd=workdir), '--seeds', '9')
    says(one_line_error('findings.py', '--preset=cpu', f'--out_dir={out}', cwd=workdir), 'other settings',
         'args.json')


def test_figures_need_matplotlib(monkeypatch):
    from report import load_matplotlib
    monkeypatch.setitem(sys.modules, 'matplotlib', None)  # import matplotlib now raises ImportError
    with pytest.raises(SystemExit) as stop:
        load_matplotlib()
    assert str(stop.value.code) == 'error: matplotlib is needed for the figures: pip install matplotlib'


def test_line_figure_draws_the_curves_bands_and_lines(tmp_path):
    from report import line_figure
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
