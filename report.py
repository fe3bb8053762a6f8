"""
Measured numbers into figures and results files: one PNG per figure (matplotlib, an optional
dependency imported only here, when a figure is drawn), results.md and results.json.

A series is a label and, for each x, the values measured over seeds: the figures draw their mean as a
line and, with two or more seeds, their range (min to max) as a band; the tables write the mean and range.
"""
import json
import math
import os

from configurator import fail


def load_matplotlib():
    """matplotlib's Figure class, drawing off screen; one line when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        fail('matplotlib is needed for the figures: pip install matplotlib')
    matplotlib.use('Agg')
    from matplotlib.figure import Figure
    return Figure


def spread(values):
    """Mean, min, max and count of the values over seeds."""
    return dict(mean=sum(values) / len(values), min=min(values), max=max(values), n=len(values))


def line_figure(path, title, xlabel, ylabel, series, hlines=(), logx=False, logy=False):
    """Write a PNG of lines with their seed bands; return the figure.

    series: [(label, xs, values)] with values[i] the list over seeds at xs[i];
    hlines: [(label, values)] drawn as horizontal lines at the mean, with a band over values' range.
    """
    fig = load_matplotlib()(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    for label, xs, values in series:
        stats = [spread(v) for v in values]
        line, = ax.plot(xs, [s['mean'] for s in stats], marker='.' if len(xs) < 20 else None, label=label)
        if max(s['n'] for s in stats) > 1:
            ax.fill_between(xs, [s['min'] for s in stats], [s['max'] for s in stats], color=line.get_color(),
                            alpha=0.2, linewidth=0)
    for i, (label, values) in enumerate(hlines):
        s = spread(values)
        color = f'C{len(series) + i}'
        ax.axhline(s['mean'], color=color, linestyle='--', label=label)
        if s['max'] > s['min']:
            ax.axhspan(s['min'], s['max'], color=color, alpha=0.15, linewidth=0)
    if logx:
        ax.set_xscale('log', base=2)
    if logy:
        ax.set_yscale('log')
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize='small')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return fig


def number(value):
    """A measured number for the table: a spread as 'mean (min to max, n seeds)', a float to 4 digits."""
    if isinstance(value, dict) and 'mean' in value:
        if value['n'] == 1:
            return number(value['mean'])
        return f"{number(value['mean'])} ({number(value['min'])} to {number(value['max'])}, {value['n']} seeds)"
    if isinstance(value, float):
        return f'{value:.4g}' if math.isfinite(value) else str(value)
    return str(value)


def write_results(out_dir, title, settings, findings):
    """results.json (settings and findings as they are) and results.md (a section per finding) in out_dir.

    settings: {name: value} of the whole set; findings: [{'finding', 'title', 'figures', 'claims':
    [{'claim', 'numbers': {name: value}, 'rule', 'verdict'}]}]; a value is a number, a spread() or text."""
    with open(os.path.join(out_dir, 'results.json'), 'w') as f:
        json.dump(dict(title=title, settings=settings, findings=findings), f, indent=2)
    lines = [f'# {title}', '', '; '.join(f'{k}: {number(v)}' for k, v in settings.items()), '',
             '| finding | claim | verdict |', '|---|---|---|']
    lines += [f"| {f['finding']} | {c['claim']} | **{c['verdict']}** |" for f in findings for c in f['claims']]
    for f in findings:
        lines += ['', f"## {f['finding']}. {f['title']}", '']
        for c in f['claims']:
            lines += [f"Claim: {c['claim']}", '', '| measured | value |', '|---|---|']
            lines += [f'| {name} | {number(value)} |' for name, value in c['numbers'].items()]
            lines += ['', f"Verdict: **{c['verdict']}** (rule: {c['rule']})", '']
        lines += [f'![{name}]({name})' for name in f['figures']]
    with open(os.path.join(out_dir, 'results.md'), 'w') as f:
        f.write('\n'.join(lines) + '\n')
