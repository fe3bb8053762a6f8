"""The encoder-only MDM against independent computations: the exact NELBO by enumerating every unmasked
subset, the any-order loss over every order (Remark 1), an explicit-loop forward, full attention."""
import math

import pytest
import torch

from conftest import N_EXACT as N, VOCAB_EXACT as V, exact_any_order, exact_l2r, exact_nelbo, nll_given, tiny_mdm
from model import GPTConfig, MDM
from training import l2r_cuts, sample_masks

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
    rms = lambda v, w: v / torch.sqrt((v * v).mean(-1, keepdim=True) + 1e-5) * w
    lin = lambda v, name: v @ p[name + '.weight'].T + p[name + '.bias']
    gelu = lambda v: 0.5 * v * (1 + torch.erf(v / math.sqrt(2)))
    h = torch.stack([p['transformer.wte.weight'][z[i]] + p['transformer.wpe.weight'][i] for i in range(T)])
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
            for i in range(T):  # every position sees every position
                w = torch.softmax(torch.stack([q[i] @ k[j] / math.sqrt(hs) for j in range(T)]), 0)
                out[i, head * hs:(head + 1) * hs] = sum(w[j] * v[j] for j in range(T))
        h = h + gate1 * lin(out, pre + 'attn.c_proj')
        m = rms(h, p[pre + 'ln_2.weight']) * (1 + scale2) + shift2
        h = h + gate2 * lin(gelu(lin(m, pre + 'mlp.c_fc')), pre + 'mlp.c_proj')
    shift, scale = lin(silu_c, 'transformer.final_layer.adaLN_final.1').chunk(2)
    return lin(rms(h, p['transformer.final_layer.ln_f.weight']) * (1 + scale) + shift, 'lm_head')


@torch.no_grad()
def test_forward_matches_slow_forward():
    model = tiny_mdm(block_size=8, vocab_size=7)
    z = torch.tensor([[7, 1, 2, 7, 7, 6, 0, 7], [3, 7, 7, 7, 7, 7, 7, 5]])  # 7 is [MASK]
    logits = model.forward_masked(z)
    assert logits.shape == (2, 8, 7)  # no output for [MASK]
    for b in range(2):
        torch.testing.assert_close(logits[b], slow_forward(model, z[b]), atol=1e-5, rtol=0)
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
