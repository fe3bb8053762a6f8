"""
The settings sample.py and gen_ppl.py share, and what each must be; prompts (a prefix, a file, an infilling
template) as token ids; the decoding order and steps a checkpoint's training allows.
"""
import torch

from aogpt.checkpoints import is_fim_gpt, training_record
from aogpt.common import check_device, check_settings, one_of, optional_int
from aogpt.decoding import DECODING_RULES, check_order, check_speculation, decoding_steps
from aogpt.engine import Sampling
from aogpt.infilling import gap_room
from aogpt.training import run_mix
from configurator import fail, parse_infill, parse_number, rank


SAMPLE_DTYPES = ('float64', 'float32')


SAMPLING_SETTINGS = dict(  # sample.py's and gen_ppl.py's settings, loaded into their globals (--help lists them)
    init_from='resume',  # the sampler: 'resume' (out_dir/ckpt.pt), a path, or hf:owner/repo/path
    out_dir='out-shakespeare-char',
    use_ema=True,  # the EMA weights, as evaluated during training (the raw ones if there are none)
    start='',  # a prefix, or FILE:path to read it from
    infill='',  # a template such as "The [MASK:3] sat on the [MASK]." ([MASK]: a gap whose length the model chooses)
    mask_token='[MASK]',
    gap_cap=None,  # [MASK] without a length: the longest gap tried (None: all the block leaves room for)
    gap_choice='sample',  # AO-GPT's length for [MASK]: drawn from its posterior ('sample'), or its most likely ('mode')
    gap_context=None,  # AO-GPT's posterior for [MASK] reads this many known tokens after the gap (None: all of them)
    max_new_tokens=None,  # tokens after start; None fills the block the run trained on (trained_block)
    steps=None,  # decoding steps; None: one token per step
    schedule='linear',  # 'linear' or 'cosine'
    order='random',  # 'random', 'l2r', 'confidence', or 'ancestral' (the encoder only)
    confidence='maxprob',  # order=confidence decodes the highest 'maxprob' or the lowest 'entropy' first
    # k > 0: one token per step's samples by speculative decoding, up to k drafts per forward; 'auto': the k measured
    # fastest for the order, batch and vocabulary (speculative.auto_k, 0 where none pays); None or 0: one token per step
    speculate=None,
    temperature=1.0,  # 0: greedy
    top_k=None,  # sample from the top_k most likely tokens only
    top_p=1.0,  # nucleus sampling: the smallest set of tokens with this much probability
    top_p_mode='nucleus',  # 'nucleus' keeps the token that crosses top_p, 'authors' drops it (their sampler)
    sample_dtype='float64',  # precision of the sampling probabilities and CDF: 'float64' or 'float32'
    seed=1337,
    compile=False,  # torch.compile each decoding step (static shapes; CUDA graphs on a GPU)
)


SAMPLING_RULES = {  # the settings sample.py and gen_ppl.py share, and what each must be
    **{k: DECODING_RULES[k] for k in ('order', 'confidence', 'schedule', 'top_k', 'top_p_mode', 'speculate')},
    'sample_dtype': one_of(*SAMPLE_DTYPES), 'max_new_tokens': optional_int(1), 'gap_cap': optional_int(1),
    'gap_context': optional_int(1),
    'gap_choice': one_of('sample', 'mode'),
    'mask_token': (lambda v: len(v) >= 2, 'a marker of at least 2 characters, such as [MASK]'),
}


TEMPERATURE_RULE = DECODING_RULES['temperature']


TOP_P_RULE = DECODING_RULES['top_p']


def check_sampling(settings):
    """The checks of SAMPLING_RULES, plus the device (MPS has no float64) and the prompt."""
    check_settings(settings, SAMPLING_RULES)
    if settings['start'] and settings['infill']:
        fail('--start and --infill both give the prompt: put the start at the beginning of the infill template '
             '(--infill="ROMEO: [MASK:20]")')
    check_device(settings['device'], settings['dtype'])
    if torch.device(settings['device']).type == 'mps' and settings['sample_dtype'] == 'float64':
        fail('MPS has no float64: use --sample_dtype=float32 there')


def parse_list(key, text, cast, rule):
    """The entries of the comma list `text` of the setting `key`, each cast and checked, or one-line errors."""
    values = []
    for entry in str(text).split(','):
        try:
            value = parse_number(entry.strip(), cast)
        except ValueError as e:
            fail(f"--{key} takes a comma list of {'ints' if cast is int else 'numbers'} such as "
                 f"{'64,128' if cast is int else '1.0,0.7'}; {e}")
        test, what = rule
        if not test(value):
            fail(f'--{key} entries must be {what}, got {value!r}')
        values.append(value)
    return values


def prompt_tokens(encode, block_size, start='', infill='', max_new_tokens=None, mask_token='[MASK]', trained=None):
    """The ids of one sample, which of them are known, and where a gap of no given length goes (an index of ids, or
    None), from an infill template or a start prefix. Without max_new_tokens a sample fills the block the model
    trained on (trained_block; None: block_size)."""
    if infill:
        try:
            ids, known, at = parse_infill(infill, mask_token, encode)
        except ValueError as e:
            fail(str(e))
        if len(ids) + (at is not None) > block_size:
            fail(f'the infill template is {len(ids)} tokens long{" and a gap" if at is not None else ""}, more than '
                 f'block_size {block_size}')
        return ids, known, at
    text = start
    if text.startswith('FILE:'):
        try:
            with open(text[5:], encoding='utf-8') as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            fail(f'cannot read the prompt file {text[5:]} as UTF-8 text ({type(e).__name__}: {e})')
    prefix = encode(text)
    if len(prefix) >= block_size:
        fail(f'the prompt is {len(prefix)} tokens long and leaves no room in block_size {block_size}')
    if max_new_tokens is None and trained and trained < block_size:
        if len(prefix) >= trained:
            fail(f'the prompt is {len(prefix)} tokens long and leaves no room in the {trained} tokens the checkpoint '
                 f'was trained on: set --max_new_tokens (its model reads up to {block_size})')
        if rank() == 0:
            print(f'note: the checkpoint was trained on blocks of {trained} tokens (its model reads {block_size}): a '
                  f'sample fills {trained}; --max_new_tokens sets how many tokens it adds')
        max_new_tokens = trained - len(prefix)
    new = block_size - len(prefix) if max_new_tokens is None else max_new_tokens
    if len(prefix) + new > block_size:
        fail(f'the output would be {len(prefix)} + {new} tokens, longer than block_size {block_size}')
    return prefix + [0] * new, [True] * len(prefix) + [False] * new, None


def check_steps(steps, n, order='random', speculate=0, flag='--{}'):
    """engine.decoding_steps for a script: the number of decoding steps for n tokens, or its one-line error."""
    try:
        return decoding_steps(steps, n, order, speculate, flag)
    except ValueError as e:
        fail(e)


def check_gap_fill(fim, speculate, steps, order_given):
    """One line where a gap of no given length, or any gap of a FIM GPT, is given a setting it cannot take: it is
    written one token a step (the FIM GPT's left to right)."""
    if speculate or steps or (fim and order_given):
        fail('a gap of no given length, and any gap of a FIM GPT, is written one token a step' +
             (' left to right: drop --order, --steps and --speculate' if fim else ': drop --steps and --speculate'))


def trained_gap_cap(model, ids, fim, gap_cap, trained):
    """--gap_cap, or where it is not set and the run trained on a shorter block than its model reads (trained_block),
    the room the template leaves in that block, said in a note (None: the model's block, infilling.fill_gap's
    default): the positions past it were never trained."""
    block = model.config.block_size
    if gap_cap is not None or trained >= block:
        return gap_cap
    cap = gap_room(trained, ids, fim)
    if cap < 1:
        fail(f'the template of {len(ids)} tokens leaves no room for a gap in the {trained} tokens the checkpoint was '
             f'trained on: set --gap_cap (its model reads up to {block})')
    print(f'note: the checkpoint was trained on blocks of {trained} tokens (its model reads {block}): gaps of up to '
          f'{cap} tokens are tried; --gap_cap sets the longest')
    return cap


def check_speculation_steps(steps, speculate, flag='--{}'):
    """engine.check_speculation for a script: fail if steps are given with speculative decoding."""
    try:
        check_speculation(steps, speculate, flag)
    except ValueError as e:
        fail(e)


def decoding_order(order, given, checkpoint, model, infill):
    """The order a decoder decodes in: --order when given; else left to right, said in one line, for one trained left
    to right only (it never learned another order), and for an infill of one trained on FIM orders (the known tokens
    read first, then the gaps left to right: how it was trained to fill one)."""
    if 'order' in given or model.config.is_encoder:
        return order
    config = training_record(checkpoint)['config']
    if config.get('order') == 'l2r':
        fim = infill and is_fim_gpt(checkpoint)  # which writes its middle left to right, and takes no --order
        print('note: decoding left to right (order=l2r): the model was trained left to right only' +
              ('' if fim else '; --order sets another'))
        return 'l2r'
    mix = run_mix(config)
    if not infill or not mix or not mix['fim']:
        return order
    print(f"order: l2r, each gap left to right after the known tokens: the model trained on FIM orders "
          f"({training_record(checkpoint)['orders']}); --order sets another")
    return 'l2r'


def check_decoding(order, model, speculate=0):
    """Fail unless the model can decode in `order`, speculatively if speculate > 0 (decoding.check_order)."""
    try:
        check_order(model, order, speculate)
    except ValueError as e:
        fail(e)


def sampling_options(settings, **point):
    """engine.Sampling and generate's decoding options from a script's SAMPLING_SETTINGS; point overrides
    some of them (gen_ppl.py's grid point: temperature and top_p)."""
    s = settings | point
    sampling = Sampling(s['temperature'], s['top_k'], s['top_p'], s['top_p_mode'], getattr(torch, s['sample_dtype']))
    return sampling, {key: s[key] for key in ('schedule', 'order', 'confidence', 'speculate')}
