"""
An lm-evaluation-harness model (`lm-eval` on PyPI) for every checkpoint of this repo: AO-GPT,
sigma-GPT, the left-to-right GPT and the encoder, registered as `ao-gpt`. lm_eval_ao.py runs the
harness's command line with it; from Python:

    import harness
    from lm_eval import simple_evaluate
    simple_evaluate(model=harness.AOGPTLM(checkpoint='out-shakespeare-char/ckpt.pt'), tasks=['lambada_openai'])

model_args: checkpoint (a path, a model folder, hf:owner/repo/file or hf:owner/repo), use_ema, ensemble
(1: none), score ('l2r', or 'nelbo' for the encoder), device, dtype, max_tokens (slots per forward, as
eval_ppl.py), batch_size
('auto': as many requests as max_tokens allows, up to max_batch_size; N: at most N per forward),
seed; for generation order, steps, temperature, top_p, top_k, speculate (k, or 'auto' as sample.py's),
max_gen_toks (the defaults a task's gen_kwargs override; its do_sample=True samples at temperature 1 where
neither gives one) and compile (True: each decoding step compiled, as sample.py's).

Text in, text out with the checkpoint's own tokenizer. block_size below is the block the run trained on
(common.trained_block: a run from GPT-2 at --block_size=128 reads 128), as sample.py and eval_ppl.py read it.
A text holding characters outside a char model's vocabulary, where the block reads it, is impossible:
log-likelihood -inf (is_greedy False; generation gives ''), with one warning naming the characters. model_args
given as text are read by their defaults' types, as sample.py reads its flags (use_ema=no is False).

- loglikelihood(context, continuation): split into tokens as lm-eval's own models split it
  (encode_pair: the context's trailing spaces go to the continuation, the context is encoded alone,
  the continuation is what the whole text holds after as many tokens; none left is refused), cut
  from the left to block_size as the harness's HF model cuts it, and the continuation is scored
  left to right; a continuation longer than block_size is impossible (-inf, one warning). A
  decoder's start slot predicts the first token, so an empty context needs no BOS. ensemble=8:
  each continuation token's log-prob is the mixture over 8 readings of its context, eval_ppl.py's
  ensemble in the left-to-right order: member 1 reads the prefix left to right, the other members
  in random orders (scoring.random_context_orders, seeded by the request's tokens: scoring.content_seed, so
  a request's score does not depend on its neighbours). is_greedy is always the left-to-right
  distribution's argmax (member 1): the members give only the log-prob of the token read, not
  their whole distributions, so LAMBADA's accuracy is the left-to-right one even where its
  perplexity is the ensemble's.
- The encoder (architecture=encoder): its exact left-to-right log-probs (scoring.encoder_l2r_logprobs)
  of the continuation's tokens, each read with the text before it and itself and the rest masked:
  one forward of n slots per continuation token; is_greedy when each is that reading's argmax (so
  greedy left-to-right decoding gives the continuation). score=nelbo:
  loglikelihood_rolling gives minus its NELBO instead, a lower bound on the log-likelihood (the
  perplexities are then upper bounds), of the text cut into disjoint block_size chunks;
  loglikelihood refuses it (the NELBO bounds whole texts only); its masks are seeded by the chunk's tokens.
- loglikelihood_rolling: the harness's windows (lm_eval.utils.get_rolling_token_windows with one token
  of context, then make_disjoint_window), scored as loglikelihood scores a request (ensembles
  included), with the start slot as the prefix token. Every forward reads the start slot first and
  it holds no token, so a window predicts block_size - 1 tokens: the first from the start slot
  alone, each later one after its token of context, block_size tokens in all.
- generate_until: the prompt (cut from the left to leave max_gen_toks, which must be below
  block_size, as lm-eval's models require) as known tokens, the
  continuation decoded by decoding.generate (order, steps, temperature, top_p, top_k, speculate),
  then cut at the first stop string (and GPT-2's end-of-text for a BPE model): an any-order decoder
  fills every position, so it decodes all max_gen_toks (what fits in block_size) before cutting. One
  request at a time, seeded by its place.

Requests are scored longest first in batches under max_tokens (slots, plus scoring.HEAD_COST per
slot through the head), keeping only each request's result: memory is flat in their number. An
ensemble's other members query a batch's requests together, in forwards under max_tokens
(scoring.query_logprobs); member 1 is the batch's left-to-right forward.
"""
import inspect
import logging
import math
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.nn import functional as F
from torch.nn.utils.rnn import pad_sequence
from tqdm import tqdm

from aogpt.checkpoints import checkpoint_vocab, token_count
from aogpt.common import (autocast, check_device, check_settings, default_device, find_checkpoint, int_at_least,
                          load_tokenizer, one_of, optional_int, read_checkpoint, trained_block)
from aogpt.sampling import (SAMPLING_RULES, TEMPERATURE_RULE, TOP_P_RULE, check_decoding, check_speculation_steps,
                            check_steps)
from configurator import fail
from configurator import check_key, parse_text
from aogpt.decoding import generate
from aogpt.engine import Sampling, compile_decoding
from aogpt.speculative import speculation_k
from configurator import count_of
from aogpt.scoring import (HEAD_COST, content_seed, encoder_l2r_logprobs, mixture_logprobs, nelbo_estimates,
                           query_logprobs, random_context_orders, release_freed_memory)

INSTALL = 'pip install "lm-eval>=0.4.9,<0.5"'
try:
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window, simple_parse_args_string
except ImportError:
    raise ImportError(f'harness.py needs the lm-evaluation-harness, an optional requirement: {INSTALL}') from None

log = logging.getLogger(__name__)
START = -1  # the start slot, standing for the harness's prefix token in its rolling windows
GPT2_EOT = '<|endoftext|>'
GEN_KWARGS = ('until', 'max_gen_toks', 'do_sample', 'temperature', 'top_p', 'top_k')


MODEL_ARG_RULES = {
    'ensemble': int_at_least(1), 'score': one_of('l2r', 'nelbo'), 'max_tokens': int_at_least(1),
    'max_batch_size': optional_int(1), 'seed': int_at_least(0), 'mc_samples': int_at_least(1),
    'steps': optional_int(1), 'max_gen_toks': int_at_least(1),
    'temperature': TEMPERATURE_RULE, 'top_p': TOP_P_RULE,
    **{k: SAMPLING_RULES[k] for k in ('order', 'top_k', 'speculate')},
}

GEN_RULES = {k: MODEL_ARG_RULES[k] for k in ('temperature', 'top_p', 'top_k', 'max_gen_toks')}


@register_model('ao-gpt')
class AOGPTLM(LM):
    """The harness's model: reads the model_args and loads the checkpoint, then hands each kind of request to its
    piece: the Tokenizer (text to tokens), the Scorer (log-likelihoods) and the TextGenerator (generate_until)."""

    def __init__(self, checkpoint='', use_ema=True, ensemble=1, score='l2r', device=None, dtype='float32',
                 max_tokens=32768, batch_size='auto', max_batch_size=None, seed=1337, mc_samples=32, order='l2r',
                 steps=None, temperature=0.0, top_p=1.0, top_k=None, speculate=None, max_gen_toks=256, compile=False,
                 **unknown):
        super().__init__()
        check_model_args(locals(), self.settings())
        device = device or default_device()
        check_device(device, dtype)
        max_rows = requests_per_forward(batch_size, max_batch_size)
        path = find_checkpoint(checkpoint, '')
        self.model, ckpt = read_checkpoint(path, device, use_ema)
        check_scoring(self.model, ensemble, score)
        speculate = generation_speculation(self.model, order, steps, speculate)
        if compile:  # the generation's steps (scoring runs eager: its shapes vary with every batch of requests)
            compile_decoding(self.model, dtype)
        self._device, ctx = torch.device(device), autocast(device, dtype)  # _device: LM.device's
        block_size = trained_block(self.model, ckpt)  # a run from GPT-2 at a smaller block reads that block
        self.tokenizer = Tokenizer.from_checkpoint(ckpt, self.model.config, block_size, path)
        self.scorer = Scorer(model=self.model, block_size=block_size, device=self._device, ctx=ctx, score=score,
                             ensemble=ensemble, seed=seed, mc_samples=mc_samples, max_tokens=max_tokens,
                             max_rows=max_rows)
        sampling = dict(temperature=temperature, top_p=top_p, top_k=top_k)
        self.generator = TextGenerator(model=self.model, device=self._device, ctx=ctx, tokenizer=self.tokenizer,
                                       n_tokens=token_count(ckpt, self.model.config.vocab_size), seed=seed, order=order,
                                       steps=steps, speculate=speculate, max_gen_toks=max_gen_toks, sampling=sampling)
        warn_what_the_scores_are(score, ensemble)

    @classmethod
    def settings(cls):
        """The model_args the constructor takes."""
        return [k for k in inspect.signature(cls.__init__).parameters if k not in ('self', 'unknown')]

    @classmethod
    def create_from_arg_obj(cls, arg_dict, additional_config=None):
        """The harness's batch_size, max_batch_size and device where model_args do not set them (its
        command line always passes a device); a model_arg whose default is not text is read as sample.py reads its
        flags (use_ema=no is False, use_ema=perhaps an error; a None default takes a literal: speculate=8 or auto)."""
        harness = {k: v for k, v in (additional_config or {}).items() if v is not None}
        defaults = {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()}
        typed = {k: parse_text(k, str(v), defaults[k], flag='{} in model_args')
                 if k in defaults and not isinstance(defaults[k], str) else v for k, v in arg_dict.items()}
        return cls(**(harness | typed))

    @classmethod
    def create_from_arg_string(cls, arg_string, additional_config=None):
        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    # -------------------------------------------------------------------------
    # the harness's three requests

    def loglikelihood(self, requests):
        """(log p(continuation | context), is_greedy) of each request; see the module docstring."""
        if self.scorer.score == 'nelbo':
            fail('score=nelbo bounds whole texts (loglikelihood_rolling, the perplexity tasks), not a continuation '
                 'given a context: score=l2r')
        pairs = self.tokenizer.encode_pairs([r.args for r in requests])
        results = self.scorer.score_pairs(pairs, 'ao-gpt loglikelihood')
        for request, result in zip(requests, results):
            self.cache_hook.add_partial('loglikelihood', request.args, result)
        return results

    def loglikelihood_rolling(self, requests):
        """log p(text) of each request, summed over its windows (or minus the NELBO with score=nelbo)."""
        totals = self.scorer.score_documents(self.tokenizer.encode_texts([r.args[0] for r in requests]))
        for request, total in zip(requests, totals):
            self.cache_hook.add_partial('loglikelihood_rolling', request.args, total)
        return totals

    def generate_until(self, requests):
        """The continuation of each context, decoded by decoding.generate and cut at the task's stop strings."""
        out = []
        for c, request in enumerate(tqdm(requests, desc='ao-gpt generate_until')):
            out.append(self.generator.continue_text(c, *request.args))
            self.cache_hook.add_partial('generate_until', request.args, out[-1])
        return out


# -----------------------------------------------------------------------------
# model_args and the checkpoint

def check_model_args(args, known):
    """One line on the first mistake in the constructor's arguments (its locals) that needs no checkpoint to see."""
    for key in args['unknown']:
        check_key(key, known, where=' in model_args')
    if not args['checkpoint']:
        fail('ao-gpt needs a checkpoint: --model_args checkpoint=path/to/ckpt.pt (or hf:owner/repo/file)')
    check_settings(args, MODEL_ARG_RULES, flag='{} in model_args')


def requests_per_forward(batch_size, max_batch_size):
    """At most how many requests a forward reads: batch_size N, or for 'auto' (and 'auto:N', the
    harness's) as many as max_tokens allows, up to max_batch_size."""
    if str(batch_size).startswith('auto'):
        return max_batch_size or math.inf
    size = count_of(str(batch_size))
    if not size:
        fail(f"batch_size must be 'auto' or an int >= 1, got {batch_size!r}")
    return size


def check_scoring(model, ensemble, score):
    """One line where the model cannot score as the model_args ask."""
    if model.config.is_encoder and ensemble > 1:
        fail('the encoder reads its context as a set, in no order, so it has no context-order ensemble: ensemble=1')
    if not model.config.is_encoder and score == 'nelbo':
        fail("score=nelbo is the encoder's bound; a decoder's log-likelihood is exact: score=l2r")


def generation_speculation(model, order, steps, speculate):
    """The speculate k of generation ('auto' as sample.py's), checked against the model, order and steps."""
    k = speculation_k(speculate, model, order, 1)  # a generation request is decoded alone
    check_decoding(order, model, k)
    check_speculation_steps(steps, k, flag='{}')  # named as the model_args name them
    return k


def warn_what_the_scores_are(score, ensemble):
    """A warning where the numbers are not plain left-to-right log-likelihoods: NELBO bounds, or an ensemble's."""
    if score == 'nelbo':
        log.warning('ao-gpt score=nelbo: loglikelihood_rolling gives minus the NELBO, a lower bound on the '
                    'log-likelihood, so the perplexities are upper bounds')
    if ensemble > 1:
        log.warning(f'ao-gpt ensemble={ensemble}: the log-likelihoods (perplexities) are the ensemble\'s, '
                    f'is_greedy (accuracies such as LAMBADA\'s acc) the left-to-right argmax')


# -----------------------------------------------------------------------------
# text to tokens

@dataclass
class Tokenizer:
    """The checkpoint's tokenizer, and the tokens of a request's text that the block reads: a text with characters
    outside a char model's vocabulary there is impossible (None), with one warning naming them."""
    encode: Callable
    decode: Callable
    vocab: str  # a char model's characters, or 'gpt2'
    block_size: int
    path: str  # the checkpoint, named by the warning
    reported: set = field(default_factory=set)  # the characters already named by the warning

    @classmethod
    def from_checkpoint(cls, ckpt, config, block_size, path):
        encode, decode = load_tokenizer(ckpt, config.vocab_size)
        return cls(encode, decode, checkpoint_vocab(ckpt, config.vocab_size), block_size, path)

    def encode_pairs(self, pairs):
        """(context tokens, continuation tokens) of each (context, continuation) text pair, as encode_pair splits it;
        None where it is impossible."""
        pairs = [(self.read_context(context, continuation), continuation) for context, continuation in pairs]
        readable = self.readable([context + continuation for context, continuation in pairs])
        return [encode_pair(self.encode, *pair) if ok else None for ok, pair in zip(readable, pairs)]

    def encode_texts(self, texts):
        """The tokens of each text; None where it is impossible."""
        return [self.encode(text) if ok else None for ok, text in zip(self.readable(texts), texts)]

    def encode_prompt(self, context, room):
        """The context's last room tokens; None where they are impossible. A char model (one token a character)
        reads, checks and encodes only the characters it keeps, so one outside its vocabulary before them is moot."""
        if self.vocab != 'gpt2':
            context = context[max(0, len(context) - room):]
            if not self.readable([context])[0]:
                return None
        return self.encode(context)[-room:]

    def readable(self, texts):
        """Whether each text is written in the vocabulary's characters; one warning naming those outside it
        that no warning named before."""
        unknown = [set() if self.vocab == 'gpt2' else set(text) - set(self.vocab) for text in texts]
        new = set().union(*unknown) - self.reported
        if new:
            log.warning(f'ao-gpt: {sum(map(bool, unknown))} of {len(texts)} texts hold characters outside the '
                        f'vocabulary of {self.path}, {", ".join(map(repr, sorted(new)))}: scored as impossible '
                        f'(log-likelihood -inf)')
            self.reported |= new
        return [not u for u in unknown]

    def read_context(self, context, continuation):
        """The context a forward reads: a char model's (one token a character) cut to the characters the block keeps
        before the continuation, so that those it drops cannot make the pair impossible."""
        if self.vocab == 'gpt2':
            return context
        return context[max(0, len(context) - max(0, self.block_size - len(continuation))):]


def encode_pair(encode, context, continuation):
    """(context tokens, continuation tokens) as lm-eval's own models split a pair (TemplateLM._encode_pair): the
    context's trailing spaces move to the continuation, the context is encoded alone, and the continuation's tokens
    are the whole text's after as many; one line if none is left (a BPE merge across the boundary: '4' + '2')."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    context_ids = encode(context)
    continuation_ids = encode(context + continuation)[len(context_ids):]
    if not continuation_ids:
        fail(f'the continuation {continuation!r} after {context[-30:]!r} has no tokens of its own (empty, or merged '
             f'into the context\'s last token), which lm-eval\'s own models refuse too: drop the request')
    return context_ids, continuation_ids


def rolling_windows(tokens, block_size):
    """The harness's rolling windows of a text's tokens as (context, continuation) pairs; see the module docstring."""
    windows = map(make_disjoint_window, get_rolling_token_windows(tokens, START, block_size - 1, 1))
    return [([t for t in context if t != START], pred) for context, pred in windows]


# -----------------------------------------------------------------------------
# scoring

@dataclass
class Scorer:
    """Log-likelihoods of tokens: left to right (ensembles included) or the encoder's, and the encoder's NELBO
    bounds; requests in batches under max_tokens, longest first (see the module docstring)."""
    model: torch.nn.Module
    block_size: int  # the block the run trained on (common.trained_block): windows and contexts are cut to it
    device: torch.device
    ctx: object  # the autocast of the model_arg dtype
    score: str  # 'l2r', or 'nelbo' (the encoder's bound, for whole texts)
    ensemble: int
    seed: int
    mc_samples: int
    max_tokens: int
    max_rows: int | float  # requests per forward (inf: as many as max_tokens allows)

    def score_documents(self, docs):
        """log p of each document's tokens (None: impossible, -inf) summed over its rolling windows, or with
        score=nelbo minus the NELBO summed over its disjoint block_size chunks."""
        if self.score == 'nelbo':
            pieces = [(d, tokens[i:i + self.block_size]) for d, tokens in enumerate(docs) if tokens
                      for i in range(0, len(tokens), self.block_size)]
            scores = self.nelbo_bounds([chunk for _, chunk in pieces])
        else:
            pieces = [(d, window) for d, tokens in enumerate(docs) if tokens
                      for window in rolling_windows(tokens, self.block_size)]
            scores = [logp for logp, _ in self.score_pairs([w for _, w in pieces], 'ao-gpt loglikelihood_rolling')]
        totals = [-math.inf if tokens is None else 0.0 for tokens in docs]
        for (d, _), logp in zip(pieces, scores):
            totals[d] += logp
        return totals

    def score_pairs(self, pairs, desc):
        """(log p(continuation | context), is_greedy) of each (context, continuation) token pair; None is impossible."""
        results = [(-math.inf, False)] * len(pairs)
        fit = {c: pair for c, pair in enumerate(pairs) if pair is not None and len(pair[1]) <= self.block_size}
        long = sum(pair is not None for pair in pairs) - len(fit)
        if long:
            log.warning(f'ao-gpt: {long} of {len(pairs)} continuations are longer than block_size {self.block_size}, '
                        f'so no forward reads them whole: scored as impossible (log-likelihood -inf)')
        rows = [(c, (context + continuation)[-self.block_size:], len(continuation))
                for c, (context, continuation) in fit.items()]
        bar = tqdm(total=len(rows), desc=desc)
        for batch in self.batches(rows):
            if self.model.config.is_encoder:
                scored = [self.encoder_l2r(x, n) for _, x, n in batch]
            else:
                logps, greedy = self.l2r(batch)
                if self.ensemble > 1:
                    logps = self.ensemble_mixture(batch, logps)
                scored = [(logp.sum().item(), g) for logp, g in zip(logps, greedy)]
            for (c, _, _), result in zip(batch, scored):
                results[c] = result
            bar.update(len(batch))
            release_freed_memory()
        bar.close()
        return results

    def batches(self, rows):
        """Rows (c, tokens, n), longest first, grouped under max_tokens: a batch's rows are padded to its
        first one, plus HEAD_COST per slot through the head; at most max_rows rows."""
        batch, scored = [], 0
        for row in sorted(rows, key=lambda row: -len(row[1])):
            width, scored = len((batch or [row])[0][1]) + 1, max(scored, row[2])
            full = len(batch) == self.max_rows or (len(batch) + 1) * (width + HEAD_COST * scored) > self.max_tokens
            if batch and full:
                yield batch
                batch, scored = [], row[2]
            batch.append(row)
        if batch:
            yield batch

    @torch.no_grad()
    def l2r(self, batch):
        """(the log-probs of the last n tokens of x given the ones before, whether all are the argmax) of each
        row (c, x, n), as two lists, in one forward of the batch read left to right; only the scored slots
        reach the head."""
        B, T = len(batch), len(batch[0][1])
        q = max(1, max(n for _, _, n in batch))
        x = pad_sequence([torch.tensor(row) for _, row, _ in batch], batch_first=True).to(self.device)
        tokens = F.pad(x, (1, 0))  # the start slot's token is ignored
        positions = torch.arange(-1, T, device=self.device).expand(B, -1)
        targets = torch.cat([torch.arange(T), torch.tensor([-1])]).to(self.device).expand(B, -1)
        slots = torch.stack([torch.arange(len(row) - q, len(row)).clamp(min=0) for _, row, _ in batch]).to(self.device)
        with self.ctx:  # slot j predicts x[j]
            logits = self.model.forward_slots(tokens, positions, targets, out_slots=slots).float()
        wanted = x.gather(1, slots)
        logp = F.log_softmax(logits, -1).gather(2, wanted.unsqueeze(-1)).squeeze(-1).cpu()
        greedy = (logits.argmax(-1) == wanted).cpu()
        return [logp[b, q - n:] for b, (_, _, n) in enumerate(batch)], \
            [bool(greedy[b, q - n:].all()) for b, (_, _, n) in enumerate(batch)]

    def ensemble_mixture(self, batch, l2r):
        """The log of the ensemble's mean probability of each row's last n tokens: member 1 the left-to-right
        reading (l2r), the others in the orders of eval_ppl.py's ensemble (seeded by the row's tokens), their
        queries batched over all the rows under max_tokens (scoring.query_logprobs)."""
        queries, where = [], []  # (x, context, target) and (row, scored token, member)
        for b, (_, x, n) in enumerate(batch):
            orders = random_context_orders(torch.arange(len(x)), self.ensemble - 1, content_seed(self.seed, x))
            tokens = torch.tensor(x)
            for k, i in enumerate(range(len(x) - n, len(x))):
                if i:  # an empty context reads the same in every order
                    queries += [(tokens, context, i) for context in orders(i)]
                    where += [(b, k, j) for j in range(1, self.ensemble)]
        members = [logp.float().expand(self.ensemble, -1).clone() for logp in l2r]
        with self.ctx:
            for (b, k, j), logp in zip(where, query_logprobs(self.model, queries, self.max_tokens)):
                members[b][j, k] = logp
        return [mixture_logprobs(m, self.ensemble) for m in members]

    def encoder_l2r(self, x, n):
        """The encoder's (log p of the last n tokens of x given the ones before, whether each is the argmax:
        then greedy decoding left to right gives them)."""
        logp, hit = encoder_l2r_logprobs(self.model, torch.tensor([x]), self.max_tokens, self.ctx, first=len(x) - n)
        return logp.sum().item(), bool(hit.all())

    def nelbo_bounds(self, chunks):
        """Minus the encoder's NELBO of each chunk of tokens, a lower bound on its log-likelihood."""
        bounds = []
        for chunk in tqdm(chunks, desc='ao-gpt NELBO'):
            x = torch.tensor([chunk])
            nelbo = nelbo_estimates(self.model, x, self.mc_samples, self.max_tokens, content_seed(self.seed, chunk),
                                    self.ctx)
            bounds.append(-nelbo.item() * x.size(1))
        return bounds


# -----------------------------------------------------------------------------
# generation

@dataclass
class TextGenerator:
    """Continuations of requests' contexts by decoding.generate: the model_args' settings, which a task's gen_kwargs
    override (see the module docstring)."""
    model: torch.nn.Module
    device: torch.device
    ctx: object  # the autocast of the model_arg dtype
    tokenizer: Tokenizer
    n_tokens: int  # the vocabulary's ids that are tokens (those past them pad GPT-2's table)
    seed: int
    order: str
    steps: int | None
    speculate: int
    max_gen_toks: int
    sampling: dict  # temperature, top_p, top_k

    def continue_text(self, c, context, gen_kwargs):
        """The text request c's context goes on with (see the module docstring)."""
        until, new, sampling = self.request_settings(gen_kwargs)
        prompt = self.tokenizer.encode_prompt(context, self.tokenizer.block_size - new)
        if prompt is None:
            return ''
        x = torch.tensor([prompt + [0] * new], device=self.device)
        known = torch.arange(x.size(1), device=self.device) < len(prompt)
        steps = check_steps(self.steps, new, self.order, self.speculate, flag='{}')
        generator = torch.Generator(self.device).manual_seed(hash((self.seed, c)))
        with self.ctx:
            x, _ = generate(self.model, x, known, steps, sampling, order=self.order, generator=generator,
                            n_tokens=self.n_tokens, speculate=self.speculate)
        text = self.tokenizer.decode(x[0, len(prompt):].tolist())
        return text[:min([text.find(s) for s in until if s and s in text], default=len(text))]

    def request_settings(self, gen_kwargs):
        """(stop strings, max_gen_toks, Sampling) of a request: the task's gen_kwargs over the model_args."""
        extra = set(gen_kwargs) - set(GEN_KWARGS)
        if extra:
            fail(f"ao-gpt does not take the gen_kwargs {', '.join(sorted(extra))}; it takes {', '.join(GEN_KWARGS)}")
        until = gen_kwargs.get('until') or []
        gpt2 = self.tokenizer.vocab == 'gpt2'
        until = ([until] if isinstance(until, str) else list(until)) + ([GPT2_EOT] if gpt2 else [])
        sampling = self.sampling | {k: gen_kwargs[k] for k in self.sampling if gen_kwargs.get(k) is not None}
        sampling['temperature'] = sample_temperature(gen_kwargs, sampling['temperature'])
        max_gen_toks = self.max_gen_toks if gen_kwargs.get('max_gen_toks') is None else gen_kwargs['max_gen_toks']
        check_settings(sampling | {'max_gen_toks': max_gen_toks}, GEN_RULES, flag='{} in gen_kwargs')
        block_size = self.tokenizer.block_size
        if max_gen_toks >= block_size:
            fail(f"max_gen_toks {max_gen_toks} leaves the prompt no room in block_size {block_size}, which "
                 f"lm-eval's own models refuse too: set max_gen_toks below {block_size} in model_args (or in the "
                 f"task's generation_kwargs, where it sets one)")
        return until, max_gen_toks, Sampling(**sampling)


def sample_temperature(gen_kwargs, temperature):
    """The temperature of a request: 0 (greedy) with do_sample=False; with do_sample=True the one it gives, else a
    nonzero model_arg's, else 1 (the model_arg's default 0 is greedy; Hugging Face's generate samples at 1)."""
    do_sample = gen_kwargs.get('do_sample')
    if do_sample is False:
        return 0.0
    if do_sample and temperature == 0:
        if gen_kwargs.get('temperature') is not None:
            fail('do_sample=True with temperature 0 in gen_kwargs: sampling needs a temperature > 0 (or '
                 'do_sample=False for greedy decoding)')
        return 1.0
    return temperature
