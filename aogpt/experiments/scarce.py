"""
Ours, not the paper's: finding scarce, data-constrained training. Every arm trains on the same prefix of the train
split (train.py --train_tokens: 50k and 200k characters of tiny Shakespeare, 50k of WikiText-2's characters) for the
same iterations, so the small prefixes repeat for many epochs; each keeps the checkpoint of its best evaluation
(--keep_best: left to right for a decoder, the NELBO for the encoder, chosen on val.bin's first half) and is read on
the second half. Arms: the GPT, AO-GPT on the FIM mix and on the paper's mix, the encoder, each at its kind's chosen
settings but for the learning rate, which is swept together with the regularizers (dropout, weight decay) on the main
prefix, on a seed that is not reported (SWEEP_SEED), by one rule for the GPT, the FIM mix (the paper's mix takes its
choice) and the encoder: a winner on the grid's edge gets one step past it (sweep.Ladders), and the lowest selection
reading at its best evaluation wins; the reported seeds then train fresh at the winner. Claims at each prefix:
AO-GPT's best left-to-right NLL against the tuned GPT's; its ensemble of 16 context orders against the GPT and against the mixture of the GPT's seeds; its
gaps of 4 and 16 tokens given both sides against the GPT's from the left; the epoch of the best reading; and on the
main prefix the encoder against AO-GPT (the architecture against the formulation). Crossover: the epochs of training
after which AO-GPT's best so far is below the GPT's.
"""
import math
import os
import statistics

from aogpt.experiments.finding import Finding, Sweep
from aogpt.experiments.jobs import read_metrics, script_job
from aogpt.experiments.measure import STUCK, claim
from aogpt.experiments.orders import FIM_MIX
from aogpt.experiments.presets import SWEEP_SEED
from aogpt.experiments.readings import arm_of, corpus_file, corpus_title, said_on
from aogpt.experiments.sweep import Ladders, point_tag, run_flags
from aogpt.report import spread, unpaired_interval
from aogpt.scoring import ensemble_slots

# {arm: (label, kind)}, the GPT first; each arm at its kind's chosen settings, its regularizers swept as SWEPT names
SCARCE_ARMS = {'gpt': ('left-to-right GPT', 'l2r'),
               'fim-mix': ('AO-GPT, 10% left to right, 40% FIM, 50% random', 'mixed'),
               'paper': ("AO-GPT, the paper's mix: 10% left to right", 'mixed'),
               'encoder': ('encoder MDM', 'encoder')}
ARM_ORDERS = {'gpt': {}, 'fim-mix': dict(order_mix=FIM_MIX), 'paper': {}, 'encoder': {}}
SWEPT = {'gpt': 'gpt', 'fim-mix': 'fim-mix', 'paper': 'fim-mix', 'encoder': 'encoder'}  # whose sweep an arm takes
ONLY_READ = {'gpt': dict(ensemble=1), 'encoder': dict(ensemble=1, encoder_l2r=False)}  # eval_ppl.py's flags for them
CLAIMS = {
    'scarce l2r': '(Ours) On {prefix} characters repeated for {iters} iterations ({epochs:.3g} epochs), {arm} reads '
                  "left to right better than the tuned GPT, each at its best evaluation (effect: the GPT's val NLL "
                  'minus its own, nats per character, on the half of val that chose nothing).',
    'scarce ensemble': '(Ours) On {prefix} characters, {arm} with an ensemble of {k} context orders reads better than '
                       '{other} (effect: the latter\'s NLL minus its own per character over the same val chunks, '
                       'at each run\'s best checkpoint; the interval over seeds, each run\'s mean over the chunks).',
    'scarce gaps': '(Ours) On {prefix} characters, {arm} fills gaps of {span} characters given both sides better than '
                   "the tuned GPT reads their left side, each at its best evaluation (effect: the GPT's NLL per gap "
                   'character minus its own).',
    'scarce epoch': '(Ours) On {prefix} characters, {arm} reaches its best evaluation later than the GPT (effect: its '
                    "epoch of the best minus the GPT's).",
    'scarce encoder': '(Ours) On {prefix} characters, the encoder MDM bounds the any-order NLL lower than {arm} reads '
                      'it (effect: its any-order loss minus the encoder\'s NELBO, each at its best any-order '
                      'evaluation: the architecture against the formulation).',
}


def is_encoder(arm):
    return SCARCE_ARMS[arm][1] == 'encoder'


def selection(arm):
    """The reading an arm's best evaluation is chosen by, and best.pt kept at (train.py --keep_best)."""
    return 'ao' if is_encoder(arm) else 'l2r'


def ladders(p):
    return Ladders(p['scarce']['ladders'])


def scarce_run(arm, tokens, seed, corpus=''):
    return f"scarce-{arm}-{tokens // 1000}k{f'-{corpus}' if corpus else ''}-s{seed}"


def sweep_run(arm, point):
    return f'scarce-sweep-{arm}-{point_tag(point)}'


def scarce_flags(p, chosen, arm, seed, tokens, point, corpus=''):
    """train.py's flags of one run: its kind's chosen settings at the point's learning rate (min_lr a tenth), the
    finding's schedule, its orders and the point's regularizers, the prefix, and the best kept by its reading."""
    kind, s = SCARCE_ARMS[arm][1], p['scarce']
    flags = run_flags(p, kind, chosen[kind][0] | dict(learning_rate=point['learning_rate']), seed) | s['train']
    if ARM_ORDERS[arm]:
        del flags['random_ratio']
    return flags | ARM_ORDERS[arm] | point | dict(train_tokens=tokens, keep_best=selection(arm), eval_gaps=','.join(
        f'span:{L}' for L in s['spans'])) | (dict(dataset=corpus) if corpus else {})


def main_prefix(p):
    corpus, tokens, _ = p['scarce']['prefixes'][0]
    return corpus, tokens


def sweep_runs(p, chosen):
    """The sweep's grid, {name: flags}: each swept arm at each point, on SWEEP_SEED and the main prefix."""
    corpus, tokens = main_prefix(p)
    return {sweep_run(arm, pt): scarce_flags(p, chosen, arm, SWEEP_SEED, tokens, pt, corpus)
            for arm in swept_arms() for pt in ladders(p).grid()}


def swept_arms():
    return list(dict.fromkeys(SWEPT.values()))


def best_record(records, arm, reading=None):
    """The record of a run's best evaluation: the lowest selection reading (select_<reading>, by default its arm's)."""
    return min(records, key=lambda r: r[f'select_{reading or selection(arm)}'])


def sweep_loss(runs_dir, arm):
    """point -> the lowest selection reading of the arm's sweep run there (at its best evaluation), None before it
    has run."""
    def loss(point):
        records = read_metrics(os.path.join(runs_dir, sweep_run(arm, point)))
        return best_record(records, arm)[f'select_{selection(arm)}'] if records else None
    return loss


def edge_runs(p, chosen, runs_dir):
    """The edge steps, {name: flags}: for each swept arm whose grid winner sits on an edge, the point one step past
    it."""
    corpus, tokens = main_prefix(p)
    return {sweep_run(arm, pt): scarce_flags(p, chosen, arm, SWEEP_SEED, tokens, pt, corpus)
            for arm in swept_arms() for pt in ladders(p).steps(sweep_loss(runs_dir, arm))}


def choose_points(p, chosen, runs_dir):
    """{swept arm: its winning point over the grid and the edge steps}."""
    return {arm: ladders(p).winner(sweep_loss(runs_dir, arm)) for arm in swept_arms()}


def first_points(p, chosen):
    return {arm: ladders(p).grid()[0] for arm in swept_arms()}


def scarce_corpora(p, seed_list):
    """[(dataset, {arm: run names})], a prefix at a time (its arms on every seed)."""
    return [(corpus or p['dataset'], {arm: [scarce_run(arm, tokens, s, corpus) for s in seed_list] for arm in arms})
            for corpus, tokens, arms in p['scarce']['prefixes']]


def scarce_runs(p, chosen, seed_list, points):
    """The finding's runs, {name: flags}: every arm of every prefix on every seed, at its sweep's choice."""
    return {scarce_run(arm, tokens, s, corpus): scarce_flags(p, chosen, arm, s, tokens, points[SWEPT[arm]], corpus)
            for corpus, tokens, arms in p['scarce']['prefixes'] for s in seed_list for arm in arms}


def evaluations(p, seed_list, folders):
    """eval_ppl.py on each run's best checkpoint, on the half of val that chose nothing: a decoder's left-to-right NLL
    and AO-GPT's ensembles of context orders, the encoder's NELBO (best.json). The GPT is read left to right only and
    the encoder by its NELBO only: their ensembles and exact readings would cost more than AO-GPT's evaluations, and
    no claim reads them."""
    jobs = []
    for dataset, runs in scarce_corpora(p, seed_list):
        for arm, name in [(arm, n) for arm, names in runs.items() for n in names]:
            flags = dict(init_from=os.path.join(folders[name], 'best.pt'), dataset=dataset, half='report') | \
                p['scarce']['eval'] | ONLY_READ.get(arm, {})
            jobs.append(script_job(f'best {name}', 'eval_ppl.py', flags, os.path.join(folders[name], 'best.json'),
                                   needs=[folders[name]]))
    return jobs


def gap_readings(arm, span):
    """[(side, metrics key)] of an arm's gap NLLs: both sides but for the GPT, which is read from the left only, and
    the left side but for the encoder, which has no left-to-right reading."""
    both, left = ('both sides', f'val_gap_span{span}'), ('left side', f'val_gap_span{span}_left')
    return [left] if arm == 'gpt' else [both] if is_encoder(arm) else [both, left]


def at_best(m, name, key, reading=None):
    """key's value at a run's best evaluation (by its arm's selection reading, or select_<reading>)."""
    return best_record(m.metrics(name), arm_of(name, SCARCE_ARMS), reading)[key]


def chunk_nll(m, name, column):
    return m.chunk_nll(name, 'best.json', column)


def mixture_nll(m, names):
    """Per-chunk NLL per token of the mixture of the runs' left-to-right models (each chunk's probability averaged
    over them): a valid likelihood, the GPT's answer to an ensemble's test-time compute."""
    runs = [chunk_nll(m, n, 'l2r') for n in names]
    T = m.read(names[0], 'best.json')['block_size']
    return [-(log_mean_exp([-T * nll for nll in chunk]) / T) for chunk in zip(*runs)]


def log_mean_exp(values):
    top = max(values)
    return top + math.log(statistics.mean(math.exp(v - top) for v in values))


def crossover(m, runs, arm, gpt='gpt'):
    """The first epoch at whose evaluation the arm's best left-to-right reading so far (report half, at the best
    selection so far, meaned over seeds) is below the GPT's; 'never' if it never is (the report prints it)."""
    def best_so_far(name):
        records, out = m.metrics(name), []
        for i in range(len(records)):
            out.append((records[i]['epochs'], best_record(records[:i + 1], arm_of(name, SCARCE_ARMS))['val_l2r']))
        return out
    mean = lambda names: [(curves[0][0], statistics.mean(v for _, v in curves))
                          for curves in zip(*(best_so_far(n) for n in names))]
    return next((epoch for (epoch, a), (_, g) in zip(mean(runs[arm]), mean(runs[gpt])) if a < g), 'never')


def did_not_learn(m, names):
    """The runs among names whose best reading sits at the unigram entropy of their corpus (their final one, after
    the data repeated, may be far above it)."""
    return [n for n in names if at_best(m, n, f'val_{selection(arm_of(n, SCARCE_ARMS))}') >
            m.unigrams.get(n, m.unigram) - STUCK]


def epoch_curves(m, label, names, key):
    """A figure series: key at every evaluation after the first, against the epochs seen (the untrained model's
    reading, the log of the vocabulary, would set the y-axis and flatten the differences near the best)."""
    epochs = {r['iter']: r['epochs'] for r in m.metrics(names[0])}
    label, iters, values = m.curves(label, names, key)
    return label, [epochs[i] for i in iters[1:]], values[1:]


def finding_scarce(m, p):
    figures, claims = [], []
    for (dataset, runs), (corpus, tokens, _) in zip(scarce_corpora(p, m.seed_list), p['scarce']['prefixes']):
        more = prefix_results(m, p, runs, tokens, corpus)
        figures, claims = figures + more[0], claims + more[1]
    return figures, claims


def prefix_results(m, p, runs, tokens, corpus):
    """One prefix's curves figure, numbers and claims."""
    label = {arm: text for arm, (text, _) in SCARCE_ARMS.items()}
    iters, k = p['scarce']['train']['max_iters'], p['scarce']['eval']['ensemble']
    epochs = m.metrics(runs['gpt'][0])[-1]['epochs']
    tag = f'{tokens // 1000}k'
    named, title = lambda file: corpus_file(file, corpus), lambda text: corpus_title(text, corpus)
    curves = m.figure(named(f'ours_scarce_{tag}.png'), title(f'(Ours) {tokens:,} characters, repeated'),
                      'epochs', 'val NLL (nats/char; the encoder: its NELBO)',
                      [epoch_curves(m, label[arm], runs[arm], 'val_ao' if is_encoder(arm) else 'val_l2r')
                       for arm in runs])
    at = lambda arm, key, reading=None: [at_best(m, n, key, reading) for n in runs[arm]]
    numbers = {f'{label[arm]}: at its best evaluation, {what}': spread(at(arm, key))
               for arm in runs for what, key in (('epoch', 'epochs'), ('left to right', 'val_l2r'),
                                                 ('any order', 'val_ao'))}
    numbers |= {f'{label[arm]}: at its best evaluation, gaps of {L}, {side}': spread(at(arm, key))
                for arm in runs for L in p['scarce']['spans'] for side, key in gap_readings(arm, L)}
    numbers |= {f'{label[arm]}: best.pt, ensemble of {size}': spread([statistics.mean(chunk_nll(m, n, str(size)))
                                                                      for n in runs[arm]])
                for arm in runs if not is_encoder(arm) and arm != 'gpt' for size in sorted({4, k})}
    numbers |= {f'{label[arm]}: epochs after which its best so far reads left to right below the GPT\'s':
                crossover(m, runs, arm) for arm in runs if not is_encoder(arm) and arm != 'gpt'}
    text = dict(prefix=f'{tokens:,}', iters=f'{iters:,}', epochs=epochs, k=k)
    said = lambda key, **kw: said_on(corpus, CLAIMS[key], **(text | kw))
    stuck = lambda *arms: did_not_learn(m, [n for arm in arms for n in runs[arm]])
    gpt_mixture = mixture_nll(m, runs['gpt'])
    n = m.read(runs['gpt'][0], 'best.json')['block_size']
    cost = {f'slots read per chunk of {n}: the ensemble of {k} / the mixture of the GPT\'s {len(runs["gpt"])} seeds':
            f"{ensemble_slots(n, k):,} / {len(runs['gpt']) * (n + 1):,}"}
    claims = []
    for arm in [arm for arm in runs if arm != 'gpt' and not is_encoder(arm)]:
        claims.append(claim(said('scarce l2r', arm=label[arm]), numbers if not claims else {},
                            unpaired_interval(at('gpt', 'val_l2r'), at(arm, 'val_l2r')), stuck=stuck(arm, 'gpt')))
        ensemble = [statistics.mean(chunk_nll(m, n, str(k))) for n in runs[arm]]
        claims.append(claim(said('scarce ensemble', arm=label[arm], other='the tuned GPT'), {},
                            unpaired_interval([statistics.mean(chunk_nll(m, n, 'l2r')) for n in runs['gpt']],
                                              ensemble), stuck=stuck(arm, 'gpt')))
        claims.append(claim(said('scarce ensemble', arm=label[arm],
                                 other=f"the mixture of the GPT's {len(runs['gpt'])} seeds"), cost,
                            unpaired_interval([statistics.mean(gpt_mixture)], ensemble), stuck=stuck(arm, 'gpt')))
        claims += [claim(said('scarce gaps', arm=label[arm], span=L), {},
                         unpaired_interval(at('gpt', f'val_gap_span{L}_left'), at(arm, f'val_gap_span{L}')),
                         stuck=stuck(arm, 'gpt')) for L in p['scarce']['spans'] if L > 1]
        claims.append(claim(said('scarce epoch', arm=label[arm]), {},
                            unpaired_interval(at(arm, 'epochs'), at('gpt', 'epochs')), floor=0,
                            stuck=stuck(arm, 'gpt')))
    if 'encoder' in runs:
        claims.append(claim(said('scarce encoder', arm=label['fim-mix']), {},
                            unpaired_interval(at('fim-mix', 'val_ao', 'ao'), at('encoder', 'val_ao')),
                            stuck=stuck('fim-mix', 'encoder')))
    return [curves], claims


FINDING = Finding('scarce', '(Ours) Data-constrained training: AO-GPT against a tuned GPT as the data repeats',
                  ('mixed', 'encoder', 'l2r'), lambda m, p, runs_dir: finding_scarce(m, p), runs=scarce_runs,
                  evaluations=evaluations, kind_seeds=False,
                  needs=('scarce', 'has no little-data prefixes: use --preset=cpu'), corpora=scarce_corpora,
                  sweep=Sweep("finding scarce's sweep of the learning rate and the regularizers", sweep_runs,
                              choose_points, first_points, more=edge_runs))
