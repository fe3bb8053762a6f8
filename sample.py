"""
Sample from a trained AO-GPT with a KV cache, in any order, many tokens per step; or from the encoder.

    python sample.py --out_dir=out-shakespeare-char                      # random order, one token per step
    python sample.py --out_dir=out-shakespeare-char --order=l2r --start="ROMEO:"
    python sample.py --out_dir=out-shakespeare-char --order=confidence --steps=16
    python sample.py --out_dir=out-shakespeare-char --infill="ROMEO: [MASK:20] my lord, [MASK:20]."
    python sample.py --out_dir=out-shakespeare-char --infill="ROMEO: [MASK] my lord"   # the model chooses the length
    python sample.py --out_dir=out-mdm-shakespeare-char --order=ancestral --steps=256   # the encoder, as MDLM
    python sample.py --out_dir=out-shakespeare-char --speculate=8       # one token per step's samples, fewer forwards

The masked positions are decoded in `steps` steps (`schedule` says how many per step); all the
tokens of a step are sampled independently from the same context, the tokens decoded before it.
order: 'random', 'l2r' (plain autoregressive decoding) or 'confidence' (each step scores every
masked position in one cached pass and decodes the most confident ones, by highest max-probability
or lowest entropy, see `confidence`). An encoder checkpoint (architecture=encoder) samples the same way,
with one full forward per step and no cache, and also takes 'ancestral', MDLM's sampler: each step
reveals every masked position with the same probability, so --steps may exceed the tokens (a step
that reveals nothing costs nothing). speculate=k > 0 draws the samples of one token per step
(random or l2r order) by any-subset speculative decoding: up to k tokens drafted at once, each kept
or redrawn by an exact test, in fewer forwards (speculative.speculative; it prints them).
start: a prefix (or FILE:path); infill: a template whose `mask_token` markers are generated ([MASK:5] is
five tokens) around the known text, each generated span printed between fill_marks. [MASK] alone is a gap whose
length the model chooses (one a template), up to gap_cap tokens: AO-GPT from its likelihood of the text after the
gap placed at each length (aogpt/infilling.py; gap_choice: a draw or the most likely), printed with its probability;
a FIM GPT (train.py --fim_rate) writes the gap until its end token. The FIM GPT fills one gap, of either kind.
init_from: 'resume' (out_dir/ckpt.pt), the path of a checkpoint (ours or the authors' format), a
model folder (export.py's), a Hugging Face Hub file hf:owner/repo/path or model folder hf:owner/repo.
Character-level checkpoints carry their vocabulary.
Tokens are drawn by inverse CDF in float64 (sample_dtype); top_p_mode='authors' is the authors'
top-p (the token that crosses top_p is dropped), and the step sizes truncate as theirs do.
"""
import itertools

import torch

from aogpt.checkpoints import is_fim_gpt, token_count
from aogpt.common import (autocast, check_settings, default_device, default_dtype, find_checkpoint, hold_freed_memory,
                          int_at_least, load_tokenizer, optional_int, read_checkpoint, trained_block)
from aogpt.sampling import (SAMPLING_SETTINGS, TEMPERATURE_RULE, TOP_P_RULE, check_decoding, check_gap_fill,
                            check_sampling, check_steps, decoding_order, prompt_tokens, sampling_options,
                            trained_gap_cap)
from configurator import configure, fail
from aogpt.decoding import generate
from aogpt.engine import compile_decoding
from aogpt.infilling import fill_gap
from aogpt.speculative import Speculation, speculation_k

# -----------------------------------------------------------------------------
globals().update(SAMPLING_SETTINGS)  # init_from, out_dir, start, infill, order, steps, temperature, ... (aogpt/sampling.py)
num_samples = 3
fill_marks = '«»'  # --infill: the two characters printed around each generated span; '' prints the text plain
device = default_device()
dtype = default_dtype()
# -----------------------------------------------------------------------------


def check_inputs():
    check_sampling(globals())
    check_settings(globals(), {'temperature': TEMPERATURE_RULE, 'top_p': TOP_P_RULE, 'steps': optional_int(1),
                               'num_samples': int_at_least(1),
                               'fill_marks': (lambda v: len(v) in (0, 2), "two characters, or '' for none")})


def main(given=()):
    """given: the settings a config file or flag set (configure's overrides)."""
    global speculate, order
    check_inputs()
    hold_freed_memory()
    model, checkpoint = read_checkpoint(find_checkpoint(init_from, out_dir), device, use_ema)
    order = decoding_order(order, given, checkpoint, model, infill)
    speculate = speculation_k(speculate, model, order, num_samples)
    check_decoding(order, model, speculate)
    block_size = model.config.block_size
    encode, decode = load_tokenizer(checkpoint, model.config.vocab_size)
    ids, known, at = prompt_tokens(encode, block_size, start, infill, max_new_tokens, mask_token,
                                   trained_block(model, checkpoint))
    fim = bool(infill) and is_fim_gpt(checkpoint)
    if at is not None or fim:
        return fill_gaps(model, checkpoint, ids, known, at, fim, given, decode)
    n_steps = check_steps(steps, known.count(False), order, speculate)

    if compile:
        compile_decoding(model, dtype)
    generator = torch.Generator(device).manual_seed(seed)
    x = torch.tensor(ids, device=device).repeat(num_samples, 1)
    n_tokens = token_count(checkpoint, model.config.vocab_size)  # never the padding ids of a GPT-2 table
    sampling, options = sampling_options(globals())
    stats = Speculation()
    with autocast(device, dtype):
        x, _ = generate(model, x, torch.tensor(known, device=device), n_steps, sampling, generator=generator,
                        n_tokens=n_tokens, progress=True, stats=stats, **options)
    for row in x.tolist():
        print(marked(decode, row, known, fill_marks) if infill else decode(row))
        print('---------------')
    if speculate:
        print(stats)


def fill_gaps(model, checkpoint, ids, known, at, fim, given, decode):
    """sample.py for a gap of no given length, or any gap of a FIM GPT (infilling.fill_gap): each sample with its
    gap's length, and for AO-GPT that length's probability."""
    check_gap_fill(fim, speculate, steps is not None, 'order' in given)
    cap = trained_gap_cap(model, ids, fim, gap_cap, trained_block(model, checkpoint))
    if compile:
        compile_decoding(model, dtype)
    sampling, options = sampling_options(globals())
    options = {k: v for k, v in options.items() if k != 'speculate'}
    try:
        with autocast(device, dtype):
            fills = fill_gap(model, ids, known, at, num_samples, sampling, fim=fim, cap=cap, choice=gap_choice,
                             context=gap_context,
                             n_tokens=token_count(checkpoint, model.config.vocab_size),
                             generator=torch.Generator(device).manual_seed(seed), **({} if fim else options))
    except ValueError as e:
        fail(e)
    for row, row_known, length, p in fills:
        print(f'gap of {length} tokens' + (f' (p={p:.3f})' if p is not None else ''))
        print(marked(decode, row, row_known, fill_marks))
        print('---------------')


def marked(decode, row, known, marks):
    """A sample's text with each generated span between marks[0] and marks[1] (none when marks is '')."""
    text = []
    for is_known, group in itertools.groupby(zip(row, known), key=lambda pair: pair[1]):
        span = decode([token for token, _ in group])
        text.append(span if is_known or not marks else marks[0] + span + marks[1])
    return ''.join(text)


if __name__ == '__main__':
    main(configure(globals(), doc=__doc__))
