"""
Ours, not the paper's: finding fim, infilling against the GPT people train for it. Arms: the GPT; the FIM GPT
(train.py --fim_rate, aogpt/fim.py), which reads both sides of a gap and ends it with its end token; AO-GPT on the FIM
mix and on l2r:0.5,fim:0.5 (the order mix closest to the FIM GPT, with every token at its place). Regimes: the
preset's corpus with fresh data, and more as the preset lists them (a corpus, a prefix with early stopping).

The protocol: each arm's learning rate and dropout are swept together in each regime on a seed that is not
reported (SWEEP_SEED); a winner on an edge of the grid gets one step past it (sweep.Ladders); the lowest reading
in the arm's own objective wins (RULE). The reported seeds are then trained fresh at the winner, and every interval
has the seed as its unit.
"""
import itertools
import math
import os

from aogpt.experiments.finding import Finding, Sweep
from aogpt.experiments.jobs import read_metrics, script_job
from aogpt.experiments.measure import STUCK, claim, comparable
from aogpt.experiments.orders import FIM_MIX, L2R_FIM
from aogpt.experiments.readings import arm_of
from aogpt.experiments.presets import SWEEP_SEED
from aogpt.experiments.sweep import Ladders, point_tag, run_flags
from aogpt.report import spread, unpaired_interval

FREE = 0.02  # nats: "FIM for free" holds within this of the GPT
# {arm: (label, kind, its train.py flags, its own objective: {reading: weight}, l2r and ao as train.py reads them)}
FIM_ARMS = {
    'gpt': ('left-to-right GPT', 'l2r', {}, {'l2r': 1.0}),
    'fim50': ('FIM GPT, FIM rate 0.5', 'l2r', dict(fim_rate=0.5), {'l2r': 1.0}),
    'fim90': ('FIM GPT, FIM rate 0.9', 'l2r', dict(fim_rate=0.9), {'l2r': 1.0}),
    'ao-fim-mix': ('AO-GPT, 10% left to right, 40% FIM orders, 50% random', 'mixed', dict(order_mix=FIM_MIX),
                   {'l2r': 0.1, 'ao': 0.9}),
    'ao-l2r-fim': ('AO-GPT, 50% left to right, 50% FIM orders', 'mixed', dict(order_mix=L2R_FIM), {'l2r': 1.0}),
}
RULE = ("each arm's learning rate and dropout swept together in each regime on seed {seed}, a winner on the grid's "
        'edge given one step past it; the lowest validation loss in the arm\'s own objective wins (at the last '
        'evaluation; where the regime stops early, at its best on the first half of val, where best.pt is chosen, '
        'the second reporting): the GPT and the FIM GPT left to right (a '
        "FIM GPT's val windows are plain text), AO-GPT on the FIM mix its left-to-right share on val_l2r and the rest "
        'on val_ao (random orders), AO-GPT on l2r:0.5,fim:0.5, which reads no random order, left to right')


def fim_run(arm, regime, seed):
    return f'fim-{arm}-{regime}-s{seed}'


def fim_regime(name):
    """The regime of a reported run's name: fim-<arm>-<regime>-s<seed>."""
    return name.rsplit('-', 2)[1]


def sweep_run(arm, regime, point):
    return f'fim-sweep-{arm}-{regime}-{point_tag(point)}'


def fim_flags(p, chosen, arm, regime, seed, point):
    """train.py's flags of one run: its kind's chosen settings at the point's learning rate (min_lr a tenth), the
    arm's own flags, the point's dropout and the regime's flags (where it stops early, best.pt kept at the arm's own
    objective); no gaps read in training (eval_ppl.py reads them)."""
    _, kind, own, _ = FIM_ARMS[arm]
    flags = run_flags(p, kind, chosen[kind][0] | dict(learning_rate=point['learning_rate']), seed)
    if own.get('order_mix'):
        del flags['random_ratio']
    best = dict(keep_best=objective_flag(arm)) if stops_early(p, regime) else {}
    return flags | own | dict(dropout=point['dropout'], eval_gaps='') | regime_train(p, regime) | best


def stops_early(p, regime):
    """Whether a regime stops early: each run keeps best.pt at its lowest reading in its arm's own objective on the
    first half of val (train.py --keep_best) and is reported on the second."""
    return bool(p['fim']['regimes'][regime].get('best'))


def objective_flag(arm):
    """train.py's --keep_best of an arm's own objective: a reading ('l2r') or readings weighted ('l2r:0.1,ao:0.9')."""
    weights = FIM_ARMS[arm][3]
    if list(weights.values()) == [1.0]:
        return next(iter(weights))
    return ','.join(f'{k}:{w:g}' for k, w in weights.items())


def objective_loss(arm, record, half='val'):
    """An arm's own objective in one metrics.jsonl record, read on val (half='val') or on its selection half."""
    return sum(w * record[f'{half}_{k}'] for k, w in FIM_ARMS[arm][3].items())


def regime_train(p, regime):
    """A regime's train.py flags (a corpus, a block, a prefix)."""
    return p['fim']['regimes'][regime].get('train', {})


def regime_eval(p, regime):
    """The evaluations' settings in a regime: the preset's, with the regime's own over them."""
    return p['fim']['eval'] | p['fim']['regimes'][regime].get('eval', {})


def arm_regimes(p):
    return list(itertools.product(p['fim']['arms'], p['fim']['regimes']))


def ladders(p):
    return Ladders(p['fim']['ladders'])


def grid_runs(p, chosen):
    """The sweep's grid, {name: flags}: every arm in every regime at every point, on SWEEP_SEED."""
    return {sweep_run(arm, regime, pt): fim_flags(p, chosen, arm, regime, SWEEP_SEED, pt)
            for arm, regime in arm_regimes(p) for pt in ladders(p).grid()}


def selection_loss(arm, regime, p, records):
    """A run's loss in its arm's own objective: at its last evaluation on val, or where the regime stops early at its
    best on the selection half (best.pt's reading)."""
    if stops_early(p, regime):
        return min(objective_loss(arm, r, 'select') for r in records)
    return objective_loss(arm, records[-1])


def sweep_loss(p, runs_dir, arm, regime):
    """point -> the selection loss of the arm's sweep run at that point in the regime, None before it has run."""
    def loss(point):
        records = read_metrics(os.path.join(runs_dir, sweep_run(arm, regime, point)))
        return selection_loss(arm, regime, p, records) if records else None
    return loss


def edge_runs(p, chosen, runs_dir):
    """The edge steps, {name: flags}: for each arm and regime whose grid winner sits on an edge, the point one step
    past it (sweep.Ladders)."""
    return {sweep_run(arm, regime, pt): fim_flags(p, chosen, arm, regime, SWEEP_SEED, pt)
            for arm, regime in arm_regimes(p) for pt in ladders(p).steps(sweep_loss(p, runs_dir, arm, regime))}


def choose_points(p, chosen, runs_dir):
    """{(arm, regime): its winning point over the grid and the edge steps}."""
    return {(arm, regime): ladders(p).winner(sweep_loss(p, runs_dir, arm, regime)) for arm, regime in arm_regimes(p)}


def first_points(p, chosen):
    return {(arm, regime): ladders(p).grid()[0] for arm, regime in arm_regimes(p)}


def fim_runs(p, chosen, seed_list, points):
    """The reported runs, {name: flags}: every arm in every regime on every seed, fresh, at its sweep's winner."""
    return {fim_run(arm, regime, s): fim_flags(p, chosen, arm, regime, s, points[arm, regime])
            for arm, regime in arm_regimes(p) for s in seed_list}


def fim_corpora(p, seed_list):
    """[(dataset, {arm: run names})], a regime at a time."""
    return [(regime_train(p, regime).get('dataset', p['dataset']),
             {arm: [fim_run(arm, regime, s) for s in seed_list] for arm in p['fim']['arms']})
            for regime in p['fim']['regimes']]


def own_loss(name, final):
    """A run's final loss in its arm's own objective (a sweep run's too)."""
    return objective_loss(arm_of(name.replace('fim-sweep-', 'fim-'), FIM_ARMS), final)


def checkpoint(p, regime, folder):
    return os.path.join(folder, 'best.pt' if stops_early(p, regime) else 'ckpt.pt')


def stuck_runs(m, p, regime, runs):
    """The runs ({arm: names}) whose loss in their own objective (selection_loss: where the regime stops early, at
    the best, as the final one after the data repeated may be far above it) sits at the unigram entropy: they did not
    learn."""
    return [n for arm, names in runs.items() for n in names
            if selection_loss(arm, regime, p, m.metrics(n)) > m.unigrams.get(n, m.unigram) - STUCK]


def evaluations(p, seed_list, folders):
    """eval_ppl.py on each reported run, on the half of val that chose nothing: left to right (fim_l2r.json); gaps of
    given lengths (fim_gaps.json) and of unknown lengths (a range, a line), scored and filled with the length given
    and not (fim_range.json, fim_line.json), on chunks that leave the FIM GPT's sentinels and the lengths room
    (fim_jobs)."""
    jobs = []
    for dataset, runs in fim_corpora(p, seed_list):
        for regime, name in [(fim_regime(n), n) for names in runs.values() for n in names]:
            e = regime_eval(p, regime)
            base = dict(init_from=checkpoint(p, regime, folders[name]), dataset=dataset, half='report',
                        max_chunks=e['max_chunks'])
            for file, flags in fim_jobs(e).items():
                jobs.append(script_job(f'{file} {name}', 'eval_ppl.py', base | flags,
                                       os.path.join(folders[name], f'fim_{file}.json'), needs=[folders[name]]))
    return jobs


def fim_jobs(e):
    """{file: eval_ppl.py flags} of one run's evaluations: lines on their own, over more chunks (line_chunks), as few
    chunks of code hold a whole short line."""
    range_, line = unknown_gaps(e)[0], unknown_gaps(e)[1:]
    jobs = {'l2r': dict(ensemble=1),
            'gaps': dict(gaps=','.join(f'span:{L}' for L in e['spans']), block_size=e['block']),
            'range': dict(gaps=range_, fills='greedy,sample', block_size=e['range_block'])}
    return jobs | ({'line': jobs['range'] | dict(gaps=line[0], max_chunks=e.get('line_chunks', e['max_chunks']))}
                   if line else {})


def unknown_gaps(e):
    """The gap settings of unknown length: the range, and on code a single line (line:H)."""
    return [f"range:{e['range'][0]}-{e['range'][1]}"] + ([f"line:{e['line']}"] if e.get('line') else [])


def gap_file(setting):
    """The evaluation file (fim_<file>.json) that scores a gap setting."""
    return {'span': 'gaps', 'range': 'range', 'line': 'line'}[setting.partition(':')[0]]


def gap_words(setting):
    """What a claim calls a gap setting."""
    kind, _, size = setting.partition(':')
    return {'span': f'gaps of {size} characters', 'range': f"gaps of {size.replace('-', ' to ')} characters",
            'line': f'single lines of up to {size} characters'}[kind]


CLAIMS = {
    'free': '(Ours{on}) FIM for free: the FIM GPT at rate {rate} reads left to right as well as the GPT, within '
            '{tolerance} nats (effect: its val NLL per character minus the GPT\'s; holds if the interval lies within '
            '±{tolerance}).',
    'given': "(Ours{on}) {arm} fills {gap}, their length given, better than the FIM GPT at rate {rate} (effect: the "
             "FIM GPT's NLL per gap character minus AO-GPT's; the FIM GPT's end token masked out and the rest "
             'renormalised at each step).',
    'unknown': "(Ours{on}) {arm} scores {gap} and their length better than the FIM GPT at rate {rate} (effect: the "
               "FIM GPT's NLL of the middle and its end token minus AO-GPT's -log p(L | both sides) - log p(middle | "
               'both sides, L), per gap character, both knowing the range of the lengths).',
    'fills': "(Ours{on}) With the length unknown, {arm}'s greedy fills of {gap} beat the FIM GPT's at rate {rate} on "
             "{what} (effect: AO-GPT's share minus the FIM GPT's; each fill the most likely length, then the most "
             'likely token at each step).',
    'left': "(Ours{on}) {arm} fills {gap}, their length given, better than the left-to-right GPT reads them from "
            "their left side alone (effect: the GPT's NLL per gap character minus its own): what reading the right "
            'side buys at this budget.',
    'tax': "(Ours{on}) {arm} reads left to right worse than the FIM GPT at rate {rate} (effect: AO-GPT's val NLL per "
           "character minus the FIM GPT's): the price of any order against the price of FIM.",
}
FILL_WHAT = {'exact': 'exact match (the whole middle right)',
             'chars': "character accuracy (aligned at the gap's start)", 'length': 'the length right'}


def results_of(m, name, file, setting=None):
    result = next(iter(m.read(name, f'fim_{file}.json')['results'].values()))
    return result[setting] if setting else result


def regime_results(m, p, regime):
    """One regime's figure and claims."""
    e, arms = regime_eval(p, regime), p['fim']['arms']
    runs = {arm: [fim_run(arm, regime, s) for s in m.seed_list] for arm in arms}
    label = {arm: FIM_ARMS[arm][0] for arm in arms}
    on = '' if regime == next(iter(p['fim']['regimes'])) else f', {regime}'
    l2r = lambda arm: [math.log(results_of(m, n, 'l2r')['ppl']['l2r']) for n in runs[arm]]
    gap = lambda arm, setting, column: [results_of(m, n, gap_file(setting), setting)['nll'][column]
                                        for n in runs[arm]]
    fill = lambda arm, u, mode, key: [results_of(m, n, gap_file(u), u)['fills'][f'{mode}, length unknown'][key]
                                      for n in runs[arm]]
    unknown, spans = unknown_gaps(e), [f'span:{L}' for L in e['spans']]
    fims = [arm for arm in arms if FIM_ARMS[arm][2].get('fim_rate')]
    aos = [arm for arm in arms if FIM_ARMS[arm][1] == 'mixed']
    column = lambda arm, unknown=False: ('fim_unknown' if unknown else 'fim') if arm in fims else \
        ('unknown' if unknown else 'gap_l2r') if arm in aos else 'left'
    numbers = {f'{label[arm]}: left to right (nats/char)': spread(l2r(arm)) for arm in arms}
    numbers |= {f'{label[arm]}: {s}, length given': spread(gap(arm, s, column(arm))) for arm in arms
                for s in spans + unknown}
    numbers |= {f'{label[arm]}: {u}, length unknown': spread(gap(arm, u, column(arm, True)))
                for arm in fims + aos for u in unknown}
    numbers |= {f'{label[arm]}: {u}, {mode} fills, {key}': spread(fill(arm, u, mode, key)) for arm in fims + aos
                for u in unknown for mode in ('greedy', 'sample') for key in (*FILL_WHAT, 'length_error')}
    stuck = stuck_runs(m, p, regime, runs)
    claims, said = [], lambda key, **kw: CLAIMS[key].format(on=on, **kw)
    rate = lambda arm: FIM_ARMS[arm][2]['fim_rate']
    for f in fims:
        claims.append(claim(said('free', rate=rate(f), tolerance=FREE), numbers if not claims else {},
                            unpaired_interval(l2r(f), l2r('gpt')), stuck=stuck,
                            decide=lambda interval, _: comparable(interval, FREE)))
        for a in aos:
            text = dict(arm=label[a], rate=rate(f))
            claims += [claim(said('given', gap=gap_words(s), **text), {},
                             unpaired_interval(gap(f, s, 'fim'), gap(a, s, 'gap_l2r')), stuck=stuck)
                       for s in spans + unknown]
            for u in unknown:
                claims.append(claim(said('unknown', gap=gap_words(u), **text), {},
                                    unpaired_interval(gap(f, u, 'fim_unknown'), gap(a, u, 'unknown')), stuck=stuck))
                claims += [claim(said('fills', what=FILL_WHAT[key], gap=gap_words(u), **text), {},
                                 unpaired_interval(fill(a, u, 'greedy', key), fill(f, u, 'greedy', key)),
                                 stuck=stuck) for key in FILL_WHAT]
            claims.append(claim(said('tax', **text), {}, unpaired_interval(l2r(a), l2r(f)), stuck=stuck))
    for arm in fims + aos:
        claims += [claim(said('left', arm=label[arm], gap=gap_words(s)), {},
                         unpaired_interval(gap('gpt', s, 'left'), gap(arm, s, column(arm))), stuck=stuck)
                   for s in spans + unknown]
    lengths = [int(s.partition(':')[2]) for s in spans]
    figure = m.figure(f'ours_fim_{regime}.png', f'(Ours) Gaps of a given length, {regime}',
                      'gap (characters, one per val chunk)', 'NLL per gap character (nats)',
                      [(label[arm], lengths, [gap(arm, s, column(arm)) for s in spans]) for arm in arms], logx=True)
    return [figure], claims


def finding_fim(m, p, runs_dir):
    """The sweep's choices, then each regime's figure and claims."""
    numbers = {f'{arm}, {regime}': point_tag(pt) for (arm, regime), pt in choose_points(p, {}, runs_dir).items()}
    figures, claims = [], [dict(claim=RULE.format(seed=SWEEP_SEED), numbers=numbers, verdict='chosen')]
    for regime in p['fim']['regimes']:
        more = regime_results(m, p, regime)
        figures, claims = figures + more[0], claims + more[1]
    return figures, claims


FINDING = Finding('fim', '(Ours) Infilling against the FIM GPT, the GPT people train for it', ('l2r', 'mixed'),
                  finding_fim, runs=fim_runs, evaluations=evaluations, kind_seeds=False,
                  needs=('fim', 'has no FIM GPT arms: use --preset=cpu'), corpora=fim_corpora,
                  sweep=Sweep("finding fim's sweep of the learning rate and dropout", grid_runs, choose_points,
                              first_points, more=edge_runs),
                  losses={'fim-': own_loss})
