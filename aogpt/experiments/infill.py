"""
Ours, not the paper's: finding infill. Each kind's NLL of a span of 1, 4, 16 and 64 tokens given the rest of its val
chunk (eval_ppl.py --gaps): AO-GPT exactly (the rest, then the gap left to right; ensembles of the gap's orders), the
l2r GPT from the left side only, the encoder's gap revealed left to right and its NELBO bound on the gap; AO-GPT
against the l2r GPT and against the encoder, on the mean over the spans shorter than the block.
"""
import statistics

from aogpt.experiments.finding import Finding
from aogpt.experiments.jobs import gaps_job
from aogpt.experiments.measure import FLOOR, claim, non_inferior
from aogpt.report import spread, unpaired_interval

CLAIMS = {
    'infill right': '(Ours) AO-GPT uses the right context: a gap read after the rest of its chunk (left to right, '
                    "exactly; AO-GPT 10% left to right) has a lower NLL per gap token than the left-to-right GPT's, "
                    'which reads the left side only (each with its swept settings, the same chunks and gaps; effect: '
                    "the GPT's NLL minus AO-GPT's, nats per gap token, averaged over the spans shorter than the "
                    'block: {spans} tokens).',
    'infill encoder': '(Ours) AO-GPT fills gaps at least as well as the encoder: its exact NLL per gap token (the '
                      "gap read left to right after the rest) is not above the encoder's exact NLL of the gap "
                      'revealed left to right by more than the floor ({floor} nats) (effect: the encoder minus '
                      'AO-GPT, averaged over the spans {spans}; holds if the interval lies above minus the floor). '
                      "The encoder's NELBO bound restricted to the gap is in the numbers.",
}


def evaluations(p, seed_list, folders):
    """eval_ppl.py --gaps on each seed's run of each kind."""
    return [gaps_job(p, f'{kind}-s{s}', folders[f'{kind}-s{s}']) for s in seed_list for kind in FINDING.kinds]


def finding_infill(m, infill):
    """Gap NLL against the span's length for each kind (eval_ppl.py --gaps, gaps.json), and the two claims, each on
    the mean over the spans shorter than the block (a span of the whole block has no other side)."""
    mixed, encoder, l2r = m.each('mixed'), m.each('encoder'), m.each('l2r')
    block = m.read(mixed[0], 'gaps.json')['block_size']
    spans, inner = list(infill['spans']), [L for L in infill['spans'] if L < block]

    def nll(name, column, span):
        return next(iter(m.read(name, 'gaps.json')['results'].values()))[f'span:{span}']['nll'][column]

    def over_spans(names, column):  # each run's NLL per gap token averaged over the inner spans
        return [statistics.mean(nll(n, column, L) for L in inner) for n in names]
    top = infill['ensemble']
    series = [('AO-GPT: the rest, then the gap left to right', mixed, 'gap_l2r'),
              (f'AO-GPT: an ensemble of {top} random orders of the gap', mixed, str(top)),
              ('AO-GPT: the left side only', mixed, 'left'), ('left-to-right GPT: the left side only', l2r, 'left'),
              ('encoder: the gap revealed left to right', encoder, 'revealed'),
              ('encoder: its NELBO bound on the gap', encoder, 'nelbo')]
    fig = m.figure('ours_infill.png', FINDING.title, 'span (tokens hidden, one span per val chunk)',
                   'NLL per gap token (nats)',
                   [(label, spans, [[nll(n, column, L) for n in names] for L in spans]) for label, names, column in series],
                   logx=True)
    numbers = {f'{label}, span {L}': spread([nll(n, column, L) for n in names])
               for label, names, column in series for L in spans}
    text = dict(spans=', '.join(map(str, inner)), floor=FLOOR)
    return [fig], [
        claim(CLAIMS['infill right'].format(**text), numbers,
              unpaired_interval(over_spans(l2r, 'left'), over_spans(mixed, 'gap_l2r')), stuck=m.stuck(mixed + l2r)),
        claim(CLAIMS['infill encoder'].format(**text),
              {'encoder NELBO bound minus AO-GPT (nats per gap token)':
               unpaired_interval(over_spans(encoder, 'nelbo'), over_spans(mixed, 'gap_l2r'))},
              unpaired_interval(over_spans(encoder, 'revealed'), over_spans(mixed, 'gap_l2r')),
              stuck=m.stuck(mixed + encoder), decide=non_inferior)]


FINDING = Finding('infill', '(Ours) Infilling: AO-GPT reads both sides of a gap', ('mixed', 'encoder', 'l2r'),
                  lambda m, p, runs_dir: finding_infill(m, p['infill']), evaluations=evaluations)
