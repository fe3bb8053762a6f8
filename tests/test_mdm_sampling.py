"""Sampling from the encoder: its engine against direct forwards of the canvas, the schedules, MDLM's
ancestral rule (its reveal probabilities, its reused forwards), sample.py and gen_ppl.py on an encoder
checkpoint."""
import json
import math
import statistics

import pytest
import torch

from aogpt.common import read_checkpoint
from conftest import nll_given, one_line_error, run_script, samples, says, tiny_mdm, tiny_model
from aogpt.decoding import generate
from aogpt.engine import Sampling, confidence_scores, make_engine, step_sizes

pytestmark = pytest.mark.usefixtures('one_thread')  # tiny models: one thread, here and in the scripts run

T, V = 8, 7  # the encoder's block_size and vocabulary here
KNOWN = {
    'none': [False] * T,
    'prefix': [True] * 3 + [False] * 5,
    'infill': [True, False, False, True, False, False, False, True],
}


@pytest.fixture(scope='module')
def model():
    return tiny_mdm(block_size=T, vocab_size=V)


def prompt(name, rows=3, seed=0):
    """(x, known): rows of random tokens and the template's known positions."""
    return torch.randint(V, (rows, T), generator=torch.Generator().manual_seed(seed)), torch.tensor(KNOWN[name])


def record_steps(model, x, known, steps, **options):
    """generate's output, decoding order and each step's (targets, logits)."""
    record = []
    out, sigma = generate(model, x, known, steps, generator=torch.Generator().manual_seed(1),
                          on_step=lambda t, l: record.append((t.clone(), l.clone())), **options)
    return out, sigma, record


@pytest.mark.parametrize('order', ['random', 'confidence'])
@pytest.mark.parametrize('steps,schedule', [(None, 'linear'), (2, 'linear'), (3, 'cosine')])
@pytest.mark.parametrize('name', ['none', 'infill'])
def test_steps_decode_the_scheduled_number_of_tokens(model, order, steps, schedule, name):
    x, known = prompt(name)
    n = int((~known).sum())
    steps = n if steps is None else steps
    _, sigma, record = record_steps(model, x, known, steps, order=order, schedule=schedule)
    assert [t.size(1) for t, _ in record] == step_sizes(n, steps, schedule)
    decoded = torch.cat([t for t, _ in record], 1)
    assert torch.equal(decoded, sigma)
    assert torch.equal(decoded.sort(1).values, (~known).nonzero().squeeze(1).expand(3, n))  # each once


def canvas(model, x, known, decoded):
    """The encoder's input before a step, built by hand: the known tokens and those at the decoded
    positions (B, d) as in x, [MASK] everywhere else."""
    shown = known.expand_as(x).clone()
    shown.scatter_(1, decoded, True)
    return torch.where(shown, x, model.mask_id)


@pytest.mark.parametrize('order', ['random', 'l2r', 'confidence'])
@pytest.mark.parametrize('name', ['none', 'prefix', 'infill'])
@torch.no_grad()
def test_engine_logits_are_a_forward_of_the_canvas(model, order, name):
    x, known = prompt(name)
    out, sigma, record = record_steps(model, x.clone(), known, 3, order=order)
    done = 0
    for targets, logits in record:
        z = canvas(model, out, known, sigma[:, :done])
        torch.testing.assert_close(logits, model.forward_masked(z, out_positions=targets), atol=1e-5, rtol=0)
        if order == 'confidence':  # the step took the most confident of all the positions still masked
            remaining = sigma[:, done:]
            scores = confidence_scores(model.forward_masked(z, out_positions=remaining), 'maxprob')
            best = remaining.gather(1, scores.topk(targets.size(1), dim=1).indices)
            assert torch.equal(best.sort(1).values, targets.sort(1).values)
        done += targets.size(1)


@torch.no_grad()
def final_step_logits(model, x, reveals, targets):
    """The last step's logits after the context was revealed in steps: reveals, a list of positions
    per step (the first led by the start slot, -1); each step but the last predicts the next step's
    first position, the last predicts targets (1, k)."""
    engine = make_engine(model, 1, T)
    for positions, following in zip(reveals, reveals[1:] + [None]):
        positions = torch.tensor([positions])
        step_targets = targets if following is None else torch.tensor([following[:1]])
        logits = engine.step(x.gather(1, positions.clamp(min=0)), positions, step_targets)
        engine.accept()
    return logits


def test_encoder_logits_do_not_depend_on_the_order_of_the_context(model):
    x = torch.tensor([[3, 1, 4, 1, 5, 6, 2, 6]])
    targets = torch.tensor([[1, 4, 7]])
    first = [[-1, 0, 2], [3, 5, 6]]
    second = [[-1, 6, 5], [0], [3, 2]]  # the same context {0, 2, 3, 5, 6}, in another order and grouping
    torch.testing.assert_close(final_step_logits(model, x, first, targets),
                               final_step_logits(model, x, second, targets), atol=0, rtol=0)
    # the check has power: a decoder (AO-GPT) reads its context in order, so its logits differ
    decoder = tiny_model(block_size=T, vocab_size=V)
    assert not torch.allclose(final_step_logits(decoder, x, first, targets),
                              final_step_logits(decoder, x, second, targets))


@pytest.mark.parametrize('order,steps', [('random', 3), ('confidence', 3), ('ancestral', 12)])
@pytest.mark.parametrize('name', ['prefix', 'infill'])
def test_known_tokens_never_change(model, order, steps, name):
    x, known = prompt(name, rows=16)
    given = x[:, known].clone()
    out, sigma = generate(model, x, known, steps, order=order, generator=torch.Generator().manual_seed(2))
    assert torch.equal(out[:, known], given)
    assert out.max() < V  # no [MASK] left
    assert torch.equal(sigma.sort(1).values, (~known).nonzero().squeeze(1).expand(16, -1))


@pytest.mark.parametrize('order', ['random', 'confidence', 'ancestral'])
def test_ids_past_n_tokens_are_never_drawn(model, order):
    x, known = prompt('none', rows=64)
    out, _ = generate(model, x, known, 4, order=order, generator=torch.Generator().manual_seed(0), n_tokens=3)
    assert out.max() == 2


def test_ancestral_needs_the_encoder():
    x = torch.zeros(2, 16, dtype=torch.long)
    with pytest.raises(ValueError, match='ancestral.*encoder'):
        generate(tiny_model(), x, torch.zeros(16, dtype=torch.bool), 4, order='ancestral')


# -----------------------------------------------------------------------------
# the ancestral rule, seen through the canvases of its forwards

def ancestral_forwards(model, monkeypatch, x, known, steps, seed=0, **options):
    """generate's (x, decoding order) with order='ancestral', and the canvas of each forward it ran."""
    canvases = []
    forward = model.forward_masked

    def recorded(z, out_positions=None):
        canvases.append(z.clone())
        return forward(z, out_positions)
    with monkeypatch.context() as patch:
        patch.setattr(model, 'forward_masked', recorded)
        out, sigma = generate(model, x.clone(), known, steps, order='ancestral',
                              generator=torch.Generator().manual_seed(seed), **options)
    return out, sigma, canvases


def test_ancestral_reuses_the_forward_only_while_nothing_changed(model, monkeypatch):
    x, known = prompt('infill', rows=4)  # 5 tokens in 40 steps: most steps reveal nothing
    out, sigma, every = ancestral_forwards(model, monkeypatch, x, known, 40, reuse_forward=False)
    reused, reused_sigma, needed = ancestral_forwards(model, monkeypatch, x, known, 40)
    assert torch.equal(reused, out) and torch.equal(reused_sigma, sigma)
    assert len(every) == 40
    # a forward is needed before each step that reveals something, where the canvas changes next
    after = every[1:] + [out]
    revealing = [z for z, nxt in zip(every, after) if not torch.equal(z, nxt)]
    assert len(needed) == len(revealing) < 40
    assert all(torch.equal(a, b) for a, b in zip(needed, revealing))


@pytest.mark.parametrize('schedule', ['linear', 'cosine'])
def test_ancestral_reveals_each_masked_position_with_probability_t_minus_s_over_t(model, monkeypatch, schedule):
    rows, steps = 3000, 5
    x, known = prompt('infill', rows=rows)
    out, decoded, canvases = ancestral_forwards(model, monkeypatch, x, known, steps, schedule=schedule,
                                                reuse_forward=False)
    t = [1 - i / steps if schedule == 'linear' else math.cos(math.pi / 2 * i / steps) for i in range(steps + 1)]
    masked = torch.stack([z == model.mask_id for z in canvases] + [out == model.mask_id])  # before each step, after
    assert not masked[-1].any()  # all decoded
    for i in range(steps):
        at_risk, revealed = masked[i].sum().item(), (masked[i] & ~masked[i + 1]).sum().item()
        p = (t[i] - t[i + 1]) / t[i]  # 1 at the last step: it reveals all that remain
        sigma = math.sqrt(at_risk * p * (1 - p))
        assert abs(revealed - at_risk * p) <= 4 * sigma + 1e-9, (i, revealed, at_risk * p)
        assert (masked[i + 1] <= masked[i]).all()  # a revealed token stays
    # the decoding order lists the positions by the step that revealed them
    step_of = masked.sum(0).gather(1, decoded)  # steps each position stayed masked
    assert (step_of[:, 1:] >= step_of[:, :-1]).all()


@torch.no_grad()
def test_ancestral_draws_each_token_given_the_canvas_before_its_step(model, monkeypatch):
    x, known = prompt('none', rows=32)
    out, _, canvases = ancestral_forwards(model, monkeypatch, x, known, 6, sampling=Sampling(temperature=0),
                                          reuse_forward=False)
    for z, after in zip(canvases, canvases[1:] + [out]):
        new = (z == model.mask_id) & (after != model.mask_id)
        assert torch.equal(after[new], model.forward_masked(z).argmax(-1)[new])


# -----------------------------------------------------------------------------
# the command line, on the tiny encoder of conftest.mdm_ckpt

@pytest.mark.parametrize('args', [
    ['--order=random', '--start=ROMEO:'],
    ['--order=confidence', '--confidence=entropy', '--steps=8', '--schedule=cosine', '--start=ROMEO:'],
    ['--order=ancestral', '--steps=64', '--top_k=10', '--top_p=0.9', '--start=ROMEO:'],  # more steps than tokens
])
def test_cli_samples_from_the_encoder(workdir, mdm_ckpt, args):
    out = run_script('sample.py', f'--out_dir={mdm_ckpt}', '--num_samples=2', '--device=cpu', *args, cwd=workdir)
    texts = samples(out.stdout)
    assert len(texts) == 2 and all(len(t) == 32 and t.startswith('ROMEO:') for t in texts), out.stdout


def test_cli_infill_from_the_encoder(workdir, mdm_ckpt):
    out = run_script('sample.py', f'--out_dir={mdm_ckpt}', '--num_samples=3', '--device=cpu', '--order=ancestral',
                     '--steps=20', '--infill=ROMEO:[MASK:10] the [MASK:5].', cwd=workdir)
    texts = samples(out.stdout)
    assert len(texts) == 3
    for t in texts:  # each generated span between sample.py's fill_marks
        assert len(t) == 31 and t[:7] == 'ROMEO:«' and t[17:24] == '» the «' and t[29:] == '».', t


def test_cli_gen_ppl_of_encoder_samples(workdir, mdm_ckpt, char_ckpt):
    out = run_script('gen_ppl.py', f'--out_dir={mdm_ckpt}', f'--scorer={char_ckpt}/ckpt.pt', '--device=cpu',
                     '--order=ancestral', '--steps=8,64', '--num_samples=4', '--batch_size=4',
                     '--samples_out=mdm.jsonl', '--out_json=mdm.json', cwd=workdir)
    assert 'gen PPL' in out.stdout and f'scorer: {char_ckpt}/ckpt.pt' in out.stdout
    results = json.loads((workdir / 'mdm.json').read_text())['results']
    assert [(r['steps'], r['order'], r['n']) for r in results] == [(8, 'ancestral', 4), (64, 'ancestral', 4)]
    assert all(1 < r['gen_ppl'] < 1e4 for r in results)
    lines = [json.loads(line) for line in (workdir / 'mdm.jsonl').read_text().splitlines()]
    assert len(lines) == 8 and all(len(r['text']) == 32 for r in lines)


def test_cli_an_encoder_scores_its_infills_given_both_sides(workdir, mdm_ckpt):
    run_script('gen_ppl.py', f'--out_dir={mdm_ckpt}', f'--scorer={mdm_ckpt}/ckpt.pt', '--sides=both', '--device=cpu',
               '--order=ancestral', '--steps=8', '--infill=ROMEO:[MASK:10] the [MASK:5].', '--num_samples=2',
               '--batch_size=2', '--samples_out=mdm-infill.jsonl', '--out_json=mdm-infill.json', cwd=workdir)
    [result] = json.loads((workdir / 'mdm-infill.json').read_text())['results']
    model, _ = read_checkpoint(workdir / mdm_ckpt / 'ckpt.pt')
    expected = []  # each generated token given the template's text and the generated tokens before it
    for r in map(json.loads, (workdir / 'mdm-infill.jsonl').read_text().splitlines()):
        x, known = torch.tensor(r['tokens']), set(r['known_positions'])
        generated = [p for p in range(len(x)) if p not in known]
        assert len(generated) == 15
        with torch.no_grad():
            expected.append(statistics.mean(nll_given(model, x, known | set(generated[:j]))[p].item()
                                            for j, p in enumerate(generated)))
    assert result['sample_nll'] == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize('script,args,parts', [
    ('sample.py', ['--out_dir={char}', '--order=ancestral'], ('ancestral', 'encoder', 'a decoder')),
    ('gen_ppl.py', ['--out_dir={char}', '--scorer={char}/ckpt.pt', '--order=ancestral'], ('ancestral', 'encoder')),
    ('sample.py', ['--out_dir={mdm}', '--steps=33'], ('--steps', 'from 1 to the 32 tokens', 'got 33')),
])
def test_cli_errors_are_one_line(workdir, mdm_ckpt, char_ckpt, script, args, parts):
    names = dict(char=char_ckpt, mdm=mdm_ckpt)
    error = one_line_error(script, '--device=cpu', *(a.format(**names) for a in args), cwd=workdir)
    says(error, *(part.format(**names) for part in parts))
