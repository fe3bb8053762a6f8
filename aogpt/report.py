"""
Measured numbers into figures and results files: one PNG per figure (matplotlib, an optional
dependency imported only here, when a figure is drawn), results.md and results.json.

A series is a label and, for each x, the values measured over seeds: the figures draw their mean as a
line and, with two or more seeds, their range (min to max) as a band; the tables write the mean and range.

A claim's effect comes with a 95% interval: a stratified bootstrap over paired differences (chunks or
samples, within each seed), Welch's t over per-run numbers, or Student's t over the repeats of a timing;
verdict() reads the interval by one rule (RULE).
"""
import dataclasses
import json
import math
import os

import numpy as np

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
    many = len(series) + len(hlines) > 6  # then the legend goes beside the axes, and no two lines share a colour
    fig = load_matplotlib()(figsize=(10 if many else 6.4, 4.2))
    ax = fig.add_subplot()
    import matplotlib  # load_matplotlib found it
    palette = matplotlib.colormaps['tab20' if many else 'tab10'].colors
    colors = [palette[i % len(palette)] for i in range(len(series) + len(hlines))]
    for (label, xs, values), color in zip(series, colors):
        stats = [spread(v) for v in values]
        line, = ax.plot(xs, [s['mean'] for s in stats], marker='.' if len(xs) < 20 else None, label=label, color=color)
        if max(s['n'] for s in stats) > 1:
            ax.fill_between(xs, [s['min'] for s in stats], [s['max'] for s in stats], color=line.get_color(),
                            alpha=0.2, linewidth=0)
    for (label, values), color in zip(hlines, colors[len(series):]):
        s = spread(values)
        ax.axhline(s['mean'], color=color, linestyle='--', label=label)
        if s['max'] > s['min']:
            ax.axhspan(s['min'], s['max'], color=color, alpha=0.15, linewidth=0)
    if logx:  # ticks at the values plotted, written plainly: learning rates read 0.003 and 0.01, not 2^-8 and 2^-7
        ax.set_xscale('log')
        ticks = sorted({x for _, xs, _ in series for x in xs})
        ax.set_xticks(ticks, [f'{x:g}' for x in ticks])
        ax.set_xticks([], minor=True)
    if logy:
        ax.set_yscale('log')
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.set_title(title, fontsize='medium')
    ax.grid(alpha=0.3)
    ax.legend(fontsize='small', **(dict(loc='upper left', bbox_to_anchor=(1.02, 1)) if many else {}))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return fig


def point_figure(path, title, xlabel, ylabel, points):
    """Write a PNG of one point per entry at the mean over seeds, with the 95% interval of each mean (Student's t
    over the seeds) as error bars; points: [(label, xs over seeds, ys over seeds)]."""
    fig = load_matplotlib()(figsize=(8, 6))
    ax = fig.add_subplot()
    for label, xs, ys in points:
        x, y = mean_interval(xs, 'seeds'), mean_interval(ys, 'seeds')
        ax.errorbar([x.effect], [y.effect], xerr=[[x.effect - x.low], [x.high - x.effect]],
                    yerr=[[y.effect - y.low], [y.high - y.effect]], fmt='o', capsize=3, label=label)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.set_title(title, fontsize='medium')
    ax.grid(alpha=0.3)
    wide = max(len(label) for label, _, _ in points) > 45  # then one label a row, or the two columns overflow
    ax.legend(fontsize='small', loc='upper center', bbox_to_anchor=(0.5, -0.12), ncol=1 if wide else 2)  # below the axes
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches='tight')  # the legend below the axes is kept whole
    return fig


def number(value):
    """A measured number for the table: an Interval as 'effect [low, high] (n)', a spread as
    'mean (min to max, n seeds)', a float to 4 digits."""
    if isinstance(value, Interval):
        return f'{number(value.effect)} [{number(value.low)}, {number(value.high)}] ({value.n})'
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
    [{'claim', 'numbers': {name: value}, 'verdict'}]}]; a value is a number, a spread(), an Interval
    (a dict in results.json) or text. The rule of the verdicts is stated once, in the settings."""
    with open(os.path.join(out_dir, 'results.json'), 'w') as f:
        json.dump(dict(title=title, settings=settings, findings=findings), f, indent=2, default=dataclasses.asdict)
    lines = [f'# {title}', '', *(f'- {k}: {number(v)}' for k, v in settings.items()), '',
             '| finding | claim | verdict |', '|---|---|---|']
    lines += [f"| {f['finding']} | {c['claim']} | **{c['verdict']}** |" for f in findings for c in f['claims']]
    for f in findings:
        lines += ['', f"## {f['finding']}. {f['title']}", '']
        for c in f['claims']:
            lines += [f"Claim: {c['claim']}", '', '| measured | value |', '|---|---|']
            lines += [f'| {name} | {number(value)} |' for name, value in c['numbers'].items()]
            lines += ['', f"Verdict: **{c['verdict']}**", '']
        lines += [f'![{name}]({name})' for name in f['figures']]
    with open(os.path.join(out_dir, 'results.md'), 'w') as f:
        f.write('\n'.join(lines) + '\n')


# -----------------------------------------------------------------------------
# verdicts: a 95% interval for each claim's effect, read by one rule

VERDICTS = ('holds', 'does not hold', 'below the practical floor', 'not resolvable at this size')
RULE = ('a claim holds when the 95% interval of its effect lies above zero and the effect reaches the practical '
        'floor, is below the practical floor when the interval lies above zero but the effect falls short of it, '
        'does not hold when the interval lies below zero, and is not resolvable at this size when it contains zero')


@dataclasses.dataclass
class Interval:
    """An effect in the claim's direction and its 95% interval; n says what was counted, method how."""
    effect: float
    low: float
    high: float
    n: str
    method: str
    per_seed: list = dataclasses.field(default_factory=list)  # (mean, low, high) of each seed, paired only


def verdict(interval, floor):
    """One of VERDICTS for the interval, by RULE; floor: the smallest effect that matters in practice."""
    if interval.low > 0:
        return 'holds' if interval.effect >= floor else 'below the practical floor'
    if interval.high < 0:
        return 'does not hold'
    return 'not resolvable at this size'


def paired_interval(differences, seed=0, n_boot=2000):
    """Interval of the mean paired difference; differences[s]: seed s's per-unit (chunk or sample) differences.

    The effect is the mean over seeds of each seed's mean. The bootstrap resamples units within each seed
    (stratified: seeds stay equally weighted, as in the effect) and takes the 2.5 and 97.5 percentiles."""
    rng = np.random.default_rng(seed)
    means, boots = [], []
    for d in map(np.asarray, differences):
        means.append(d.mean())
        boots.append(d[rng.integers(0, len(d), size=(n_boot, len(d)))].mean(axis=1))
    per_seed = [(float(m), *percentile_95(b)) for m, b in zip(means, boots)]
    sizes = [len(d) for d in differences]
    units = str(sizes[0]) if len(set(sizes)) == 1 else '/'.join(map(str, sizes))
    seeds = f"{len(differences)} seed{'s' if len(differences) > 1 else ''}"
    return Interval(float(np.mean(means)), *percentile_95(np.mean(boots, axis=0)), n=f'{seeds} x {units} units',
                    method=f'stratified bootstrap over units within each seed, {n_boot} draws, percentile 95%',
                    per_seed=per_seed)


def percentile_95(draws):
    low, high = np.percentile(draws, [2.5, 97.5])
    return float(low), float(high)


def unpaired_interval(a, b):
    """Interval of mean(a) - mean(b) over runs, by Welch's t (a bootstrap of 3 runs is far too narrow).

    A side with a single run has no variance of its own: it takes the other side's (the t then has that
    side's n - 1 degrees of freedom)."""
    if len(a) < 2 and len(b) < 2:
        raise ValueError(f'unpaired_interval needs at least 2 runs on one side, got {len(a)} vs {len(b)}')
    var_a = np.var(a, ddof=1) if len(a) > 1 else np.var(b, ddof=1)
    var_b = np.var(b, ddof=1) if len(b) > 1 else var_a
    se2_a, se2_b = float(var_a / len(a)), float(var_b / len(b))
    effect, n = float(np.mean(a) - np.mean(b)), f'{len(a)} vs {len(b)} runs'
    if se2_a + se2_b == 0:  # Welch's df would be 0/0
        return Interval(effect, effect, effect, n=n, method='every run on each side equal: no spread')
    if len(a) > 1 and len(b) > 1:
        df = (se2_a + se2_b) ** 2 / (se2_a ** 2 / (len(a) - 1) + se2_b ** 2 / (len(b) - 1))  # Welch-Satterthwaite
        method = f"Welch's t, df {df:.3g}"
    else:
        df = max(len(a), len(b)) - 1
        method = f"t with one side's variance for both (one run on the other), df {df}"
    half = t_quantile(0.975, df) * math.sqrt(se2_a + se2_b)
    return Interval(effect, effect - half, effect + half, n=n, method=method)


def mean_interval(values, unit):
    """Interval of the mean of values (repeats of one measurement, unit: what they are) by Student's t,
    n - 1 degrees of freedom."""
    if len(values) < 2:
        raise ValueError(f'mean_interval needs at least 2 {unit}, got {len(values)}')
    effect, df = float(np.mean(values)), len(values) - 1
    half = t_quantile(0.975, df) * float(np.std(values, ddof=1)) / math.sqrt(len(values))
    return Interval(effect, effect - half, effect + half, n=f'{len(values)} {unit}', method=f"Student's t, df {df}")


def t_quantile(p, df):
    """Student's t quantile, p > 0.5: bisection on the two-sided tail 2(1 - p) = I_x(df/2, 1/2),
    x = df / (df + t^2), which falls as t grows (within 1e-8 of scipy's for df 1 to 10^7)."""
    lo, hi = 0.0, 1.0  # x: t = inf at 0, t = 0 at 1
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if regularized_beta(df / 2, 0.5, mid) < 2 * (1 - p) else (lo, mid)
    x = (lo + hi) / 2
    return math.sqrt(df * (1 - x) / x)


def regularized_beta(a, b, x):
    """I_x(a, b), by its continued fraction (Numerical Recipes 6.4), on the side of x where it converges fast."""
    if x <= 0 or x >= 1:
        return float(x >= 1)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * beta_fraction(a, b, x) / a
    return 1 - front * beta_fraction(b, a, 1 - x) / b


def beta_fraction(a, b, x):
    """The continued fraction of I_x(a, b), by the modified Lentz method."""
    nonzero = lambda v: v if abs(v) > 1e-300 else 1e-300  # a zero denominator would stop the recurrence
    c, d = 1.0, 1 / nonzero(1 - (a + b) * x / (a + 1))
    result = d
    for m in range(1, 10000):
        for coef in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),  # the even and odd terms of step m
                     -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d, c = 1 / nonzero(1 + coef * d), nonzero(1 + coef / c)
            result *= c * d
        if abs(c * d - 1) < 1e-15:
            return result
    raise ArithmeticError(f'incomplete beta did not converge for a={a}, b={b}, x={x}')
