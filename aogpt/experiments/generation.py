"""
The paper's finding 6 (--only=7 names it too), generation: AO-GPT's KV cache against the encoder's forward per step,
in steps and in sequence length (Fig. 4), timed through the library with every repeat kept, the two models taking
turns; sample quality against steps (gen_ppl.py, one scorer), and AO-GPT's samples against the encoder's (Table 2).
"""
import json
import math
import os
import statistics
import time

import torch

from aogpt.checkpoints import load_checkpoint
from aogpt.common import autocast, default_device, default_dtype
from aogpt.decoding import generate
from aogpt.experiments.finding import Finding
from aogpt.experiments.jobs import read_json, script_job
from aogpt.experiments.measure import claim, comparable, spread_pair
from aogpt.experiments.presets import SEEDS
from aogpt.report import mean_interval, paired_interval, unpaired_interval

SAME = 0.1  # nats: "comparable" sample quality, log gen PPLs within 10%
CLAIMS = {
    '6 time': 'With its KV cache AO-GPT generates faster than the encoder (a full forward per step) at one token per '
              'step ({steps} steps, {block} tokens); the growth of each with the steps is in the numbers (effect: log '
              "of the encoder's seconds over AO-GPT's, per timing repeat).",
    '6 length': "At one token per step the encoder's time over AO-GPT's grows with the sequence length, from {short} "
                "to {long} tokens (the paper's ~25x at 1,024 tokens is a statement about scaling; effect: the log "
                'ratio at the longest length minus that at the shortest, per timing repeat).',
    '6 steps': "More steps give better samples: AO-GPT's gen PPL at the fewest steps ({fewest}) is above that at the "
               'most ({most}), temperature {temperature}, top_p {top_p} (effect in nats of per-sample log gen PPL).',
    '6 encoder': "With temperature annealing (temperature {temperature}, top_p {top_p}) at {most} steps AO-GPT's "
                 "samples are as good as the encoder's: their log gen PPLs (one scorer) differ by less than {same} "
                 'nats (effect: AO-GPT minus encoder; holds if the interval lies within the tolerance, does not hold '
                 'if wholly outside it).',
}


def evaluations(p, seed_list, folders):
    """gen_ppl.py on each seed's AO-GPT and encoder: their samples at each number of steps, scored by one model (the
    l2r kind's first run, or the preset's scorer)."""
    jobs = []
    scorer = os.path.join(folders[f'l2r-s{seed_list[0]}'], 'ckpt.pt') if p['scorer'] == 'l2r' else p['scorer']
    for s in seed_list:
        for kind in ('mixed', 'encoder'):
            folder = folders[f'{kind}-s{s}']
            flags = dict(out_dir=folder, scorer=scorer, samples_out=os.path.join(folder, 'samples.jsonl')) | p['gen']
            jobs.append(script_job(f'gen-ppl {kind}-s{s}', 'gen_ppl.py', flags, os.path.join(folder, 'gen.json'),
                                   needs=[folder, os.path.dirname(scorer)] if p['scorer'] == 'l2r' else [folder]))
    return jobs


def time_generation(paths, steps, lengths, batch_size, repeats, seed=SEEDS[0]):
    """Wall seconds of generating batch_size sequences in a random order, through the library as bench.py
    --run=arch (decoders with their KV cache, the encoder a forward per step), every repeat kept, the
    models taking turns at each point so that a repeat's ratio compares timings under the same load:
    ({label: [[seconds of each repeat] per number of steps, at the block size]}, {label: the same per
    sequence length, one token per step}, the block size)."""
    device, dtype = default_device(), default_dtype()
    models = {label: load_checkpoint(path, device)[0] for label, path in paths.items()}

    def once(model, length, n_steps):
        x = torch.zeros(batch_size, length, dtype=torch.long, device=device)
        known = torch.zeros(length, dtype=torch.bool, device=device)
        t0 = time.perf_counter()
        with autocast(device, dtype):
            generate(model, x, known, n_steps, generator=torch.Generator(device).manual_seed(seed))
        if device == 'cuda':
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    def timed(points):
        seconds = {label: [[] for _ in points] for label in models}
        for _ in range(repeats):
            for i, (length, n_steps) in enumerate(points):
                for label, model in models.items():
                    seconds[label][i].append(once(model, length, n_steps))
        return seconds

    block = next(iter(models.values())).config.block_size
    for model in models.values():
        once(model, block, steps[0])  # warm-up
    return timed([(block, k) for k in steps]), timed([(n, n) for n in lengths]), block


def generation_times(p, folders, seed, runs_dir):
    """Finding 6's timings, measured once and kept in runs/generation_time.json; measured again when that
    file is of other settings (an older one kept no repeats)."""
    path = os.path.join(runs_dir, 'generation_time.json')
    timing = p['timing']
    wanted = dict(steps=list(timing['steps']), lengths=list(timing['lengths']), batch_size=timing['batch_size'],
                  repeats=timing['repeats'])
    if os.path.exists(path):
        kept = read_json(path)
        if {k: kept.get(k) for k in wanted} == wanted:
            print('generation time: done, skipped')
            return kept
        print(f'generation time: {path} is of other settings or kept no repeats, measuring again')
    print('generation time: measuring')
    if p['threads']:
        torch.set_num_threads(p['threads'])  # as the runs: one thread each on the CPU
    paths = {'AO-GPT (KV cache)': os.path.join(folders[f'mixed-s{seed}'], 'ckpt.pt'),
             'encoder MDM': os.path.join(folders[f'encoder-s{seed}'], 'ckpt.pt')}
    by_steps, by_length, block = time_generation(paths, timing['steps'], timing['lengths'], timing['batch_size'],
                                                 timing['repeats'])
    result = dict(block_size=block, **wanted, seconds=by_steps, seconds_by_length=by_length)
    with open(path, 'w') as f:
        json.dump(result, f)
    return result


def analyse(m, p, runs_dir):
    """The timings (measured once, generation_times) and the samples' scores of the first seed's runs."""
    return finding_6(m, generation_times(p, m.folders, m.seed_list[0], runs_dir),
                     {kind: gen_rows(m, kind) for kind in ('mixed', 'encoder')})


def finding_6(m, timing, gen):
    return ([generation_time(m, timing), time_against_length(m, timing), sample_quality_figure(m, gen)],
            [time_claim(timing), length_claim(timing), steps_claim(m, gen), encoder_claim(m, gen)])


def generation_time(m, timing):
    return m.figure('fig4_generation_time.png',
                    f"Generation time against steps, {timing['block_size']} tokens (Fig. 4)", 'steps',
                    f"seconds for {timing['batch_size']} samples (band: the {timing['repeats']} repeats)",
                    [(label, timing['steps'], times) for label, times in timing['seconds'].items()],
                    logx=True, logy=True)


def time_against_length(m, timing):
    return m.figure('fig4_time_vs_length.png', 'Generation time against length, one token per step', 'tokens',
                    f"seconds for {timing['batch_size']} samples (band: the {timing['repeats']} repeats)",
                    [(label, timing['lengths'], times) for label, times in timing['seconds_by_length'].items()],
                    logx=True, logy=True)


def log_ratios(seconds, i):
    """log(encoder seconds / AO-GPT seconds) of each repeat at point i (the repeats taken in turn)."""
    return [math.log(e / a) for a, e in zip(seconds['AO-GPT (KV cache)'][i], seconds['encoder MDM'][i])]


def time_claim(timing):
    steps, seconds = timing['steps'], timing['seconds']
    mean = {label: [statistics.mean(t) for t in times] for label, times in seconds.items()}
    ao, encoder = mean['AO-GPT (KV cache)'], mean['encoder MDM']
    numbers = {f'seconds at {n} steps, AO-GPT / encoder (mean over repeats)': f'{a:.3g} / {e:.3g}'
               for n, a, e in zip(steps, ao, encoder)}
    numbers |= {f'growth from {steps[0]} to {steps[-1]} steps, AO-GPT': ao[-1] / ao[0],
                f'growth from {steps[0]} to {steps[-1]} steps, encoder': encoder[-1] / encoder[0]}
    return claim(CLAIMS['6 time'].format(steps=steps[-1], block=timing['block_size']), numbers, mean_interval(log_ratios(seconds, -1), 'timing repeats'))


def length_claim(timing):
    seconds, lengths = timing['seconds_by_length'], timing['lengths']
    short, long = log_ratios(seconds, 0), log_ratios(seconds, -1)
    return claim(CLAIMS['6 length'].format(short=lengths[0], long=lengths[-1]),
                 {f'encoder / AO-GPT at {n} tokens (geometric mean over repeats)':
                  math.exp(statistics.mean(log_ratios(seconds, i))) for i, n in enumerate(lengths)},
                 mean_interval([b - a for a, b in zip(short, long)], 'timing repeats'))


def gen_rows(m, kind):
    """{(temperature, top_p): [rows by steps]} of gen_ppl.py's grid, for each of the kind's seeds."""
    out = []
    for name in m.each(kind):
        by_setting = {}
        for r in m.read(name, 'gen.json')['results']:
            by_setting.setdefault((r['temperature'], r['top_p']), []).append(r)
        out.append(by_setting)
    return out


def sample_quality_figure(m, gen):
    series = []
    for kind, label in (('mixed', 'AO-GPT'), ('encoder', 'encoder')):
        seeds = gen[kind]
        for setting, rows in seeds[0].items():
            series.append((f'{label}, temperature {setting[0]}, top_p {setting[1]}', [r['steps'] for r in rows],
                           [[s[setting][i]['gen_ppl'] for s in seeds] for i in range(len(rows))]))
    return m.figure('table2_sample_quality.png', 'Sample quality against steps (Table 2)', 'steps', 'gen PPL', series,
                    logx=True, logy=True)


def steps_claim(m, gen):
    """More steps, better samples: AO-GPT's per-sample log gen PPL at the fewest minus at the most steps."""
    setting = next(iter(gen['mixed'][0]))
    differences = [[a - b for a, b in zip(s[setting][0]['sample_nll'], s[setting][-1]['sample_nll'])]
                   for s in gen['mixed']]
    rows = gen['mixed'][0][setting]
    return claim(CLAIMS['6 steps'].format(fewest=rows[0]['steps'], most=rows[-1]['steps'], temperature=setting[0],
                                          top_p=setting[1]),
                 {f"steps {r['steps']}: gen PPL, entropy": spread_pair([s[setting][i] for s in gen['mixed']])
                  for i, r in enumerate(rows)}, paired_interval(differences), stuck=m.stuck(m.each('mixed')))


def encoder_claim(m, gen):
    """AO-GPT's samples against the encoder's at the most steps and the lowest temperature of the grid."""
    setting = min(gen['mixed'][0], key=lambda s: s[0])
    mean_nll = lambda kind: [statistics.mean(s[setting][-1]['sample_nll']) for s in gen[kind]]
    most = gen['mixed'][0][setting][-1]['steps']
    table = {f'{label}, temperature {t}, top_p {p}, steps {r["steps"]}: gen PPL, entropy':
             spread_pair([s[(t, p)][i] for s in gen[kind]])
             for kind, label in (('mixed', 'AO-GPT'), ('encoder', 'encoder'))
             for (t, p), rows in gen[kind][0].items() for i, r in enumerate(rows)}
    return claim(CLAIMS['6 encoder'].format(temperature=setting[0], top_p=setting[1], most=most, same=SAME), table, unpaired_interval(mean_nll('mixed'), mean_nll('encoder')),
                 floor=SAME, stuck=m.stuck(m.each('mixed') + m.each('encoder')),
                 decide=comparable)


FINDING = Finding('6', 'Generation: time and sample quality (Fig. 4, Table 2)', ('mixed', 'encoder', 'l2r'), analyse,
                  evaluations=evaluations)
