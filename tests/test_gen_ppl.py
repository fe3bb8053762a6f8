"""gen_ppl.py: scores equal independent computations, temperature lowers gen PPL and entropy, the
samples file round-trips, bad inputs give one line."""
import json
import math
import statistics
from collections import Counter

import pytest
import torch

from aogpt.common import read_checkpoint
from aogpt.scorers import load_scorer
from conftest import (nll_given, one_forward_logprob, one_line_error, run_here, says, stored_checkpoint, tiny_mdm,
                      tiny_model)
from aogpt.scoring import SIDES, score_samples, summarize, unigram_entropy

pytestmark = pytest.mark.usefixtures('one_thread')  # tiny models: one thread, here and in the scripts run


def records_of(rows, known_positions=()):
    return [dict(tokens=row, known_positions=list(k), seconds=0.5)
            for row, k in zip(rows, known_positions or [[]] * len(rows))]


def hand_statistics(nlls, generated):
    """The reported numbers, from per-sample lists of NLLs and of generated tokens."""
    sample_nll = [sum(n) / len(n) for n in nlls]
    ppl = [math.exp(n) for n in sample_nll]
    entropy = [-sum(c / len(g) * math.log(c / len(g)) for c in Counter(g).values()) for g in generated]
    pooled = math.exp(sum(map(sum, nlls)) / sum(map(len, nlls)))
    return dict(gen_ppl=statistics.mean(ppl), gen_ppl_std=statistics.pstdev(ppl), pooled_ppl=pooled,
                entropy=statistics.mean(entropy), sample_nll=sample_nll, sample_entropy=entropy)


def check_summary(records, scored, generated):
    summary = summarize(records, scored)
    for key, value in hand_statistics([s.tolist() for s in scored], generated).items():
        assert summary[key] == pytest.approx(value, rel=1e-6), key
    assert summary['n'] == len(records) and summary['seconds_per_sample'] == 0.5


def test_hf_gen_ppl_equals_a_hand_loop(tiny_gpt2):
    from transformers import GPT2LMHeadModel
    rows = torch.randint(50257, (7, 20), generator=torch.Generator().manual_seed(0)).tolist()
    known_positions = [[0, 1, 2], [], [], [5, 19], [], [], []]  # a prompt, and given tokens inside (not scored)
    records = records_of(rows, known_positions)
    nll, tokens, context, weights = load_scorer(tiny_gpt2, 'cpu')
    assert (tokens, context, weights) == (('gpt2', 50257), 1024, None)
    scored = score_samples(records, nll, 3, 'cpu')  # 7 samples: batches of 3, 3 and the remainder 1

    hf = GPT2LMHeadModel.from_pretrained(tiny_gpt2).eval()
    nlls, generated = [], []
    for row, given in zip(rows, known_positions):
        with torch.no_grad():
            logp = hf(torch.tensor([row])).logits[0].double().log_softmax(-1)
        nlls.append([-logp[p - 1, row[p]].item() for p in range(1, len(row)) if p not in given])
        generated.append([t for p, t in enumerate(row) if p not in given])
    for got, expected in zip(scored, nlls):
        torch.testing.assert_close(got.double(), torch.tensor(expected, dtype=torch.float64), atol=5e-5, rtol=0)
    check_summary(records, scored, generated)


DECODERS, DECODER_IDS = [dict(), dict(position_encoding='rotary'), dict(target_injection='add')], \
    ['ao-gpt-learned', 'ao-gpt-rotary', 'sigma-gpt']


@pytest.mark.parametrize('kind', DECODERS, ids=DECODER_IDS)
def test_checkpoint_scorer_reads_left_to_right(tmp_path, kind):
    model = tiny_model(**kind)
    path = tmp_path / 'ckpt.pt'
    state = model.state_dict()
    torch.save(dict(model=state, ema=state, model_args=vars(model.config), vocab='abcdefghijk'), path)
    rows = torch.randint(11, (5, 16), generator=torch.Generator().manual_seed(1)).tolist()
    records = records_of(rows)
    nll, tokens, context, weights = load_scorer(str(path), 'cpu')
    assert (tokens, context, weights) == (('abcdefghijk', 11), 16, 'EMA')
    scored = score_samples(records, nll, 2, 'cpu')
    nlls = []
    with torch.no_grad():  # token p from a plain forward over the tokens before it, and nothing else
        for row in rows:
            x = torch.tensor([row])
            nlls.append([-model(x[:, :p + 1], torch.arange(p + 1)[None])[0][0, p].log_softmax(-1)[row[p]].item()
                         for p in range(1, 16)])
    for got, expected in zip(scored, nlls):
        torch.testing.assert_close(got, torch.tensor(expected), atol=1e-5, rtol=0)
    check_summary(records, scored, rows)


def known_first_nlls_by_hand(model, row, known):
    """-log p of each generated token of a sample, by one forward per token over the known tokens left to right,
    then the generated ones before it."""
    read, nlls = list(known), []
    for p in [p for p in range(len(row)) if p not in known]:
        nlls.append(-one_forward_logprob(model, torch.tensor(row), torch.tensor(read, dtype=torch.long), p))
        read.append(p)
    return torch.tensor(nlls, dtype=torch.float64)


@pytest.mark.parametrize('kind', DECODERS, ids=DECODER_IDS)
def test_both_sides_scores_each_generated_token_given_every_known_one(tmp_path, kind):
    model = tiny_model(**kind)
    path = tmp_path / 'ckpt.pt'
    torch.save(dict(model=model.state_dict(), model_args=vars(model.config), vocab='abcdefghijk'), path)
    rows = torch.randint(11, (5, 16), generator=torch.Generator().manual_seed(2)).tolist()
    known_positions = [[0, 1, 2, 9, 10, 15], [4, 5, 6, 7], [0, 1, 2, 3], [], [3, 12]]  # 2 gaps, one at each end,
    records = records_of(rows, known_positions)  # a prefix prompt, nothing known, scattered known tokens
    score, tokens, context, weights = load_scorer(str(path), 'cpu', 'both')
    assert (tokens, context, weights) == (('abcdefghijk', 11), 16, 'raw')
    scored = score_samples(records, score, 2, 'cpu')
    with torch.no_grad():
        for row, known, got in zip(rows, known_positions, scored):
            torch.testing.assert_close(got.double(), known_first_nlls_by_hand(model, row, known), atol=1e-5, rtol=0)
    left, *_ = load_scorer(str(path), 'cpu', 'left')  # a prefix prompt: read left to right either way
    torch.testing.assert_close(score_samples(records[2:3], left, 1, 'cpu')[0], scored[2], atol=1e-6, rtol=0)


def test_an_encoder_scores_each_token_revealed_left_to_right(tmp_path):
    model = tiny_mdm()
    path = tmp_path / 'encoder.pt'
    torch.save(dict(model=model.state_dict(), model_args=vars(model.config)), path)
    n = model.config.block_size
    rows = torch.randint(model.mask_id, (4, n), generator=torch.Generator().manual_seed(3)).tolist()
    known_positions = [[0, 4], [1, 2], [], [0, 1]]  # a known token after the generated ones; inside; none; a prefix
    records = records_of(rows, known_positions)
    for sides in SIDES:
        score, *_ = load_scorer(str(path), 'cpu', sides)
        with torch.no_grad():
            for row, known, got in zip(rows, known_positions, score_samples(records, score, 3, 'cpu')):
                generated = [p for p in range(n) if p not in known]
                given = {'left': lambda p: set(range(p)),  # every position from p on masked; the first not scored
                         'both': lambda p: set(known) | {q for q in generated if q < p}}[sides]
                expected = [nll_given(model, torch.tensor(row), given(p))[p] for p in generated
                            if sides == 'both' or p > 0]
                torch.testing.assert_close(got.double(), torch.stack(expected), atol=1e-5, rtol=0)


def test_infills_scored_given_both_sides(workdir, char_ckpt, capsys):
    results = run_gen_ppl(workdir, f'--out_dir={char_ckpt}', f'--scorer={char_ckpt}/ckpt.pt', '--sides=both',
                          '--infill=ROMEO: [MASK:6] my lord[MASK:3].', '--num_samples=3', '--batch_size=3',
                          '--samples_out=infill.jsonl', '--out_json=gen.json')
    assert 'each generated token given every known one (--sides=both)' in capsys.readouterr().out
    assert json.loads((workdir / 'gen.json').read_text())['sides'] == 'both'
    lines = [json.loads(line) for line in (workdir / 'infill.jsonl').read_text().splitlines()]
    model, _ = read_checkpoint(workdir / char_ckpt / 'ckpt.pt')
    with torch.no_grad():
        by_hand = [known_first_nlls_by_hand(model, r['tokens'], r['known_positions']) for r in lines]
    assert all(len(nll) == 9 for nll in by_hand)  # the gaps' 9 tokens, each scored
    assert results[0]['sample_nll'] == pytest.approx([nll.mean().item() for nll in by_hand], abs=1e-5)


@pytest.mark.parametrize('fim', [False, True], ids=['ao-gpt', 'fim-gpt'])
def test_gaps_of_no_length_are_drawn_with_their_length_and_scored_each_at_its_own(workdir, char_ckpt, fim_ckpt, fim):
    """[MASK]: each sample has the length its model chose, its prompt at its own positions, and its NLL is scored
    by hand at that length (samples of many lengths, scored together)."""
    results = run_gen_ppl(workdir, f'--out_dir={fim_ckpt if fim else char_ckpt}', f'--scorer={char_ckpt}/ckpt.pt',
                          '--sides=both', '--infill=ROMEO: [MASK] my lord.', '--num_samples=6', '--batch_size=4',
                          '--gap_cap=12', '--samples_out=gaps.jsonl', '--out_json=gen.json')
    lines = [json.loads(line) for line in (workdir / 'gaps.jsonl').read_text().splitlines()]
    prompt = 'ROMEO: ' + ' my lord.'
    for r in lines:
        L = r['gap_length']
        assert 1 <= L <= 12 and len(r['tokens']) == len(prompt) + L and (r['gap_p'] is None) == fim
        assert r['known_positions'] == list(range(7)) + list(range(7 + L, len(prompt) + L))
        assert r['text'][:7] + r['text'][7 + L:] == prompt
    model, _ = read_checkpoint(workdir / char_ckpt / 'ckpt.pt')
    with torch.no_grad():
        by_hand = [known_first_nlls_by_hand(model, r['tokens'], r['known_positions']).mean().item() for r in lines]
    assert results[0]['sample_nll'] == pytest.approx(by_hand, abs=1e-5)


def test_unigram_entropy_by_hand():
    assert unigram_entropy(torch.tensor([3, 3, 3, 3])) == 0
    assert unigram_entropy(torch.tensor([1, 2, 1, 2])) == pytest.approx(math.log(2))
    assert unigram_entropy(torch.tensor([7, 7, 8, 9])) == pytest.approx(1.5 * math.log(2))


# -----------------------------------------------------------------------------
# the command line, on the char model of the other script tests

def run_gen_ppl(workdir, *args):
    """Run the script in this process (torch and transformers are imported already); its results."""
    run_here('gen_ppl.py', '--device=cpu', *args, cwd=workdir)
    return json.loads((workdir / 'gen.json').read_text())['results']


def test_temperature_lowers_gen_ppl_and_entropy_and_samples_round_trip(workdir, char_ckpt):
    scorer = f'--scorer={char_ckpt}/ckpt.pt'  # the char model read left to right
    results = run_gen_ppl(workdir, f'--out_dir={char_ckpt}', scorer, '--num_samples=24', '--batch_size=24',
                          '--score_batch_size=5', '--steps=4,32', '--temperature=1.0,0.7', '--top_p=1.0',
                          '--samples_out=gen.jsonl', '--out_json=gen.json')
    assert [(r['steps'], r['temperature'], r['top_p'], r['n']) for r in results] == [
        (4, 1.0, 1.0, 24), (4, 0.7, 1.0, 24), (32, 1.0, 1.0, 24), (32, 0.7, 1.0, 24)]
    for hot, cold in [results[:2], results[2:]]:
        assert cold['gen_ppl'] < hot['gen_ppl'] and cold['pooled_ppl'] < hot['pooled_ppl']
        assert cold['entropy'] < hot['entropy']
    lines = [json.loads(line) for line in (workdir / 'gen.jsonl').read_text().splitlines()]
    assert len(lines) == 96 and all(len(r['tokens']) == 32 and len(r['text']) == 32 for r in lines)
    vocab = lines[0]['vocab']
    assert all(''.join(vocab[t] for t in r['tokens']) == r['text'] for r in lines)
    # scoring the file again, in other batches, gives the same numbers
    again = run_gen_ppl(workdir, '--samples=gen.jsonl', scorer, '--score_batch_size=7', '--out_json=gen.json')
    for r, s in zip(results, again):
        assert r.keys() == s.keys()
        for k in r.keys() - {'seconds_per_sample'}:
            assert r[k] == pytest.approx(s[k], rel=1e-6), k
    assert [r['seconds_per_sample'] for r in results] == [s['seconds_per_sample'] for s in again]
    check_sample_nlls(workdir / char_ckpt / 'ckpt.pt', lines, results)


def test_samples_of_the_older_format_keep_their_prompt_unscored(workdir, char_ckpt):
    scorer = f'--scorer={char_ckpt}/ckpt.pt'
    run_gen_ppl(workdir, f'--out_dir={char_ckpt}', scorer, '--num_samples=4', '--start=ROMEO:',
                '--samples_out=new.jsonl', '--out_json=gen.json')
    lines = [json.loads(line) for line in (workdir / 'new.jsonl').read_text().splitlines()]
    assert all(r['known_positions'] == list(range(6)) for r in lines)
    (workdir / 'old.jsonl').write_text(''.join(json.dumps({k: v for k, v in r.items() if k != 'known_positions'} |
                                                         dict(known=r['known_positions'])) + '\n' for r in lines))
    [new] = run_gen_ppl(workdir, '--samples=new.jsonl', scorer, '--out_json=gen.json')
    [old] = run_gen_ppl(workdir, '--samples=old.jsonl', scorer, '--out_json=gen.json')
    assert old['sample_nll'] == new['sample_nll']


def check_sample_nlls(scorer, lines, results):
    """Each row's sample_nll, independently: one forward of the scorer's EMA weights in the identity order over
    each sample of the file (a row's samples in the file's order), every token but the first scored."""
    model, _ = read_checkpoint(scorer)
    for r, row in zip(results, [lines[i:i + 24] for i in range(0, 96, 24)]):
        x = torch.tensor([s['tokens'] for s in row])
        with torch.no_grad():
            logp = model(x, torch.arange(32).expand_as(x))[0][:, 1:32].double().log_softmax(-1)  # slot p: x[p] from x[:p]
        ppl = (-logp.gather(2, x[:, 1:, None]).mean((1, 2))).exp()
        assert [math.exp(v) for v in r['sample_nll']] == pytest.approx(ppl.tolist(), rel=1e-5)
        assert statistics.mean(map(math.exp, r['sample_nll'])) == pytest.approx(r['gen_ppl'], rel=1e-9)
        assert statistics.mean(r['sample_entropy']) == pytest.approx(r['entropy'], rel=1e-9)


def test_the_scorers_weights_are_named(workdir, char_ckpt, capsys):
    # the raw weights of a checkpoint that has only those, whatever --use_ema (the sampler's) says
    checkpoint = stored_checkpoint(workdir, char_ckpt)
    torch.save({k: v for k, v in checkpoint.items() if k != 'ema'}, workdir / 'raw-only.pt')
    for scorer, weights in [(f'{char_ckpt}/ckpt.pt', 'EMA'), ('raw-only.pt', 'raw')]:
        run_gen_ppl(workdir, f'--out_dir={char_ckpt}', f'--scorer={scorer}', '--use_ema=False', '--num_samples=2',
                    '--batch_size=2', '--steps=4', '--samples_out=weights.jsonl', '--out_json=gen.json')
        assert f'scorer: {scorer} ({weights} weights)' in capsys.readouterr().out
        assert json.loads((workdir / 'gen.json').read_text())['scorer_weights'] == weights
    run_gen_ppl(workdir, '--samples=weights.jsonl', '--scorer=raw-only.pt', '--out_json=gen.json')
    assert 'note: raw-only.pt holds no EMA weights: reading its raw weights' in capsys.readouterr().out


def test_a_scorer_that_stores_no_vocabulary_scores_ids_of_its_size(workdir, char_ckpt, capsys):
    checkpoint = stored_checkpoint(workdir, char_ckpt)
    torch.save({k: v for k, v in checkpoint.items() if k != 'vocab'}, workdir / 'no-vocab.pt')  # 65 ids, as nanoGPT's
    expected = run_gen_ppl(workdir, f'--out_dir={char_ckpt}', f'--scorer={char_ckpt}/ckpt.pt', '--num_samples=3',
                           '--batch_size=3', '--steps=4', '--samples_out=ids.jsonl', '--out_json=gen.json')
    capsys.readouterr()
    assert run_gen_ppl(workdir, '--samples=ids.jsonl', '--scorer=no-vocab.pt', '--out_json=gen.json') == expected
    assert 'note: the scorer no-vocab.pt gives only a vocabulary size (65), so the tokens cannot be checked' in \
        capsys.readouterr().out


@pytest.mark.needs('gpt2_bpe')
def test_gpt2_bpe_samples_scored_by_a_hugging_face_model(workdir, bpe_ckpt, tiny_gpt2):
    results = run_gen_ppl(workdir, f'--out_dir={bpe_ckpt}', f'--scorer={tiny_gpt2}', '--num_samples=5',
                          '--batch_size=5', '--score_batch_size=2', '--steps=4', '--start=The', '--max_new_tokens=8',
                          '--samples_out=bpe.jsonl', '--out_json=gen.json')
    assert len(results) == 1 and results[0]['n'] == 5
    assert 1 < results[0]['gen_ppl'] < 2 * 50257  # a random scorer: about the vocabulary size
    lines = [json.loads(line) for line in (workdir / 'bpe.jsonl').read_text().splitlines()]
    assert all(r['known_positions'] == [0] and max(r['tokens']) < 50257 for r in lines)  # no padding ids drawn


@pytest.fixture(scope='module')
def sample_files(workdir):
    (workdir / 'empty.jsonl').write_text('\n')
    (workdir / 'other.jsonl').write_text('{"text": "hello"}\n')
    sample = dict(tokens=[1, 2, 3, 4], vocab=list('abcde'))
    (workdir / 'outside.jsonl').write_text(json.dumps(sample | dict(known_positions=[0, 99])) + '\n')
    (workdir / 'allknown.jsonl').write_text(json.dumps(sample | dict(known_positions=[1, 2, 3])) + '\n')
    model = tiny_model(vocab_size=96, block_size=32)  # no characters stored, and 96 ids
    torch.save(dict(model=model.state_dict(), model_args=vars(model.config)), workdir / 'sized.pt')
    torch.save(dict(model=model.state_dict(), model_args=vars(model.config), config=dict(order='l2r')),
               workdir / 'l2r.pt')
    return workdir


@pytest.mark.parametrize('args,parts', [
    (['--scorer=no-such-model-here'], ('could not load the Hugging Face model', "'no-such-model-here'")),
    (['--scorer={gpt2}'], ('65-character', 'scorer {gpt2}', 'reads GPT-2 BPE')),
    (['--samples=empty.jsonl'], ('empty.jsonl holds no samples',)),
    (['--samples=other.jsonl'], ('other.jsonl, line 1', 'not a sample written by gen_ppl.py')),
    (['--samples=missing.jsonl'], ('--samples=missing.jsonl', 'no such file')),
    (['--samples=outside.jsonl'], ('outside.jsonl, line 1', 'known_positions', 'its 4 tokens', '[0, 99]')),
    (['--samples=allknown.jsonl'], ('allknown.jsonl, line 1', 'every token after the first is known')),
    (['--steps=8,x'], ('--steps', 'comma list of ints', "'x' is not a whole number")),
    (['--temperature=1.0,'], ('--temperature', 'comma list of numbers', "'' is not a number")),
    (['--top_p=1.0,1.5'], ('--top_p', '(0, 1]', 'got 1.5')),
    (['--steps=33'], ('--steps', 'from 1 to the 32 tokens', 'got 33')),
    (['--temperature=1.0,0.7', '--top_p=0.9', '--pair_settings'], ('--pair_settings', 'the 2 temperatures')),
    (['--top_p_mode=top'], ('--top_p_mode', 'nucleus, authors', "got 'top'")),
    (['--sample_dtype=float16'], ('--sample_dtype', 'float64, float32', "got 'float16'")),
    (['--start=ROMEO:', '--infill=JULIET: [MASK:5]'], ('--start', '--infill', 'both give the prompt')),
    (['--scorer=sized.pt'], ('65-character', 'scorer sized.pt', 'reads the ids of a 96-token')),
    (['--scorer={out_dir}'], ('{out_dir} is a folder without a config.json', '{out_dir}/ckpt.pt')),  # a run folder
    (['--sides=middle'], ('--sides', 'one of left, both', "got 'middle'")),
    (['--scorer={gpt2}', '--sides=both'], ('--sides=both', '{gpt2} is a Hugging Face model', 'left to right only')),
    (['--scorer=l2r.pt', '--sides=both'], ('--sides=both', 'l2r.pt was trained left to right', '--sides=left')),
])
def test_bad_input_is_one_line(sample_files, char_ckpt, tiny_gpt2, args, parts):
    names = dict(gpt2=tiny_gpt2, out_dir=char_ckpt)
    args = [a.format(**names) for a in args]
    error = one_line_error('gen_ppl.py', f'--out_dir={char_ckpt}', f'--scorer={char_ckpt}/ckpt.pt', '--device=cpu',
                           *args, cwd=sample_files)
    says(error, *(part.format(**names) for part in parts))
