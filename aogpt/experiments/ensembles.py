"""
The paper's finding 4 (--only=5 names it too): context-order ensembles lower AO-GPT's perplexity, towards the
encoder's NELBO bound (Figs. 3, 5). eval_ppl.py reads AO-GPT's runs with ensembles of context orders and the
encoder's with its NELBO.
"""
import math
import os
import statistics

from aogpt.experiments.finding import Finding
from aogpt.experiments.jobs import script_job
from aogpt.experiments.measure import claim
from aogpt.report import paired_interval, spread, unpaired_interval

CLAIMS = {
    '4 ensemble': 'Averaging AO-GPT over context orders lowers its perplexity: ensemble={top} against ensemble=1, on '
                  'the same chunks.',
    '4 premise': "The paper's premise: with one order (ensemble=1) AO-GPT's perplexity is above the encoder's NELBO "
                 'bound (effect: log AO-GPT ppl minus log bound, in nats).',
}


def ensemble_job(p, s, folders):
    """eval_ppl.py on seed s's AO-GPT, ensembles of context orders (eval.json; finding 8 reads its one order too)."""
    mixed = folders[f'mixed-s{s}']
    return script_job(f'eval mixed-s{s}', 'eval_ppl.py', dict(out_dir=mixed, dataset=p['dataset']) | p['eval'],
                      os.path.join(mixed, 'eval.json'), needs=[mixed])


def evaluations(p, seed_list, folders):
    """eval_ppl.py on each seed's AO-GPT (ensembles of context orders) and encoder (its NELBO bound)."""
    jobs = []
    for s in seed_list:
        encoder = folders[f'encoder-s{s}']
        jobs.append(ensemble_job(p, s, folders))
        jobs.append(script_job(f'eval encoder-s{s}', 'eval_ppl.py',
                               dict(out_dir=encoder, dataset=p['dataset']) | p['eval'] |
                               dict(ensemble=1, encoder_l2r=False),
                               os.path.join(encoder, 'eval.json'), needs=[encoder]))
    return jobs


def finding_4(m):
    mixed, encoder = m.each('mixed'), m.each('encoder')
    ao = [next(iter(m.read(n, 'eval.json')['results'].values()))['ppl'] for n in mixed]
    bounds = [next(iter(m.read(n, 'eval.json')['results'].values()))['ppl'] for n in encoder]
    sizes = sorted(int(k) for k in ao[0] if k.isdigit())
    fig = m.figure('fig3_ensembles_vs_encoder.png', FINDING.title, 'orders in the ensemble', 'val perplexity',
                   [('AO-GPT, an ensemble of context orders', sizes, [[r[str(k)] for r in ao] for k in sizes])],
                   hlines=[('encoder MDM: NELBO bound, over seeds', [b['nelbo_bound'] for b in bounds])], logx=True)
    top = sizes[-1]
    falls = paired_interval([[a - b for a, b in zip(m.chunk_nll(n, 'eval.json', '1'),
                                                     m.chunk_nll(n, 'eval.json', str(top)))] for n in mixed])
    log_ppl = {k: statistics.mean(math.log(r[str(k)]) for r in ao) for k in sizes}
    trend = all(log_ppl[a] >= log_ppl[b] for a, b in zip(sizes, sizes[1:]))
    stuck = m.stuck(mixed + encoder)
    ao_nll = {k: [statistics.mean(m.chunk_nll(n, 'eval.json', str(k))) for n in mixed] for k in (1, top)}
    nelbo = [statistics.mean(m.chunk_nll(n, 'eval.json', 'nelbo')) for n in encoder]
    seed_by_seed = {f'seed {s}: AO-GPT ppl ensemble=1 / ensemble={top} / encoder bound':
                    f"{r['1']:.4g} / {r[str(top)]:.4g} / {b['nelbo_bound']:.4g} ± {b['nelbo_bound_se']:.2g}"
                    for s, r, b in zip(m.seed_list, ao, bounds)}
    return [fig], [
        claim(CLAIMS['4 ensemble'].format(top=top),
              {f'AO-GPT ppl, ensemble={k}': spread([r[str(k)] for r in ao]) for k in sizes} |
              {'falls at every doubling of the ensemble (mean over seeds)': trend}, falls, stuck=m.stuck(mixed)),
        claim(CLAIMS['4 premise'],
              seed_by_seed | {f'gap left with ensemble={top} (nats)': unpaired_interval(ao_nll[top], nelbo)},
              unpaired_interval(ao_nll[1], nelbo), stuck=stuck)]


FINDING = Finding('4', 'Context-order ensembles lower the perplexity, towards the encoder (Figs. 3, 5)',
                  ('mixed', 'encoder'), lambda m, p, runs_dir: finding_4(m), evaluations=evaluations)
