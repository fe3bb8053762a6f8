"""aogpt/report.py's statistics for the verdicts: t quantiles, the paired bootstrap, Welch and one-sample t intervals
(their verdicts on synthetic effects and their coverage), the rule, and Intervals in results.md and results.json."""
import json
import math

import numpy as np
import pytest

from aogpt.report import (RULE, VERDICTS, Interval, mean_interval, number, paired_interval, t_quantile,
                          unpaired_interval, verdict, write_results)


@pytest.mark.parametrize('df, t', [(1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (30, 2.0423),
                                   (1000, 1.9623), (10**6, 1.9600)])
def test_t_quantiles_match_the_tables(df, t):
    assert t_quantile(0.975, df) == pytest.approx(t, abs=1e-4)


def paired_draw(rng, mean, sd, seeds=3, units=100):
    return [rng.normal(mean, sd, units).tolist() for _ in range(seeds)]


@pytest.mark.parametrize('mean, sd, expected', [(0.1, 0.3, 'holds'), (0.0, 0.3, 'not resolvable at this size'),
                                                (-0.1, 0.3, 'does not hold'), (0.003, 0.001, 'below the practical floor')])
def test_paired_verdicts_on_known_effects(mean, sd, expected):
    interval = paired_interval(paired_draw(np.random.default_rng(0), mean, sd))
    assert interval.low < interval.effect < interval.high
    assert interval.effect == pytest.approx(mean, abs=3 * sd / math.sqrt(300))
    assert verdict(interval, floor=0.01) == expected
    assert interval.n == '3 seeds x 100 units' and len(interval.per_seed) == 3
    for seed_mean, low, high in interval.per_seed:  # a seed alone has 100 units: its interval is wider
        assert low < seed_mean < high and high - low > interval.high - interval.low


def test_paired_interval_is_seeded():
    differences = paired_draw(np.random.default_rng(1), 0.1, 0.3)
    assert paired_interval(differences, seed=5) == paired_interval(differences, seed=5)
    assert paired_interval(differences, seed=5) != paired_interval(differences, seed=6)


def test_paired_coverage():
    rng = np.random.default_rng(0)
    covered = [i.low < 0.1 < i.high for i in (paired_interval(paired_draw(rng, 0.1, 0.3), seed=k, n_boot=500)
                                             for k in range(200))]
    assert 0.90 <= np.mean(covered) <= 0.98


def test_unpaired_finds_a_known_effect_and_not_a_null():
    rng = np.random.default_rng(0)
    interval = unpaired_interval(rng.normal(1.0, 0.1, 3).tolist(), rng.normal(0.0, 0.1, 3).tolist())
    assert verdict(interval, floor=0.1) == 'holds' and interval.n == '3 vs 3 runs' and 'Welch' in interval.method
    null = unpaired_interval(rng.normal(0.0, 0.1, 3).tolist(), rng.normal(0.0, 0.1, 3).tolist())
    assert verdict(null, floor=0.1) == 'not resolvable at this size'


def test_unpaired_coverage():
    rng = np.random.default_rng(0)
    covered = [i.low < 0.5 < i.high for i in (unpaired_interval(rng.normal(0.5, 1, 3), rng.normal(0, 1, 3))
                                             for _ in range(400))]
    assert 0.93 <= np.mean(covered) <= 0.985  # Welch is a little wide at 3 vs 3 equal variances: 96.6% in 20,000 draws


def test_unpaired_with_one_run_on_a_side_takes_the_other_sides_variance():
    one = unpaired_interval([2.0], [0.0, 1.0, 2.0])  # variance 1 for both sides, df 2
    half = 4.3027 * math.sqrt(1 / 1 + 1 / 3)
    assert (one.effect, one.low, one.high) == pytest.approx((1.0, 1.0 - half, 1.0 + half), abs=1e-3)
    assert unpaired_interval([0.0, 1.0, 2.0], [2.0]).effect == -1.0
    with pytest.raises(ValueError, match='at least 2 runs on one side'):
        unpaired_interval([1.0], [2.0])


def test_mean_interval_is_students_t_over_the_values():
    interval = mean_interval([1.0, 2.0, 3.0, 4.0], 'timing repeats')  # sd sqrt(5/3), df 3: t 3.1824
    half = 3.1824 * math.sqrt(5 / 3) / 2
    assert (interval.effect, interval.low, interval.high) == pytest.approx((2.5, 2.5 - half, 2.5 + half), abs=1e-4)
    assert interval.n == '4 timing repeats' and 'df 3' in interval.method
    rng = np.random.default_rng(0)
    covered = [i.low < 0.3 < i.high for i in (mean_interval(rng.normal(0.3, 1, 5), 'repeats') for _ in range(2000))]
    assert 0.93 <= np.mean(covered) <= 0.97
    with pytest.raises(ValueError, match='at least 2 repeats'):
        mean_interval([1.0], 'repeats')


def test_verdict_follows_the_rule():
    at = lambda effect, low, high: verdict(Interval(effect, low, high, n='', method=''), floor=0.05)
    assert [at(0.1, 0.01, 0.2), at(-0.1, -0.2, -0.01), at(0.02, 0.01, 0.03), at(0.1, -0.01, 0.2)] == list(VERDICTS)
    assert all(v in RULE for v in VERDICTS)


def test_intervals_in_results_md_and_json(tmp_path):
    interval = paired_interval([[0.1, 0.2, 0.3], [0.2, 0.25, 0.3]], n_boot=100)
    text = number(Interval(0.123456, -0.0012346, 1.5, n='3 vs 3 runs', method=''))
    assert text == '0.1235 [-0.001235, 1.5] (3 vs 3 runs)'
    claim = dict(claim='c', numbers={'effect': interval}, rule=RULE, verdict=verdict(interval, 0.01))
    write_results(tmp_path, 't', {'preset': 'smoke'}, [dict(finding='1', title='t', figures=[], claims=[claim])])
    saved = json.loads((tmp_path / 'results.json').read_text())['findings'][0]['claims'][0]['numbers']['effect']
    assert Interval(**saved) == Interval(**{**interval.__dict__, 'per_seed': [list(s) for s in interval.per_seed]})
    assert f'| effect | {number(interval)} |' in (tmp_path / 'results.md').read_text()
