"""
The code a model folder carries for Hugging Face transformers: export.py copies it, with model.py, configurator.py,
engine.py, speculative.py, decoding.py, scoring.py, infilling.py and fim.py, into every folder it writes, and config.json's auto_map names its classes. Read left to right, AO-GPT
and sigma-GPT are causal language models:

    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained('ao-gpt-shakespeare-char', trust_remote_code=True)
    logits = model(input_ids).logits    # logits[:, t] predicts the token after input_ids[:, t]

The encoder is a masked LM (AutoModelForMaskedLM: the masked positions hold config.mask_token_id). A character-level
model's folder also holds its characters (vocab.json), which AutoTokenizer reads with AOGPTCharTokenizer. The network
is model.py's, unchanged: its weights load under the same names. In any order, sample() and infill() decode with
decoding.py, as sample.py does; log_likelihood() and gap_log_likelihood() score exactly with scoring.py, as
eval_ppl.py does.
"""
import dataclasses
import json
import math
import os

import torch
from torch.nn import functional as F
from transformers import DynamicCache, GenerationMixin, PretrainedConfig, PreTrainedModel, PreTrainedTokenizer
from transformers.modeling_outputs import CausalLMOutputWithPast, MaskedLMOutput

from .decoding import DECODING_RULES, check_order, decoding_steps, generate
from .engine import Sampling
from .infilling import fill_gap
from .scoring import decoder_gap_logprobs, encoder_l2r_logprobs, order_logprobs
from .speculative import speculation_k

try:  # a model folder (export.py): model.py and configurator.py lie beside this file
    from .configurator import check_rules, parse_infill
    from .model import GPTConfig, Rotary, build_model
except ImportError:  # the repository: they are at its root
    from configurator import check_rules, parse_infill
    from model import GPTConfig, Rotary, build_model

MAX_TOKENS = 32768  # slots per forward when scoring, as eval_ppl.py's max_tokens: it bounds memory
NUM_SAMPLES_RULE = (lambda v: type(v) is int and v >= 1, 'an int >= 1')
GAP_CHOICE_RULE = (lambda v: v in ('sample', 'mode'), "'sample' or 'mode'")
# what infill() takes for a gap of no given length
GAP_OPTIONS = {'num_samples', 'seed', 'temperature', 'top_k', 'top_p', 'top_p_mode', 'order'}


class AOGPTConfig(PretrainedConfig):
    """config.json as export.py writes it: model.py's GPTConfig under model_args, beside what the scripts read."""
    model_type = 'ao-gpt'

    def __init__(self, model_args=None, n_tokens=None, **kwargs):
        self.model_args = dict(model_args or {})
        self.n_tokens = n_tokens  # how many ids are tokens (GPT-2's 50257 of a 50304-row table); None: all
        # what generic tools read: the longest input whose every next token has a target position in the block
        self.max_position_embeddings = self.model_args.get('block_size', 1) - 1
        # the network's ids, then a decoder's start slot (position -1, the "[None]" token; a row that begins with it is
        # read from the start, as the repository reads left to right, so that its first token is predicted too) or
        # the encoder's [MASK]
        self.vocab_size = self.model_args.get('vocab_size', 0) + 1
        self.num_hidden_layers = self.model_args.get('n_layer')  # as transformers names them
        self.num_attention_heads = self.model_args.get('n_head')
        self.hidden_size = self.model_args.get('n_embd')
        # a decoder's forward returns its keys and values, as transformers' causal LMs do
        self.use_cache = kwargs.pop('use_cache', self.model_args.get('architecture') != 'encoder')
        if self.model_args.get('architecture') == 'encoder':
            self.mask_token_id = self.vocab_size - 1  # the encoder's [MASK]
        else:
            kwargs.setdefault('bos_token_id', self.vocab_size - 1)
        # sigma-GPT's head is its embedding: the file holds it once, as the head
        kwargs['tie_word_embeddings'] = bool(model_args) and GPTConfig(**model_args).recipe.tied_head
        super().__init__(**kwargs)


def check_inputs(input_ids, vocab_size):
    """Raise unless every id is one of the model's (the network's and its special token's: a tokenizer of another
    model gives others)."""
    if input_ids.size(-1) == 0:
        raise ValueError(f'input_ids of shape {tuple(input_ids.shape)} holds no tokens: pass at least one token a row')
    if not (0 <= int(input_ids.min()) and int(input_ids.max()) < vocab_size):
        raise ValueError(f'ids from {int(input_ids.min())} to {int(input_ids.max())}, but this model reads ids 0 to '
                         f'{vocab_size - 1}: encode the text with the tokenizer of its folder')


def check_mask(attention_mask, shape, padding='left'):
    """attention_mask (B, T) of 0s and 1s, its 0s (padding) only before a row's first 1 (left padding), or none
    (padding=None); None stands for all 1s."""
    if attention_mask is None:
        return
    if tuple(attention_mask.shape) != tuple(shape):
        raise ValueError(f'attention_mask of shape {tuple(attention_mask.shape)} for {tuple(shape)} columns: pass one '
                         f'0 or 1 for every column of input_ids (after the cache, for every column so far)')
    others = attention_mask[(attention_mask != 0) & (attention_mask != 1)]
    if len(others):
        raise ValueError(f'attention_mask holds values other than 0 and 1 ({others[0].item()!r}): 0 marks padding, 1 '
                         f'a token')
    mask = attention_mask.long()
    if padding is None and not bool(mask.all()):
        raise ValueError('padding is not supported: pass rows of one length, without an attention_mask')
    if bool((mask[:, 1:] < mask[:, :-1]).any()):
        raise ValueError("attention_mask pads a row on its right: pad on the left (tokenizer.padding_side = 'left'), "
                         "as generate() reads each row's last column as its newest token")


def order_rows(orders, T):
    """orders, one (T,) or several (E, T), as a tensor (E, T) of permutations of 0..T-1 on the CPU; ValueError for
    anything else (an order's name such as 'random', ids that are no permutation, ragged rows)."""
    what = f'orders (E, {T}): each a permutation of the {T} positions 0..{T - 1}'
    try:
        orders = torch.as_tensor(orders).cpu()
    except (TypeError, ValueError, RuntimeError):  # torch's errors for a str, ragged lists, objects
        raise ValueError(f'{what}, got {orders!r:.60}; random orders are e.g. '
                         f'torch.stack([torch.randperm({T}) for _ in range(E)])') from None
    orders = orders[None] if orders.dim() == 1 else orders
    if not (orders.dim() == 2 and orders.size(1) == T and
            torch.equal(orders.sort(1).values, torch.arange(T).expand_as(orders))):
        raise ValueError(what)
    return orders


class AOGPTPreTrainedModel(PreTrainedModel):
    """A folder's network (model.py's GPT or MDM) with transformers' loading: its modules are the network's own, so the
    weights load by their names."""
    config_class = AOGPTConfig
    main_input_name = 'input_ids'
    encoder = False  # the kind of network the class reads

    def __init__(self, config):
        super().__init__(config)
        args = GPTConfig(**config.model_args)
        if args.is_encoder != self.encoder:
            raise ValueError(f'this folder holds {"the encoder" if args.is_encoder else "a decoder"}: load it with '
                             f'{"AutoModelForMaskedLM" if args.is_encoder else "AutoModelForCausalLM"}')
        net = build_model(args)
        object.__setattr__(self, 'net', net)  # its methods, not a submodule: its modules are registered below
        for name, module in net.named_children():
            self.add_module(name, module)
        if args.recipe.tied_head:
            self._tied_weights_keys = {'transformer.wte.weight': 'lm_head.weight'}  # the file holds the head
        self.post_init()

    def __setattr__(self, name, value):
        """A module put in place of one of the network's (peft's LoRA around lm_head, and back when merged) is put in
        the network too, whose forward is the one that runs."""
        super().__setattr__(name, value)
        net = self.__dict__.get('net')
        if net is not None and isinstance(value, torch.nn.Module) and name in net._modules:
            setattr(net, name, value)

    @torch.no_grad()
    def sample(self, input_ids=None, known=None, num_samples=1, steps=None, seed=1337, order='random',
               schedule='linear', confidence='maxprob', temperature=1.0, top_k=None, top_p=1.0, top_p_mode='nucleus',
               speculate=0):
        """num_samples rows of ids (num_samples, T), decoded by the repository's engine as its sample.py decodes them:
        the same seed and settings give the same tokens. The positions of input_ids (T,) that known (T,) marks are
        given, the others generated in `steps` steps (None: one token per step) in an order ('random', 'l2r',
        'confidence'; the encoder also 'ancestral'); speculate=k draws one token per step's samples by speculative
        decoding, up to k drafts a forward. Without input_ids: a block of new tokens. ValueError, in one line, for what
        sample.py refuses."""
        if input_ids is None:
            input_ids = torch.zeros(self.net.config.block_size, dtype=torch.long)
            known = torch.zeros(self.net.config.block_size, dtype=torch.bool)
        known = torch.as_tensor(known, dtype=torch.bool, device=self.device)
        input_ids = torch.as_tensor(input_ids, device=self.device)
        check_rules(dict(order=order, schedule=schedule, confidence=confidence, temperature=temperature, top_k=top_k,
                         top_p=top_p, top_p_mode=top_p_mode, speculate=speculate, num_samples=num_samples),
                    DECODING_RULES | {'num_samples': NUM_SAMPLES_RULE})
        speculate = speculation_k(speculate, self.net, order, num_samples)
        check_order(self.net, order, speculate)
        if input_ids.dim() != 1 or known.shape != input_ids.shape:
            raise ValueError(f'input_ids {tuple(input_ids.shape)} and known {tuple(known.shape)}: pass one row of '
                             f'ids (T,) and whether each is given (T,)')
        if not 1 <= len(input_ids) <= self.net.config.block_size:
            raise ValueError(f'{len(input_ids)} positions to decode: this model reads 1 to '
                             f'{self.net.config.block_size} (its block)')
        check_inputs(input_ids, self.net.config.vocab_size)
        n_tokens = self.config.n_tokens
        if n_tokens and known.any() and int(input_ids[known].max()) >= n_tokens:
            raise ValueError(f'a known id of {int(input_ids[known].max())}: ids from {n_tokens} on pad the table or '
                             f'are a FIM GPT\'s sentinels, which infill() places itself: give tokens below {n_tokens}')
        steps = decoding_steps(steps, int((~known).sum()), order, speculate)
        x = input_ids.view(1, -1).repeat(num_samples, 1)
        x, _ = generate(self.net, x, known, steps,
                        Sampling(temperature, top_k, top_p, top_p_mode), schedule=schedule, order=order,
                        confidence=confidence, generator=torch.Generator(self.device).manual_seed(seed),
                        n_tokens=self.config.n_tokens, speculate=speculate)
        return x

    def infill(self, template, tokenizer, mask_token='[MASK]', gap_cap=None, gap_choice='sample', gap_context=None,
               **options):
        """The texts of the fills of a template, as sample.py --infill fills it: each mask_token with a count
        ([MASK:5]) is that many tokens, decoded by sample() (options: sample's); mask_token alone is a gap whose length
        the model chooses (infilling.fill_gap: up to gap_cap tokens, AO-GPT's length drawn from its posterior, or its
        most likely with gap_choice='mode', reading gap_context tokens after the gap), and a FIM GPT writes its one gap
        until its end token. ValueError, in one
        line, for what sample.py refuses."""
        ids, known, at = parse_infill(template, mask_token,
                                      lambda text: tokenizer.encode(text, add_special_tokens=False))
        fim = (getattr(self.config, 'trained', None) or {}).get('config', {}).get('fim_rate', 0) > 0
        if at is None and not fim:
            return tokenizer.batch_decode(self.sample(ids, known, **options), clean_up_tokenization_spaces=False)
        if not set(options) <= GAP_OPTIONS or (fim and 'order' in options):
            raise ValueError(f"a gap of no given length, and any gap of a FIM GPT, is written one token a step: "
                             f"options {', '.join(sorted(GAP_OPTIONS - {'order'} if fim else GAP_OPTIONS))} only")
        settings = dict(num_samples=1, seed=1337, temperature=1.0, top_k=None, top_p=1.0, top_p_mode='nucleus',
                        order='l2r' if fim else 'random') | options
        rules = {k: rule for k, rule in DECODING_RULES.items() if k in GAP_OPTIONS}
        check_rules(settings | dict(gap_choice=gap_choice),
                    rules | {'num_samples': NUM_SAMPLES_RULE, 'gap_choice': GAP_CHOICE_RULE})
        sampling = Sampling(settings['temperature'], settings['top_k'], settings['top_p'], settings['top_p_mode'])
        fills = fill_gap(self.net, ids, known, at, settings['num_samples'], sampling, fim=fim,
                         n_tokens=self.config.n_tokens, cap=gap_cap, choice=gap_choice, context=gap_context,
                         generator=torch.Generator(self.device).manual_seed(settings['seed']),
                         **({} if fim else dict(order=settings['order'])))
        return [tokenizer.decode(row, clean_up_tokenization_spaces=False) for row, _, _, _ in fills]

    @torch.no_grad()
    def log_likelihood(self, input_ids, orders=None):
        """The exact log p(row) of each row of input_ids (B, T) read in each order of orders (E, T), permutations of
        0..T-1 (None: left to right): (B, E), float64. The mixture of the E orders (an ensemble) reads
        logsumexp(result, 1) - log(E). The encoder reads left to right only, each token revealed after those before
        it (eval_ppl.py's revealed l2r)."""
        x = self.scored_rows(input_ids)
        B, T = x.shape
        if self.encoder:
            if orders is not None:
                raise ValueError('the encoder reads left to right only (orders=None)')
            return encoder_l2r_logprobs(self.net, x, MAX_TOKENS)[0].view(B, T).double().sum(1, keepdim=True)
        orders = torch.arange(T)[None] if orders is None else order_rows(orders, T)
        return torch.stack([order_logprobs(self.net, row, orders, 0, MAX_TOKENS).double().sum(1) for row in x])

    @torch.no_grad()
    def gap_log_likelihood(self, input_ids, gap, n_random=0, seed=1337):
        """The exact log p(gap | the rest) of each row of input_ids (B, T), gap its positions: (B, 1 + n_random),
        float64, as eval_ppl.py --gaps scores it (its seeds). A decoder reads the rest left to right, then the gap
        left to right (column 0) and in n_random uniform orders (columns 1..; their ensemble of k, the log of the mean
        of their probabilities, is logsumexp(result[:, 1:k + 1], 1) - log(k)). The encoder reveals the gap left to
        right, the rest given (one column)."""
        x = self.scored_rows(input_ids)
        B, T = x.shape
        gap = torch.as_tensor(gap, dtype=torch.long).flatten().cpu()
        if not (len(gap) and 0 <= int(gap.min()) and int(gap.max()) < T and torch.equal(gap, gap.unique())):
            raise ValueError(f'gap: positions of the {T} tokens (0..{T - 1}), at least one, sorted, each once')
        if self.encoder:
            if n_random:
                raise ValueError('the encoder reveals the gap left to right only (n_random=0)')
            return encoder_l2r_logprobs(self.net, x, MAX_TOKENS, gaps=[gap] * B)[0].view(B, 1, -1).double().sum(2)
        return decoder_gap_logprobs(self.net, x, [gap] * B, n_random, MAX_TOKENS, seed)

    def scored_rows(self, input_ids):
        """input_ids (B, T) as the network's ids on the CPU, where scoring.py builds its rows: ValueError for ids
        it does not read or a row longer than its block."""
        x = torch.as_tensor(input_ids).cpu()
        if x.dim() != 2:
            raise ValueError(f'input_ids of shape {tuple(x.shape)}: pass rows, (B, T)')
        check_inputs(x, self.net.config.vocab_size)
        if x.size(1) > self.net.config.block_size:
            raise ValueError(f'{x.size(1)} tokens: this model reads at most {self.net.config.block_size} (its block)')
        return x

    def _init_weights(self, module):
        """The weights come from the folder; the rotary tables, not in it, are made again from the config (loading
        builds the modules on no memory)."""
        if isinstance(module, Rotary):
            fresh = Rotary(module.cos.size(-1), module.cos.size(0) - 1)
            module.cos.copy_(fresh.cos)
            module.sin.copy_(fresh.sin)


class AOGPTForMaskedLM(AOGPTPreTrainedModel):
    """The encoder: full attention over the tokens, the masked ones given as mask_token_id."""
    encoder = True

    def forward(self, input_ids, labels=None, attention_mask=None, **kwargs):
        """logits (B, T, V + 1) at every position (the [MASK] id never predicted); with labels, their mean
        cross-entropy where labels are not -100."""
        check_inputs(input_ids, self.config.vocab_size)
        check_mask(attention_mask, input_ids.shape, padding=None)
        logits = F.pad(self.net.forward_masked(input_ids), (0, 1), value=-math.inf)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
        return MaskedLMOutput(loss=loss, logits=logits)


# the output's cache, by the name the installed transformers reads: cache, past_key_values before it was renamed
CACHE_FIELD = 'cache' if 'cache' in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else 'past_key_values'


class AOGPTForCausalLM(AOGPTPreTrainedModel, GenerationMixin):
    """An AO-GPT or sigma-GPT decoder read left to right, with transformers' cache (a DynamicCache) and left padding."""

    def get_input_embeddings(self):
        return self.transformer.wte

    def forward(self, input_ids, labels=None, attention_mask=None, cache=None, use_cache=None, past_key_values=None,
                **kwargs):
        """logits (B, T, V + 1): logits[:, t] predicts the token after input_ids[:, t] from the row's tokens up to t;
        with labels, their mean cross-entropy (labels shifted inside, -100 ignored, as every causal LM of
        transformers). Rows may begin with the start id (bos_token_id), all or none, after their padding.

        attention_mask (B, columns so far): 0 on a row's left padding, which no token sees and which moves the row's
        positions, so that each row reads as it would alone. cache: the keys and values of the columns before
        input_ids (and of the start slot the first forward adds), which use_cache (the config's by default) returns
        filled, as transformers' causal LMs do; generate() passes it from step to step (as past_key_values before
        transformers named it cache): one of the two names, not both. A row of padding alone (the first piece of a
        padded prompt read in pieces) gives logits of padding, which mean nothing; generate() refuses such a row."""
        if cache is not None and past_key_values is not None and cache is not past_key_values:
            raise ValueError('a cache given twice, as cache and as past_key_values (its name before transformers '
                             'renamed it): pass one of them')
        cache = past_key_values if cache is None else cache
        check_inputs(input_ids, self.config.vocab_size)
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if cache is None and use_cache:
            cache = DynamicCache(config=self.config)
        past = 0 if cache is None else cache.get_seq_length()
        if past and not hasattr(cache, 'start_added'):
            raise ValueError('this cache was not filled by this model: start generating with an empty one')
        tokens, positions, targets, mask = self.slots(input_ids, attention_mask, past, cache)
        view = None if cache is None else CacheView(cache)
        logits = self.net.forward_slots(tokens, positions, targets, view, attn_mask=mask)
        logits = logits[:, tokens.size(1) - input_ids.size(1):]  # the added start slot predicts no input's next
        logits = F.pad(logits, (0, 1), value=-math.inf)  # the start id, never predicted
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{CACHE_FIELD: cache if use_cache else None})

    def generate(self, inputs=None, *args, **kwargs):
        """transformers' generate, after the checks a forward cannot make: generate drops an attention_mask of all 1s
        before any forward (so a mask of the wrong width would go unseen), and would sample a prompt row of padding
        alone as an empty prompt."""
        ids, mask = kwargs.get('input_ids', inputs), kwargs.get('attention_mask')
        if torch.is_tensor(ids) and mask is not None:
            check_mask(mask, ids.shape)
            empty = (~mask.bool().any(1)).nonzero().flatten().tolist()
            if empty:
                raise ValueError(f'attention_mask: prompt row(s) {empty} hold padding alone: give every row at least '
                                 f'one token')
        return super().generate(inputs, *args, **kwargs)

    def slots(self, input_ids, attention_mask, past, cache):
        """The network's slots of input_ids (B, n) after `past` cached ones: tokens, positions, targets (B, S), and
        the attention mask (B, 1, S, past + S), or None (causal) for unpadded rows without a cache.
        Each row's first token sits at position 0 after its start slot (position -1): input_ids' own start ids, or
        one the first forward adds (recorded as cache.start_added)."""
        B, n = input_ids.shape
        bos = self.config.bos_token_id
        if past:
            added = cache.start_added
        else:  # a row's first column with a 1 in attention_mask holds its first token, or the start id
            mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.long()
            first = input_ids.gather(1, mask.argmax(1, keepdim=True)).squeeze(1)
            added = not bool(((first == bos) & mask.any(1)).any())
            if cache is not None:
                cache.start_added = added
        columns = n + (past - added if past else 0)  # of input_ids so far: the cache also holds an added start
        check_mask(attention_mask, (B, columns))
        real = torch.ones(B, columns, dtype=torch.bool, device=input_ids.device) if attention_mask is None \
            else attention_mask.bool()
        tokens = input_ids
        if added:
            real = torch.cat([real[:, :1] | True, real], 1)
            if not past:
                tokens = torch.cat([input_ids[:, :1] * 0, input_ids], 1)
        positions = (real.cumsum(1) - 2).masked_fill(~real, -1)  # padding: a start slot nothing sees
        if int(positions.max()) + 1 > self.config.max_position_embeddings:
            raise ValueError(f'{int(positions.max()) + 1} tokens in a row: this model reads at most '
                             f'{self.config.max_position_embeddings} (its block size less one, so that the last token '
                             f'has a next position)')
        starts = (positions == -1) & real
        if not torch.equal(starts[:, -n:], (input_ids == bos) & real[:, -n:]):
            raise ValueError(f'the start id {bos} begins every row or none (after its padding), and only there')
        S = tokens.size(1)
        positions = positions[:, -S:]
        tokens = tokens.masked_fill(positions == -1, 0)  # start slots and padding: the start token, whatever the id
        targets = (positions + 1).masked_fill(~real[:, -S:], -1)
        if cache is None and bool(real.all()):
            return tokens, positions, targets, None
        query = torch.arange(past, past + S, device=real.device).view(S, 1)
        key = torch.arange(past + S, device=real.device)
        mask = ((key <= query) & real[:, None, :]) | (key == query)  # a pad slot sees itself only
        return tokens, positions, targets, mask.unsqueeze(1)


class CacheView:
    """A transformers Cache as model.py's forward writes and reads one: each layer's new keys and values appended,
    all of them returned."""

    def __init__(self, cache):
        self.cache = cache

    def begin(self, width):
        """Nothing to place: the new slots go after the cached ones."""

    def update(self, layer, k, v):
        return self.cache.update(k, v, layer)


class AOGPTCharTokenizer(PreTrainedTokenizer):
    """A character-level model's tokenizer: id i is the i-th character of vocab.json (the string train.py's data
    preparation made), then one special token, which encode() does not add: a decoder's start slot (bos_token) or
    the encoder's [MASK] (mask_token)."""
    vocab_files_names = {'vocab_file': 'vocab.json'}
    model_input_names = ['input_ids', 'attention_mask']

    def __init__(self, vocab_file=None, **kwargs):
        if vocab_file is None:  # transformers passes None for a file the folder lacks
            raise ValueError("this model folder holds no vocab.json, its characters: export the model again (export.py"
                             " writes it)")
        with open(vocab_file, encoding='utf-8') as f:
            self.chars = json.load(f)
        self.ids = {c: i for i, c in enumerate(self.chars)}
        super().__init__(**kwargs)  # its special token (tokenizer_config.json's) takes the id after the characters'

    @property
    def vocab_size(self):
        return len(self.chars)

    def get_vocab(self):
        return dict(self.ids)

    def _tokenize(self, text):
        unknown = sorted(set(text) - self.ids.keys())
        if unknown:
            raise ValueError(f"{', '.join(map(repr, unknown))}: not among the {len(self.chars)} characters this model "
                             f"reads")
        return list(text)

    def _convert_token_to_id(self, token):
        return self.ids[token]

    def _convert_id_to_token(self, index):
        return self.chars[index]

    def convert_tokens_to_string(self, tokens):
        return ''.join(tokens)

    def save_vocabulary(self, save_directory, filename_prefix=None):
        path = os.path.join(save_directory, (filename_prefix + '-' if filename_prefix else '') + 'vocab.json')
        with open(path, 'w', encoding='utf-8') as f:
            json.dump(self.chars, f)
        return (path,)
