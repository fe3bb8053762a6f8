"""
Ours, not the paper's: finding streams. Two streams (model.py's target_injection='two_stream': keys and values from a
content stream without targets) against the single stream: finding orders' FIM mix (its runs) against the same with
two streams at its iterations and at half of them (about its training compute), and with the target in the rotary
queries only ('queries'), each at the mixed kind's chosen settings, beside finding orders' GPT; finding orders'
readings (losses, gaps both sides and left only, samples scored by the GPT) and ms a sampled token; each arm against
the single stream (any-order loss, gaps of 4 and 16 tokens, by at least 0.05 nats) and the GPT (gaps from the left,
the tax); the same-iteration two streams again on the second corpus (cpu and smoke presets).
"""
from aogpt.experiments.finding import Finding
from aogpt.experiments.measure import between_runs, claim, within
from aogpt.experiments.orders import CLAIMS as ORDER_CLAIMS
from aogpt.experiments.orders import ORDER_ARMS, TAX, arm_loss, order_flags, order_run, scored_jobs
from aogpt.experiments.readings import (arm_numbers, corpus_file, corpus_title, gap_nll, inner_spans, mean_gaps, order_steps,
                                  said_on, sample_nlls, trade_off_figure)
from aogpt.report import spread, unpaired_interval

# the single stream is finding orders' FIM mix (the recipe it recommends; its runs), against two streams at its
# iterations and at half of them (about its training compute: a two-stream step does both streams' work), the target
# in the rotary queries only, and finding orders' GPT: {arm: (label, kind)}, the GPT first; every AO-GPT arm at the
# mixed kind's chosen settings with the FIM mix's orders; stream_arms gives the flags
STREAM_ARMS = {'gpt': ORDER_ARMS['gpt'], 'fim-mix': ('AO-GPT, one stream (the FIM mix)', 'mixed'),
               'two': ('two streams (the FIM mix, the same iterations)', 'mixed'),
               'two-half': ("two streams (the FIM mix, half the iterations: about the single stream's training "
                            'compute)', 'mixed'),
               'queries': ('the target in the rotary queries only (the FIM mix)', 'mixed')}
STREAM_GAIN = 0.05  # nats: finding streams' goal, two streams at least this far below the single stream
STREAM_SPANS = (4, 16)  # finding streams: the gaps (tokens) its goal names
CLAIMS = {
    'streams ao': '(Ours) {arm} ends with a lower any-order loss than the single stream (the FIM mix) by at least '
                  '{gain} nats (each on every seed, the same orders; effect: the single stream\'s final EMA val '
                  'any-order loss minus its own; holds if the interval lies above zero and the effect reaches {gain}).',
    'streams gaps': '(Ours) {arm} fills gaps of {span} tokens better than the single stream by at least {gain} nats: '
                    'its exact NLL per gap token given both sides (the rest, then the gap left to right) (effect: the '
                    "single stream's NLL minus its own; holds if the interval lies above zero and the effect reaches "
                    '{gain}).',
}


def stream_arms(max_iters):
    """finding streams' flags of each arm, over finding orders' FIM mix's (the GPT: over its own)."""
    half = dict(max_iters=max_iters // 2, lr_decay_iters=max_iters // 2)
    return {'gpt': {}, 'fim-mix': {}, 'two': dict(target_injection='two_stream'),
            'two-half': dict(target_injection='two_stream') | half,
            'queries': dict(target_injection='queries', position_encoding='rotary')}


def stream_run(arm, seed, corpus=''):
    """A run's name: finding orders' for its GPT and FIM mix (they are its runs), else streams-<arm>[-<corpus>]-s<seed>."""
    if arm in ('gpt', 'fim-mix'):
        return order_run(arm, seed, corpus=corpus)
    return f"streams-{arm}{f'-{corpus}' if corpus else ''}-s{seed}"


def stream_flags(p, chosen, arm, seed, corpus=''):
    """train.py's flags of one of finding streams' runs: finding orders' GPT, or its FIM mix with the arm's own."""
    base = order_flags(p, chosen, 'gpt' if arm == 'gpt' else 'fim-mix', seed)
    return base | stream_arms(p['train']['max_iters'])[arm] | (dict(dataset=corpus) if corpus else {})


def stream_settings(p):
    """finding streams' [(corpus, arms)]: every arm on the preset's corpus (''), then its second arms on finding
    orders' second corpus where the preset has one."""
    second = p['orders'].get('second', {}).get('dataset')
    return [('', list(STREAM_ARMS))] + ([(second, list(p['streams']['second_arms']))] if second else [])


def stream_corpora(p, seed_list):
    """finding streams' [(dataset, {arm: its run names})], as stream_settings."""
    return [(corpus or p['dataset'], {arm: [stream_run(arm, s, corpus) for s in seed_list] for arm in arms})
            for corpus, arms in stream_settings(p) if arms]


def stream_runs(p, chosen, seed_list):
    """finding streams' runs, {name: flags}: each arm of each corpus on every seed."""
    return {stream_run(arm, s, corpus): stream_flags(p, chosen, arm, s, corpus)
            for corpus, arms in stream_settings(p) for s in seed_list for arm in arms}


def evaluations(p, seed_list, folders):
    """finding streams' evaluations: every arm's on each corpus (finding orders' runs among them evaluated once)."""
    return scored_jobs(p, folders, stream_corpora(p, seed_list))


def finding_streams(m, p):
    """finding streams on each of its corpora (stream_corpora): the same claims on each."""
    figures, claims = [], []
    for i, (dataset, runs) in enumerate(stream_corpora(p, m.seed_list)):
        more = stream_results(m, p, runs, corpus=dataset if i else '')
        figures, claims = figures + more[0], claims + more[1]
    return figures, claims


def stream_results(m, p, runs, corpus=''):
    """Each arm's numbers (finding orders' readings and its samples' ms a token; not training minutes: a run's
    wall clock counts pauses and whatever else ran beside it, and the cpu runs' restarted at each resume), the
    trade-off figure, and the claims of each arm but the GPT and the single stream: against the single stream (the
    any-order loss, gaps of STREAM_SPANS) by STREAM_GAIN, against the GPT (gaps from the left, the tax)."""
    label = {arm: text for arm, (text, _) in STREAM_ARMS.items()}
    inner = inner_spans(m, p, runs['fim-mix'][0])
    numbers = {}
    for arm in runs:
        numbers |= arm_numbers(m, p, label[arm], runs[arm])
        numbers |= {f"{label[arm]}: {k} steps, ms a sampled token (batch {p['orders']['gen']['batch_size']})":
                    spread([1000 * r['seconds_per_sample'] / m.read(n, 'gaps.json')['block_size']
                            for n, r in zip(runs[arm], sample_nlls(m, runs[arm], k)[1])]) for k in order_steps(p)}
    named, title = lambda file: corpus_file(file, corpus), lambda text: corpus_title(text, corpus)
    trade = trade_off_figure(m, named('ours_streams.png'), title(FINDING.title), inner,
                             [(label[arm], runs[arm]) for arm in runs])
    gap = lambda name, L, column=None: gap_nll(m, name, L, column)
    text = dict(gain=STREAM_GAIN, tax=TAX, spans=', '.join(map(str, inner)))
    stuck = lambda *arms: m.stuck([n for arm in arms for n in runs[arm]])
    said = lambda key, **kw: said_on(corpus, (ORDER_CLAIMS | CLAIMS)[key], **kw)
    claims = []
    for arm in [arm for arm in runs if arm not in ('gpt', 'fim-mix')]:
        claims.append(claim(said('streams ao', arm=label[arm], **text), numbers if not claims else {},
                            between_runs(m, runs['fim-mix'], 'val_ao', runs[arm], 'val_ao')[0], floor=STREAM_GAIN,
                            stuck=stuck(arm, 'fim-mix')))
        claims += [claim(said('streams gaps', arm=label[arm], span=L, **text), {},
                         unpaired_interval([gap(n, L) for n in runs['fim-mix']], [gap(n, L) for n in runs[arm]]),
                         floor=STREAM_GAIN, stuck=stuck(arm, 'fim-mix')) for L in STREAM_SPANS if L in inner]
        claims.append(claim(said('orders gaps', arm=label[arm], reading='the rest, then the gap left to right', **text),
                            {}, unpaired_interval(mean_gaps(m, runs['gpt'], inner, 'left'),
                                                  mean_gaps(m, runs[arm], inner)), stuck=stuck(arm, 'gpt')))
        claims.append(claim(said('orders tax', arm=label[arm], **text), {},
                            between_runs(m, runs[arm], 'val_l2r', runs['gpt'], 'val_l2r')[0], stuck=stuck(arm, 'gpt'),
                            decide=within(TAX)))
    return [trade], claims


FINDING = Finding('streams', '(Ours) Two streams: keys and values that carry no target, against the single stream',
                  ('mixed', 'l2r'), lambda m, p, runs_dir: finding_streams(m, p), runs=stream_runs,
                  evaluations=evaluations, kind_seeds=False, needs=('streams', 'has no two-stream arms: use --preset=cpu'),
                  corpora=stream_corpora,
                  losses={'streams-': arm_loss(STREAM_ARMS)})
