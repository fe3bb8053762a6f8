"""
Scorers: a model that gives each generated token its NLL, for gen_ppl.py and the findings. A checkpoint of ours
(AO-GPT, sigma-GPT, GPT or the encoder) or a Hugging Face causal LM (GPT-2 and its kin, through transformers).
"""
import os
from functools import partial

import torch
from torch.nn import functional as F

from aogpt.checkpoints import GPT2_VOCAB, checkpoint_tokens, is_hf_folder, training_record, weights_read
from aogpt.common import find_checkpoint, read_checkpoint
from aogpt.scoring import encoder_gap_nlls, encoder_l2r_logprobs, known_first_nlls, left_nlls, order_logprobs
from configurator import fail


def is_hf_model(name):
    """Whether init_from (or a scorer) names a Hugging Face causal LM, a Hub name or a folder saved with
    save_pretrained, rather than one of our checkpoints ('resume', a .pt or other file, hf:owner/repo/file,
    any other folder: a model folder of export.py's, or a run's, whose error names the ckpt.pt in it)."""
    ours = name == 'resume' or name.startswith('hf:') or name.endswith('.pt') or os.path.isfile(name)
    return not ours and (not os.path.isdir(name) or is_hf_folder(name))


def load_hf_causal_lm(name, device):
    """A Hugging Face causal LM (gpt2, gpt2-large, ... or a local folder), in eval mode, through the
    optional dependency transformers; one-line errors when it or the weights cannot be had."""
    try:
        from transformers import AutoModelForCausalLM
    except ImportError:
        fail(f'{name} is a Hugging Face model, which needs transformers: pip install transformers')
    try:
        model = AutoModelForCausalLM.from_pretrained(name)
    except (OSError, ValueError) as e:  # unknown name, no network, no weights in the folder
        reason = ' '.join(str(e).split())[:200]
        fail(f'could not load the Hugging Face model {name!r} ({reason}); check the name and the network, '
             f'or pass a local folder saved with save_pretrained')
    return model.to(device).eval()


def load_scorer(name, device, sides='left'):
    """score(x, generated) -> each row's NLL of its scored tokens, for the token ids x (B, T) and which of them were
    generated (B, T) bool, on the CPU; its vocabulary (what the ids mean, as checkpoint_vocab says it, and how
    many), the longest sequence it reads, and which weights of a checkpoint scorer it reads ('EMA' or 'raw'; None
    for a Hugging Face model). sides='left': each generated token but the sample's first, given the tokens before
    it; 'both': every generated token, given every known token (read first, left to right) and the generated ones
    before it (our checkpoints only). An encoder is read exactly, one forward per scored token."""
    if not is_hf_model(name):
        model, checkpoint = read_checkpoint(find_checkpoint(name, ''), device)
        if sides == 'both' and training_record(checkpoint)['config'].get('order') == 'l2r':
            fail(f'--sides=both reads the known tokens first, but the scorer {name} was trained left to right '
                 f'(--order=l2r): score with an any-order checkpoint, or --sides=left')

        def nll(x):  # an encoder's exactly: one forward per token
            if model.config.is_encoder:
                return -encoder_l2r_logprobs(model, x.cpu(), x.numel(), first=1)[0].view(len(x), -1)
            # a row at a time through order_logprobs: a batch's logits at a 50k vocabulary would take gigabytes
            l2r = torch.arange(x.size(1))[None]
            return -torch.stack([order_logprobs(model, row, l2r, 1, max_tokens=len(row))[0] for row in x])
        both = encoder_gap_nlls if model.config.is_encoder else known_first_nlls
        score = partial(both, model) if sides == 'both' else partial(left_nlls, nll)
        return score, checkpoint_tokens(checkpoint, model.config.vocab_size), model.config.block_size, \
            weights_read(checkpoint)
    if sides == 'both':
        fail(f'--sides=both reads the known tokens first, but the scorer {name} is a Hugging Face model, which reads '
             f'left to right only: score with an any-order checkpoint of ours, or --sides=left')
    model = load_hf_causal_lm(name, device)
    if model.config.vocab_size < GPT2_VOCAB:
        fail(f'the scorer {name} has a {model.config.vocab_size}-token vocabulary: a Hugging Face scorer must '
             f'read GPT-2 BPE ids (gpt2, gpt2-medium, gpt2-large, gpt2-xl, ...)')

    def nll(x):  # a row's log-softmax at a time: the batch's would double the logits' gigabytes at GPT-2's vocabulary
        logits = model(input_ids=x).logits
        return torch.stack([F.cross_entropy(row[:-1].float(), ids[1:], reduction='none')
                            for row, ids in zip(logits, x)])
    return partial(left_nlls, nll), ('gpt2', model.config.vocab_size), \
        getattr(model.config, 'max_position_embeddings', None), None
