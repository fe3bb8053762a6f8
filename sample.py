"""
Sample from a trained AO-GPT with a KV cache, in any order, many tokens per step; or from the encoder.

    python sample.py --out_dir=out-shakespeare-char                      # random order, one token per step
    python sample.py --out_dir=out-shakespeare-char --order=l2r --start="ROMEO:"
    python sample.py --out_dir=out-shakespeare-char --order=confidence --steps=16
    python sample.py --out_dir=out-shakespeare-char --infill="ROMEO: [MASK:20] my lord, [MASK:20]."
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
or redrawn by an exact test, in fewer forwards (engine.speculative; it prints them). start: a prefix (or FILE:path); infill: a template whose
`mask_token` markers are generated ([MASK] is one token, [MASK:5] five) around the known text.
init_from: 'resume' (out_dir/ckpt.pt), the path of a checkpoint (ours or the authors' format), or
a Hugging Face Hub file hf:owner/repo/path. Character-level checkpoints carry their vocabulary.
Tokens are drawn by inverse CDF in float64 (sample_dtype); top_p_mode='authors' is the authors'
top-p (the token that crosses top_p is dropped), and the step sizes truncate as theirs do.
"""
import torch

from checkpoints import token_count
from common import (TEMPERATURE_RULE, TOP_P_RULE, autocast, check_order, check_sampling, check_steps, default_device,
                    default_dtype, find_checkpoint, load_tokenizer, prompt_tokens, read_checkpoint)
from configurator import check_settings, configure, int_at_least, optional_int
from engine import Sampling, Speculation, compile_forward, generate

# -----------------------------------------------------------------------------
init_from = 'resume'  # 'resume' (out_dir/ckpt.pt), a path, or hf:owner/repo/path
out_dir = 'out-shakespeare-char'
use_ema = True  # the EMA weights, as evaluated during training (the raw ones if there are none)
start = ''  # a prefix, or FILE:path to read it from
infill = ''  # a template such as "The [MASK] sat on the [MASK:5]."; not with start
mask_token = '[MASK]'
max_new_tokens = None  # tokens after start; None fills the block
num_samples = 3
steps = None  # decoding steps; None: one token per step
schedule = 'linear'  # 'linear' or 'cosine'
order = 'random'  # 'random', 'l2r', 'confidence', or 'ancestral' (the encoder only)
confidence = 'maxprob'  # order=confidence decodes the highest 'maxprob' or the lowest 'entropy' first
speculate = 0  # k > 0: one token per step's samples by speculative decoding, up to k drafts per forward
temperature = 1.0  # 0: greedy
top_k = None  # sample from the top_k most likely tokens only
top_p = 1.0  # nucleus sampling: the smallest set of tokens with this much probability
top_p_mode = 'nucleus'  # 'nucleus' keeps the token that crosses top_p, 'authors' drops it (their sampler)
sample_dtype = 'float64'  # precision of the sampling probabilities and CDF: 'float64' or 'float32'
seed = 1337
device = default_device()
dtype = default_dtype()
compile = False
# -----------------------------------------------------------------------------


def check_inputs():
    check_sampling(globals())
    check_settings(globals(), {'temperature': TEMPERATURE_RULE, 'top_p': TOP_P_RULE, 'steps': optional_int(1),
                               'num_samples': int_at_least(1)})


def main():
    check_inputs()
    model, checkpoint = read_checkpoint(find_checkpoint(init_from, out_dir), device, use_ema)
    check_order(order, model, speculate)
    block_size = model.config.block_size
    encode, decode = load_tokenizer(checkpoint, model.config.vocab_size)
    ids, known = prompt_tokens(encode, block_size, start, infill, max_new_tokens, mask_token)
    n_steps = check_steps(steps, known.count(False), order, speculate)

    if compile:
        compile_forward(model)
    generator = torch.Generator(device).manual_seed(seed)
    x = torch.tensor(ids, device=device).repeat(num_samples, 1)
    n_tokens = token_count(checkpoint, model.config.vocab_size)  # never the padding ids of a GPT-2 table
    with autocast(device, dtype):
        sampling = Sampling(temperature, top_k, top_p, top_p_mode, getattr(torch, sample_dtype))
        stats = Speculation()
        x, _ = generate(model, x, torch.tensor(known, device=device), n_steps, sampling, schedule=schedule,
                        policy=order, confidence=confidence, generator=generator, n_tokens=n_tokens, progress=True,
                        speculate=speculate, stats=stats)
    for row in x.tolist():
        print(decode(row))
        print('---------------')
    if speculate:
        print(stats)


if __name__ == '__main__':
    configure(globals(), doc=__doc__)
    main()
