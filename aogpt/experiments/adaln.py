"""
The paper's finding 8: adaLN against sigma-GPT's additive injection (each with the position encoding its sweep chose,
named in the claim), and EMA against the raw weights (eval_ppl.py on AO-GPT's raw weights, beside finding 4's
reading of its EMA weights).
"""
import os

from aogpt.experiments.ensembles import ensemble_job
from aogpt.experiments.finding import Finding
from aogpt.experiments.jobs import script_job
from aogpt.experiments.measure import LOSS, between_runs, claim
from aogpt.report import paired_interval, spread

CLAIMS = {
    '8 adaln': "With EMA on both, AO-GPT's adaLN reaches a lower any-order loss than sigma-GPT's additive injection "
               "(each with its own swept settings: position_encoding {ao!r} for AO-GPT, {sigma!r} for "
               'sigma-GPT{differ}). Besides the injection the two recipes differ in their norms (RMSNorm / '
               'LayerNorm), QK-norm (on / off), head (untied with a bias / tied to the embedding), dropout placement '
               'and init (truncated normal / normal): model.RECIPES.',
    '8 ema': "EMA lowers AO-GPT's any-order loss: the same runs' EMA weights against their raw weights, on the same "
             'chunks and orders (eval_ppl.py, ensemble=1).',
}


def evaluations(p, seed_list, folders):
    """eval_ppl.py on each seed's AO-GPT with its raw weights (one order) beside finding 4's reading of its EMA
    weights (which runs once when both findings run)."""
    data = dict(dataset=p['dataset']) | p['eval'] | dict(ensemble=1, use_ema=False)
    return [job for s, folder in ((s, folders[f'mixed-s{s}']) for s in seed_list)
            for job in (script_job(f'eval mixed-s{s} raw weights', 'eval_ppl.py', dict(out_dir=folder) | data,
                                   os.path.join(folder, 'eval_raw.json'), needs=[folder]),
                        ensemble_job(p, s, folders))]


def finding_8(m):
    mixed, sigma = m.each('mixed'), m.each('sigma')
    fig = m.figure('fig8_adaln_vs_sigma.png', FINDING.title, 'iteration', f'{LOSS}, any order',
                   [m.curves('AO-GPT (adaLN), EMA weights', mixed, 'val_ao'),
                    m.curves('sigma-GPT (additive), EMA weights', sigma, 'val_ao')])
    interval, stuck = between_runs(m, sigma, 'val_ao', mixed, 'val_ao')
    positions = {'AO-GPT': m.positions(mixed), 'sigma-GPT': m.positions(sigma)}
    differ = '; the two differ, so the comparison includes the position encoding' \
        if positions['AO-GPT'] != positions['sigma-GPT'] else ''
    ema = paired_interval([[raw - avg for raw, avg in zip(m.chunk_nll(n, 'eval_raw.json', '1'),
                                                           m.chunk_nll(n, 'eval.json', '1'))] for n in mixed])
    return [fig], [
        claim(CLAIMS['8 adaln'].format(ao=positions['AO-GPT'], sigma=positions['sigma-GPT'], differ=differ),
              {'final val any-order loss, AO-GPT': spread(m.finals(mixed, 'val_ao')),
               'final val any-order loss, sigma-GPT': spread(m.finals(sigma, 'val_ao')),
               'position encodings, AO-GPT / sigma-GPT' + (' (they differ)' if differ else ''):
                   ' / '.join(positions.values())}, interval, stuck=stuck),
        claim(CLAIMS['8 ema'], {}, ema, stuck=m.stuck(mixed))]


FINDING = Finding('8', 'AdaLN against additive injection; EMA against raw weights', ('mixed', 'sigma'),
                  lambda m, p, runs_dir: finding_8(m), evaluations=evaluations)
