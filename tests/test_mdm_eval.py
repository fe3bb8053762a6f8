"""eval_ppl.py on an encoder (MDM) checkpoint: the NELBO estimator against the exact NELBO by subset
enumeration, its stratified levels, the exact left-to-right log-probs against one forward per cut,
batching."""
import math

import pytest
import torch

from conftest import N_EXACT as N, VOCAB_EXACT as V, exact_l2r, exact_nelbo, nll_given, tiny_mdm
from scoring import encoder_l2r_logprobs, nelbo_estimates, nelbo_masks

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture(scope='module')
def model():
    return tiny_mdm()


def random_chunks(n_chunks, seed):
    return torch.randint(V, (n_chunks, N), generator=torch.Generator().manual_seed(seed))


def test_nelbo_estimates_are_unbiased(model):
    x = torch.tensor([3, 0, 4, 4, 1])
    estimates = nelbo_estimates(model, x.expand(4096, N), 16, max_tokens=10**7, seed=1)  # copies, each its own masks
    mean, error = estimates.mean().item(), estimates.std().item() / math.sqrt(len(estimates))
    assert abs(mean - exact_nelbo(model, x)) < 4 * error
    # the check has power; the bound is loose because the estimate's tail is heavy (a level near 0 weighs its few
    # masked tokens by 1/t), so the sample s.e. varies from seed to seed (0.5% to 1% here)
    assert error < 0.02 * mean


def test_levels_are_one_per_stratum():
    generator = torch.Generator().manual_seed(0)
    for K in (1, 3, 16):
        mask, t = nelbo_masks(4000, K, generator)
        assert torch.equal(torch.ceil(t * K), torch.arange(1.0, K + 1, dtype=torch.float64))  # t_k in (k/K, (k+1)/K]
        assert (mask.double().mean(1) - t).abs().max() < 4 * math.sqrt(0.25 / 4000)  # each position masked w.p. t_k
    levels = torch.cat([nelbo_masks(1, 4, generator)[1] for _ in range(2000)]).sort().values
    assert (levels - torch.linspace(0, 1, len(levels), dtype=torch.float64)).abs().max() < 0.02  # uniform over (0, 1]


def test_encoder_l2r_is_one_forward_per_cut(model):
    chunks = random_chunks(3, seed=0)
    logprobs = encoder_l2r_logprobs(model, chunks, max_tokens=1).view(3, N)
    for x, row in zip(chunks, logprobs):
        expected = torch.stack([-nll_given(model, x, set(range(i)))[i] for i in range(N)])  # position 0 from nothing
        torch.testing.assert_close(row.double(), expected, rtol=1e-5, atol=0)
        assert -row.double().mean().item() == pytest.approx(exact_l2r(model, x), rel=1e-5)


@pytest.mark.parametrize('max_tokens', [1, 700])  # one row per forward; 2 NELBO and 10 l2r rows, across chunks
def test_batching_does_not_change_the_numbers(model, max_tokens):
    chunks = random_chunks(7, seed=1)
    nelbo = nelbo_estimates(model, chunks, 5, max_tokens, seed=3)
    torch.testing.assert_close(nelbo, nelbo_estimates(model, chunks, 5, 10**6, seed=3))
    assert not torch.allclose(nelbo, nelbo_estimates(model, chunks, 5, max_tokens, seed=4))  # the draws matter
    l2r = encoder_l2r_logprobs(model, chunks, max_tokens)
    torch.testing.assert_close(l2r, encoder_l2r_logprobs(model, chunks, 10**6))

