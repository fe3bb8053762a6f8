"""
Ours, not the paper's: AO-GPT's plateau, and queries at the target position.
  plateau  queries at the target position remove AO-GPT's plateau: the mixed kind at its chosen
           settings with position_encoding 'learned', 'rotary' and 'rotary_plain' (the query at its own
           position, as in a GPT), every seed; when each run's any-order loss first fell 0.1 nats below the
           unigram entropy; rotary against learned, and rotary against rotary_plain
  long     the same at block 256 (batch 4: the tokens per iteration of 64 x 16), 'learned' against
           'rotary', 2 seeds, any-order and left-to-right losses (cpu and smoke presets; on the gpu
           preset's block of 1,024 the plateau finding is already the long one)
These findings measure that plateau, so only their rotary runs are held to the unigram entropy (AT_PLATEAU).
"""
from aogpt.experiments.finding import Finding
from aogpt.experiments.measure import LOSS, claim
from aogpt.experiments.sweep import run_flags
from aogpt.report import spread, unpaired_interval

PLATEAU = 0.1  # nats: a run has left the plateau at the first evaluation this far below the unigram entropy
POSITIONS = ('learned', 'rotary', 'rotary_plain')  # the plateau finding's settings (model.py)
LONG_POSITIONS = ('learned', 'rotary')
# what a preset without the longer blocks of findings long and length lacks (--only names it)
LONGER_BLOCKS = 'has no longer blocks (its block is already long: its finding plateau is the long-block one)'
AT_PLATEAU = ('Runs of the other settings that end at the unigram entropy are the plateau measured here, so they '
              'are compared as they are; the claim is not judged only if a rotary run did not learn.')
CLAIMS = {
    'plateau learned': "(Ours) With queries at the target position ('rotary') AO-GPT (10% left to right, its swept "
                       "learning rate and gate_init) ends with a lower any-order loss than with the authors' learned "
                       "positions ('learned'), on the same tokens (effect: learned minus rotary, final EMA val "
                       f'any-order loss, nats). {AT_PLATEAU}',
    'plateau plain': "(Ours) It is the query at the target, not rotation as such: 'rotary' ends below 'rotary_plain' "
                     "(each query at its own slot's position, as in a GPT) (effect: rotary_plain minus rotary, final "
                     f'EMA val any-order loss, nats). {AT_PLATEAU}',
    'long learned': '(Ours) At block {block} (batch {batch}: the tokens of an iteration as before) AO-GPT (10% left to '
                    "right, its swept learning rate and gate_init) with queries at the target position ('rotary') "
                    'ends with a lower any-order loss than with learned positions (effect: learned minus rotary, '
                    f'final EMA val any-order loss, nats). {AT_PLATEAU}',
    'long l2r': '(Ours) At block {block} (batch {batch}: the tokens of an iteration as before) ... and with a lower '
                'left-to-right loss (effect: learned minus rotary, final EMA val left-to-right loss, nats). '
                f'{AT_PLATEAU}',
}


def at_positions(chosen, positions):
    """The mixed kind's chosen point with another position encoding."""
    return chosen['mixed'][0] | dict(position_encoding=positions)


def plateau_runs(p, chosen, seed_list):
    """finding plateau's runs, {name: flags}: the mixed kind's chosen settings at each position encoding, every seed."""
    return {f'mixed-{pe}-s{s}': run_flags(p, 'mixed', at_positions(chosen, pe), s) for pe in POSITIONS
            for s in seed_list}


def long_runs(p, chosen, seed_list):
    """finding long's runs, {name: flags}: as finding plateau's at the preset's longer block, 'learned' and 'rotary',
    the first 2 seeds."""
    return {f'mixed-long-{pe}-s{s}': run_flags(p, 'mixed', at_positions(chosen, pe), s) | p['long']
            for pe in LONG_POSITIONS for s in seed_list[:2]}


def plateau_left(records, unigram):
    """The first evaluated iteration at which the any-order val loss is PLATEAU nats or more below the
    unigram entropy, or 'never'."""
    return next((r['iter'] for r in records if r['val_ao'] <= unigram - PLATEAU), 'never')


def ours_numbers(m, runs):
    """Our findings' numbers: {setting: run names} -> when each run left the plateau, the final losses."""
    numbers = {f'{pe}, seed {n.rsplit("-s", 1)[1]}: first iteration {PLATEAU} nats below the unigram entropy':
               plateau_left(m.metrics(n), m.unigram) for pe, names in runs.items() for n in names}
    return numbers | {f'final val {reading} loss, {pe}': spread(m.finals(names, key)) for pe, names in runs.items()
                      for reading, key in (('any-order', 'val_ao'), ('left-to-right', 'val_l2r'))}


def ours_claim(m, text, a, b, key, numbers=None):
    """Ours: mean(a) - mean(b) of the final val key over runs; judged unless a rotary run (b) did not learn (the
    text says so: AT_PLATEAU)."""
    at_entropy = [n for n in m.stuck(a) if n not in b]
    numbers = (numbers or {}) | ({'other runs at the unigram entropy (the plateau: kept)': ', '.join(at_entropy)}
                                 if at_entropy else {})
    return claim(text, numbers, unpaired_interval(m.finals(a, key), m.finals(b, key)),
                 stuck=m.stuck(b))


def finding_plateau(m):
    runs = {pe: m.each(f'mixed-{pe}') for pe in POSITIONS}
    fig = m.figure('ours_plateau.png', PLATEAU_FINDING.title, 'iteration', f'{LOSS}, any order',
                   [m.curves(f"AO-GPT (10% l2r), position_encoding '{pe}'", names, 'val_ao')
                    for pe, names in runs.items()],
                   hlines=[('unigram entropy of the val text', [m.unigram])])
    return [fig], [
        ours_claim(m, CLAIMS['plateau learned'], runs['learned'], runs['rotary'], 'val_ao', ours_numbers(m, runs)),
        ours_claim(m, CLAIMS['plateau plain'], runs['rotary_plain'], runs['rotary'], 'val_ao')]


def finding_long(m, long):
    runs = {pe: [f'mixed-long-{pe}-s{s}' for s in m.seed_list[:2]] for pe in LONG_POSITIONS}
    fig = m.figure('ours_long_blocks.png', f"{LONG_FINDING.title}: block {long['block_size']}", 'iteration', LOSS,
                   [m.curves(f"'{pe}': {reading} loss", names, key) for pe, names in runs.items()
                    for reading, key in (('any-order', 'val_ao'), ('left-to-right', 'val_l2r'))],
                   hlines=[('unigram entropy of the val text', [m.unigram])])
    at = dict(block=long['block_size'], batch=long['batch_size'])
    return [fig], [
        ours_claim(m, CLAIMS['long learned'].format(**at), runs['learned'], runs['rotary'], 'val_ao',
                   ours_numbers(m, runs)),
        ours_claim(m, CLAIMS['long l2r'].format(**at), runs['learned'], runs['rotary'], 'val_l2r')]


PLATEAU_FINDING = Finding('plateau', "(Ours) Queries at the target position remove AO-GPT's plateau", ('mixed',),
                          lambda m, p, runs_dir: finding_plateau(m), runs=plateau_runs)
LONG_FINDING = Finding('long', '(Ours) Queries at the target position at longer blocks', ('mixed',),
                       lambda m, p, runs_dir: finding_long(m, p.get('long')), runs=long_runs, kind_seeds=False,
                       needs=('long', LONGER_BLOCKS))
