"""
Ours, not the paper's: finding length. AO-GPT with queries at the target ('rotary', the mixed kind's settings) against
the encoder's NELBO and the l2r GPT, each with its swept settings, at blocks 64, 256 and 1,024 (the tokens of an
iteration kept: batch 16, 4, 1), 2 seeds; at the longer blocks also our query-only variants ('rotary_half_heads',
'rotary_upper_layers'), and AO-GPT's and the encoder's learning rates swept again there by the sweep's rule (the l2r
GPT keeps its choice); final losses against the block size, losses by the share known and by the distance to the
nearest known token (cpu and smoke presets).
"""
import os

import numpy as np
import torch

from aogpt.checkpoints import load_checkpoint
from aogpt.common import write_json
from configurator import fail
from aogpt.experiments.finding import Finding, Sweep
from aogpt.experiments.jobs import read_json, read_metrics
from aogpt.experiments.measure import LOSS, claim
from aogpt.experiments.plateau import LONGER_BLOCKS
from aogpt.experiments.presets import SEEDS
from aogpt.experiments.sweep import own_loss, point_name, run_flags
from aogpt.report import spread, unpaired_interval
from aogpt.scoring import losses_by_context

# AO-GPT's query settings at the longer blocks ('rotary' and our query-only variants, model.py)
QUERY_POSITIONS = ('rotary', 'rotary_half_heads', 'rotary_upper_layers')
BLOCK_SWEPT = ('mixed', 'encoder')  # the kinds whose learning rate is swept again at each longer block
SHARES = 10  # the known share of a block, in bins of a tenth
CLAIMS = {
    'length encoder': "(Ours) At block {block} AO-GPT (10% left to right, its swept learning rate, position_encoding "
                      "'{positions}') ends with an any-order loss below the encoder's NELBO (each with its swept "
                      "settings{swept}, the same tokens; effect: the encoder's final EMA val NELBO minus AO-GPT's "
                      'any-order loss, nats).',
    'length variant': "(Ours) At block {block} AO-GPT with '{positions}' ends with a lower any-order loss than with "
                      "'rotary' (each its own swept rate; effect: rotary minus the variant, final EMA val any-order "
                      'loss, nats).',
}


def length_run(label, block_size, seed):
    return f'{label}-block{block_size}-s{seed}'


def length_entries(chosen, block, base_block):
    """finding length's models at a block: {label: (kind, point)}. AO-GPT with queries at the target ('mixed': the
    mixed kind's chosen settings, position_encoding 'rotary'), at the longer blocks also each query-only variant
    ('mixed-<position_encoding>'); the encoder and the l2r GPT at their chosen settings."""
    at = lambda positions: chosen['mixed'][0] | dict(position_encoding=positions)
    return ({query_label(pe): ('mixed', at(pe)) for pe in block_queries(block, base_block)} |
            {kind: (kind, chosen[kind][0]) for kind in ('encoder', 'l2r')})


def block_queries(block, base_block):
    """AO-GPT's query settings finding length runs at a block: the variants at the longer blocks only."""
    return QUERY_POSITIONS if block != base_block else QUERY_POSITIONS[:1]


def query_label(positions):
    return 'mixed' if positions == 'rotary' else f'mixed-{positions}'


def block_sweep_runs(p, chosen):
    """finding length, {name: flags}: at each block beyond the preset's own, the learning rate of AO-GPT's entries
    and the encoder's swept again over the grid's rates (their other settings as chosen), on the first seed."""
    base = p['lengths'][0][0]
    return {block_point_name(kind, point | dict(learning_rate=lr), block):
            run_flags(p, kind, point | dict(learning_rate=lr), SEEDS[0]) | flags
            for block, flags in p['lengths'][1:] for kind, point in length_entries(chosen, block, base).values()
            if kind in BLOCK_SWEPT for lr in p['grid']['learning_rate']}


def block_point_name(kind, point, block):
    return f'{point_name(kind, point)}-block{block}'


def choose_at_blocks(p, chosen, runs_dir):
    """{(label, block): point} of finding length: at the preset's own block the sweep's choice; at a longer one, for
    the block-swept kinds, the learning rate whose run ends with the lowest loss in the kind's own objective."""
    base, picked = p['lengths'][0][0], {}
    for block, _ in p['lengths']:
        for label, (kind, point) in length_entries(chosen, block, base).items():
            rates = p['grid']['learning_rate'] if block != base and kind in BLOCK_SWEPT else [point['learning_rate']]
            loss = lambda lr: own_loss(kind, read_metrics(os.path.join(
                runs_dir, block_point_name(kind, point | dict(learning_rate=lr), block)))[-1])
            picked[label, block] = point | dict(learning_rate=min(rates, key=loss) if len(rates) > 1 else rates[0])
    return picked


def chosen_at_blocks(p, chosen):
    """{(label, block): point}: each model's point as the kinds chose it, at every block (the dry run's stand-in for
    choose_at_blocks)."""
    return {(label, block): point for block, _ in p['lengths']
            for label, (_, point) in length_entries(chosen, block, p['lengths'][0][0]).items()}


def length_runs(p, chosen, seed_list, at_blocks):
    """finding length's runs, {name: flags}: each model of each block at its point there (at_blocks:
    choose_at_blocks), the first 2 seeds."""
    base = p['lengths'][0][0]
    return {length_run(label, block, s): run_flags(p, kind, at_blocks[label, block], s) | flags
            for block, flags in p['lengths'] for label, (kind, _) in length_entries(chosen, block, base).items()
            for s in seed_list[:2]}


def context_losses(folder, dataset, block, chunks, per_share, seed=SEEDS[0]):
    """A run's val losses by the share of the block known and by the distance from the nearest known token
    (scoring.losses_by_context, the first `chunks` val chunks of its block, each in a random order; the encoder at
    per_share known counts evenly within each tenth): {'share': mean nll per tenth known, 'distance': {d: mean nll} for
    d = 1, 2, 4, ... (up to the next power of two) and 'none'}. Kept in folder/by_context.json, so that the
    figure redraws without the checkpoint."""
    path = os.path.join(folder, 'by_context.json')
    if os.path.exists(path):
        return read_json(path)
    if not os.path.exists(os.path.join(folder, 'ckpt.pt')):
        fail(f'{folder} has neither by_context.json nor ckpt.pt: train the run again (delete its folder) to measure it')
    model = load_checkpoint(os.path.join(folder, 'ckpt.pt'))[0]
    val = np.memmap(os.path.join('data', dataset, 'val.bin'), dtype=np.uint16, mode='r')
    generator = torch.Generator().manual_seed(seed)
    grid = [int((i + (j + 0.5) / per_share) * block / SHARES) for i in range(SHARES) for j in range(per_share)]
    parts = [losses_by_context(model, torch.from_numpy(val[i * block:(i + 1) * block].astype(np.int64)),
                               torch.randperm(block, generator=generator), grid) for i in range(chunks)]
    known, distances, nlls = (torch.cat(p) for p in zip(*parts))
    # each known count weighs as one prediction, as a decoder's slot does (the encoder predicts block - c at c)
    weights = 1 / torch.bincount(known)[known].double()
    mean = lambda where: ((weights * nlls)[where].sum() / weights[where].sum()).item()
    share = known * SHARES // block
    # distance d goes to the power of two at or above it: 1, 2, 4 (3 and 4), 8 (5 to 8), ...
    rounded = torch.where(distances < block, 2 ** torch.ceil(torch.log2(distances.double())).long(), -1)
    result = dict(share=[mean(share == i) for i in range(SHARES)],
                  distance={('none' if d == -1 else str(d)): mean(rounded == d) for d in rounded.unique().tolist()})
    write_json(path, result)
    return result


def finding_length(m, lengths, dataset, context):
    """AO-GPT (queries at the target; at the longer blocks also the query-only variants) against the encoder's NELBO
    and the l2r GPT at each block; the any-order loss of AO-GPT and the encoder by the share of the block known and
    by the distance from the nearest known token."""
    base = lengths[0][0]
    readings = {query_label(pe): ('val_ao', f"AO-GPT, '{pe}', any-order loss") for pe in QUERY_POSITIONS} | {
        'encoder': ('val_ao', 'encoder MDM, NELBO'), 'l2r': ('val_l2r', 'left-to-right GPT, left-to-right loss')}
    runs = {block: {label: [length_run(label, block, s) for s in m.seed_list[:2]]
                    for label in [query_label(pe) for pe in block_queries(block, base)] + ['encoder', 'l2r']}
            for block, _ in lengths}
    blocks = list(runs)
    fig = m.figure('ours_length.png', FINDING.title, 'block size (tokens; the tokens of an iteration kept)',
                   f'final {LOSS}', [(text, [b for b in blocks if label in runs[b]],
                                      [m.finals(runs[b][label], key) for b in blocks if label in runs[b]])
                                     for label, (key, text) in readings.items()], logx=True)
    final = lambda block, label: m.finals(runs[block][label], readings[label][0])
    claims = []
    for block, by_label in runs.items():
        numbers = {f'final val loss, {readings[label][1]}, learning rate '
                   f"{m.read(names[0], 'args.json')['learning_rate']:g}": spread(final(block, label))
                   for label, names in by_label.items()}
        for pe in block_queries(block, base):
            label = query_label(pe)
            swept = '' if block == base else ', the rate swept again at this block'
            claims.append(claim(CLAIMS['length encoder'].format(block=block, positions=pe, swept=swept),
                                numbers if pe == 'rotary' else {},
                                unpaired_interval(final(block, 'encoder'), final(block, label)),
                                stuck=m.stuck(by_label[label] + by_label['encoder'])))
        for pe in block_queries(block, base)[1:]:
            claims.append(claim(CLAIMS['length variant'].format(block=block, positions=pe), {},
                                unpaired_interval(final(block, 'mixed'), final(block, query_label(pe))),
                                stuck=m.stuck(by_label[query_label(pe)] + by_label['mixed'])))
    by_context = {(block, label): [context_losses(m.folders[name], dataset, block, **context)
                                   for name in runs[block][label]] for block in blocks for label in ('mixed', 'encoder')}
    labels = {'mixed': 'AO-GPT', 'encoder': 'encoder'}
    shares = [(i + 0.5) / SHARES for i in range(SHARES)]
    by_share = m.figure('ours_length_by_share.png', '(Ours) AO-GPT and the encoder: loss by the share known',
                        'share of the block known (the place in the order, over the block)', LOSS,
                        [(f'{labels[kind]}, block {block}', shares, [[r['share'][i] for r in rows] for i in range(SHARES)])
                         for (block, kind), rows in by_context.items()])
    by_distance = m.figure('ours_length_by_distance.png', '(Ours) AO-GPT and the encoder: loss by the nearest known token',
                           'distance to the nearest known token (up to; none known: drawn at twice the block)', LOSS,
                           [distance_series(f'{labels[kind]}, block {block}', block, rows)
                            for (block, kind), rows in by_context.items()], logx=True)
    return [fig, by_share, by_distance], claims


def distance_series(label, block, rows):
    """A figure series of runs' losses by distance: the distances every run has, 'none' drawn at 2 x block."""
    keys = sorted(set.intersection(*(set(r['distance']) for r in rows)), key=lambda d: 2 * block if d == 'none' else int(d))
    return label, [2 * block if d == 'none' else int(d) for d in keys], [[r['distance'][d] for r in rows] for d in keys]


FINDING = Finding('length', '(Ours) AO-GPT with target queries against the encoder as blocks grow',
                  ('mixed', 'encoder', 'l2r'),
                  lambda m, p, runs_dir: finding_length(m, p.get('lengths'), p['dataset'], p.get('context')),
                  runs=length_runs, needs=('lengths', LONGER_BLOCKS),
                  sweep=Sweep("finding length's sweep at the longer blocks", block_sweep_runs, choose_at_blocks,
                              chosen_at_blocks))
