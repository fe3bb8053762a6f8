"""The sigma-GPT baseline (target_injection='add'): parity with the authors' model, their checkpoint
format with a tied head, our init, and one run through train.py, sample.py and eval_ppl.py."""
import os

import pytest
import torch

from conftest import ROOT, run_script, samples, says, stored_checkpoint, train
from fixtures.reference import load
from aogpt.checkpoints import CheckpointError, load_checkpoint, weights_read
from model import GPT, GPTConfig
from aogpt.training import make_ema


@pytest.fixture(scope='module')
def fixture():
    return load('sigma_gpt')


def logits_and_loss(model, fixture):
    with torch.no_grad():
        return model(fixture['inputs'], fixture['orders'], reduction='none')


@pytest.mark.parametrize('prefix', ['', '_orig_mod.'])
def test_parity_with_authors_sigma_gpt(fixture, tmp_path, prefix):
    # their model_args say nothing of the architecture: load_checkpoint tells sigma-GPT by its keys
    assert 'target_injection' not in fixture['model_args']
    torch.save(dict(fixture, model={prefix + k: v for k, v in fixture['model'].items()}), tmp_path / 'sigma.pt')
    model, _ = load_checkpoint(tmp_path / 'sigma.pt', use_ema=False)
    assert model.config.target_injection == 'add'
    assert model.lm_head.weight is model.transformer.wte.weight and model.lm_head.bias is None
    logits, loss = logits_and_loss(model, fixture)
    torch.testing.assert_close(logits, fixture['expected_logits'], atol=1e-4, rtol=0)
    torch.testing.assert_close(loss, fixture['expected_loss'], atol=1e-4, rtol=0)
    # their keys are our parameter names, in their registration order, the tied head listed once
    assert [name for name, _ in model.named_parameters()] == [k for k in fixture['model'] if k != 'lm_head.weight']


def test_authors_ema_of_a_tied_model(fixture, tmp_path):
    """Their trainer's EMA lists model.parameters(): the tied head once, as transformer.wte.weight."""
    names = [k for k in fixture['model'] if k != 'lm_head.weight']
    gen = torch.Generator().manual_seed(0)
    shadow = [fixture['model'][k] + 0.05 * torch.randn(fixture['model'][k].shape, generator=gen) for k in names]
    ckpt = dict(model_args=fixture['model_args'], model={'_orig_mod.' + k: v for k, v in fixture['model'].items()},
                ema_model=dict(decay=0.9, num_updates=10, shadow_params=shadow))
    torch.save(ckpt, tmp_path / 'ema.pt')
    model, _ = load_checkpoint(tmp_path / 'ema.pt')
    expected = GPT(GPTConfig(**fixture['model_args'], target_injection='add')).eval()
    expected.load_state_dict(dict(zip(names, shadow)) | {'lm_head.weight': shadow[0]})
    logits, _ = logits_and_loss(model, fixture)
    torch.testing.assert_close(logits, logits_and_loss(expected, fixture)[0], atol=0, rtol=0)
    assert (logits - fixture['expected_logits']).abs().max() > 0.1  # the EMA, not the raw weights
    assert model.lm_head.weight is model.transformer.wte.weight

    torch.save(dict(ckpt, ema_model=dict(shadow_params=shadow + [shadow[0]])), tmp_path / 'long.pt')
    with pytest.raises(CheckpointError) as exc:
        load_checkpoint(tmp_path / 'long.pt')
    says(str(exc.value), 'EMA holds 31 tensors', '30 parameters')
    torch.save(fixture, tmp_path / 'raw.pt')  # no EMA at all, as their released sigma-GPT: the raw weights
    model, checkpoint = load_checkpoint(tmp_path / 'raw.pt')
    assert weights_read(checkpoint) == 'raw' and weights_read(ckpt) == 'EMA' and weights_read(ckpt, False) == 'raw'
    torch.testing.assert_close(logits_and_loss(model, fixture)[0], fixture['expected_logits'], atol=1e-4, rtol=0)


def tiny_sigma_gpt(**kw):
    torch.manual_seed(0)
    args = dict(block_size=16, vocab_size=1000, n_layer=2, n_head=2, n_embd=64, target_injection='add') | kw
    return GPT(GPTConfig(**args))


def test_init_is_untruncated_normal():
    model = tiny_sigma_gpt()
    for weight, std in [(model.transformer.wte.weight, 0.02), (model.transformer.h[0].mlp.c_fc.weight, 0.02),
                        (model.transformer.h[1].mlp.c_proj.weight, 0.02 / 2)]:  # 0.02 / sqrt(2 * n_layer)
        assert abs(weight.std().item() / std - 1) < 0.05
        assert weight.abs().max() > 3.3 * std  # nanoGPT's normal init, not AO-GPT's cut at 3 std
    assert all(torch.equal(n.weight, torch.ones(64)) and torch.equal(n.bias, torch.zeros(64))
               for n in [model.transformer.h[0].ln_1, model.transformer.ln_f])


def test_tying_survives_ema_and_checkpoints(tmp_path):
    model = tiny_sigma_gpt()
    ema = make_ema(model, decay=0.5)
    assert ema.module.lm_head.weight is ema.module.transformer.wte.weight
    with torch.no_grad():
        model.lm_head.weight.add_(1.0)
    ema.update_parameters(model)  # n=1: decay min(0.5, 2/11)
    torch.testing.assert_close(ema.module.transformer.wte.weight, model.transformer.wte.weight - 2 / 11)
    torch.save(dict(model=model.state_dict(), ema=ema.module.state_dict(), model_args=vars(model.config)),
               tmp_path / 'ckpt.pt')
    for use_ema, source in [(True, ema.module), (False, model)]:
        loaded, _ = load_checkpoint(tmp_path / 'ckpt.pt', use_ema=use_ema)
        assert loaded.lm_head.weight is loaded.transformer.wte.weight
        assert torch.equal(loaded.lm_head.weight, source.lm_head.weight)


# -----------------------------------------------------------------------------
# train.py from the recipe, exact resume, then sample.py and eval_ppl.py on the checkpoint

@pytest.fixture(scope='module')
def sigma_ckpt(workdir):
    def recipe(out_dir, *args):
        return train(workdir, out_dir, '--eval_interval=3', '--lr_decay_iters=6', '--learning_rate=3e-3', *args,
                     config=os.path.join(ROOT, 'config', 'train_sigma_gpt_small.py'))
    recipe('sigma-straight', '--max_iters=6')
    recipe('sigma-halves', '--max_iters=3')
    recipe('sigma-halves', '--max_iters=6', '--init_from=resume')
    return 'sigma-halves'


def test_recipe_trains_and_resumes_exactly(workdir, sigma_ckpt):
    a, b = (stored_checkpoint(workdir, d) for d in ('sigma-straight', sigma_ckpt))
    assert a['model_args']['target_injection'] == 'add' and a['iter_num'] == b['iter_num'] == 6
    assert 'lm_head.bias' not in a['model'] and 'transformer.ln_f.bias' in a['model']
    for part in ('model', 'ema'):
        for name, tensor in a[part].items():
            assert torch.equal(tensor, b[part][name]), f'{part} {name}'
        assert torch.equal(a[part]['lm_head.weight'], a[part]['transformer.wte.weight'])
    # ema_decay=0: what train.py evaluates and saves as the EMA is the raw weights, as the authors evaluate
    assert all(torch.equal(a['ema'][name], tensor) for name, tensor in a['model'].items())
    model, _ = load_checkpoint(workdir / sigma_ckpt / 'ckpt.pt')
    assert model.lm_head.weight is model.transformer.wte.weight


@pytest.mark.parametrize('args,length,prefix,suffix', [
    (['--order=l2r', '--start=ROMEO:'], 32, 'ROMEO:', ''),
    (['--order=random', '--steps=8'], 32, '', ''),
    (['--order=confidence', '--steps=4', '--infill=ROMEO:[MASK:10].'], 19, 'ROMEO:«', '».'),  # the span marked
])
def test_checkpoint_samples(workdir, sigma_ckpt, args, length, prefix, suffix):
    out = run_script('sample.py', f'--out_dir={sigma_ckpt}', '--num_samples=2', '--device=cpu', *args, cwd=workdir)
    texts = samples(out.stdout)
    assert len(texts) == 2 and all(len(t) == length and t.startswith(prefix) and t.endswith(suffix)
                                   for t in texts), out.stdout


def test_checkpoint_evaluates(workdir, sigma_ckpt):
    out = run_script('eval_ppl.py', f'--out_dir={sigma_ckpt}', '--dataset=shakespeare_char', '--ensemble=2',
                     '--max_chunks=2', '--use_ema=False', '--device=cpu', '--dtype=float32', cwd=workdir)
    row = out.stdout.splitlines()[-1].split()
    assert row[:2] == ['shakespeare_char', '64']
    assert all(1 < float(v) < 65 for v in row[2:5]), out.stdout  # l2r, any-order, ensemble=2
