"""Data-constrained training (train.py): a prefix of train.bin, the best checkpoint chosen on half of val.bin, input
masking for a GPT."""
import json
import os
import pickle

import numpy as np
import pytest
import torch

from configurator import read_config_file
from conftest import ROOT, metrics, run_here, run_script, stored_checkpoint, tiny_model, train
from aogpt.training import training_inputs

SHORT = ['--weight_decay=0', '--max_iters=10', '--lr_decay_iters=10', '--eval_interval=10']
PREFIX = 2000


@pytest.fixture(scope='module')
def prefixed(workdir):
    """data/prefixed: the play's first PREFIX tokens with its last character id replaced, then that id alone: a
    token that only a window past the prefix holds. Returns (the dataset, that id)."""
    source, folder = workdir / 'data' / 'shakespeare_char', workdir / 'data' / 'prefixed'
    folder.mkdir(exist_ok=True)
    with open(source / 'meta.pkl', 'rb') as f:
        last = pickle.load(f)['vocab_size'] - 1
    ids = np.fromfile(source / 'train.bin', dtype=np.uint16)[:PREFIX]
    np.concatenate([np.where(ids == last, 0, ids), np.full(20 * PREFIX, last)]).astype(np.uint16).tofile(
        folder / 'train.bin')
    for name in ('val.bin', 'meta.pkl'):
        (folder / name).write_bytes((source / name).read_bytes())
    return 'prefixed', last


@pytest.mark.parametrize('seed', [1337, 7])
def test_every_training_window_lies_in_the_prefix(workdir, prefixed, seed):
    """Without weight decay, Adam leaves the embedding of a token no input held exactly where it started: with
    --train_tokens the token past the prefix keeps its starting row, for every seed; without, it moves."""
    dataset, outside = prefixed
    start = f'out-prefix-start-{seed}'
    train(workdir, start, f'--dataset={dataset}', f'--seed={seed}', '--max_iters=0')
    train(workdir, f'out-prefix-{seed}', f'--dataset={dataset}', f'--seed={seed}', f'--train_tokens={PREFIX}', *SHORT)
    row = lambda run: stored_checkpoint(workdir, run)['model']['transformer.wte.weight'][outside]
    assert torch.equal(row(f'out-prefix-{seed}'), row(start))
    if seed == 1337:  # the control: the whole split holds the token, and its row moves
        train(workdir, 'out-prefix-all', f'--dataset={dataset}', *SHORT)
        assert not torch.equal(row('out-prefix-all'), row(start))


def test_epochs_count_the_prefix(workdir):
    train(workdir, 'out-epochs', '--train_tokens=1024', *SHORT)  # 10 iterations of 8 x 32 tokens
    assert [r['epochs'] for r in metrics(workdir, 'out-epochs')] == [0, 2.5]
    assert stored_checkpoint(workdir, 'out-epochs')['config']['train_tokens'] == 1024
    run_here('export.py', '--out_dir=out-epochs', '--out=epochs-folder', cwd=workdir)
    card = (workdir / 'epochs-folder' / 'README.md').read_text()
    assert 'on shakespeare_char (its first 1,024 tokens only, 2.5 epochs)' in card


OVERFIT = ['--train_tokens=40', '--learning_rate=1e-2', '--max_iters=30', '--lr_decay_iters=30', '--eval_interval=5',
           '--keep_best=l2r']  # a few windows of one line, learnt by heart: the val loss falls, then rises


def test_the_best_checkpoint_is_the_run_at_its_best_evaluation(workdir):
    """best.pt is the checkpoint a run stopped at the evaluation with the lowest selection reading writes."""
    train(workdir, 'out-best', *OVERFIT)
    records = metrics(workdir, 'out-best')
    lowest = min(records, key=lambda r: r['select_l2r'])
    assert 0 < lowest['iter'] < 30  # the curve turned: the last evaluation is not the best
    assert all('select_l2r' in r and 'val_l2r' in r for r in records)
    best = torch.load(workdir / 'out-best' / 'best.pt', weights_only=True)
    assert best['iter_num'] == lowest['iter'] and best['best'] == dict(iter=lowest['iter'], loss=lowest['select_l2r'])
    train(workdir, 'out-best-stopped', *OVERFIT, f"--max_iters={lowest['iter']}")
    stopped = stored_checkpoint(workdir, 'out-best-stopped')
    for part in ('model', 'ema'):
        for name, tensor in stopped[part].items():
            assert torch.equal(tensor, best[part][name]), f'{part} {name}'


def test_a_weighted_best_is_kept_at_the_lowest_weighted_reading(workdir):
    """--keep_best=l2r:0.3,ao:0.7 (an AO-GPT mix's own objective) keeps best.pt at the evaluation whose weighted sum of
    the selection readings is the lowest, and records that sum."""
    train(workdir, 'out-best-weighted', *OVERFIT[:-1], '--keep_best=l2r:0.3,ao:0.7', '--max_iters=15')
    weighted = {r['iter']: 0.3 * r['select_l2r'] + 0.7 * r['select_ao'] for r in metrics(workdir, 'out-best-weighted')}
    lowest = min(weighted, key=weighted.get)
    best = torch.load(workdir / 'out-best-weighted' / 'best.pt', weights_only=True)
    assert best['iter_num'] == lowest and best['best'] == dict(iter=lowest, loss=pytest.approx(weighted[lowest]))


def test_a_resumed_prefix_run_is_the_uninterrupted_one(workdir):
    """The prefix, the best so far and the hidden inputs go on exactly over a resume: the same weights, metrics and
    best.pt."""
    flags = [*OVERFIT, '--input_mask=0.2', '--dropout=0.1']
    train(workdir, 'out-scarce-straight', *flags)
    train(workdir, 'out-scarce-halves', *flags, '--max_iters=15')
    train(workdir, 'out-scarce-halves', *flags, '--init_from=resume')
    a, b = (stored_checkpoint(workdir, run) for run in ('out-scarce-straight', 'out-scarce-halves'))
    for part in ('model', 'ema'):
        for name, tensor in a[part].items():
            assert torch.equal(tensor, b[part][name]), f'{part} {name}'
    losses = lambda run: [{k: v for k, v in r.items() if k not in ('elapsed', 'tokens_per_sec')}
                          for r in metrics(workdir, run)]
    assert losses('out-scarce-straight') == losses('out-scarce-halves')
    best = [torch.load(workdir / run / 'best.pt', weights_only=True) for run in ('out-scarce-straight',
                                                                                  'out-scarce-halves')]
    assert best[0]['best'] == best[1]['best'] and torch.equal(best[0]['ema']['lm_head.weight'],
                                                              best[1]['ema']['lm_head.weight'])


def test_input_masking_hides_its_share_of_tokens_anywhere():
    """training_inputs hides each input token with probability --input_mask: the share over 64 x 512 tokens, and in
    each quarter of the positions, within 4.5 standard errors."""
    model = tiny_model()
    x = torch.zeros(64, 512, dtype=torch.long)
    for share in (0.1, 0.3):
        _, orders, hidden = training_inputs(model, x, 'l2r', torch.Generator().manual_seed(0), hide=share)
        assert torch.equal(orders, torch.arange(512).expand(64, 512))  # the orders are drawn as without masking
        for part in [hidden, *hidden.chunk(4, dim=1)]:
            error = (share * (1 - share) / part.numel()) ** 0.5
            assert abs(part.float().mean().item() - share) < 4.5 * error, (share, part.float().mean().item())
    assert len(training_inputs(model, x, 'l2r')) == 2  # no masking: nothing drawn, the batches of every other run


@pytest.mark.parametrize('kind', [{}, dict(position_encoding='rotary'), dict(target_injection='add'),
                                  dict(target_injection='two_stream', position_encoding='rotary')],
                         ids=['ao-gpt', 'rotary', 'sigma-gpt', 'two-stream'])
def test_a_hidden_input_reads_as_the_start_token_and_keeps_its_target(kind):
    """With wnonee set to token 3's embedding, hiding inputs is reading token 3 there: the logits of x with hidden
    inputs are those of x with 3 in their place (the logits read only inputs), and the loss scores x itself; for
    every decoder."""
    model = tiny_model(**kind)
    T = model.config.block_size
    x = torch.randint(0, 11, (4, T), generator=torch.Generator().manual_seed(1))
    order = torch.stack([torch.randperm(T, generator=torch.Generator().manual_seed(i)) for i in range(4)])
    hidden = torch.rand(4, T, generator=torch.Generator().manual_seed(2)) < 0.3
    with torch.no_grad():
        model.transformer.wnonee.weight[0] = model.transformer.wte.weight[3]
        logits, loss = model(x, order, hidden, reduction='none')
        replaced, _ = model(torch.where(hidden, 3, x), order)
        plain, _ = model(x, order)
    torch.testing.assert_close(logits, replaced, rtol=0, atol=1e-6)
    assert (logits - plain).abs().max() > 1e-3  # the hidden inputs matter
    expected = torch.nn.functional.cross_entropy(logits[:, :T].transpose(1, 2), x.gather(1, order), reduction='none')
    torch.testing.assert_close(loss, expected)


def test_the_little_data_config_trains_what_finding_scarce_trained(workdir):
    """config/train_shakespeare_char_scarce.py, as train.py reads it, holds every flag of the finding's FIM-mix run on
    the 50k prefix (its args.json, in the repo: the first protocol's run, until the rerun), seed and reporting aside."""
    config = os.path.join(ROOT, 'config', 'train_shakespeare_char_scarce.py')
    with open(os.path.join(ROOT, 'docs', 'findings-cpu-ours', 'runs-scarce-v1', 'scarce-fim-mix-50k-s1',
                           'args.json')) as f:
        run = {k: v for k, v in json.load(f).items() if k not in ('config', 'seed', 'log_interval', 'eval_gaps')}
    run_script('train.py', config, '--max_iters=0', '--out_dir=out-scarce-config', cwd=workdir)  # its weights only
    stored = stored_checkpoint(workdir, 'out-scarce-config')['config'] | dict(max_iters=read_config_file(config)[
        'max_iters'])
    assert {k: stored[k] for k in run} == pytest.approx(run)  # min_lr: 3e-3 / 10 in the finding
