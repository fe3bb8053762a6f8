"""
Sample quality: the generative perplexity and unigram entropy of a checkpoint's samples, over a grid
of sampling settings in one run (the AO-GPT paper's Table 2).

    python gen_ppl.py --scorer=out-shakespeare-char/ckpt.pt --steps=8,64 --temperature=1.0,0.7
    python gen_ppl.py --samples=samples.jsonl --scorer=gpt2-large          # score saved samples again
    python gen_ppl.py --init_from=out/ckpt.pt --num_samples=256 --batch_size=32 --scorer=gpt2-large \\
        --steps=64,128,256,512,1024 --temperature=1.0,0.9,0.7 --top_p=1.0,0.95,0.95 --pair_settings \\
        --top_p_mode=authors                                               # the paper's Table 2
    python gen_ppl.py --scorer=out-shakespeare-char/ckpt.pt --speculate=8 # one token per step, speculatively
    python gen_ppl.py --scorer=out-shakespeare-char/ckpt.pt --infill="ROMEO: [MASK:20] my lord." --sides=both
    python gen_ppl.py --scorer=out-shakespeare-char/ckpt.pt --infill="ROMEO: [MASK] my lord." --sides=both

For each point of the grid, steps x temperature x top_p (comma lists; with --pair_settings the i-th
temperature goes with the i-th top_p instead), num_samples samples are drawn with sample.py's
sampler (unconditional by default; start, infill, max_new_tokens and order as in sample.py, so an
encoder checkpoint samples too, also with --order=ancestral), in batches of batch_size, all from the
same seed; --speculate=k draws one token per step's samples by speculative decoding (as sample.py)
and adds its forwards, tokens per forward and acceptance to the row. A [MASK] of no length (and any gap of a FIM
GPT) is filled as sample.py fills it, one token a step, each sample at the length its model chose (its record's
gap_length, and AO-GPT's probability of it, gap_p); samples of many lengths are scored together. They go to samples_out (jsonl:
ids, text and settings, one sample per line), so that --samples=file scores them again without
sampling.

scorer reads the samples left to right: a Hugging Face causal LM that reads GPT-2 BPE ids (a name
such as gpt2-large, or a folder written by save_pretrained; needs transformers), or one of our
checkpoints (a .pt file or hf:owner/repo/file.pt) with its EMA weights (its raw ones if it has
none; the output says which; --use_ema is the sampler's): a decoder read in the identity order, an
encoder exactly, each scored token read with the positions from it on masked (one forward per
token: O(T^2) work a sample). Every generated token but the first of the sample is scored, with no
BOS; prompt tokens are not scored. --sides=both scores infills: every generated token given every
known token of its sample (the prompt on both sides of the gaps, read first, left to right) and the
generated ones before it, the exact NLL of the gaps given the rest, as eval_ppl.py --gaps reads a
chunk; the scorer must be one of our checkpoints (a decoder trained in any order, not with
--order=l2r; an encoder with only the generated positions from the token on masked). Given a prefix
prompt, both settings read the same tokens in the same order.

Per grid point: gen PPL, the mean and (population) std over samples of exp(mean token NLL of the
sample) as the authors report it; pooled PPL, exp(mean NLL over all the scored tokens); entropy,
the mean over samples of the unigram entropy of their generated tokens (nats; repetitive text has
a low entropy and a flattering gen PPL); seconds of sampling per sample. --out_json saves them, and
each sample's mean token NLL and entropy (sample_nll, sample_entropy, in the order of the samples
file) for paired comparisons over samples.
"""
import collections
import json
import math
import os
import time

import torch

from aogpt.checkpoints import GPT2_VOCAB, checkpoint_vocab, is_fim_gpt, token_count
from aogpt.common import (autocast, check_settings, default_device, default_dtype, describe_vocab, find_checkpoint,
                          hold_freed_memory, int_at_least, load_tokenizer, one_of, print_table, read_checkpoint,
                          read_jsonl, same_vocab, trained_block)
from aogpt.sampling import (SAMPLING_SETTINGS, TEMPERATURE_RULE, TOP_P_RULE, check_decoding, check_gap_fill,
                            check_sampling, check_steps, decoding_order, parse_list, prompt_tokens, sampling_options,
                            trained_gap_cap)
from aogpt.scorers import load_scorer
from configurator import fail
from configurator import configure
from aogpt.decoding import generate_many
from aogpt.engine import compile_decoding
from aogpt.infilling import fill_gap
from aogpt.speculative import Speculation, speculation_k
from aogpt.scoring import SIDES, score_samples, summarize

# -----------------------------------------------------------------------------
globals().update(SAMPLING_SETTINGS)  # the sampler's settings, as sample.py's (aogpt/sampling.py); the grid's are comma lists:
steps = ''  # step counts; '' one token per step
temperature = '1.0'
top_p = '1.0'
pair_settings = False  # True: temperature[i] goes with top_p[i], instead of every combination
samples = ''  # a samples .jsonl written by an earlier run: score it instead of sampling
samples_out = 'samples.jsonl'  # where the new samples go
scorer = 'gpt2-large'  # a Hugging Face causal LM (name or folder), or our checkpoint (.pt path or hf:...)
sides = 'left'  # what the scorer reads before a generated token: 'left', the tokens before it; 'both', every known one
num_samples = 16  # per grid point
batch_size = 16  # samples drawn at once
score_batch_size = 8  # samples scored at once
out_json = ''
device = default_device()
dtype = default_dtype()  # autocast dtype of the sampler; scoring is float32
# -----------------------------------------------------------------------------
SETTINGS = ('checkpoint', 'steps', 'temperature', 'top_p', 'top_k', 'top_p_mode', 'schedule', 'order',
            'confidence', 'speculate', 'sample_dtype', 'seed')  # what makes samples belong to one row of the table


def grid():
    """(steps, temperature, top_p) of every point to sample; steps None is one token per step."""
    step_list = parse_list('steps', steps, int, (lambda v: v >= 1, 'ints >= 1')) if str(steps).strip() else [None]
    temperatures = parse_list('temperature', temperature, float, TEMPERATURE_RULE)
    top_ps = parse_list('top_p', top_p, float, TOP_P_RULE)
    if pair_settings and len(temperatures) != len(top_ps):
        fail(f'--pair_settings pairs the {len(temperatures)} temperatures with the {len(top_ps)} top_p values: '
             f'give as many of each')
    settings = list(zip(temperatures, top_ps)) if pair_settings else [(t, p) for t in temperatures for p in top_ps]
    return [(s, t, p) for s in step_list for t, p in settings]


def check_inputs():
    at_least_one = int_at_least(1)
    check_settings(globals(), {'num_samples': at_least_one, 'batch_size': at_least_one,
                               'score_batch_size': at_least_one, 'sides': one_of(*SIDES)})
    check_sampling(globals())
    for key in ('out_json', 'samples_out'):
        path = globals()[key]
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            fail(f'--{key}={path}: its folder does not exist')
    if samples and not os.path.isfile(samples):
        fail(f'--samples={samples}: no such file')


# -----------------------------------------------------------------------------
# scorers: per-token NLL of tokens 1..T-1 of each row, left to right

def check_scorer(scorer, vocab, length, scorer_tokens, scorer_context):
    """Fail unless the scorer reads the samples' tokens, as common.same_vocab says, and their length."""
    samples = (vocab, GPT2_VOCAB if vocab == 'gpt2' else len(vocab))
    if not same_vocab(samples, scorer_tokens):
        fail(f'the samples are {describe_vocab(*samples)} but the scorer {scorer} reads '
             f'{describe_vocab(*scorer_tokens)}: score with a model of the same tokenizer')
    if scorer_tokens[0] is None:
        print(f'note: the scorer {scorer} gives only a vocabulary size ({scorer_tokens[1]}), so the tokens cannot '
              f"be checked: its ids are taken to be the samples'")
    if scorer_context is not None and length > scorer_context:
        fail(f'the samples are {length} tokens long but the scorer {scorer} reads at most {scorer_context}')


def check_ids(records, scorer, n_ids):
    for i, r in enumerate(records):
        if max(r['tokens']) >= n_ids:
            fail(f"sample {i} holds the token id {max(r['tokens'])}, past the {n_ids} ids of the scorer {scorer}")


# -----------------------------------------------------------------------------
# samples: drawn here, or read from an earlier run's file

def read_samples(path):
    records = []
    for i, r in read_jsonl(path, 'one sample written by gen_ppl.py'):
        tokens = r.get('tokens') if isinstance(r, dict) else None
        if not (isinstance(tokens, list) and len(tokens) >= 2 and all(type(t) is int and t >= 0 for t in tokens)
                and 'vocab' in r):
            fail(f'{path}, line {i}: not a sample written by gen_ppl.py (a "tokens" list of ids and a "vocab")')
        known = r.setdefault('known_positions', r.pop('known', []))  # 'known': the key of older samples
        if not (isinstance(known, list) and all(type(k) is int and 0 <= k < len(tokens) for k in known)):
            fail(f'{path}, line {i}: known_positions must list positions of its {len(tokens)} tokens, got {known!r}')
        if set(range(1, len(tokens))) <= set(known):
            fail(f'{path}, line {i}: every token after the first is known (the prompt), so nothing generated is scored')
        records.append(r)
    if not records:
        fail(f'{path} holds no samples')
    if len({json.dumps(r['vocab']) for r in records}) > 1:
        fail(f'{path} mixes samples of different vocabularies: score them separately')
    for r in records:
        r.setdefault('seconds', math.nan)
    return records


def sample_grid(model, checkpoint, path, decode, ids, known, points, at=None, fim=False):
    """Every grid point's samples as records, written to samples_out as they come; a gap of no given length (at) or
    any gap of a FIM GPT filled by infilling.fill_gap, each sample with its gap's length (and AO-GPT's p of it)."""
    if compile:
        compile_decoding(model, dtype)
    shared = dict(checkpoint=path, top_k=top_k, top_p_mode=top_p_mode, schedule=schedule, order=order,
                  confidence=confidence, speculate=speculate, sample_dtype=sample_dtype, seed=seed, dtype=dtype,
                  vocab=checkpoint_vocab(checkpoint, model.config.vocab_size),
                  known_positions=[i for i, k in enumerate(known) if k])  # the prompt's: not scored
    n_tokens = token_count(checkpoint, model.config.vocab_size)  # never the padding ids of a GPT-2 table
    gap = at is not None or fim
    cap = trained_gap_cap(model, ids, fim, gap_cap, trained_block(model, checkpoint)) if gap else None

    def draw(s, t, p, count, generator, stats=None):
        """[{record fields}] of count samples."""
        sampling, options = sampling_options(globals(), temperature=t, top_p=p)
        if gap:
            return fills(sampling, {} if fim else {k: v for k, v in options.items() if k != 'speculate'}, count,
                         generator)
        rows = generate_many(model, ids, known, count, batch_size, s, sampling, ctx=autocast(device, dtype),
                             desc=f'steps={s} temperature={t} top_p={p}', generator=generator, n_tokens=n_tokens,
                             stats=stats, **options)
        return [dict(tokens=row) for row in rows]

    def fills(sampling, options, count, generator):
        out = []
        for b in range(0, count, batch_size):
            try:
                with autocast(device, dtype):
                    drawn = fill_gap(model, ids, known, at, min(batch_size, count - b), sampling, fim=fim,
                                     cap=cap, choice=gap_choice, context=gap_context, n_tokens=n_tokens,
                                     generator=generator, **options)
            except ValueError as e:
                fail(e)
            out += [dict(tokens=row, known_positions=[i for i, k in enumerate(row_known) if k], gap_length=L,
                         gap_p=p) for row, row_known, L, p in drawn]
        return out
    draw(*points[0], min(batch_size, num_samples), torch.Generator(device))  # warm-up
    records = []
    with open(samples_out, 'w', encoding='utf-8') as f:
        for s, t, p in points:
            t0 = time.time()
            generator = torch.Generator(device).manual_seed(seed)  # the same seed at every grid point
            stats = Speculation()
            rows = draw(s, t, p, num_samples, generator, stats)
            seconds = (time.time() - t0) / num_samples
            speculation = stats.summary() if speculate else None
            new = [dict(shared, steps=s, temperature=t, top_p=p, **r, text=decode(r['tokens']), seconds=seconds,
                        speculation=speculation) for r in rows]
            f.writelines(json.dumps(r) + '\n' for r in new)
            f.flush()  # a long sweep keeps what it has drawn
            records += new
    print(f'wrote {len(records)} samples to {samples_out}')
    return records


def main(given=()):
    """given: the settings a config file or flag set (configure's overrides)."""
    global speculate, order
    points = None if samples else grid()
    check_inputs()
    hold_freed_memory()
    if samples:
        records = read_samples(samples)
        vocab, length = records[0]['vocab'], max(len(r['tokens']) for r in records)
    else:
        path = find_checkpoint(init_from, out_dir)
        model, checkpoint = read_checkpoint(path, device, use_ema)
        order = decoding_order(order, given, checkpoint, model, infill)
        speculate = speculation_k(speculate, model, order, min(batch_size, num_samples))  # 'auto': the k recorded
        check_decoding(order, model, speculate)
        vocab = checkpoint_vocab(checkpoint, model.config.vocab_size)
        encode, decode = load_tokenizer(checkpoint, model.config.vocab_size)
        ids, known, at = prompt_tokens(encode, model.config.block_size, start, infill, max_new_tokens, mask_token,
                                       trained_block(model, checkpoint))
        fim = bool(infill) and is_fim_gpt(checkpoint)
        if at is not None or fim:
            check_gap_fill(fim, speculate, any(s is not None for s, _, _ in points), 'order' in given)
        else:
            points = [(check_steps(s, known.count(False), order, speculate), t, p) for s, t, p in points]
        length = model.config.block_size if at is not None else len(ids)
    score, scorer_tokens, context, scorer_weights = load_scorer(scorer, device, sides)
    check_scorer(scorer, vocab, length, scorer_tokens, context)

    if not samples:
        records = sample_grid(model, checkpoint, path, decode, ids, known, points, at, fim)

    check_ids(records, scorer, scorer_tokens[1])
    groups = collections.defaultdict(list)  # grid point -> its records, in the order of the file
    for r in records:
        groups[tuple(r.get(k) for k in SETTINGS)].append(r)
    results = [dict(zip(SETTINGS, key), **summarize(group, score_samples(group, score, score_batch_size, device)),
                    speculation=group[0].get('speculation')) for key, group in groups.items()]
    report(results, scorer + (f' ({scorer_weights} weights)' if scorer_weights else '') +
           (', each generated token given every known one (--sides=both)' if sides == 'both' else ''))
    if out_json:
        with open(out_json, 'w') as f:
            json.dump(dict(scorer=scorer, scorer_weights=scorer_weights, sides=sides, samples=samples or samples_out,
                           results=results), f, indent=2)
        print(f'wrote {out_json}')


def report(results, scorer_name):
    """The table: steps, temperature and top_p, plus any other setting that differs between rows."""
    keys = ['steps', 'temperature', 'top_p'] + [k for k in SETTINGS if k not in ('steps', 'temperature', 'top_p')
                                                and len({json.dumps(r[k]) for r in results}) > 1]
    head = keys + ['N', 'gen PPL', 'pooled PPL', 'entropy', 's/sample']
    rows = [[r[k] for k in keys] + [r['n'], f"{r['gen_ppl']:.2f} ± {r['gen_ppl_std']:.2f}", f"{r['pooled_ppl']:.2f}",
                                     f"{r['entropy']:.3f}", f"{r['seconds_per_sample']:.3g}"] for r in results]
    if any(r['speculation'] for r in results):  # speculative decoding's work, where it drew the samples
        head += ['forwards', 'tokens/forward', 'kept']
        rows = [row + ([s['forwards'], f"{s['tokens_per_forward']:.2f}", f"{100 * s['acceptance']:.1f}%"]
                       if (s := r['speculation']) else ['', '', '']) for row, r in zip(rows, results)]
    print(f'scorer: {scorer_name}')
    print_table(head, rows)


if __name__ == '__main__':
    main(configure(globals(), doc=__doc__))
