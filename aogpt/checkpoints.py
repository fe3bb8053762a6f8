"""
Checkpoints: naming one, reading any supported format, writing ours.

Every script names its checkpoint the same way, with `init_from`:
- 'resume': out_dir/ckpt.pt
- a local path: one of our checkpoints or one of the authors' released ones, or a model folder
  (export.py's: model.safetensors, config.json, a model card), read without unpickling anything
- 'hf:owner/repo/path/in/repo': a file on the Hugging Face Hub, fetched once and cached by
  huggingface_hub (e.g. hf:Cauthyyy/AO-GPT-MDM/<one of its ckpt_*.pt files>); 'hf:owner/repo': a
  model folder on the Hub

Nothing here stops the program: a file that cannot be used raises CheckpointError with a one-line
message, which the scripts print as their error (common.read_checkpoint).
"""
import dataclasses
import json
import os
import shutil
import warnings

import torch

from model import GPTConfig, build_model
from aogpt.fim import SENTINELS
from aogpt.training import describe_orders

GPT2_VOCAB = 50257  # GPT-2 BPE ids; models pad their tables up to 50304
FOLDER_FORMAT = 'ao-gpt'  # config.json's format of a model folder
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# what transformers runs (trust_remote_code): the network's, the decoding's and the scoring's own code, and the
# readers of numbers and templates they share; paths in the repository, side by side in a folder
FOLDER_CODE = ('model.py', 'configurator.py', 'aogpt/engine.py', 'aogpt/speculative.py', 'aogpt/decoding.py',
               'aogpt/scoring.py', 'aogpt/infilling.py', 'aogpt/fim.py', 'aogpt/modeling_ao_gpt.py')
# generate()'s defaults for transformers: with no input it starts from the start slot, whose id follows the network's
GENERATION_CONFIG = 'generation_config.json'
TOKENIZER_FILES = ('vocab.json', 'merges.txt', 'tokenizer_config.json')  # for transformers' AutoTokenizer
FOLDER_FILES = (('config.json', 'model.safetensors', 'README.md', GENERATION_CONFIG)
                + tuple(os.path.basename(path) for path in FOLDER_CODE) + TOKENIZER_FILES)
GPT2_BPE_FILES = 'https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/'  # where tiktoken gets GPT-2's BPE
# transformers' Auto class and model class of each kind: a decoder is a causal LM read left to right, the encoder a
# masked LM
HF_CLASSES = {False: ('AutoModelForCausalLM', 'AOGPTForCausalLM'), True: ('AutoModelForMaskedLM', 'AOGPTForMaskedLM')}
# train.py's settings about the machine and the run's files, not the model: a shared folder leaves them out
MACHINE_SETTINGS = ('data_dir', 'out_dir', 'device', 'compile', 'eval_only', 'overwrite', 'log_interval', 'peak_flops',
                    'wandb_log', 'wandb_project', 'wandb_run_name', 'init_from', 'order_file')


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
    if os.path.isdir(init_from) and not os.path.isfile(os.path.join(init_from, 'config.json')):
        raise CheckpointError(f'{init_from} is a folder without a config.json, so not a model folder: name the '
                              f'checkpoint file in it ({os.path.join(init_from, "ckpt.pt")})')
    if not os.path.exists(init_from):
        raise CheckpointError(f"checkpoint {init_from} not found (init_from takes 'resume', a path, a model "
                              f"folder, hf:owner/repo/file or hf:owner/repo; a new run of train.py also GPT-2: "
                              f"{GPT2_LIST} or a folder that save_pretrained wrote)")
    return init_from


def hub_file(name):
    """Fetch hf:owner/repo/path (a file) or hf:owner/repo (a model folder's files) from the Hugging Face Hub
    into its cache; return the local path."""
    owner, _, rest = name[3:].partition('/')
    repo, _, filename = rest.partition('/')
    if not (owner and repo):
        raise CheckpointError(f'{name} is not a Hub name: use hf:owner/repo/path/in/repo, or hf:owner/repo for a '
                              f'model folder')
    try:
        from huggingface_hub import hf_hub_download, snapshot_download
        if not filename:
            return snapshot_download(f'{owner}/{repo}', allow_patterns=list(FOLDER_FILES))
        return hf_hub_download(f'{owner}/{repo}', filename)
    except Exception as e:  # the Hub raises many kinds (offline, missing repo or file, auth)
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f'could not fetch {filename} from the Hub repo {owner}/{repo} ({reason}); '
                              f'check the name, the network, or download it and pass its path')


def save_checkpoint(checkpoint, path):
    """torch.save to a temporary file, flushed to the disk (fsync), then renamed into place and the rename flushed
    too: neither a crash nor a power cut mid-write leaves a broken or empty file where the old one was."""
    with open(path + '.tmp', 'wb') as f:
        torch.save(checkpoint, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + '.tmp', path)
    folder = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


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
    if os.path.isdir(path):
        return load_folder(path, device)
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
    'ema_model') unless use_ema=False or the checkpoint has none (the authors' sigma-GPT, nanoGPT's);
    a model folder's one set, whichever it holds."""
    if 'weights' in checkpoint:
        return checkpoint['weights']
    return 'EMA' if use_ema and {'ema', 'ema_model'} & checkpoint.keys() else 'raw'


def folder_config(model, checkpoint, weights):
    """A model folder's config.json: the network's config, what its ids mean, which weights ('EMA' or 'raw')
    and what trained it."""
    auto, name = HF_CLASSES[model.config.is_encoder]
    return dict(format=FOLDER_FORMAT, model_args=dataclasses.asdict(model.config), weights=weights,
                vocab=checkpoint_vocab(checkpoint, model.config.vocab_size),
                n_tokens=token_count(checkpoint, model.config.vocab_size), trained=training_record(checkpoint),
                model_type=FOLDER_FORMAT, architectures=[name],
                auto_map={'AutoConfig': 'modeling_ao_gpt.AOGPTConfig', auto: f'modeling_ao_gpt.{name}'})


def save_folder(model, config, card, folder):
    """Write a model folder: model.safetensors (the model's weights; a tied head stored once), config.json
    (folder_config), README.md (card), FOLDER_CODE (copied from the repository), a decoder's GENERATION_CONFIG and the
    tokenizer's files (tokenizer_files). Written beside, then renamed into place: a
    crash never leaves half a folder."""
    from safetensors.torch import save_model
    encoder = config['model_args']['architecture'] == 'encoder'
    # first, as it may fail: before anything is written
    tokenizer = tokenizer_files(config['vocab'], encoder, config['model_args']['vocab_size'])
    tmp = folder.rstrip('/') + '.tmp'
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    save_model(model, os.path.join(tmp, 'model.safetensors'))
    with open(os.path.join(tmp, 'config.json'), 'w', encoding='utf-8') as f:
        json.dump(config, f, indent=1)
    # safetensors writes its file for its owner alone (0600): as readable as a file written here (the umask's)
    shutil.copymode(os.path.join(tmp, 'config.json'), os.path.join(tmp, 'model.safetensors'))
    with open(os.path.join(tmp, 'README.md'), 'w', encoding='utf-8') as f:
        f.write(card)
    for path in FOLDER_CODE:
        shutil.copy(os.path.join(REPO, path), tmp)
    if not encoder:
        with open(os.path.join(tmp, GENERATION_CONFIG), 'w', encoding='utf-8') as f:
            json.dump(dict(bos_token_id=config['model_args']['vocab_size']), f)
    for name, text in tokenizer.items():
        with open(os.path.join(tmp, name), 'w', encoding='utf-8') as f:
            f.write(text)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def tokenizer_files(vocab, encoder, start_id):
    """The files (name -> text) of a folder's tokenizer for transformers' AutoTokenizer, whose one special token, at
    start_id (the id after the network's), is the encoder's [MASK] or a decoder's start slot: a character model's
    characters for the folder's tokenizer class; GPT-2's BPE files (tiktoken's cached copies) for transformers' own
    GPT-2 tokenizer; none for a vocabulary the checkpoint does not name."""
    special = dict(mask_token='[MASK]', bos_token=None) if encoder else dict(bos_token='<|start|>')
    token = special['mask_token' if encoder else 'bos_token']
    if vocab is None:
        return {}
    if vocab != 'gpt2':
        config = dict(tokenizer_class='AOGPTCharTokenizer',
                      auto_map={'AutoTokenizer': ['modeling_ao_gpt.AOGPTCharTokenizer', None]}, **special)
        return {'vocab.json': json.dumps(vocab), 'tokenizer_config.json': json.dumps(config, indent=1)}
    from tiktoken.load import read_file_cached
    try:
        ids, merges = (read_file_cached(GPT2_BPE_FILES + name).decode() for name in ('encoder.json', 'vocab.bpe'))
    except Exception as e:  # requests' connection errors, and whatever a broken cache raises
        raise CheckpointError(f'could not read the GPT-2 BPE files ({type(e).__name__}) for the tokenizer: tiktoken '
                              f'downloads them once, so connect to the network, or point TIKTOKEN_CACHE_DIR at a '
                              f'cache that holds them')
    config = dict(tokenizer_class='GPT2Tokenizer', eos_token='<|endoftext|>', unk_token='<|endoftext|>', **special)
    return {'vocab.json': json.dumps(json.loads(ids) | {token: start_id}), 'merges.txt': merges,
            'tokenizer_config.json': json.dumps(config, indent=1)}


def training_record(checkpoint):
    """What trained a checkpoint, as far as it says: train.py's settings, its iterations and tokens (a model
    folder's config.json: the record it carries)."""
    if 'trained' in checkpoint:
        return checkpoint['trained']
    config = checkpoint.get('config', {})
    iters = checkpoint.get('iter_num')
    tokens = None
    if iters is not None and {'batch_size', 'block_size', 'gradient_accumulation_steps'} <= config.keys():
        tokens = iters * config['batch_size'] * config['block_size'] * config['gradient_accumulation_steps']
    plain = {k: v for k, v in config.items()
             if k not in MACHINE_SETTINGS and isinstance(v, (int, float, str, bool, type(None)))}
    return dict(iterations=iters, tokens=tokens, config=plain, orders=describe_orders(plain),
                parent=checkpoint.get('parent'))


def is_hf_folder(path):
    """Whether path is a folder saved by Hugging Face's save_pretrained: a config.json naming a model_type, and not
    ours (our format or model_type). Any other folder (a run's, a model folder of ours, cut or of another format) is
    read as ours, for its own error."""
    try:
        with open(os.path.join(path, 'config.json'), encoding='utf-8') as f:
            config = json.load(f)
        return 'model_type' in config and FOLDER_FORMAT not in (config.get('format'), config.get('model_type'))
    except (OSError, UnicodeDecodeError, ValueError, TypeError):
        return False


def load_folder(folder, device='cpu'):
    """A network (eval mode) and its config.json as the checkpoint dict, from a model folder: JSON and
    safetensors, nothing unpickled."""
    from safetensors.torch import load_model
    path = os.path.join(folder, 'config.json')
    try:
        with open(path, encoding='utf-8') as f:
            config = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f'{path} cannot be read as JSON ({one_line(e)}): export the model again')
    if is_hf_folder(folder):
        raise CheckpointError(f"{folder} is a transformers folder of model_type {config['model_type']!r}, not one of "
                              f"export.py's: a new run of train.py starts from GPT-2's (model_type 'gpt2'), and the "
                              f"scripts read the folders export.py writes")
    if not isinstance(config, dict) or config.get('format') != FOLDER_FORMAT:
        found = config.get('format') if isinstance(config, dict) else None
        raise CheckpointError(f"{path} is not an AO-GPT model folder's (format {found!r}, expected "
                              f"{FOLDER_FORMAT!r}): give a folder written by export.py")
    weights = os.path.join(folder, 'model.safetensors')
    if not os.path.isfile(weights):
        raise CheckpointError(f'{folder} holds no model.safetensors: export the model again')
    try:
        model = build_model(GPTConfig(**config['model_args']))
        load_model(model, weights, device=str(device))
    except Exception as e:  # a config of another kind or size, a truncated or foreign file
        raise CheckpointError(f'{weights} does not fit {path} ({one_line(e)})')
    check_folder_vocab(config.get('vocab'), model.config.vocab_size, path)
    return model.to(device).eval(), config


def check_folder_vocab(vocab, size, path):
    """Raise unless a model folder's vocab (config.json at path) is 'gpt2', None or one character for each of the
    model's size ids: the scripts encode and decode text by it."""
    if not (vocab in ('gpt2', None) or (isinstance(vocab, str) and len(vocab) == size)):
        what = f'{len(vocab)} characters' if isinstance(vocab, str) else f'a {type(vocab).__name__}'
        raise CheckpointError(f"{path}'s vocab is {what} but its model reads vocab_size={size} ids: a vocab is "
                              f"'gpt2', null or one character per id; export the model again")


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


GPT2_NAMES = ('gpt2', 'gpt2-medium', 'gpt2-large', 'gpt2-xl')  # OpenAI's GPT-2 on the Hugging Face Hub
GPT2_OWNER = 'openai-community/'  # the Hub's names of GPT-2 today put it before GPT2_NAMES (the old ones redirect)
GPT2_LIST = f"{', '.join(GPT2_NAMES)} (gpt2 is GPT-2 small; also as {GPT2_OWNER}gpt2, ...)"
GPT2_GELUS = {'gelu_new': 'tanh', 'gelu_pytorch_tanh': 'tanh', 'gelu': 'none'}  # transformers' names -> model.py's
GPT2_SAVE = "GPT2LMHeadModel.from_pretrained('gpt2').save_pretrained('gpt2-local')"


def is_gpt2(init_from):
    """Whether init_from names OpenAI's GPT-2 (a Hub name of GPT2_NAMES, with or without GPT2_OWNER) or a folder that
    transformers saved a GPT-2 in (save_pretrained: config.json's model_type 'gpt2')."""
    if init_from.removeprefix(GPT2_OWNER) in GPT2_NAMES:
        return True
    return os.path.isdir(init_from) and is_hf_folder(init_from) and hf_model_type(init_from) == 'gpt2'


def gpt2_missing(name):
    """'' when GPT-2's weights `name` are on this machine (a folder, or the Hugging Face cache), else what to do:
    they download on the first run, which needs the network."""
    if os.path.isdir(name):
        return ''
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return ''  # gpt2_checkpoint says that transformers is missing
    if isinstance(try_to_load_from_cache(name, 'config.json'), str):
        return ''
    return (f"--init_from={name}: GPT-2's weights are not on this machine, and download on the first run (offline, "
            f'save them on a machine with the network, {GPT2_SAVE}, and pass that folder: --init_from=gpt2-local)')


def hf_model_type(folder):
    with open(os.path.join(folder, 'config.json'), encoding='utf-8') as f:
        return json.load(f).get('model_type')


def gpt2_checkpoint(name):
    """GPT-2's weights (a Hub name, or a save_pretrained folder) as one of our checkpoints of sigma-GPT's recipe, the
    network GPT-2 is (LayerNorm, a tied head, learned positions), read left to right exactly as GPT-2 reads
    '<|endoftext|>' + the text: the start slot is that token at GPT-2's position 0, slot j + 1 its position j + 1
    (so block_size is GPT-2's positions less one), and the target-position embedding starts at zero, where it
    changes nothing. The vocabulary stays GPT-2's: rows padded to 50304 would take probability from its tokens."""
    try:
        from safetensors import SafetensorError
        from transformers import GPT2LMHeadModel
    except ImportError:
        raise CheckpointError(f'--init_from={name} reads GPT-2 through transformers: pip install transformers')
    try:
        hf = GPT2LMHeadModel.from_pretrained(name)
    except (OSError, ValueError) as e:  # offline without a cached copy, an unknown name, a folder without weights
        raise CheckpointError(f"could not load GPT-2's weights {name!r} ({one_line(e, 150)}); offline, save them on a "
                              f'machine with the network ({GPT2_SAVE}) and pass that folder: --init_from=gpt2-local')
    except SafetensorError as e:  # a model.safetensors cut short (a copy or download that stopped) or overwritten
        raise CheckpointError(f"GPT-2's weights {name!r} cannot be read ({one_line(e, 150)}): the file is cut short "
                              f'or damaged; save the model again (save_pretrained), or delete a download from the '
                              f'Hugging Face cache to fetch it again')
    c = hf.config
    config = GPTConfig(block_size=c.n_positions - 1, vocab_size=c.vocab_size, n_layer=c.n_layer, n_head=c.n_head,
                       n_embd=c.n_embd, bias=True, target_injection='add', position_encoding='learned',
                       gelu=gpt2_gelu(c, name))
    state = {k: v for k, v in hf.state_dict().items() if not k.endswith(('.attn.bias', '.attn.masked_bias'))}
    conv1d = ('attn.c_attn.weight', 'attn.c_proj.weight', 'mlp.c_fc.weight', 'mlp.c_proj.weight')
    state = {k: v.t() if k.endswith(conv1d) else v for k, v in state.items()}  # Conv1D keeps (in, out)
    state['transformer.wnonee.weight'] = state['transformer.wte.weight'][c.bos_token_id][None]
    state['transformer.wtpe.weight'] = torch.zeros(config.block_size, config.n_embd)
    model = build_model(config)
    model.load_state_dict(state)
    model_args = dataclasses.asdict(config)
    return dict(model=model.state_dict(), model_args=model_args, vocab='gpt2', trained=dict(
        iterations=None, tokens=None, config={}, orders=f'left to right: OpenAI\'s GPT-2 ({name})'))


def gpt2_gelu(c, name):
    """model.py's gelu of a transformers GPT2Config; CheckpointError for a GPT-2 variant the recipe cannot hold."""
    different = [what for what, bad in (
        (f'activation_function={c.activation_function!r}', c.activation_function not in GPT2_GELUS),
        ('an untied head (tie_word_embeddings=False)', not c.tie_word_embeddings),
        (f'n_inner={c.n_inner}', c.n_inner not in (None, 4 * c.n_embd)),
        (f'layer_norm_epsilon={c.layer_norm_epsilon}', c.layer_norm_epsilon != 1e-5),
        ('scale_attn_weights=False', not c.scale_attn_weights),
        ('scale_attn_by_inverse_layer_idx=True', c.scale_attn_by_inverse_layer_idx),
        ('cross-attention', c.add_cross_attention),
        (f'bos_token_id={c.bos_token_id}',
         not (isinstance(c.bos_token_id, int) and 0 <= c.bos_token_id < c.vocab_size)))
        if bad]
    if different:
        raise CheckpointError(f"{name} is a GPT-2 with {', '.join(different)}, which sigma-GPT's recipe does not "
                              f"hold: only GPT-2's own shape converts (a tied head, a 4x MLP with GELU, eps 1e-5)")
    return GPT2_GELUS[c.activation_function]


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
    """How many ids of a checkpoint's vocabulary are tokens: GPT-2's 50257 of a padded 50304-row table, a character
    set's characters; the rest are padding or a FIM GPT's sentinels (fim.py)."""
    vocab = checkpoint_vocab(checkpoint, vocab_size)
    if vocab == 'gpt2':
        return GPT2_VOCAB
    if vocab is not None:
        return len(vocab)
    return vocab_size - len(SENTINELS) * is_fim_gpt(checkpoint)


def is_fim_gpt(checkpoint):
    """Whether a checkpoint is a FIM GPT (train.py --fim_rate): its table ends in the sentinels."""
    return training_record(checkpoint)['config'].get('fim_rate', 0) > 0


def checkpoint_tokens(checkpoint, vocab_size):
    """(what a checkpoint's ids mean, how many of them are tokens), as common.check_vocab compares them."""
    return checkpoint_vocab(checkpoint, vocab_size), token_count(checkpoint, vocab_size)
