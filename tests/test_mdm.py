"""The encoder-only MDM against independent computations: the exact NELBO by enumerating every unmasked
subset, the any-order loss over every order (Remark 1), an explicit-loop forward, full attention; and its
rotary position encoding: the loop forward with 2x2 rotations, relative scores, state dicts, train.py (the
decoders' rotary positions: test_model.py)."""
import math

import pytest
import torch

import conftest
from conftest import (N_EXACT as N, VOCAB_EXACT as V, exact_any_order, exact_l2r, exact_nelbo, nll_given,
                      one_line_error, rotate, says, stored_checkpoint, tiny_mdm, train)
from model import MDM, GPTConfig, rotate as model_rotate
from aogpt.training import l2r_cuts, sample_masks

@pytest.fixture(scope='module')
def model():
    return tiny_mdm()


@torch.no_grad()
def test_nelbo_is_the_any_order_loss(model):
    # Remark 1, exactly: the subset enumeration and the average over every order agree
    for seed in range(3):
        x = torch.randint(V, (N,), generator=torch.Generator().manual_seed(seed))
        assert exact_nelbo(model, x) == pytest.approx(exact_any_order(model, x), rel=1e-9)


def mean_and_error(values):
    return values.mean().item(), values.std().item() / math.sqrt(len(values))


@torch.no_grad()
def test_training_loss_is_unbiased_for_the_exact_nelbo(model):
    x = torch.tensor([3, 0, 4, 4, 1])
    generator = torch.Generator().manual_seed(0)
    draws = []
    for _ in range(40):  # 40 batches of 512 rows, each one antithetic set of levels
        mask, weights = sample_masks(512, N, generator)
        _, terms = model(x.expand(512, N), mask, weights, reduction='none')
        draws.append(terms.double().mean(1))
    mean, error = mean_and_error(torch.cat(draws))
    assert abs(mean - exact_nelbo(model, x)) < 4 * error + 2e-3 * mean  # eps = 1e-3 cuts off [0, 1e-3)
    assert error < 0.01 * mean  # the check has power


@torch.no_grad()
def test_l2r_cuts_are_unbiased_for_the_l2r_loss(model):
    x = torch.tensor([3, 0, 4, 4, 1])
    mask, weights = l2r_cuts(20000, N, torch.Generator().manual_seed(0))
    _, terms = model(x.expand(20000, N), mask, weights, reduction='none')
    mean, error = mean_and_error(terms.double().mean(1))
    assert abs(mean - exact_l2r(model, x)) < 4 * error


def slow_forward(model, z):
    """MDM's logits for one row z, written out with explicit loops over heads and positions."""
    p, cfg = model.state_dict(), model.config
    T, C, nh = len(z), cfg.n_embd, cfg.n_head
    hs = C // nh
    rotary = cfg.position_encoding == 'rotary'  # no wpe: queries and keys turned by their position
    rms = lambda v, w: v / torch.sqrt((v * v).mean(-1, keepdim=True) + 1e-5) * w
    lin = lambda v, name: v @ p[name + '.weight'].T + p[name + '.bias']
    gelu = lambda v: 0.5 * v * (1 + torch.erf(v / math.sqrt(2)))
    h = torch.stack([p['transformer.wte.weight'][z[i]] + (0 if rotary else p['transformer.wpe.weight'][i])
                     for i in range(T)])
    cond = p['transformer.wcond.weight'][0]
    silu_c = cond * torch.sigmoid(cond)
    for layer in range(cfg.n_layer):
        pre = f'transformer.h.{layer}.'
        shift1, scale1, gate1, shift2, scale2, gate2 = lin(silu_c, pre + 'adaLN.1').chunk(6)
        qkv = lin(rms(h, p[pre + 'ln_1.weight']) * (1 + scale1) + shift1, pre + 'attn.c_attn')
        out = torch.zeros_like(h)
        for head in range(nh):
            q = rms(qkv[:, head * hs:(head + 1) * hs], p[pre + 'attn.q_norm.weight'])
            k = rms(qkv[:, C + head * hs:C + (head + 1) * hs], p[pre + 'attn.k_norm.weight'])
            v = qkv[:, 2 * C + head * hs:2 * C + (head + 1) * hs]
            if rotary:  # after the QK-norm
                q, k = (torch.stack([rotate(u[i], i) for i in range(T)]) for u in (q, k))
            for i in range(T):  # every position sees every position
                w = torch.softmax(torch.stack([q[i] @ k[j] / math.sqrt(hs) for j in range(T)]), 0)
                out[i, head * hs:(head + 1) * hs] = sum(w[j] * v[j] for j in range(T))
        h = h + gate1 * lin(out, pre + 'attn.c_proj')
        m = rms(h, p[pre + 'ln_2.weight']) * (1 + scale2) + shift2
        h = h + gate2 * lin(gelu(lin(m, pre + 'mlp.c_fc')), pre + 'mlp.c_proj')
    shift, scale = lin(silu_c, 'transformer.final_layer.adaLN_final.1').chunk(2)
    return lin(rms(h, p['transformer.final_layer.ln_f.weight']) * (1 + scale) + shift, 'lm_head')


@torch.no_grad()
@pytest.mark.parametrize('position_encoding', ['learned', 'rotary'])
def test_forward_matches_slow_forward(position_encoding):
    model = tiny_mdm(block_size=8, vocab_size=7, position_encoding=position_encoding)
    z = torch.tensor([[7, 1, 2, 7, 7, 6, 0, 7], [3, 7, 7, 7, 7, 7, 7, 5]])  # 7 is [MASK]
    logits = model.forward_masked(z)
    assert logits.shape == (2, 8, 7)  # no output for [MASK]
    for b in range(2):
        torch.testing.assert_close(logits[b], slow_forward(model, z[b]), atol=1e-5, rtol=0)
        torch.testing.assert_close(model.forward_masked(z[b:b + 1, :5])[0], slow_forward(model, z[b, :5]), atol=1e-5,
                                   rtol=0)  # shorter than block_size: positions 0..4
    positions = torch.tensor([[3, 0], [1, 7]])
    torch.testing.assert_close(model.forward_masked(z, positions), logits.gather(1, positions[..., None].expand(-1, -1, 7)))


@torch.no_grad()
def test_attention_is_full(model):
    z = torch.tensor([[1, model.mask_id, 2, model.mask_id, 0]])
    later = z.clone()
    later[0, 4] = 3  # a change at the last position reaches the first
    assert not torch.allclose(model.forward_masked(z)[0, 0], model.forward_masked(later)[0, 0])


def test_loss_counts_masked_positions_only(model):
    x = torch.tensor([[3, 0, 4, 4, 1]])
    mask = torch.tensor([[True, False, True, False, False]])
    _, terms = model(x, mask, torch.full((1, N), 2.0), reduction='none')
    expected = 2 * nll_given(model, x[0], {1, 3, 4})
    assert terms[0, [1, 3, 4]].eq(0).all()
    torch.testing.assert_close(terms[0, [0, 2]].double(), expected[[0, 2]], rtol=1e-5, atol=0)


def test_parameters_match_ao_gpt_but_the_target_embedding():
    from model import GPT
    args = dict(block_size=64, vocab_size=65, n_layer=4, n_head=4, n_embd=128, cond_dim=64)
    ao_gpt, mdm = GPT(GPTConfig(**args)), MDM(GPTConfig(**args, architecture='encoder'))
    # AO-GPT: the target-position table (64 x 64), the start token and its position (2 x 128);
    # the encoder: its one condition (64) and [MASK] (128)
    assert ao_gpt.get_num_params() - mdm.get_num_params() == 64 * 64 + 2 * 128 - 64 - 128


@torch.no_grad()
def test_rotary_scores_depend_only_on_relative_position():
    table = tiny_mdm(block_size=N + 3, position_encoding='rotary').rotary
    at = lambda u, positions: model_rotate(u, table(positions))
    p = torch.arange(N)[None]  # positions 0..N-1
    q, k = torch.randn(2, 1, 1, 1, 8).expand(-1, -1, -1, N, -1)  # one query and one key vector at every position
    scores = at(q, p) @ at(k, p).mT  # (1, 1, N, N)
    for offset in range(-N + 1, N):  # equal along each diagonal i - j, different across them
        diagonal = scores[0, 0].diagonal(offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal))
    assert scores[0, 0, 0].unique().numel() == N
    q, k = torch.randn(2, 1, 2, N, 8)  # shifted by 3 positions, or to -1.. (the start slot's), random queries
    for shift in (3, -1):  # and keys keep their scores
        torch.testing.assert_close(at(q, p + shift) @ at(k, p + shift).mT, at(q, p) @ at(k, p).mT)
    torch.testing.assert_close(at(q, p)[0, 0, 2], rotate(q[0, 0, 2], 2))  # the table is the 2x2 rotations'


@torch.no_grad()
def test_rotary_is_the_encoders_only_position():
    # permuting the tokens permutes the outputs of a model with no position at all, but not with RoPE
    model = tiny_mdm(position_encoding='rotary')
    z = torch.tensor([[1, model.mask_id, 2, model.mask_id, 0]])
    permutation = torch.tensor([3, 0, 4, 1, 2])
    assert not torch.allclose(model.forward_masked(z[:, permutation]), model.forward_masked(z)[:, permutation],
                              atol=1e-3)
    model.rotary.cos.fill_(1.0)  # every angle 0: no position
    model.rotary.sin.zero_()
    torch.testing.assert_close(model.forward_masked(z[:, permutation]), model.forward_masked(z)[:, permutation])


def test_state_dicts_and_old_checkpoints(tmp_path):
    from aogpt.checkpoints import load_checkpoint
    args = dict(block_size=N, vocab_size=V, n_layer=1, n_head=2, n_embd=16, cond_dim=8, architecture='encoder')
    learned, rotary = MDM(GPTConfig(**args)), MDM(GPTConfig(**args, position_encoding='rotary'))
    block = ['ln_1.weight', 'attn.c_attn.weight', 'attn.c_attn.bias', 'attn.c_proj.weight', 'attn.c_proj.bias',
             'attn.q_norm.weight', 'attn.k_norm.weight', 'ln_2.weight', 'mlp.c_fc.weight', 'mlp.c_fc.bias',
             'mlp.c_proj.weight', 'mlp.c_proj.bias', 'adaLN.1.weight', 'adaLN.1.bias']
    keys = ['transformer.wte.weight', 'transformer.wpe.weight', 'transformer.wcond.weight',
            *[f'transformer.h.0.{name}' for name in block], 'transformer.final_layer.ln_f.weight',
            'transformer.final_layer.adaLN_final.1.weight', 'transformer.final_layer.adaLN_final.1.bias',
            'lm_head.weight', 'lm_head.bias']
    assert list(learned.state_dict()) == keys  # as before the option: the cos/sin tables are not saved
    assert list(rotary.state_dict()) == [k for k in keys if k != 'transformer.wpe.weight']
    assert learned.get_num_params() - rotary.get_num_params() == N * 16
    # a checkpoint from before the option (no position_encoding in model_args) is a learned one
    model = tiny_mdm(n_layer=1)
    torch.save({'model': model.state_dict(), 'model_args': args}, tmp_path / 'old.pt')
    loaded, _ = load_checkpoint(tmp_path / 'old.pt')
    z = torch.tensor([[1, V, 2, V, 0]])
    assert loaded.config.position_encoding == 'learned'
    torch.testing.assert_close(loaded.forward_masked(z), model.forward_masked(z))
    model = tiny_mdm(n_layer=1, position_encoding='rotary')
    torch.save({'model': model.state_dict(), 'model_args': args | dict(position_encoding='rotary')}, tmp_path / 'r.pt')
    loaded, _ = load_checkpoint(tmp_path / 'r.pt')  # the tables are made again from the config
    torch.testing.assert_close(loaded.forward_masked(z), model.forward_masked(z))


@pytest.mark.parametrize('args,parts', [
    (dict(position_encoding='alibi'), ["('learned', 'rotary', 'rotary_plain', 'rotary_half_heads'", "'alibi'"]),
    (dict(position_encoding='rotary_plain'), ["'rotary_plain'", "for the decoders", "use 'rotary'"]),
    (dict(position_encoding='rotary_half_heads'), ["'rotary_half_heads'", "for the decoders", "use 'rotary'"]),
    (dict(position_encoding='rotary_half_heads', n_head=1, architecture='decoder'), ['n_head', '2 or more', 'got 1']),
    (dict(position_encoding='rotary_upper_layers', n_layer=1, architecture='decoder'), ['n_layer', '2 or more', 'got 1']),
    (dict(position_encoding='rotary_plain', n_embd=12, n_head=4, architecture='decoder'), ['head size', '(3)']),
    (dict(position_encoding='rotary', n_embd=12, n_head=4), ['head size', '(3)', 'even']),
])
def test_bad_position_encoding(args, parts):
    with pytest.raises(ValueError) as error:
        GPTConfig(**dict(architecture='encoder', n_embd=16, n_head=2) | args)
    says(str(error.value), *parts)


@pytest.mark.filterwarnings('ignore:Mismatch dtype between input and weight')  # RMSNorm's fp32 weight
def test_rotary_bf16_autocast():
    model = tiny_mdm(position_encoding='rotary')
    x = torch.tensor([[3, 0, 4, 4, 1]])
    mask = torch.tensor([[True, False, True, True, False]])
    with torch.no_grad():
        reference = model.forward_masked(torch.where(mask, model.mask_id, x))
    with torch.autocast('cpu', dtype=torch.bfloat16):
        logits, loss = model(x, mask, torch.full((1, N), 2.0))
    assert logits.dtype == torch.bfloat16
    torch.testing.assert_close(logits.float(), reference, atol=0.1, rtol=0.05)  # bf16 rounding, not another model
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_train_rotary_encoder_and_resume_exactly(workdir):
    def rope(out_dir, *args):
        return train(workdir, out_dir, '--architecture=encoder', '--position_encoding=rotary', '--eval_interval=4',
                     '--lr_decay_iters=8', '--learning_rate=3e-3', *args)
    rope('out-rope-straight', '--max_iters=8')
    rope('out-rope-halves', '--max_iters=4')
    rope('out-rope-halves', '--max_iters=8', '--init_from=resume')
    a, b = (stored_checkpoint(workdir, f'out-rope-{run}') for run in ('straight', 'halves'))
    assert a['iter_num'] == b['iter_num'] == 8 and a['model_args']['position_encoding'] == 'rotary'
    assert 'transformer.wpe.weight' not in a['model']
    for part in ('model', 'ema'):
        for name, tensor in a[part].items():
            assert torch.equal(tensor, b[part][name]), f'{part} {name}'
    says(one_line_error('train.py', '--dataset=shakespeare_char', *conftest.TINY, '--out_dir=out-rope-halves',
                        '--init_from=resume', '--position_encoding=learned', cwd=workdir),
         '--position_encoding=learned', "checkpoint's position_encoding=rotary", 'start a new out_dir')


@pytest.mark.parametrize('args,parts', [
    (['--architecture=encoder', '--position_encoding=rotary_plain'], ['rotary_plain', 'for the decoders']),
    (['--position_encoding=rotary', '--n_embd=30'], ['head size', '(15)', 'even']),  # a decoder
    (['--architecture=encoder', '--position_encoding=alibi'], ['--position_encoding', 'learned, rotary']),
    (['--architecture=encoder', '--position_encoding=rotary', '--n_embd=30'], ['head size', '(15)', 'even']),
])
def test_train_bad_position_encoding_is_one_line(workdir, args, parts):
    says(one_line_error('train.py', '--dataset=shakespeare_char', *conftest.TINY, '--out_dir=out-rope-bad', *args,
                        cwd=workdir), *parts)
