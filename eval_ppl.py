"""
Zero-shot perplexity of a checkpoint, left-to-right, any-order, and ensembled over context orders,
on the authors' evaluation chunks; for an encoder (MDM) checkpoint, the exact left-to-right
perplexity and the NELBO perplexity bound.

    python eval_ppl.py --ensemble 8                      # out-shakespeare-char on its val.bin
    python eval_ppl.py --out_dir=out --dataset=wikitext2,ptb,lambada,lm1b --ensemble 8
    python eval_ppl.py --out_dir=out --dataset=wikitext2 --data_dir=path/to/mirror   # local copies
    python eval_ppl.py --out_dir=out --data_file=my_text.jsonl --out_json=ppl.json
    python eval_ppl.py --init_from=hf:Cauthyyy/AO-GPT-MDM/<file>.pt --dataset=lambada --ensemble 8
    python eval_ppl.py --init_from=gpt2-medium --dataset=wikitext2,ptb    # the GPT-2 baseline row
    python eval_ppl.py --gaps=span:1,span:4,span:16,span:64 --ensemble=4  # infilling: each gap given the rest

init_from: 'resume' (out_dir/ckpt.pt), a checkpoint path (ours or the authors' format), a model
folder (export.py's) or a Hub file hf:owner/repo/path or folder hf:owner/repo, whose EMA weights
are evaluated (--use_ema=False, or a checkpoint without EMA weights: the raw ones); or a Hugging
Face causal LM (gpt2, gpt2-medium, gpt2-large, gpt2-xl, another Hub name, or a folder saved with
save_pretrained; needs transformers), scored left-to-right only.

The chunks (--pipeline=paper, the default, as the authors' data pipeline makes them): every row of
a set exactly as the Hugging Face Hub serves it (WikiText: the raw lines with their newline, a
blank line an empty row; PTB: the stripped lines; LAMBADA: the jsonl texts; LM1B: the sentences) is
detokenized by the set's rule, GPT-2 BPE encoded and followed by an end-of-text token. The rows
fall into 8 contiguous shards, each read in batches of 1,000 rows (datasets.map(batched=True,
num_proc=8)), and each batch is concatenated and cut into block_size chunks on its own, its
remainder dropped. --pipeline=clean instead strips the rows, skips the blank ones and cuts their
one concatenation.

Each chunk x gets a seeded uniformly random order. Reported per set:
- l2r: perplexity in the left-to-right order (--l2r_dtype; 'auto' is the authors' choice: bf16
  autocast on a GPU that has it, float32 for a Hugging Face model and on the CPU);
- any-order (ensemble=1): exp of the mean of -log p(x[order_i] | x[order_<i]);
- ensemble=2, 4, ...: -log of p averaged over that many members, member 1 reading the context set
  x[order_<i] in that order and the others in independent uniform orders; the members are nested,
  so one run gives the whole curve up to --ensemble.
Any-order and ensemble numbers are computed in --dtype: float32 by default, as the authors' AO-GPT
scripts; their sigma-GPT any-order script used bf16 autocast (--dtype=bfloat16).
A Hugging Face model scores tokens 2..block_size of each chunk (the first has no context), as the
authors scored GPT-2.

An encoder checkpoint (architecture=encoder, known from the checkpoint) reads its context as a set,
so it has no context orders (ensemble=2.. read n/a). Its l2r is exact, position i read with positions i..
masked: n forwards per chunk, O(n^2) work (--encoder_l2r=False skips it). Its any-order column is
the NELBO bound exp(NELBO) ± its standard error: each chunk's NELBO estimated without bias from
--mc_samples masks at stratified levels (in --dtype), the s.e. over chunks by the delta method.

--out_json also keeps, as chunk_nll, each chunk's mean -log p per token (nats) in every column of ppl
(an encoder's: 'l2r' and 'nelbo', its NELBO estimate), for paired comparisons over the same chunks.

--gaps=span:16,scatter:0.15 (a comma list) scores infilling instead: in each chunk a gap (a span of L tokens, or a
share r of them scattered) drawn from the chunk's tokens, and its NLL per gap token given the rest of the chunk,
as each model can read it: a decoder the rest first, then the gap left to right, in random orders and ensembles
of them, and each gap token given all before it (left only: all that a left-to-right model or GPT-2 reads); the
encoder the gap revealed left to right and its NELBO restricted to the gap (docs/evaluation.md). The FIM GPT
(train.py --fim_rate) reads both sides in its prompt and writes the gap, its end token masked out (its length given).
range:1-16 draws a span of 1 to 16 tokens per chunk and line:16 hides a whole line of up to 16 characters: their
length is also scored as unknown, AO-GPT's from its length posterior and the FIM GPT's by its end token; --fills=
greedy,sample also fills them, with the length given and not, and reports exact match, token accuracy and the
length's error.

Sets: wikitext2, wikitext103 (raw), ptb, lambada (OpenAI's jsonl), lm1b from the Hugging Face Hub /
OpenAI's URL; each corpus of data/ (openwebtext, python, python_char, shakespeare, shakespeare_char,
wikitext2_char) from its val.bin; --data_file=path
for a .txt (a row per line), .jsonl ({"text": ...} per line) or .bin (uint16 tokens) file.
--data_dir reads the Hub sets from local copies instead (an offline mirror: wikitext-2-raw/wiki.test.raw,
ptb/ptb.test.txt, lambada/lambada_test.jsonl, lm1b/news.en.heldout-00000-of-00050, ...); it defaults
to the environment variable AOGPT_DATA_DIR, the project's one data-location setting, '' when unset.
--split defaults to 'test', the standard benchmark split (the authors' WikiText-2 script used
'train'; --split=train does that with network access).

Speed: see aogpt/scoring.py (the fast ensemble).
"""
import os
import time

import torch

from aogpt.benchmarks import KNOWN, MAP_BATCH, MAP_SHARDS, PIPELINES, check_tokens, load_tokens, make_chunks, token_file
from aogpt.checkpoints import checkpoint_tokens, is_fim_gpt, training_record
from aogpt.fim import PROMPT_SENTINELS, SENTINELS
from aogpt.common import (DTYPES, at_least, autocast, check_device, check_settings, default_device, find_checkpoint,
                          one_of, print_table, read_checkpoint, trained_block, write_json)
from aogpt.scorers import is_hf_model, load_hf_causal_lm
from configurator import fail
from configurator import configure
from aogpt.engine import compile_forward
from aogpt.engine import Sampling
from aogpt.infilling import (fill_scores, fim_given_logprobs, fim_logprobs, gap_length_logprobs, gap_sides,
                             infill_middle)
from aogpt.scoring import (check_gap_sizes, chunk_gap, chunk_line, chunk_nlls, decoder_gap_logprobs,
                           decoder_l2r_logprobs, encoder_l2r_logprobs, ensemble_sizes, gap_lengths, hf_l2r_logprobs,
                           hf_start_logprobs, left_gap_logprobs, mixture_logprobs, nelbo_bound, nelbo_estimates,
                           parse_gaps, perplexities, perplexity, score_chunks)
from aogpt.training import val_half

# -----------------------------------------------------------------------------
init_from = 'resume'  # 'resume' (out_dir/ckpt.pt), a path, hf:owner/repo/path, or gpt2, gpt2-medium, ... / an HF folder
out_dir = 'out-shakespeare-char'
dataset = 'shakespeare_char'  # one name or several, comma-separated
data_file = ''  # a local .txt/.jsonl/.bin file to evaluate instead of --dataset
data_dir = os.environ.get('AOGPT_DATA_DIR', '')  # '': the Hub / URL; else a folder holding local copies
split = 'test'  # 'test', 'validation' or 'train' (Hub sets)
pipeline = 'paper'  # 'paper': the authors' rows and per-batch chunks; 'clean': stripped rows, one concatenation
block_size = 0  # 0: the block the checkpoint's run trained on (its model's block_size, or a smaller one it records)
ensemble = 1  # the largest ensemble of context orders; 1, 2, 4, ... up to it are reported
max_chunks = 0  # 0: every chunk; else only the first max_chunks (quick looks)
half = ''  # of a token file (a data/ set's val.bin): '' all, 'select' its first half or 'report' its second
# (train.py --keep_best chose the checkpoint on the first)
max_tokens = 32768  # slots per forward pass, which bounds memory
use_ema = True  # the EMA weights (the raw ones if there are none); False: the raw ones
seed = 1337
out_json = ''
device = default_device()
dtype = 'float32'  # any-order and ensemble numbers (their AO-GPT scripts: float32; their sigma-GPT one: bfloat16)
l2r_dtype = 'auto'  # left-to-right: 'auto' (bf16 autocast on a GPU that has it, float32 for HF models) or a dtype;
# --gaps reads every column in dtype
compile = False  # torch.compile the model's forward, with dynamic shapes (the query batches vary in size)
encoder_l2r = True  # an encoder's exact left-to-right perplexity: n forwards per chunk (O(n^2)); False skips it
mc_samples = 32  # an encoder's masks per chunk for its NELBO, one per stratum of the masking level
gaps = ''  # infilling instead of perplexity: each chunk's gap scored given the rest, e.g. span:16,span:64,scatter:0.15
fills = ''  # with a range gap, also fill each gap: 'greedy' and/or 'sample' (comma list), the length given and not
# -----------------------------------------------------------------------------

SPLITS = ('test', 'validation', 'train')
FILLS = {'greedy': Sampling(temperature=0), 'sample': Sampling()}  # the most likely length and token, or drawn
ENCODER_ONLY = {'mc_samples': "the masks per chunk of an encoder's NELBO bound",
                'encoder_l2r': "whether an encoder's exact left-to-right perplexity is computed"}


def l2r_precision(l2r_dtype, device, hf):
    """l2r_dtype, where 'auto' is the authors' choice: bf16 autocast for an AO-GPT on a GPU that
    has it, float32 for a Hugging Face model (their GPT-2 row) and on the CPU."""
    if l2r_dtype != 'auto':
        return l2r_dtype
    gpu_bf16 = torch.device(device).type == 'cuda' and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return 'bfloat16' if gpu_bf16 and not hf else 'float32'


def check_inputs(names):
    """Everything that can be checked before any work: settings, device, names, output folder."""
    check_settings(globals(), {'ensemble': at_least(1), 'max_tokens': at_least(1), 'max_chunks': at_least(0),
                               'block_size': at_least(0), 'split': one_of(*SPLITS), 'pipeline': one_of(*PIPELINES),
                               'l2r_dtype': one_of('auto', *DTYPES), 'mc_samples': at_least(1),
                               'half': (lambda v: v in ('', 'select', 'report'), "'', 'select' or 'report'")})
    hf = is_hf_model(init_from)
    check_device(device, dtype)
    check_device(device, l2r_precision(l2r_dtype, device, hf))
    if hf and ensemble > 1:
        fail(f'{init_from} is scored left-to-right only: --ensemble applies to AO-GPT checkpoints')
    if hf and compile:
        fail(f'--compile applies to AO-GPT checkpoints, not to the Hugging Face model {init_from}')
    if not names:
        fail('--dataset is empty: name one or more sets, comma-separated, or pass --data_file=path')
    for name in names:
        if name != data_file and name not in KNOWN:
            fail(f"unknown dataset {name!r}; known: {', '.join(KNOWN)} (or --data_file=path)")
    if data_file and not os.path.isfile(data_file):
        fail(f'{data_file} not found')
    if data_file and not data_file.endswith(('.txt', '.jsonl', '.bin')):
        fail(f'--data_file must be a .txt, .jsonl or .bin file, got {data_file}')
    texts = [name for name in names if not token_file(name)]
    if half and texts:
        fail(f'--half={half} halves a token file (a data/ set, or a .bin), not {texts[0]}: drop --half')
    if out_json and not os.path.isdir(os.path.dirname(os.path.abspath(out_json))):
        fail(f'--out_json={out_json}: its folder does not exist')
    settings = gap_settings_of(gaps)
    modes = fill_modes(fills)
    if modes and not any(gap_lengths(*s) for s in settings):
        fail(f'--fills={fills} fills gaps whose length is not given: add a range or a line to --gaps, e.g. '
             '--gaps=range:1-16')
    if modes and is_hf_model(init_from):
        fail(f'--fills: {init_from} reads the left side only; AO-GPT and the FIM GPT fill a gap from both sides')


def fill_modes(text):
    """--fills as a list of FILLS' names; one line for another name."""
    modes = [m.strip() for m in text.split(',') if m.strip()]
    for mode in modes:
        if mode not in FILLS:
            fail(f"--fills takes {' and/or '.join(FILLS)} (a comma list), got {mode!r}")
    return modes


def gap_settings_of(spec, n=None):
    """--gaps as [(kind, size)] (scoring.parse_gaps), each checked to fit an n-token chunk when n is given."""
    try:
        settings = parse_gaps(spec, '--gaps')
        if n is not None:
            check_gap_sizes(settings, n, '--gaps')
    except ValueError as e:
        fail(e)
    return settings


def load_model(init_from, out_dir, device, use_ema):
    """(model, its block size, the block it trained on (common.trained_block), (what its token ids mean, how many), a
    description for the output, how it reads a gap: 'l2r' left to right only (a Hugging Face model, or a checkpoint
    that train.py trained with --order=l2r), 'fim' the FIM GPT (--fim_rate), 'any' in any order (AO-GPT, the
    encoder))."""
    if is_hf_model(init_from):
        model = load_hf_causal_lm(init_from, device)
        positions = getattr(model.config, 'n_positions', None) or model.config.max_position_embeddings
        return model, positions, positions, ('gpt2', model.config.vocab_size), init_from, 'l2r'
    path = find_checkpoint(init_from, out_dir)
    model, checkpoint = read_checkpoint(path, device, use_ema)
    reads = 'fim' if is_fim_gpt(checkpoint) else 'l2r' if training_record(checkpoint)['config'].get('order') == 'l2r' \
        else 'any'
    return (model, model.config.block_size, trained_block(model, checkpoint),
            checkpoint_tokens(checkpoint, model.config.vocab_size), path, reads)


FIM_EXTRA = len(SENTINELS)  # a FIM GPT's row holds its chunk and its prompt's sentinels, then the end token


def widest_range(settings):
    """The most a gap of unknown length (a range, a line) varies in length (hi - lo), None without one."""
    return max((lengths.hi - lengths.lo for lengths in (gap_lengths(*s) for s in settings) if lengths), default=None)


def gap_chunk_length(trained, settings, reads):
    """The chunk --gaps reads by default: the trained block, less what a range needs (AO-GPT places the suffix after
    every length of it) and a FIM GPT's FIM_EXTRA; with a range every model leaves both, so all read the same
    chunks."""
    widest = widest_range(settings)
    if widest is not None:
        return trained - widest - FIM_EXTRA
    return trained - FIM_EXTRA * (reads == 'fim')


def line_ids(settings, vocab):
    """(the newline's id, the ids of blanks) of a character vocabulary, for line gaps; None without one. One line
    where the vocabulary has no newline token."""
    if not any(kind == 'line' for kind, _ in settings):
        return None
    if not isinstance(vocab, str) or '\n' not in vocab:
        fail('--gaps=line:H hides whole lines, which needs a character vocabulary with a newline (data/python_char, '
             f'data/shakespeare_char); this model reads {vocab if isinstance(vocab, str) else "other"} tokens')
    return vocab.index('\n'), {vocab.index(c) for c in ' \t' if c in vocab}


def check_gap_room(n, model_block, settings, reads):
    """One line where an n-token chunk leaves a model too little room: a FIM GPT's rows of n + FIM_EXTRA, its prompt
    and a fill of a range's longest length (--fills), AO-GPT's suffix placed after that length; or where the FIM GPT
    is given scattered gaps (it fills one gap between a prefix and a suffix)."""
    widest = widest_range(settings)
    if reads == 'fim' and any(kind == 'scatter' for kind, _ in settings):
        fail('--gaps=scatter: the FIM GPT fills one gap between a prefix and a suffix, not scattered positions: give '
             'span, range or line gaps')
    if reads == 'fim' and n + FIM_EXTRA > model_block:
        fail(f'--block_size={n}: the FIM GPT reads a chunk with {FIM_EXTRA} more tokens ({PROMPT_SENTINELS} '
             f'sentinels, the end token) in its block of {model_block}: use at most {model_block - FIM_EXTRA}')
    if reads == 'fim' and fills and widest is not None and n + PROMPT_SENTINELS + widest > model_block:
        fail(f'--block_size={n}: with --fills the FIM GPT writes up to {widest} tokens more than the shortest gap of '
             f'a range after its prompt ({PROMPT_SENTINELS} sentinels) in its block of {model_block}: use at most '
             f'{model_block - PROMPT_SENTINELS - widest}')
    if reads == 'any' and widest is not None and n + widest > model_block:
        fail(f'--block_size={n}: a range gap whose length varies by {widest} has AO-GPT place the suffix up to '
             f'{widest} tokens further in its block of {model_block}: use at most {model_block - widest}')


def main(given=()):
    """given: the settings a config file or flag set (configure's overrides)."""
    names = [data_file] if data_file else [d.strip() for d in dataset.split(',') if d.strip()]
    check_inputs(names)
    hf = is_hf_model(init_from)
    model, model_block, trained, model_tokens, source, reads = load_model(init_from, out_dir, device, use_ema)
    if fills and (reads == 'l2r' or model.config.is_encoder):  # noted, not refused, as ENCODER_ONLY's keys below
        print(f"note: --fills is ignored: {source} is {'an encoder' if reads == 'any' else 'a GPT trained left to right'}"
              ', which fills no gap of unknown length (AO-GPT and the FIM GPT do)')
    asked = gap_settings_of(gaps)
    n = block_size or (gap_chunk_length(trained, asked, reads) if asked else trained)
    if n > model_block:
        fail(f"--block_size={n} is larger than the checkpoint's block_size {model_block}")
    if n < 1:
        fail(f'--gaps={gaps}: a range that wide leaves no chunk in the block of {trained}: narrow it')
    if n < trained and not block_size:
        print(f'note: chunks of {n} tokens, which leave room for the gaps in the block of {trained} (a range\'s '
              "lengths, a FIM GPT's sentinels); --block_size sets their length, the same for every model compared")
    elif n < model_block and not block_size:
        print(f'note: {source} was trained on blocks of {n} tokens (its model reads {model_block}): chunks of {n}; '
              f'--block_size sets their length')
    gap_settings = gap_settings_of(gaps, n)
    if gap_settings and not hf:
        check_gap_room(n, model_block, gap_settings, reads)
    lines = line_ids(gap_settings, 'gpt2' if hf else model_tokens[0])
    sets = {}
    for name in names:  # read and check every set before evaluating any
        docs, data_tokens = load_tokens(name, split, data_dir, pipeline)
        docs = [val_half(doc, half) for doc in docs]  # a token file is one document: the val.bin --keep_best cut
        if half:
            print(f'{name}: the {half} half of {token_file(name)}' +
                  (" (train.py --keep_best chose on the other)" if half == 'report' else ''))
        note = check_tokens(name, docs, data_tokens, model_tokens, n)
        if note:
            print(note)
        sets[name] = make_chunks(docs, n, pipeline)[:max_chunks or None]
        if not len(sets[name]):
            fail(f'{name} makes no {n}-token chunk: --pipeline=paper cuts each batch (at most {MAP_BATCH:,} rows '
                 f'of one of {MAP_SHARDS} shards) on its own; --pipeline=clean cuts all the rows at once')
    encoder = not hf and model.config.is_encoder
    if not encoder:  # noted, not refused: findings.py gives every run's evaluation the same flags
        for key in sorted(ENCODER_ONLY.keys() & set(given)):
            print(f'note: --{key} is ignored: it sets {ENCODER_ONLY[key]}, and {source} is not an encoder')
    if compile:
        compile_forward(model)
    # a gap table's columns compare models and readings, so all of them are in one precision: --dtype's
    precision = dtype if gap_settings else l2r_precision(l2r_dtype, device, hf)
    if gap_settings and 'l2r_dtype' in given:
        print(f'note: --l2r_dtype is ignored with --gaps: every column of the gap table is in --dtype={dtype}')
    l2r_ctx = autocast(device, precision)
    if gap_settings:
        describe_gap_columns(source, hf, encoder, reads)
    elif encoder:
        describe_encoder_passes(precision, n)
    else:
        print(f"pipeline: {pipeline}; left-to-right in {precision}" + ('' if hf else f', any-order in {dtype}'))
    if hf and not gap_settings:
        print(f'{init_from}: left-to-right only; each {n}-token chunk scores its last {n - 1} tokens '
              f'(the first has no context), as the authors scored GPT-2')
    results = {}
    for name, chunks in sets.items():
        t0 = time.time()
        if gap_settings:  # the left-to-right pass serves every gap setting
            l2r = None if encoder else l2r_rows(model, chunks, hf, l2r_ctx, f'{name} l2r')
            results[name] = {f'{kind}:{size}': gap_result(model, chunks, kind, size, name, hf, encoder, reads,
                                                          model_tokens[1], l2r, l2r_ctx, lines)
                             for kind, size in gap_settings}
            continue
        if hf:
            l2r = hf_l2r_logprobs(model, chunks, max_tokens, l2r_ctx, name)
            ppl, nlls, tokens = {'l2r': perplexity(l2r)}, chunk_nlls(l2r, None, len(chunks)), l2r.numel()
        elif encoder:
            (ppl, nlls), tokens = encoder_perplexities(model, chunks, name, l2r_ctx), chunks.numel()
        else:
            l2r, members = score_chunks(model, chunks, ensemble, max_tokens, seed, autocast(device, dtype), name, l2r_ctx)
            ppl, nlls, tokens = perplexities(l2r, members), chunk_nlls(l2r, members, len(chunks)), l2r.numel()
        results[name] = dict(split=text_read(name), pipeline=pipeline, chunks=len(chunks), tokens=tokens, ppl=ppl,
                             chunk_nll=nlls, seconds=round(time.time() - t0, 2))
    report_gaps(results) if gap_settings else report(results, ensemble)
    if out_json:
        write_json(out_json, dict(checkpoint=source, block_size=n, ensemble=ensemble, seed=seed, dtype=dtype, gaps=gaps,
                                  l2r_dtype=precision, **(dict(mc_samples=mc_samples) if encoder else {}),
                                  results=results), indent=2)
        print(f'wrote {out_json}')


def text_read(name):
    """What a set's numbers read, for the record: the token file and its half, a Hub set's split, or the file."""
    path = token_file(name)
    if path:
        return path + (f', {half} half' if half else '')
    return split if name in KNOWN else name


def describe_encoder_passes(precision, n):
    """What the encoder's columns are and what they cost."""
    print(f'pipeline: {pipeline}; encoder: ' + (f'left-to-right exact in {precision}, {n} forwards per chunk '
                                                f'(--encoder_l2r=False skips it); ' if encoder_l2r else '') +
          f'any-order: the NELBO bound exp(NELBO) ± its standard error over chunks, {mc_samples} stratified '
          f'masks per chunk in {dtype}')
    if ensemble > 1:
        print('note: the encoder reads its context as a set, in no order, so context-order ensembles do not '
              'apply: ensemble=2.. read n/a')


def encoder_perplexities(model, chunks, name, l2r_ctx):
    """An encoder's ppl of one set (its NELBO bound and the bound's s.e., its exact l2r unless skipped) and
    its chunk_nll (each chunk's l2r NLL and NELBO estimate, per token)."""
    l2r = encoder_l2r_logprobs(model, chunks, max_tokens, l2r_ctx, f'{name} l2r')[0] if encoder_l2r else None
    estimates = nelbo_estimates(model, chunks, mc_samples, max_tokens, seed, autocast(device, dtype), f'{name} NELBO')
    bound, se = nelbo_bound(estimates)
    ppl = ({} if l2r is None else {'l2r': perplexity(l2r)}) | {'nelbo_bound': bound, 'nelbo_bound_se': se}
    return ppl, chunk_nlls(l2r, None, len(chunks)) | {'nelbo': estimates.tolist()}


def describe_gap_columns(source, hf, encoder, reads):
    """What the gap table's columns are."""
    if encoder:
        print('gaps, each given the rest of its chunk: the encoder\'s gap revealed left to right (revealed l2r, exact: '
              'a forward per gap token; --encoder_l2r=False skips it) and its NELBO bound restricted to the gap '
              f'({mc_samples} stratified masks of the gap per chunk, ± its s.e. over chunks)')
    elif reads == 'fim':
        print('gaps: the FIM GPT reads the prefix and the suffix, then writes the middle: given its length (fim given: '
              'the end token masked out and the rest renormalised at each step) and, for a range, not (fim unknown: '
              'the middle and its end token, which is left out before lo and sure at hi); left only: each gap token '
              'given all before it')
    elif reads == 'l2r':
        print(f'gaps: {source} reads left to right only: each gap token given all before it (left only)' +
              (', a chunk\'s first token after <|endoftext|>' if hf else ''))
        if ensemble > 1:
            print('note: --ensemble is ignored: a left-to-right model reads no other order')
    else:
        print('gaps, each given the rest of its chunk: left only (each gap token given all before it); the rest read '
              'first, left to right, then the gap left to right (gap l2r), in a random order (gap random), and '
              'ensembles of random orders of the gap (ensemble=2..: the log of the mean of their probabilities); for a '
              'range, the length too: length (-log p(L | both sides), normalised over the range: the suffix placed '
              'after each length) and unknown (length + gap l2r: the middle and its length)')


def l2r_rows(model, chunks, hf, l2r_ctx, desc):
    """A decoder's or Hugging Face model's log p(x_i | x_<i) of every token of every chunk: (N, n); a Hugging Face
    model reads position 0 after its start token, so its gaps are every other kind's, token for token."""
    if hf:
        l2r = hf_l2r_logprobs(model, chunks, max_tokens, l2r_ctx, desc).view(len(chunks), -1)
        return torch.cat([hf_start_logprobs(model, chunks[:, 0], l2r_ctx)[:, None], l2r], 1)
    on = next(model.parameters()).device
    return torch.stack([decoder_l2r_logprobs(model, x.to(on), l2r_ctx) for x in chunks])


def gap_result(model, chunks, kind, size, name, hf, encoder, reads, n_tokens, l2r, l2r_ctx, lines=None):
    """One gap setting on one set: the gaps' count and tokens, the NLL per gap token (nats) in each column the model
    has, and each chunk's (chunk_nll, for paired comparisons); an encoder's NELBO bound with its s.e. over chunks."""
    t0 = time.time()
    if kind == 'line':  # the chunks that hold a line to hide
        positions = [chunk_line(x, size, *lines, seed) for x in chunks]
        kept = [i for i, g in enumerate(positions) if g is not None]
        if not kept:
            fail(f'--gaps=line:{size}: none of the {len(chunks)} chunks of {name} holds a whole line of 1 to {size} '
                 'characters: give a longer line, more chunks or longer ones')
        chunks, positions = chunks[kept], [positions[i] for i in kept]
        l2r = None if l2r is None else l2r[kept]
    else:
        positions = [chunk_gap(x, kind, size, seed) for x in chunks]
    lengths = torch.tensor([len(g) for g in positions], dtype=torch.float64)
    lengths_range = gap_lengths(kind, size)
    columns, nelbo = gap_logprobs(model, chunks, positions, encoder, reads, n_tokens, lengths_range, l2r, l2r_ctx,
                                  f'{name} {kind}:{size}')
    filled = gap_fills(model, chunks, positions, reads, n_tokens, lengths_range) if lengths_range and not encoder \
        else {}
    nll = {k: (-v.sum() / lengths.sum()).item() for k, v in columns.items()}
    chunk_nll = {k: (-v / lengths).tolist() for k, v in columns.items()}
    if nelbo is not None:
        nll['nelbo'] = ((nelbo * lengths).sum() / lengths.sum()).item()
        nll['nelbo_se'] = nelbo.std().item() / len(nelbo) ** 0.5 if len(nelbo) > 1 else float('nan')
        chunk_nll['nelbo'] = nelbo.tolist()
    return dict(gaps=len(chunks), tokens=int(lengths.sum()), nll=nll, chunk_nll=chunk_nll,
                **(dict(fills=filled) if filled else {}), seconds=round(time.time() - t0, 2))


def gap_fills(model, chunks, gaps, reads, n_tokens, lengths):
    """{'<mode>, length given' / '<mode>, length unknown': {infilling.fill_scores' means over the gaps, and
    'chunks': each gap's}} of AO-GPT's and the FIM GPT's fills (infilling.infill_middle), {} for a model
    that fills from the left only."""
    if reads not in ('any', 'fim') or not fills:
        return {}
    generator, out = torch.Generator(device=next(model.parameters()).device).manual_seed(seed), {}
    for mode, known in [(m, k) for m in fill_modes(fills) for k in ('given', 'unknown')]:
        scores = []
        for prefix, truth, suffix in gap_sides(chunks, gaps):
            lo, hi = (len(truth), len(truth)) if known == 'given' else lengths
            with autocast(device, dtype):
                fill = infill_middle(model, prefix, suffix, lo, hi, FILLS[mode], fim=reads == 'fim', n_tokens=n_tokens,
                                     choice='mode' if mode == 'greedy' else 'sample', generator=generator)
            scores.append(fill_scores(fill, truth))
        out[f'{mode}, length {known}'] = {k: sum(s[k] for s in scores) / len(scores) for k in scores[0]} | \
            dict(chunks={k: [s[k] for s in scores] for k in scores[0]})
    return out


def gap_logprobs(model, chunks, gaps, encoder, reads, n_tokens, lengths, l2r, l2r_ctx, desc):
    """Each chunk's log p(gap | what the model reads of the rest), (N,), in each column the model has: 'left' (each
    gap token given all before it, from l2r_rows' l2r), 'gap_l2r' and 1, 2, ... (the rest read first, then the gap
    left to right, in random orders, and the mixtures of 2, ... of those), the FIM GPT's 'fim' (its length given),
    an encoder's 'revealed' (the gap revealed left to right); for a range of lengths (lengths: scoring.Lengths), also
    the gap and its length: AO-GPT's 'length' and 'unknown', the FIM GPT's 'fim_unknown'; and an encoder's NELBO per
    gap token (None for a decoder)."""
    ctx = autocast(device, dtype)
    if encoder:
        columns = {}
        if encoder_l2r:
            revealed = encoder_l2r_logprobs(model, chunks, max_tokens, l2r_ctx, f'{desc} revealed', gaps=gaps)[0]
            columns['revealed'] = torch.stack([g.double().sum() for g in revealed.split([len(g) for g in gaps])])
        return columns, nelbo_estimates(model, chunks, mc_samples, max_tokens, seed, ctx, f'{desc} NELBO', gaps=gaps)
    columns = {'left': left_gap_logprobs(l2r, gaps)}
    if reads == 'fim':
        with ctx:
            columns['fim'] = fim_given_logprobs(model, gap_sides(chunks, gaps), n_tokens)
            if lengths:
                columns['fim_unknown'] = fim_logprobs(model, gap_sides(chunks, gaps), n_tokens, *lengths)
    if reads == 'any':
        scores = decoder_gap_logprobs(model, chunks, gaps, ensemble, max_tokens, seed, ctx, desc)
        columns['gap_l2r'] = scores[:, 0]
        columns |= {size: mixture_logprobs(scores[:, 1:].T, size) for size in ensemble_sizes(ensemble)}
        if lengths:
            with ctx:
                columns['length'] = gap_length_logprobs(model, gap_sides(chunks, gaps), lengths, n_tokens)
            columns['unknown'] = columns['length'] + columns['gap_l2r']
    return columns, None


GAP_COLUMNS = {'left': 'left only', 'gap_l2r': 'gap l2r', 1: 'gap random', 'length': 'length',
               'unknown': 'unknown', 'fim': 'fim given', 'fim_unknown': 'fim unknown', 'revealed': 'revealed l2r',
               'nelbo': 'NELBO bound'}  # and ensemble=2, ...


def report_gaps(results):
    """One row per set and gap setting: the NLL per gap token (nats) in each column the model has."""
    keys = list(dict.fromkeys(k for by_gap in results.values() for r in by_gap.values() for k in r['nll']
                              if k != 'nelbo_se'))
    cell = lambda nll, k: '-' if k not in nll else f"<= {nll[k]:.4f} ± {nll['nelbo_se']:.4f}" if k == 'nelbo' \
        else f'{nll[k]:.4f}'
    print('NLL per gap token (nats), each gap given the rest of its chunk')
    names = [GAP_COLUMNS.get(k, f'ensemble={k}') for k in keys]
    print_table(['dataset', 'gap', 'gaps', 'gap tokens', *names, 'time'],
                [[name, setting, f"{r['gaps']:,}", f"{r['tokens']:,}", *[cell(r['nll'], k) for k in keys],
                  f"{r['seconds']:.1f}s"] for name, by_gap in results.items() for setting, r in by_gap.items()])
    rows = [[name, setting, how, f"{f['exact']:.3f}", f"{f['chars']:.3f}", f"{f['length']:.3f}",
             f"{f['length_error']:.2f}"]
            for name, by_gap in results.items() for setting, r in by_gap.items()
            for how, f in r.get('fills', {}).items()]
    if rows:
        print('fills of the gaps: exact match, the share of tokens right (chars: characters at a character model), the '
              'length right, mean |length error| (tokens)')
        print_table(['dataset', 'gap', 'fill', 'exact', 'chars', 'length', 'length error'], rows)


def report(results, ensemble):
    """One row per set; a column a model does not have (any-order for GPT-2, an encoder's l2r when skipped)
    reads '-'; an encoder's any-order column is its NELBO bound ± s.e., its ensemble columns n/a."""
    sizes = ensemble_sizes(ensemble)
    head = ['dataset', 'tokens', 'l2r ppl', 'any-order ppl'] + [f'ensemble={size}' for size in sizes[1:]] + ['time']
    print_table(head, [[name, f"{r['tokens']:,}", *ppl_cells(r['ppl'], sizes), f"{r['seconds']:.1f}s"]
                       for name, r in results.items()])


def ppl_cells(ppl, sizes):
    """A row's perplexity cells: l2r, any-order, then ensemble=2.. (see report)."""
    cell = lambda k: f'{ppl[k]:.3f}' if k in ppl else '-'
    if 'nelbo_bound' not in ppl:
        return [cell(k) for k in ['l2r', *sizes]]
    return [cell('l2r'), f"<= {ppl['nelbo_bound']:.3f} ± {ppl['nelbo_bound_se']:.3f}"] + ['n/a'] * (len(sizes) - 1)


if __name__ == '__main__':
    main(configure(globals(), doc=__doc__))
