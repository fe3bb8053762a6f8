"""
Checkpoints: naming one, reading any supported format, writing ours.

Every script names its checkpoint the same way, with `init_from`:
- 'resume': out_dir/ckpt.pt
- a local path: one of our checkpoints or one of the authors' released ones
- 'hf:owner/repo/path/in/repo': a file on the Hugging Face Hub, fetched once and cached by
  huggingface_hub (e.g. hf:Cauthyyy/AO-GPT-MDM/<one of its ckpt_*.pt files>)

Nothing here stops the program: a file that cannot be used raises CheckpointError with a one-line
message, which the scripts print as their error (common.read_checkpoint).
"""
import os
import warnings

import torch

from model import GPTConfig, build_model

GPT2_VOCAB = 50257  # GPT-2 BPE ids; models pad their tables up to 50304


class CheckpointError(Exception):
    """A checkpoint that cannot be found, read or built, said in one line."""


def checkpoint_path(init_from, out_dir):
    """The local file that init_from names (see the module docstring)."""
    if init_from == 'resume':
        path = os.path.join(out_dir, 'ckpt.pt')
        if not os.path.isfile(path):
            raise CheckpointError(f'no checkpoint at {path}: train one there first, or pass --out_dir or '
                                  f'--init_from=path')
        return path
    if init_from.startswith('hf:'):
        return hub_file(init_from)
    if os.path.isdir(init_from):
        raise CheckpointError(f'{init_from} is a folder: name the checkpoint file in it '
                              f'({os.path.join(init_from, "ckpt.pt")})')
    if not os.path.isfile(init_from):
        raise CheckpointError(f"checkpoint {init_from} not found (init_from takes 'resume', a path, or "
                              f"hf:owner/repo/file)")
    return init_from


def hub_file(name):
    """Fetch hf:owner/repo/path from the Hugging Face Hub into its cache; return the local path."""
    owner, _, rest = name[3:].partition('/')
    repo, _, filename = rest.partition('/')
    if not (owner and repo and filename):
        raise CheckpointError(f'{name} is not a Hub file name: use hf:owner/repo/path/in/repo')
    try:
        from huggingface_hub import hf_hub_download
        return hf_hub_download(f'{owner}/{repo}', filename)
    except Exception as e:  # the Hub raises many kinds (offline, missing repo or file, auth)
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f'could not fetch {filename} from the Hub repo {owner}/{repo} ({reason}); '
                              f'check the name, the network, or download it and pass its path')


def save_checkpoint(checkpoint, path):
    """torch.save through a temporary file and a rename: a crash mid-write never leaves a broken file."""
    torch.save(checkpoint, path + '.tmp')
    os.replace(path + '.tmp', path)


def load_weights_only(path, device='cpu'):
    """torch.load(weights_only=True), without torch's warning about the pickle protocol of a file
    that is not a checkpoint (the caller's one-line error says that)."""
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='Detected pickle protocol')
        return torch.load(path, map_location=device, weights_only=True)


def load_checkpoint(path, device='cpu', use_ema=True):
    """A network (GPT or MDM, eval mode) and the checkpoint dict, from one of our checkpoints or the authors' ones.

    The EMA weights by default, the raw ones with use_ema=False or when the checkpoint has no EMA
    weights; weights_read(checkpoint, use_ema) says which.
    """
    try:
        checkpoint = load_weights_only(path, device)
    except FileNotFoundError:
        raise CheckpointError(f'checkpoint {path} not found')
    except Exception as e:  # truncated, not a torch file, or pickled objects other than tensors
        raise CheckpointError(f'{path} is not a readable checkpoint: truncated, or not written by '
                              f'torch.save ({type(e).__name__})')
    if not isinstance(checkpoint, dict) or not {'model', 'model_args'} <= checkpoint.keys():
        raise CheckpointError(f"{path} is not an AO-GPT checkpoint (no 'model' and 'model_args' in it)")
    ema = weights_read(checkpoint, use_ema) == 'EMA'
    try:
        if 'ema' in checkpoint:  # ours
            state = checkpoint['ema'] if ema else checkpoint['model']
        else:  # the authors' format (whose model_args do not say which model it is), or nanoGPT's
            state = reference_state_dict(checkpoint, ema)
        model = build_model(GPTConfig(**{'target_injection': injection_of(state), **checkpoint['model_args']}))
        model.load_state_dict(state)
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError(f'{path} does not hold a model this code can build ({one_line(e)})')
    return model.to(device).eval(), checkpoint


def weights_read(checkpoint, use_ema=True):
    """'EMA' or 'raw': the weights load_checkpoint reads, the EMA ones (ours: 'ema', the authors':
    'ema_model') unless use_ema=False or the checkpoint has none (the authors' sigma-GPT, nanoGPT's)."""
    return 'EMA' if use_ema and {'ema', 'ema_model'} & checkpoint.keys() else 'raw'


def injection_of(state):
    """The target injection of a state dict, from its keys: only sigma-GPT has a top-level ln_f."""
    return 'add' if 'transformer.ln_f.weight' in state else 'adaln'


def reference_state_dict(checkpoint, use_ema=True):
    """A state dict for GPT from a checkpoint of the authors' trainer (EMA weights by default).

    Their EMA keeps `shadow_params` as a list in parameter order, which is the key order of
    their `model` state dict; their compiled runs prefix keys with `_orig_mod.`. sigma-GPT's
    state dict holds its tied head twice, as transformer.wte.weight and lm_head.weight, but
    parameters() yields the shared tensor once, under its first name (wte): we assume their EMA
    of a sigma-GPT has no entry for lm_head.weight and take it from wte.
    """
    raw = {k.removeprefix('_orig_mod.'): v for k, v in checkpoint['model'].items()}
    if not use_ema:
        return raw
    tied = injection_of(raw) == 'add'
    names = [k for k in raw if not (tied and k == 'lm_head.weight')]
    shadow = checkpoint['ema_model']['shadow_params']
    if len(shadow) != len(names):
        raise ValueError(f'EMA holds {len(shadow)} tensors but the model has {len(names)} parameters')
    state = dict(zip(names, shadow))
    if tied:
        state['lm_head.weight'] = state['transformer.wte.weight']
    return state


def one_line(error, limit=300):
    """An exception as one short line, for error messages."""
    text = ' '.join(str(error).split())
    return f'{type(error).__name__}: {text[:limit]}' + ('...' if len(text) > limit else '')


def checkpoint_vocab(checkpoint, vocab_size):
    """What a checkpoint's token ids mean: its characters (one string, in id order), 'gpt2', or
    None when it does not say (a small vocabulary saved without its characters, or a run on a
    dataset whose meta.pkl gives only vocab_size)."""
    if 'vocab' in checkpoint:  # train.py always stores it
        return checkpoint['vocab']
    return 'gpt2' if vocab_size >= GPT2_VOCAB else None


def token_count(checkpoint, vocab_size):
    """How many ids of a checkpoint's vocabulary are tokens: GPT-2's 50257 of a padded 50304-row table."""
    return GPT2_VOCAB if checkpoint_vocab(checkpoint, vocab_size) == 'gpt2' else vocab_size


def checkpoint_tokens(checkpoint, vocab_size):
    """(what a checkpoint's ids mean, how many of them are tokens), as common.check_vocab compares them."""
    return checkpoint_vocab(checkpoint, vocab_size), token_count(checkpoint, vocab_size)
