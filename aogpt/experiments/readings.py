"""
How findings orders, adapt and streams read their runs: each run's gap NLLs (gaps.json) and samples
(gen_orders.json), each arm's numbers over its runs, the trade-off figure, and a second corpus named in the figures'
files and the claims.
"""
import statistics

from aogpt.experiments.measure import spread_pair
from aogpt.report import spread

BOTH_SIDES = {'gpt': 'left', 'encoder': 'revealed'}  # what an arm reads of a gap given both sides: a decoder 'gap_l2r'


def arm_of(name, arms):
    """The arm among arms of a run of a finding (the name after its finding's, then '-'), or None: orders-fim-mix-s1
    and scarce-fim-mix-50k-s1 are FIM mixes, streams-two-half-s1 is two streams at half the iterations (the longest
    arm name that fits)."""
    rest = name.partition('-')[2]
    return max((arm for arm in arms if rest.startswith(f'{arm}-')), key=len, default=None)


def gap_nll(m, name, span, column=None):
    """A run's NLL per gap token at a span (gaps.json): column's, else what its arm reads given both sides."""
    result = next(iter(m.read(name, 'gaps.json')['results'].values()))[f'span:{span}']['nll']
    return result[column or BOTH_SIDES.get(arm_of(name, BOTH_SIDES), 'gap_l2r')]


def inner_spans(m, p, name):
    """The preset's spans shorter than a run's block (a span of the whole block has no other side)."""
    block = m.read(name, 'gaps.json')['block_size']
    return [L for L in p['infill']['spans'] if L < block]


def mean_gaps(m, names, spans, column=None):
    """Each run's NLL per gap token given both sides (or column), averaged over the spans."""
    return [statistics.mean(gap_nll(m, n, L, column) for L in spans) for n in names]


def order_steps(p):
    return [int(k) for k in p['orders']['gen']['steps'].split(',')]


def sample_nlls(m, names, steps):
    """Each run's mean per-sample NLL at `steps` (gen_orders.json), and its rows there."""
    rows = [next(r for r in m.read(n, 'gen_orders.json')['results'] if r['steps'] == steps) for n in names]
    return [statistics.mean(r['sample_nll']) for r in rows], rows


def arm_numbers(m, p, label, names):
    """An arm's numbers over its runs: its final losses, its gap NLLs at each span given both sides (and, but for the
    encoder, from the left only), its samples' gen PPL and entropy at each number of steps."""
    spans = p['infill']['spans']
    numbers = {f'{label}: final val loss, {reading}': spread(m.finals(names, key))
               for reading, key in (('left to right', 'val_l2r'), ('any order', 'val_ao'))}
    numbers |= {f'{label}: gap NLL, span {L}, both sides': spread([gap_nll(m, n, L) for n in names]) for L in spans}
    if arm_of(names[0], ('encoder',)) is None:
        numbers |= {f'{label}: gap NLL, span {L}, left only': spread([gap_nll(m, n, L, 'left') for n in names])
                    for L in spans}
    return numbers | {f'{label}: {k} steps, gen PPL, entropy': spread_pair(sample_nlls(m, names, k)[1])
                      for k in order_steps(p)}


def trade_off_figure(m, file, title, inner, points):
    """Each arm's final left-to-right loss against its gap NLL given both sides (the mean over the inner spans);
    points: [(label, run names)]."""
    return m.point_figure(file, title, 'final val left-to-right loss (nats/char)',
                          f"gap NLL given both sides (nats/char; mean over spans {', '.join(map(str, inner))})",
                          [(label, m.finals(names, 'val_l2r'), mean_gaps(m, names, inner)) for label, names in points])


def corpus_file(file, corpus):
    """A figure's file on a corpus other than the preset's: named after it."""
    return file.replace('.png', f'_{corpus}.png' if corpus else '.png')


def corpus_title(text, corpus):
    return f'{text} ({corpus})' if corpus else text


def said_on(corpus, text, **kw):
    """A claim's text, on a corpus other than the preset's: its (Ours) names it."""
    return text.format(**kw).replace('(Ours)', f'(Ours, on {corpus})' if corpus else '(Ours)')
