"""aogpt/harness.py and lm_eval_ao.py: the lm-evaluation-harness model against direct full forwards (left to right, ensembles,
the encoder), generation, out-of-vocabulary texts, the harness end to end offline with tasks/, one-line errors."""
import glob
import importlib.util
import json
import logging
import math
import os
import random
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from torch.nn import functional as F

from aogpt.common import gpt2_encoding
from conftest import ROOT, needs, one_line_error, run_script, says
from aogpt.scoring import nelbo_estimates, random_context_orders

try:
    from aogpt import harness
    from lm_eval.api.instance import Instance
    from lm_eval.api.model import TemplateLM
except ImportError:
    harness = None
pytestmark = [pytest.mark.usefixtures('one_thread'),
              pytest.mark.skipif(harness is None, reason='needs lm-eval: pip install "lm-eval>=0.4.9,<0.5"')]
SEED = 1337  # the model's default seed


def make_lm(workdir, out_dir, **model_args):
    return harness.AOGPTLM(checkpoint=str(workdir / out_dir / 'ckpt.pt'), device='cpu', **model_args)


def requests(kind, *args):
    return [Instance(kind, {}, a, i) for i, a in enumerate(args)]


def random_text(rng, chars, low, high):
    return ''.join(rng.choice(chars) for _ in range(rng.randint(low, high)))


@torch.no_grad()
def full_forward(model, x):
    """log p(x_j | x_<j) and the argmax at every position, from one full forward left to right."""
    x = torch.tensor(x)
    logits, _ = model(x[None], torch.arange(len(x))[None])
    logp = F.log_softmax(logits[0, :len(x)].float(), -1).double()
    return logp.gather(1, x[:, None])[:, 0], logp.argmax(-1)


def direct(model, x, n):
    """(log p of the last n tokens of x given the ones before, whether each is the argmax)."""
    logp, argmax = full_forward(model, x)
    return logp[-n:].sum().item(), bool((argmax[-n:] == torch.tensor(x[-n:])).all())


@torch.no_grad()
def direct_mixture(model, x, n, ensemble, seed):
    """The ensemble's mixture of each of the last n tokens, summed, one full forward per (token, member): member 1
    reads the prefix left to right, the others in the orders random_context_orders draws with the seed."""
    x, identity = torch.tensor(x), torch.arange(len(x))
    orders = random_context_orders(identity, ensemble - 1, seed)
    total = 0.0
    for i in range(len(x) - n, len(x)):
        logps = [-model(x[None], torch.cat([context, identity[i:]])[None], reduction='none')[1][0, i].double()
                 for context in [identity[:i], *orders(i)]]
        total += (torch.stack(logps).logsumexp(0) - math.log(ensemble)).item()
    return total


@torch.no_grad()
def greedy_tokens(model, ids, n):
    """n tokens after ids, each the argmax of a full forward left to right (a dummy token holds the target slot)."""
    x = list(ids)
    for _ in range(n):
        logits, _ = model(torch.tensor(x + [0])[None], torch.arange(len(x) + 1)[None])
        x.append(logits[0, len(x)].argmax().item())
    return x[len(ids):]


def rolling_windows(lm, tokens):
    """The harness's rolling windows of tokens in lm's block."""
    return harness.rolling_windows(tokens, lm.tokenizer.block_size)


def lm_eval_pair(encode, context, continuation):
    """lm-eval's own split of a pair into tokens (TemplateLM._encode_pair of a causal model); an empty context is its
    prefix token, which our start slot stands for."""
    if not context:
        return [], encode(continuation)
    return TemplateLM._encode_pair(SimpleNamespace(backend='causal', tok_encode=encode), context, continuation)


def scored_tokens(lm, context, continuation):
    """The pair's tokens as lm-eval splits them, cut to the block, and how many are scored."""
    context, continuation = lm_eval_pair(lm.tokenizer.encode, context, continuation)
    return (context + continuation)[-lm.tokenizer.block_size:], len(continuation)


# -----------------------------------------------------------------------------
# the class against direct forwards

@pytest.mark.parametrize('model_args', [{}, dict(max_tokens=150), dict(batch_size=1), dict(ensemble=4),
                                        dict(ensemble=4, max_tokens=300)])
def test_loglikelihood_equals_full_forwards(workdir, char_ckpt, model_args):
    lm = make_lm(workdir, char_ckpt, **model_args)
    tokenizer, rng = lm.tokenizer, random.Random(0)
    letters = [c for c in tokenizer.vocab if c.isalpha()]
    pairs = [(random_text(rng, tokenizer.vocab, 0, 50), random_text(rng, tokenizer.vocab, 1, 6)) for _ in range(10)]
    pairs += [('ROMEO: my lord ', 'and'), ('', 'KING')]  # trailing spaces go to the continuation; an empty context
    for _ in range(3):  # continuations the model would write itself, from the context the block keeps
        context = random_text(rng, letters, 5, 40)
        prompt = tokenizer.encode(context)[-(tokenizer.block_size - 3):]
        pairs.append((context, tokenizer.decode(greedy_tokens(lm.model, prompt, 3))))
    results = lm.loglikelihood(requests('loglikelihood', *pairs))
    expected = []
    for pair in pairs:
        x, n = scored_tokens(lm, *pair)
        logp, greedy = direct(lm.model, x, n)
        if lm.scorer.ensemble > 1:
            logp = direct_mixture(lm.model, x, n, lm.scorer.ensemble, harness.content_seed(SEED, x))
        expected.append((logp, greedy))
    for (logp, greedy), (want, want_greedy) in zip(results, expected):
        assert logp == pytest.approx(want, abs=1e-4) and greedy == want_greedy
    assert [greedy for _, greedy in results[-3:]] == [True] * 3 and not all(greedy for _, greedy in results)
    if lm.scorer.ensemble > 1:  # the members do differ from the left-to-right reading
        assert any(abs(want - direct(lm.model, *scored_tokens(lm, *pair))[0]) > 1e-3 for (want, _), pair in
                   zip(expected, pairs))


@pytest.mark.parametrize('positions', ['learned', 'rotary', 'rotary_plain'])
def test_loglikelihood_equals_full_forwards_for_each_position_encoding(workdir, char_ckpt_by_positions, positions):
    # batched and ensembled scoring (padded rows, few query slots) against full forwards, each position encoding
    lm = make_lm(workdir, char_ckpt_by_positions(positions), ensemble=3, max_tokens=200)
    assert lm.model.config.position_encoding == positions
    rng, vocab = random.Random(1), lm.tokenizer.vocab
    pairs = [(random_text(rng, vocab, 0, 40), random_text(rng, vocab, 1, 5)) for _ in range(6)]
    results = lm.loglikelihood(requests('loglikelihood', *pairs))
    for (logp, _), pair in zip(results, pairs):
        x, n = scored_tokens(lm, *pair)
        assert logp == pytest.approx(direct_mixture(lm.model, x, n, 3, harness.content_seed(SEED, x)), abs=1e-4)


def test_an_ensemble_score_does_not_depend_on_its_neighbours(workdir, char_ckpt, caplog):
    with caplog.at_level(logging.WARNING, logger='aogpt.harness'):
        lm = make_lm(workdir, char_ckpt, ensemble=4)
    says(caplog.records[-1].getMessage(), "log-likelihoods (perplexities) are the ensemble's", 'left-to-right argmax')
    pair, other = ('ROMEO: my lord', ' and'), ('KING', ' HENRY')
    [alone] = lm.loglikelihood(requests('loglikelihood', pair))
    assert lm.loglikelihood(requests('loglikelihood', other, pair))[1][0] == pytest.approx(alone[0], abs=1e-9)


@pytest.mark.needs('gpt2_bpe')
@pytest.mark.parametrize('context,continuation', [
    ('The answer is', ' 42'), ('The answer is ', '42'), ('The answer is 4', '2 apples'), ('Hello  ', 'world'),
    ('She said "', 'hi" twice'), ('x', '\n\ny'), ('   ', 'lead'), ('', 'KING')])
def test_pairs_split_as_lm_evals_own_models_split_them(context, continuation):
    encode = gpt2_encoding().encode_ordinary
    assert harness.encode_pair(encode, context, continuation) == lm_eval_pair(encode, context, continuation)


@pytest.mark.needs('gpt2_bpe')
@pytest.mark.parametrize('context,continuation', [('The answer is 4', '2'), ('', ''), ('ROMEO', '')])
def test_a_continuation_without_tokens_of_its_own_is_one_line(context, continuation):
    encode = gpt2_encoding().encode_ordinary
    assert not lm_eval_pair(encode, context, continuation)[1]  # lm-eval has none left either
    with pytest.raises(SystemExit) as e:
        harness.encode_pair(encode, context, continuation)
    says(str(e.value.code), 'no tokens of its own', "lm-eval's own models refuse")


def test_what_the_block_reads_decides_what_is_impossible(workdir, char_ckpt, caplog):
    lm = make_lm(workdir, char_ckpt)
    long = random_text(random.Random(5), lm.tokenizer.vocab, lm.tokenizer.block_size + 1, lm.tokenizer.block_size + 1)
    far = '€' + 'ROMEO: ' * 6  # the character outside the vocabulary falls before the block
    pairs = [('ROMEO', long), (far, 'my'), ('ROMEO', ' my')]
    with caplog.at_level(logging.WARNING, logger='aogpt.harness'):
        results = lm.loglikelihood(requests('loglikelihood', *pairs))
    assert results[0] == (-math.inf, False)
    for result, pair in zip(results[1:], [(far[1:], 'my'), pairs[2]]):  # the block reads no more of far
        assert result[0] == pytest.approx(direct(lm.model, *scored_tokens(lm, *pair))[0], abs=1e-4)
    [warning] = [r.getMessage() for r in caplog.records if r.name == 'aogpt.harness']
    says(warning, '1 of 3 continuations', f'longer than block_size {lm.tokenizer.block_size}', 'impossible')


def test_a_run_trained_on_a_shorter_block_than_its_model_is_read_in_that_block(workdir, short_trained):
    """A run from a parent of block 32 at --block_size=16: rolling windows of 16 tokens, contexts cut to 16, and no
    room for 16 new tokens, as sample.py and eval_ppl.py read it (positions past 16 were never trained)."""
    lm = harness.AOGPTLM(checkpoint=str(workdir / short_trained), device='cpu')
    text = random_text(random.Random(2), lm.tokenizer.vocab, 50, 50)
    tokens = lm.tokenizer.encode(text)
    [logp] = lm.loglikelihood_rolling(requests('loglikelihood_rolling', (text,)))
    want = sum(direct(lm.model, context + pred, len(pred))[0]
               for context, pred in harness.rolling_windows(tokens, 16))
    assert logp == pytest.approx(want, abs=1e-4)
    [(pair_logp, _)] = lm.loglikelihood(requests('loglikelihood', (text[:-3], text[-3:])))
    assert pair_logp == pytest.approx(direct(lm.model, tokens[-16:], 3)[0], abs=1e-5)
    with pytest.raises(SystemExit) as e:
        lm.generate_until(requests('generate_until', ('x', dict(until=[], max_gen_toks=16))))
    says(str(e.value.code), 'max_gen_toks 16', 'block_size 16')


def test_a_prompt_reads_what_the_block_keeps_of_a_long_context(workdir, char_ckpt):
    """generate_until: a character outside the vocabulary in the part of a long context the block drops does not
    end the run; the generation is that of the context the block keeps."""
    lm = make_lm(workdir, char_ckpt, temperature=0.0)
    kept = 'ROMEO: ' * 8
    far = '€' + kept
    room = lm.tokenizer.block_size - 4
    out = lm.generate_until(requests('generate_until', *[(text, dict(until=[], max_gen_toks=4)) for text in
                                                         (far, kept[len(kept) - room:])]))
    assert out[0] == out[1] and len(out[0]) == 4


def test_rolling_windows_cover_each_token_once_within_the_block(workdir, char_ckpt):
    lm = make_lm(workdir, char_ckpt, max_tokens=500)
    tokens = list(range(100))
    windows = rolling_windows(lm, tokens)
    assert sum((pred for _, pred in windows), []) == tokens and windows[0][0] == []
    assert all(w == tokens[w[0]:w[0] + len(w)] and len(w) <= lm.tokenizer.block_size
               for w in (c + p for c, p in windows))
    assert all(context for context, _ in windows[1:])  # every later window reads at least one token before it
    text = random_text(random.Random(1), lm.tokenizer.vocab, 100, 100)
    [logp] = lm.loglikelihood_rolling(requests('loglikelihood_rolling', (text,)))
    want = sum(direct(lm.model, context + pred, len(pred))[0]
               for context, pred in rolling_windows(lm, lm.tokenizer.encode(text)))
    assert logp == pytest.approx(want, abs=1e-4)


@pytest.mark.parametrize('model_args,gen_kwargs', [({}, {}), (dict(speculate=2), {}),
                                                   (dict(temperature=1.0), dict(do_sample=False))])
def test_generate_until_stops_at_a_stop_string_and_max_gen_toks(workdir, char_ckpt, model_args, gen_kwargs):
    lm = make_lm(workdir, char_ckpt, **model_args)  # greedy, left to right: one answer to check against
    tokenizer = lm.tokenizer
    short, long = 'ROMEO:\nWhat', random_text(random.Random(2), tokenizer.vocab, 40, 40)
    free = tokenizer.decode(greedy_tokens(lm.model, tokenizer.encode(short), 20))
    stop = free[4:6]
    prompt = tokenizer.encode(long)[-(tokenizer.block_size - 6):]  # the prompt keeps 32 - 6
    cut = tokenizer.decode(greedy_tokens(lm.model, prompt, 6))
    out = lm.generate_until(requests('generate_until', (short, dict(until=[stop], max_gen_toks=20, **gen_kwargs)),
                                     (long, dict(until=[], max_gen_toks=6, **gen_kwargs)),
                                     (short, dict(until='\x00', max_gen_toks=20, **gen_kwargs))))
    assert out == [free[:free.find(stop)], cut, free] and len(cut) == 6


def test_generation_always_reads_the_prompt(workdir, char_ckpt, monkeypatch):
    lm = make_lm(workdir, char_ckpt)
    seen = []  # each generation's canvas and known positions
    monkeypatch.setattr(harness, 'generate', lambda model, x, known, *a, **k: seen.append((x.clone(), known)) or (x, 0))
    new = lm.tokenizer.block_size - 1  # the most that leaves the prompt a token: its last
    lm.generate_until(requests('generate_until', ('abc', dict(until=[], max_gen_toks=new))))
    [(x, known)] = seen
    assert x.shape == (1, lm.tokenizer.block_size) and known.tolist() == [True] + [False] * new
    assert x[0, 0] == lm.tokenizer.encode('c')[0]


@pytest.mark.parametrize('gen_kwargs,parts', [
    ({}, ('max_gen_toks 256', 'block_size 32', 'below 32 in model_args')),  # the harness's default, as lm-eval's
    (dict(max_gen_toks=32), ('max_gen_toks 32', 'no room')),
    (dict(max_gen_toks=8, top_p=0), ('top_p in gen_kwargs must be in (0, 1]', 'got 0')),
    (dict(max_gen_toks=8, temperature=-1.0), ('temperature in gen_kwargs', '>= 0')),
    (dict(max_gen_toks=8, max_new_tokens=5), ('does not take the gen_kwargs max_new_tokens', 'max_gen_toks')),
    (dict(max_gen_toks=0), ('max_gen_toks in gen_kwargs must be an int >= 1, got 0',)),  # not the default's 256
    (dict(max_gen_toks=8, do_sample=True, temperature=0.0), ('do_sample=True with temperature 0', 'do_sample=False')),
])
def test_bad_generation_settings_are_one_line(workdir, char_ckpt, gen_kwargs, parts):
    lm = make_lm(workdir, char_ckpt)
    with pytest.raises(SystemExit) as e:
        lm.generate_until(requests('generate_until', ('abc', dict(until=['\n'], **gen_kwargs))))
    message = str(e.value.code)
    assert message.startswith('error: ') and '\n' not in message
    says(message, *parts)


@pytest.mark.parametrize('model_args,gen_kwargs,temperature', [
    ({}, {}, 0.0), ({}, dict(do_sample=True), 1.0),  # as Hugging Face's generate samples when given no temperature
    (dict(temperature=0.5), dict(do_sample=True), 0.5), ({}, dict(do_sample=True, temperature=0.7), 0.7),
    (dict(temperature=0.5), dict(do_sample=False), 0.0),
])
def test_do_sample_samples(workdir, char_ckpt, model_args, gen_kwargs, temperature):
    generator = make_lm(workdir, char_ckpt, **model_args).generator
    _, _, sampling = generator.request_settings(dict(max_gen_toks=8, **gen_kwargs))
    assert sampling.temperature == temperature


def test_sampled_generation_is_seeded_per_request(workdir, char_ckpt):
    lm = make_lm(workdir, char_ckpt, order='random', temperature=1.0, top_k=10)
    batch = requests('generate_until', *[('ROMEO:', dict(until=['\n\n'], max_gen_toks=12))] * 2)
    first, again = lm.generate_until(batch), lm.generate_until(batch)
    assert first == again and first[0] != first[1] and all(len(text) <= 12 for text in first)


@pytest.mark.slow
def test_compiled_generation_gives_the_eager_text(workdir, char_ckpt):
    # compile=True compiles each decoding step; prompts of different lengths share its graph (their step is eager)
    batch = requests('generate_until', *[(prompt, dict(until=['\n\n'], max_gen_toks=12)) for prompt in ('ROMEO:', 'A')])
    texts = [make_lm(workdir, char_ckpt, order='random', temperature=1.0, compile=compile).generate_until(batch)
             for compile in (True, False)]
    assert texts[0] == texts[1] and all(len(text) <= 12 for text in texts[0])


def test_the_encoder_scores_left_to_right_exactly(workdir, mdm_ckpt):
    lm = make_lm(workdir, mdm_ckpt, max_tokens=200)
    model, rng = lm.model, random.Random(3)

    @torch.no_grad()
    def given_prefix(x, i):  # position i read with i.. masked: (log-probs, argmax)
        z = torch.where(torch.arange(len(x)) >= i, model.mask_id, torch.tensor(x))
        logp = F.log_softmax(model.forward_masked(z[None])[0, i].double(), -1)
        return logp[x[i]].item(), logp.argmax().item()

    letters = [c for c in lm.tokenizer.vocab if c.isalpha()]
    pairs = [(random_text(rng, letters, 0, 40), random_text(rng, lm.tokenizer.vocab, 1, 5)) for _ in range(5)]
    context = lm.tokenizer.encode('ROMEO: my lord')
    canvas = context + [0] * 3  # the encoder's greedy continuation, decoded left to right on its own canvas
    for i in range(len(context), len(canvas)):
        canvas[i] = given_prefix(canvas, i)[1]
    pairs.append(('ROMEO: my lord', lm.tokenizer.decode(canvas[len(context):])))
    results = lm.loglikelihood(requests('loglikelihood', *pairs))
    for (logp, greedy), pair in zip(results, pairs):
        x, n = scored_tokens(lm, *pair)
        scored = [given_prefix(x, i) for i in range(len(x) - n, len(x))]
        assert logp == pytest.approx(sum(p for p, _ in scored), abs=1e-4)
        assert greedy == all(a == t for (_, a), t in zip(scored, x[-n:]))
    assert results[-1][1] and not all(greedy for _, greedy in results)


def test_the_encoders_nelbo_only_by_name_and_as_a_bound(workdir, mdm_ckpt):
    lm = make_lm(workdir, mdm_ckpt, score='nelbo', mc_samples=4)
    text = random_text(random.Random(4), lm.tokenizer.vocab, 70, 70)
    [bound] = lm.loglikelihood_rolling(requests('loglikelihood_rolling', (text,)))
    tokens, block_size = lm.tokenizer.encode(text), lm.tokenizer.block_size
    chunks = [tokens[i:i + block_size] for i in range(0, len(tokens), block_size)]  # disjoint, no context
    want = sum(-len(chunk) * nelbo_estimates(lm.model, torch.tensor([chunk]), 4, lm.scorer.max_tokens,
                                             harness.content_seed(SEED, chunk)).item() for chunk in chunks)
    assert bound == pytest.approx(want, rel=1e-5) and bound < 0
    with pytest.raises(SystemExit, match='score=nelbo bounds whole texts'):
        lm.loglikelihood(requests('loglikelihood', ('a', 'b')))


def test_out_of_vocabulary_texts_are_impossible_with_one_warning(workdir, char_ckpt, caplog):
    lm = make_lm(workdir, char_ckpt)
    with caplog.at_level(logging.WARNING, logger='aogpt.harness'):
        results = lm.loglikelihood(requests('loglikelihood', ('a price: 5€', ' b'), ('ROMEO', ' ©'),
                                            ('ROMEO', ' my')))
        rolling = lm.loglikelihood_rolling(requests('loglikelihood_rolling', ('€ again',), ('fine',)))
        generated = lm.generate_until(requests('generate_until', ('©', dict(until=['\n'], max_gen_toks=8))))
    assert results[:2] == [(-math.inf, False)] * 2 and math.isfinite(results[2][0])
    assert rolling[0] == -math.inf and math.isfinite(rolling[1]) and generated == ['']
    [warning] = [r.getMessage() for r in caplog.records if r.name == 'aogpt.harness']
    says(warning, "'5'", "'€'", "'©'", '2 of 3 texts', 'impossible')


# -----------------------------------------------------------------------------
# the harness end to end, offline, on the shipped tasks

def task_utils():
    spec = importlib.util.spec_from_file_location('task_utils', os.path.join(ROOT, 'tasks', 'utils.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lambada_items(indices):
    """(context, target) of LAMBADA items, as the task's doc_to_text and doc_to_target make them."""
    texts = [row['text'] for row in task_utils().lambada_openai()['test'].select(indices)]
    return [(text.rsplit(' ', 1)[0], ' ' + text.rsplit(' ', 1)[1]) for text in texts]


def direct_lambada(lm, indices):
    """LAMBADA's perplexity and accuracy on these items from full forwards."""
    scores = [direct(lm.model, *scored_tokens(lm, *pair)) for pair in lambada_items(indices)]
    return math.exp(-sum(s for s, _ in scores) / len(scores)), sum(g for _, g in scores) / len(scores)


@pytest.mark.slow  # lm-eval's task index
@pytest.mark.needs('wikitext2', 'lambada', 'gpt2_bpe')
def test_simple_evaluate_equals_the_direct_computation(workdir, bpe_ckpt):
    from lm_eval import simple_evaluate
    skip_without_the_mirror()
    lm = make_lm(workdir, bpe_ckpt)
    out = simple_evaluate(model=lm, tasks=['lambada_openai_local', 'wikitext_local'], limit=2, bootstrap_iters=0,
                          task_manager=task_manager())['results']
    perplexity, accuracy = direct_lambada(lm, range(2))
    assert out['lambada_openai_local']['perplexity,none'] == pytest.approx(perplexity, rel=1e-4)
    assert out['lambada_openai_local']['acc,none'] == accuracy
    utils = task_utils()
    logp, words, size = 0.0, 0, 0
    for doc in utils.wikitext_pages()['test'].select(range(2)):  # the harness's windows of the same tokens
        logp += sum(direct(lm.model, context + pred, len(pred))[0]
                    for context, pred in rolling_windows(lm, lm.tokenizer.encode(utils.wikitext_detokenizer(doc))))
        words, size = words + len(re.split(r'\s+', doc['page'])), size + len(doc['page'].encode())
    assert out['wikitext_local']['word_perplexity,none'] == pytest.approx(math.exp(-logp / words), rel=1e-4)
    assert out['wikitext_local']['byte_perplexity,none'] == pytest.approx(math.exp(-logp / size), rel=1e-4)


def skip_without_the_mirror():
    if not needs('lambada', 'wikitext2'):  # '': they come from downloads, which the local tasks do not read
        pytest.skip('the local tasks read the data mirror: set AOGPT_DATA_DIR (docs/tests.md)')


def task_manager():
    from lm_eval.tasks import TaskManager
    return TaskManager(include_path=os.path.join(ROOT, 'tasks'), include_defaults=False)  # ours only: seconds


@pytest.mark.slow  # lm-eval's task index, in a fresh interpreter
@pytest.mark.needs('wikitext2', 'lambada')
def test_the_script_runs_the_harness_offline(workdir, char_ckpt, tmp_path):
    skip_without_the_mirror()
    items = [11, 21, 24]  # LAMBADA items in the char vocabulary; WikiText's first article is not in it
    samples = json.dumps({'lambada_openai_local': items, 'wikitext_local': [0]})
    result = run_script('lm_eval_ao.py', '--tasks', 'lambada_openai_local,wikitext_local', '--include_path',
                        os.path.join(ROOT, 'tasks'), '--samples', samples, '--output_path', str(tmp_path),
                        '--model_args', f'checkpoint={char_ckpt}/ckpt.pt', cwd=workdir)
    [path] = glob.glob(str(tmp_path / '**' / 'results_*.json'), recursive=True)
    with open(path) as f:
        out = json.load(f)['results']
    perplexity, accuracy = direct_lambada(make_lm(workdir, char_ckpt), items)
    assert out['lambada_openai_local']['perplexity,none'] == pytest.approx(perplexity, rel=1e-4)
    assert out['lambada_openai_local']['acc,none'] == accuracy
    assert out['wikitext_local']['word_perplexity,none'] == math.inf
    assert result.stderr.count('outside the vocabulary') == 1 and "'='" in result.stderr


@pytest.mark.slow  # transformers' model and lm-eval's
@pytest.mark.needs('wikitext2', 'lambada')
def test_lm_evals_own_hf_model_reads_an_exported_folder_as_lm_eval_ao_does(workdir, char_ckpt, tmp_path):
    """lm-eval's hf model on an exported folder (its code loaded by transformers) and lm_eval_ao.py's model on the
    checkpoint give the same log-likelihood to each LAMBADA item."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM  # the harness's --model hf
    skip_without_the_mirror()
    run_script('export.py', f'--out_dir={char_ckpt}', f'--out={tmp_path}/folder', cwd=workdir)
    items = dict(tasks=['lambada_openai_local'], samples={'lambada_openai_local': [11, 21, 24]}, bootstrap_iters=0,
                 task_manager=task_manager())
    ours = simple_evaluate(model=make_lm(workdir, char_ckpt), **items)
    hf = simple_evaluate(model=HFLM(pretrained=f'{tmp_path}/folder', trust_remote_code=True, device='cpu'), **items)
    ours, hf = ({row['doc_id']: float(row['resps'][0][0][0]) for row in out['samples']['lambada_openai_local']}
                for out in (ours, hf))
    assert ours.keys() == hf.keys() == {11, 21, 24}
    assert all(hf[i] == pytest.approx(ours[i], abs=1e-4) for i in ours), (ours, hf)


# -----------------------------------------------------------------------------
# one-line errors

@pytest.mark.parametrize('model_args,parts', [
    ('checkpoint=missing.pt', ['missing.pt not found']),
    ('checkpoint=out-char', ['out-char is a folder', 'out-char/ckpt.pt']),
    ('checkpoint=out-char/ckpt.pt,ensembel=2', ["'ensembel' in model_args", "did you mean 'ensemble'?"]),
    ('checkpoint=out-char/ckpt.pt,batch_size=0', ['batch_size', "'auto' or an int"]),
    ('checkpoint=out-mdm/ckpt.pt,ensemble=2', ['encoder', 'ensemble=1']),
    ('checkpoint=out-char/ckpt.pt,score=nelbo', ['score=l2r']),
    ('', ['needs a checkpoint', 'checkpoint=path']),
    ('checkpoint=out-char/ckpt.pt,dtype=float8', ['dtype', 'float32']),
    ('checkpoint=out-char/ckpt.pt,use_ema=perhaps', ['use_ema in model_args expects a bool', "'perhaps'"]),
    ('checkpoint=out-char/ckpt.pt,ensemble=-1', ['ensemble in model_args must be an int >= 1, got -1']),
    ('checkpoint=out-char/ckpt.pt,order=random,speculate=auto,steps=4', ['steps=4 with speculate', 'drop steps']),
])
def test_bad_model_args_are_one_line(workdir, char_ckpt, mdm_ckpt, model_args, parts):
    old = os.getcwd()
    os.chdir(workdir)
    try:
        with pytest.raises(SystemExit) as e:
            harness.AOGPTLM.create_from_arg_string(model_args, {'device': 'cpu', 'batch_size': None})
    finally:
        os.chdir(old)
    message = str(e.value.code)
    assert message.startswith('error: ') and '\n' not in message
    says(message, *parts)


def test_model_args_text_is_read_as_sample_py_reads_flags(workdir, char_ckpt):
    first = lambda lm: next(lm.model.parameters())
    raw, ema = (first(make_lm(workdir, char_ckpt, use_ema=flag)) for flag in (False, True))
    assert not torch.equal(raw, ema)
    for text, want in (('no', raw), ('false', raw), ('0', raw), ('yes', ema), ('True', ema)):
        args = f'checkpoint={workdir / char_ckpt / "ckpt.pt"},use_ema={text}'
        assert torch.equal(first(harness.AOGPTLM.create_from_arg_string(args, {'device': 'cpu'})), want), text


def test_speculate_auto_in_model_args_as_in_sample_py(workdir, char_ckpt):
    from aogpt.speculative import auto_k
    args = f'checkpoint={workdir / char_ckpt / "ckpt.pt"},order=random,speculate='
    lm = harness.AOGPTLM.create_from_arg_string(args + 'auto', {'device': 'cpu'})
    assert lm.generator.speculate == auto_k(lm.model, 'random', 1) > 0  # one request at a time
    assert harness.AOGPTLM.create_from_arg_string(args + '3', {'device': 'cpu'}).generator.speculate == 3


@pytest.mark.slow  # lm-eval's task index, in a fresh interpreter
def test_an_unknown_task_is_one_line(workdir, char_ckpt):
    message = one_line_error('lm_eval_ao.py', '--tasks', 'no_such_task', '--model_args',
                             f'checkpoint={char_ckpt}/ckpt.pt', cwd=workdir)
    says(message, 'no_such_task', 'ls tasks', '--include_path tasks')


@pytest.mark.parametrize('mirror,problem', [(None, 'AOGPT_DATA_DIR is not set'),
                                            ('no-such-folder', 'AOGPT_DATA_DIR=no-such-folder is not a folder'),
                                            ('a-file', 'AOGPT_DATA_DIR=a-file is not a folder'),
                                            ('.', 'AOGPT_DATA_DIR=. holds no lambada/lambada_test.jsonl')])
def test_a_local_task_without_its_data_is_one_line_before_the_model_loads(workdir, monkeypatch, mirror, problem):
    (workdir / 'a-file').write_text('')
    if mirror is None:
        monkeypatch.delenv('AOGPT_DATA_DIR', raising=False)
    else:
        monkeypatch.setenv('AOGPT_DATA_DIR', mirror)
    message = one_line_error('lm_eval_ao.py', '--tasks', 'wikitext,lambada_openai_local', '--include_path', 'tasks',
                             '--model_args', 'checkpoint=not-loaded.pt', cwd=workdir)  # no checkpoint needed to say it
    says(message, 'lambada_openai_local reads the data mirror', problem, 'run the standard task (lambada_openai)')


def test_limit_zero_is_one_line(workdir, char_ckpt):
    message = one_line_error('lm_eval_ao.py', '--tasks', 'lambada_openai', '--limit', '0', '--model_args',
                             f'checkpoint={char_ckpt}/ckpt.pt', cwd=workdir)
    says(message, '--limit 0 leaves no documents', 'count >= 1')


def test_without_lm_eval_the_script_says_how_to_install_it(workdir):
    code = ("import runpy, sys; sys.modules['lm_eval'] = None; sys.argv = ['lm_eval_ao.py', '--tasks', 'x']; "
            f"runpy.run_path({os.path.join(ROOT, 'lm_eval_ao.py')!r}, run_name='__main__')")
    result = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 1 and result.stderr.count('\n') == 1, result.stderr
    says(result.stderr, 'error: ', 'pip install "lm-eval>=0.4.9,<0.5"')
