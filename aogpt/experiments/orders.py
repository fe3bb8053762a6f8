"""
Ours, not the paper's: finding orders, the any-order tax. AO-GPT trained on other distributions over orders
(train.py's --order_mix, --order_curriculum: the paper's mix, 50% left to right, a curriculum, a mix with FIM orders,
the l2r-FIM mix), each at the mixed kind's chosen settings, beside the l2r GPT and the encoder at theirs, all trained
here with their gap NLLs recorded in training; their losses, gaps (both sides and left only), and samples at a few steps
scored by the GPT's first run; each arm against the GPT, the l2r-FIM mix and the paper's mix; and the longer pair (the
paper's mix and the GPT at a multiple of the iterations): does the tax shrink; and some arms again on a second corpus
at the same settings (cpu: WikiText-2's characters, prepared by data/wikitext2_char/prepare.py), the same claims there.
Findings adapt and streams build on its runs.
"""
import os

from aogpt.experiments.finding import Finding
from aogpt.experiments.jobs import gaps_job, script_job
from aogpt.experiments.measure import FLOOR, between_runs, claim, non_inferior, within
from aogpt.experiments.readings import (arm_numbers, arm_of, corpus_file, corpus_title, gap_nll, inner_spans, mean_gaps,
                                  order_steps, said_on, sample_nlls, trade_off_figure)
from aogpt.experiments.sweep import own_loss, run_flags
from aogpt.report import unpaired_interval
from aogpt.training import parse_mix

TAX = 0.1  # nats: finding orders' goal for the left-to-right loss, at most this far above the GPT's
AO_COST = 0.05  # nats: finding orders' goal for the any-order loss, at most this far above the paper's mix
# models trained on distributions over orders (train.py's order settings), every AO-GPT arm at the mixed kind's chosen
# settings, the GPT and the encoder at their own: {arm: (label, kind)}, the GPT first (its first run scores the
# samples); order_arms gives the flags
ORDER_ARMS = {'gpt': ('left-to-right GPT', 'l2r'),
              'paper': ("AO-GPT, the paper's mix: 10% left to right", 'mixed'),
              'l2r50': ('AO-GPT, 50% left to right', 'mixed'),
              'curriculum': ("AO-GPT, the paper's mix after a curriculum from all left to right", 'mixed'),
              'fim-mix': ('AO-GPT, 10% left to right, 40% FIM, 50% random', 'mixed'),
              'fim-gpt': ('the l2r-FIM mix: 50% left to right, 50% FIM', 'mixed'),
              'encoder': ('encoder MDM', 'encoder')}
FIM_MIX, L2R_FIM = 'l2r:0.1,fim:0.4,random:0.5', 'l2r:0.5,fim:0.5'  # orders' FIM mix, l2r-FIM mix (--order_mix)
# what a preset without the order arms of findings orders, adapt and streams lacks (--only names it)
NO_ARMS = 'has no order arms (its runs take days each): use --preset=cpu'
CLAIMS = {
    'orders tax': '(Ours) {arm} reads left to right within {tax} nats of the left-to-right GPT (each on every seed, '
                  "the same tokens; effect: its final EMA val left-to-right loss minus the GPT's; holds if the "
                  'interval lies below {tax}, does not hold if above it).',
    'orders gaps': '(Ours) {arm} fills gaps better than the left-to-right GPT reading the left side: its exact NLL '
                   "per gap token given both sides ({reading}) is below the GPT's from the left only (effect: the "
                   "GPT's NLL minus its own, nats per gap token, averaged over the spans {spans}).",
    'orders fim': '(Ours) {arm} fills gaps at least as well as the l2r-FIM mix (50% left to right, 50% FIM): its NLL '
                  "per gap token given both sides is not above the l2r-FIM mix's by more than the floor ({floor} "
                  'nats) (effect: the l2r-FIM mix minus it, averaged over the spans {spans}; holds if the interval '
                  'lies above minus the floor).',
    'orders gaps paper': "(Ours) {arm} fills gaps better than the paper's mix: its NLL per gap token given both "
                         "sides is below the paper's mix's (effect: the paper's mix's NLL minus its own, nats per gap "
                         'token, averaged over the spans {spans}).',
    'orders ao': "(Ours) {arm} keeps its any-order loss within {cost} nats of the paper's mix (effect: its final EMA "
                 "val any-order loss minus the paper's mix's; holds if the interval lies below {cost}, does not hold "
                 'if above it).',
    'orders samples': "(Ours) {arm}'s samples at {steps} steps (temperature 1, {order}) score better than the "
                      "paper's mix's under one left-to-right GPT (effect: the paper's mix's mean per-sample NLL minus"
                      ' its own, nats).',
    'orders longer': "(Ours) The any-order tax shrinks with training: the paper's mix's left-to-right loss above the "
                     "GPT's (same seed) is smaller after {times}x the iterations (effect: the tax at {iters} "
                     'iterations minus the tax at {longer}, nats).',
}


def order_arms(max_iters):
    """finding orders' order flags of each arm, over its kind's: the curriculum takes the first half of training."""
    return {'gpt': {}, 'paper': {}, 'l2r50': dict(random_ratio=0.5),
            'curriculum': dict(order_curriculum=max_iters // 2),
            'fim-mix': dict(order_mix=FIM_MIX), 'fim-gpt': dict(order_mix=L2R_FIM), 'encoder': {}}


def order_runs(p, chosen, seed_list):
    """finding orders' runs, {name: flags}: each arm on every seed at its kind's chosen settings with its order flags
    (an arm that gives the whole mix drops the paper's random_ratio), and the longer pair: the paper's mix and the
    GPT for `longer` times the iterations."""
    o, runs = p['orders'], {}
    flags = lambda arm, seed: order_flags(p, chosen, arm, seed)
    runs.update({order_run(arm, s): flags(arm, s) for s in seed_list for arm in ORDER_ARMS})  # a seed at a time
    times, train = o['longer'], p['train']
    longer = dict(max_iters=train['max_iters'] * times, lr_decay_iters=train['lr_decay_iters'] * times,
                  eval_interval=train['eval_interval'] * times)
    runs.update({order_run(arm, s, times): flags(arm, s) | longer
                 for arm in ('paper', 'gpt') for s in seed_list[:o['longer_seeds']]})
    if 'second' in o:
        corpus = o['second']['dataset']
        runs.update({order_run(arm, s, corpus=corpus): flags(arm, s) | dict(dataset=corpus)
                     for s in seed_list for arm in o['second']['arms']})
    return runs


def order_flags(p, chosen, arm, seed):
    """train.py's flags of one of finding orders' arms on a seed."""
    kind, arms = ORDER_ARMS[arm][1], order_arms(p['train']['max_iters'])
    flags = run_flags(p, kind, chosen[kind][0], seed) | p['orders']['train']
    if 'order_mix' in arms[arm]:
        del flags['random_ratio']
    return flags | arms[arm]


def order_run(arm, seed, times=1, corpus=''):
    """A run's name: its arm, its multiple of the iterations (when not 1), its corpus (when not the preset's)."""
    return f"orders-{arm}{f'-x{times}' if times != 1 else ''}{f'-{corpus}' if corpus else ''}-s{seed}"


def order_corpora(p, seed_list):
    """finding orders' [(dataset, {arm: its run names})]: every arm on the preset's corpus, then the arms of its
    second corpus where the preset has one."""
    corpora = [(p['dataset'], {arm: [order_run(arm, s) for s in seed_list] for arm in ORDER_ARMS})]
    if 'second' in p['orders']:
        corpus = p['orders']['second']['dataset']
        corpora.append((corpus, {arm: [order_run(arm, s, corpus=corpus) for s in seed_list]
                                 for arm in p['orders']['second']['arms']}))
    return corpora


def without_random_orders():
    """finding orders' decoder arms trained on no random orders (the GPT, the l2r-FIM mix): they sample left to right,
    and their left-to-right loss says whether they learned."""
    arms = order_arms(max_iters=0)  # the curriculum's length does not matter here
    return {arm for arm in ORDER_ARMS if arm != 'encoder' and (ORDER_ARMS[arm][1] == 'l2r' or
            'order_mix' in arms[arm] and not parse_mix(arms[arm]['order_mix'])['random'])}


def arm_loss(arms):
    """(name, final record) -> the final loss in its own objective of a run of finding orders, adapt or streams (arms:
    that finding's): an arm trained on no random orders, left to right; else its kind's."""
    def loss(name, final):
        arm = arm_of(name, arms)
        return final['val_l2r'] if arm in without_random_orders() else own_loss(arms[arm][1], final)
    return loss


def scored_jobs(p, folders, corpora, gaps_also=()):
    """The evaluations of finding orders, adapt or streams: the gaps of each run of corpora ([(dataset, {arm: run
    names})]) and of each run named with a prefix in gaps_also, and the samples of each run of corpora
    (gen_orders.json) at finding orders' steps, scored by the GPT's first run on the same corpus; an arm trained
    without random orders (the GPT, the l2r-FIM mix) samples left to right, the others in random orders."""
    on = {name: dataset for dataset, runs in corpora for names in runs.values() for name in names}
    jobs = [gaps_job(p, name, folder, on.get(name)) for name, folder in folders.items()
            if name in on or name.startswith(gaps_also)]
    scorers, sampled = {}, set()
    for dataset, runs in corpora:
        scorer = scorers.setdefault(dataset, folders[runs['gpt'][0]])
        for arm, names in runs.items():
            for name in [name for name in names if name not in sampled]:
                flags = dict(out_dir=folders[name], scorer=os.path.join(scorer, 'ckpt.pt'),
                             samples_out=os.path.join(folders[name], 'samples_orders.jsonl')) | p['orders']['gen'] | \
                    (dict(order='l2r') if arm in without_random_orders() else {})
                jobs.append(script_job(f'gen-ppl {name}', 'gen_ppl.py', flags,
                                       os.path.join(folders[name], 'gen_orders.json'), needs=[scorer, folders[name]]))
                sampled.add(name)
    return jobs


def evaluations(p, seed_list, folders):
    """finding orders' evaluations: every arm's on each corpus, and the longer pair's gaps."""
    return scored_jobs(p, folders, order_corpora(p, seed_list), gaps_also=('orders-',))


def finding_orders(m, p):
    """finding orders on the preset's corpus, then on its second one (the same claims, for the arms run there); the
    tax at the longer pair."""
    figures, claims = [], []
    for i, (dataset, runs) in enumerate(order_corpora(p, m.seed_list)):
        more = order_results(m, p, runs, corpus=dataset if i else '')
        figures, claims = figures + more[0], claims + more[1]
    return figures, claims + [longer_claim(m, p)]


def order_results(m, p, runs, corpus=''):
    """Each arm's left-to-right and any-order losses, gap NLLs (gaps.json: both sides and the left side only) and
    sample quality (gen_orders.json); the trade-off figure, the gap curves over training, and the claims against
    the GPT, the l2r-FIM mix and the paper's mix (those of them whose arms ran): (figures, claims). runs: {arm: names};
    corpus: a second corpus, named in the figures' files and the claims."""
    label = {arm: text for arm, (text, _) in ORDER_ARMS.items()}
    spans, inner = list(p['infill']['spans']), inner_spans(m, p, runs['paper'][0])
    gap = lambda name, L, column=None: gap_nll(m, name, L, column)
    gaps = lambda arm, column=None: mean_gaps(m, runs[arm], inner, column)
    samples = lambda arm, steps: sample_nlls(m, runs[arm], steps)
    sampled_in = lambda name: f"{m.read(name, 'gen_orders.json')['results'][0]['order']} order"
    numbers = {}
    for arm in runs:
        numbers |= arm_numbers(m, p, label[arm], runs[arm])
    named, title = lambda file: corpus_file(file, corpus), lambda text: corpus_title(text, corpus)
    trade = trade_off_figure(m, named('ours_orders.png'), title(FINDING.title), inner,
                             [(label[arm], runs[arm]) for arm in runs])
    by_span = m.figure(named('ours_orders_gaps.png'), title('(Ours) Gap NLL by span, each arm'), 'span (tokens hidden)',
                       'NLL per gap token (nats)',
                       [(f'{label[arm]}, ' + ('left only' if arm == 'gpt' else 'both sides'), spans,
                         [[gap(n, L) for n in runs[arm]] for L in spans]) for arm in runs], logx=True)
    key = f"val_gap_span{p['orders']['train']['eval_gaps'].split(',')[-1].split(':')[1]}"
    curves = m.figure(named('ours_orders_training.png'), title(f'(Ours) In training: {key[8:]} given both sides'),
                      'iteration', 'NLL per gap token (nats)',
                      [m.curves(label[arm], runs[arm], key) for arm in runs if arm != 'gpt'] +
                      [m.curves(f"{label['gpt']}, left only", runs['gpt'], f'{key}_left')])
    text = dict(tax=TAX, cost=AO_COST, floor=FLOOR, spans=', '.join(map(str, inner)))
    stuck = lambda *arms: m.stuck([n for arm in arms for n in runs[arm]])
    decoders = [arm for arm in runs if arm not in ('gpt', 'encoder')]
    said = lambda key, **kw: said_on(corpus, CLAIMS[key], **kw)
    claims = [claim(said('orders tax', arm=label[arm], **text), numbers if arm == decoders[0] else {},
                    between_runs(m, runs[arm], 'val_l2r', runs['gpt'], 'val_l2r')[0], stuck=stuck(arm, 'gpt'),
                    decide=within(TAX)) for arm in decoders]
    claims += [claim(said('orders gaps', arm=label[arm], reading='revealed left to right' if arm == 'encoder'
                                                  else 'the rest, then the gap left to right', **text),
                     {f'span {L}': unpaired_interval([gap(n, L, 'left') for n in runs['gpt']],
                                                     [gap(n, L) for n in runs[arm]]) for L in inner},
                     unpaired_interval(gaps('gpt'), gaps(arm)), stuck=stuck(arm, 'gpt'))
               for arm in runs if arm != 'gpt']
    claims += [claim(said('orders fim', arm=label[arm], **text), {},
                     unpaired_interval(gaps('fim-gpt'), gaps(arm)), stuck=stuck(arm, 'fim-gpt'), decide=non_inferior)
               for arm in decoders if arm != 'fim-gpt' and 'fim-gpt' in runs]
    claims += [claim(said('orders gaps paper', arm=label[arm], **text), {},
                     unpaired_interval(gaps('paper'), gaps(arm)), stuck=stuck(arm, 'paper'))
               for arm in runs if arm not in ('gpt', 'paper')]
    claims += [claim(said('orders ao', arm=label[arm], **text), {},
                     between_runs(m, runs[arm], 'val_ao', runs['paper'], 'val_ao')[0], stuck=stuck(arm, 'paper'),
                     decide=within(AO_COST)) for arm in decoders if arm != 'paper']
    claims += [claim(said('orders samples', arm=label[arm], steps=k, order=sampled_in(runs[arm][0])), {},
                     unpaired_interval(samples('paper', k)[0], samples(arm, k)[0]), stuck=stuck(arm, 'paper'))
               for arm in runs if arm not in ('gpt', 'paper') for k in order_steps(p)]
    return [trade, by_span, curves], claims


def longer_claim(m, p):
    """The tax (the paper's mix's left-to-right loss minus the GPT's of the same seed) at the preset's iterations
    against `longer` times them, on the longer pair's seeds."""
    times, seeds = p['orders']['longer'], m.seed_list[:p['orders']['longer_seeds']]
    final = lambda arm, s, t: m.metrics(order_run(arm, s, t))[-1]['val_l2r']
    tax = lambda t: [final('paper', s, t) - final('gpt', s, t) for s in seeds]
    iters = p['train']['max_iters']
    names = [order_run(arm, s, t) for arm in ('paper', 'gpt') for s in seeds for t in (1, times)]
    return claim(CLAIMS['orders longer'].format(times=times, iters=iters, longer=iters * times),
                 {f'tax at {iters} iterations, per seed': tax(1),
                  f'tax at {iters * times} iterations, per seed': tax(times)},
                 unpaired_interval(tax(1), tax(times)), stuck=m.stuck(names))


FINDING = Finding('orders', '(Ours) The any-order tax: which training orders make AO-GPT worth picking',
                  ('mixed', 'encoder', 'l2r'), lambda m, p, runs_dir: finding_orders(m, p),
                  runs=order_runs, evaluations=evaluations, needs=('orders', NO_ARMS), corpora=order_corpora,
                  losses={'orders-': arm_loss(ORDER_ARMS)})
