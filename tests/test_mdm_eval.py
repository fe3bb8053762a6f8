"""eval_ppl.py on an encoder (MDM) checkpoint: the NELBO estimator against the exact NELBO by subset
enumeration, its stratified levels, the exact left-to-right log-probs against one forward per cut,
batching, the CLI."""
import json
import math

import numpy as np
import pytest
import torch

from conftest import N_EXACT as N, VOCAB_EXACT as V, exact_l2r, exact_nelbo, nll_given, run_script, tiny_mdm
from aogpt.common import read_checkpoint
from aogpt.scoring import encoder_l2r_logprobs, nelbo_estimates, nelbo_masks

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
    assert error < 0.005 * mean  # the check has power


def test_mask_counts_are_one_per_stratum():
    generator = torch.Generator().manual_seed(0)
    for K in (1, 3, 16):
        mask, level = nelbo_masks(4000, K, generator)
        m = mask.sum(1)
        assert torch.equal(m / 4000, level)
        assert torch.equal((m - 1) * K // 4000, torch.arange(K))  # m_k - 1 in [4000 k / K, 4000 (k+1) / K)
    counts = torch.cat([nelbo_masks(10, 4, generator)[0].sum(1) for _ in range(3000)]).bincount(minlength=11)
    assert counts[0] == 0 and (counts[1:] / 12000 - 0.1).abs().max() < 0.01  # every count 1..10 equally often
    positions = torch.cat([nelbo_masks(10, 1, generator)[0] for _ in range(3000)])
    assert (positions.double().mean(0) - 0.55).abs().max() < 0.04  # any position, as often: E[m]/n = 0.55


def test_encoder_l2r_is_one_forward_per_cut(model):
    chunks = random_chunks(3, seed=0)
    logprobs = encoder_l2r_logprobs(model, chunks, max_tokens=1)[0].view(3, N)
    later, hits = encoder_l2r_logprobs(model, chunks, max_tokens=1, first=5)  # the same cuts, from position 5
    assert torch.equal(later.view(3, N - 5), logprobs[:, 5:]) and hits.shape == later.shape
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
    torch.testing.assert_close(l2r, encoder_l2r_logprobs(model, chunks, 10**6))  # both the log-probs and the hits


def eval_ppl(workdir, mdm_ckpt, *args):
    """eval_ppl.py on the first 3 chunks of the tiny encoder's val.bin: its stdout, the table's header and row
    (split into words), the JSON."""
    out = run_script('eval_ppl.py', f'--out_dir={mdm_ckpt}', '--max_chunks=3', '--device=cpu', '--out_json=mdm.json',
                     *args, cwd=workdir).stdout
    header, row = out.splitlines()[-3:-1]
    return out, header.split(), row.split(), json.load(open(workdir / 'mdm.json'))


def test_cli_encoder(workdir, mdm_ckpt):
    out, header, row, result = eval_ppl(workdir, mdm_ckpt, '--ensemble', '4')
    assert header == ['dataset', 'tokens', 'l2r', 'ppl', 'any-order', 'ppl', 'ensemble=2', 'ensemble=4', 'time']
    assert 'left-to-right exact in float32, 32 forwards per chunk' in out
    assert 'context-order ensembles do not apply' in out
    assert result['mc_samples'] == 32 and result['ensemble'] == 4
    ppl = result['results']['shakespeare_char']['ppl']
    assert set(ppl) == {'l2r', 'nelbo_bound', 'nelbo_bound_se'}
    assert row[:-1] == ['shakespeare_char', '96', f"{ppl['l2r']:.3f}", '<=', f"{ppl['nelbo_bound']:.3f}", '±',
                        f"{ppl['nelbo_bound_se']:.3f}", 'n/a', 'n/a']
    assert 1 < ppl['nelbo_bound'] < 65 and 0 < ppl['nelbo_bound_se'] < ppl['nelbo_bound']
    # the l2r perplexity, independently: one forward per cut of each chunk of val.bin (one document, cut in 32s)
    model, _ = read_checkpoint(workdir / mdm_ckpt / 'ckpt.pt')
    tokens = np.fromfile(workdir / 'data' / 'shakespeare_char' / 'val.bin', dtype=np.uint16)[:96]
    chunks = torch.from_numpy(tokens.astype(np.int64)).view(3, 32)
    with torch.no_grad():
        nll = [exact_l2r(model, x) for x in chunks]
    assert ppl['l2r'] == pytest.approx(math.exp(sum(nll) / 3), rel=1e-5)
    # per chunk: its l2r NLL, and its NELBO estimate, whose mean over the chunks makes the bound
    chunk_nll = result['results']['shakespeare_char']['chunk_nll']
    assert set(chunk_nll) == {'l2r', 'nelbo'} and chunk_nll['l2r'] == pytest.approx(nll, rel=1e-5)
    assert math.exp(sum(chunk_nll['nelbo']) / 3) == pytest.approx(ppl['nelbo_bound'], rel=1e-9)


@pytest.mark.filterwarnings('ignore:Mismatch dtype between input and weight')
def test_cli_encoder_without_l2r_nelbo_in_dtype(workdir, mdm_ckpt):
    _, _, _, fp32 = eval_ppl(workdir, mdm_ckpt, '--encoder_l2r=False')
    _, header, row, bf16 = eval_ppl(workdir, mdm_ckpt, '--encoder_l2r=False', '--dtype=bfloat16')
    assert header[-1] == 'time' and row[2:4] == ['-', '<=']  # no ensemble columns without --ensemble
    assert set(fp32['results']['shakespeare_char']['chunk_nll']) == {'nelbo'}
    fp32, bf16 = (r['results']['shakespeare_char']['ppl'] for r in (fp32, bf16))
    assert set(bf16) == {'nelbo_bound', 'nelbo_bound_se'}
    # --dtype: bf16 autocast rounds the NELBO passes, a little
    assert bf16['nelbo_bound'] != fp32['nelbo_bound']
    assert bf16['nelbo_bound'] == pytest.approx(fp32['nelbo_bound'], rel=0.01)


@pytest.mark.slow
def test_compiled_encoder_evaluation_matches_eager(workdir, mdm_ckpt):
    rows = [eval_ppl(workdir, mdm_ckpt, f'--compile={compile}')[3]['results']['shakespeare_char']['ppl']
            for compile in (True, False)]
    assert rows[0] == pytest.approx(rows[1], rel=1e-4)
