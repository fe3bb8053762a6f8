"""OpenAI's GPT-2 as this repo's decoder (train.py --init_from=gpt2 or a folder saved by transformers;
checkpoints.gpt2_checkpoint), exact against transformers' GPT2LMHeadModel for each shape option; a run started from
a checkpoint (GPT-2's or a GPT of ours) and what it records; the fine-tuning recipe's first iterations. The bad
starts are in test_inputs.py."""
import os
import time

import pytest
import torch

from aogpt.checkpoints import load_checkpoint
from conftest import GPT2_RUN as RUN, ROOT, metrics, run_here, run_script, save_gpt2, stored_checkpoint, train
from aogpt.experiments.orders import FIM_MIX

pytestmark = pytest.mark.usefixtures('one_thread')

SHAPES = {'gpt2': {},  # GPT-2's own: a tied head, 50257 ids, the tanh GELU
          'padded': dict(vocab_size=50304), 'exact_gelu': dict(activation_function='gelu'),
          'wider': dict(n_layer=3, n_head=4, n_embd=32, n_positions=48)}


@pytest.fixture(scope='module')
def gpt2_folders(tmp_path_factory, gpt2_folder):
    """{shape: a folder holding a small GPT-2 of that shape}: GPT-2's own is conftest's gpt2_folder."""
    return {name: gpt2_folder if name == 'gpt2' else save_gpt2(tmp_path_factory.mktemp(name), **shape)
            for name, shape in SHAPES.items()}


def convert(workdir, folder, out_dir, *args):
    run_here('train.py', *RUN, f'--init_from={folder}', '--max_iters=0', f'--out_dir={out_dir}',
             f'--block_size={gpt2_positions(folder) - 1}', *args, cwd=workdir)
    return workdir / out_dir / 'ckpt.pt'


def gpt2_positions(folder):
    from transformers import GPT2Config
    return GPT2Config.from_pretrained(folder).n_positions


@pytest.mark.parametrize('shape', SHAPES)
def test_converted_gpt2_reads_left_to_right_as_gpt2_after_endoftext(workdir, bpe_shakespeare, gpt2_folders, shape):
    """Our loader's model of train.py's converted checkpoint, read left to right, gives GPT-2's logits for
    '<|endoftext|>' + x at every slot: the start slot's are GPT-2's after <|endoftext|> alone."""
    from transformers import GPT2LMHeadModel
    folder = gpt2_folders[shape]
    model, checkpoint = load_checkpoint(convert(workdir, folder, f'out-gpt2-{shape}'))
    gpt2 = GPT2LMHeadModel.from_pretrained(folder).eval()
    T, V = model.config.block_size, gpt2.config.vocab_size
    assert T == gpt2.config.n_positions - 1 and model.config.vocab_size == V and checkpoint['vocab'] == 'gpt2'
    x = torch.randint(V, (3, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, _ = model(x, torch.arange(T).expand(3, T))
        theirs = gpt2(torch.cat([torch.full((3, 1), gpt2.config.bos_token_id), x], 1)).logits
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)
    assert (ours - theirs).abs().max() < 1e-4


def test_eval_ppl_scores_every_token_of_a_chunk_as_gpt2_after_endoftext(workdir, bpe_shakespeare, gpt2_folders,
                                                                        tmp_path):
    """eval_ppl.py's left-to-right column of the converted GPT-2: each chunk's every token (the first too) as GPT-2
    scores it after '<|endoftext|>' (its own row scores tokens 2..T with no <|endoftext|>: docs/evaluation.md)."""
    import json

    import numpy as np
    import torch.nn.functional as F
    from transformers import GPT2LMHeadModel
    folder = gpt2_folders['gpt2']
    convert(workdir, folder, 'out-gpt2-eval')
    out = tmp_path / 'eval.json'
    run_here('eval_ppl.py', '--out_dir=out-gpt2-eval', '--data_file=data/shakespeare/val.bin', '--max_chunks=3',
             '--device=cpu', f'--out_json={out}', cwd=workdir)
    nll = list(json.loads(out.read_text())['results'].values())[0]['chunk_nll']['l2r']
    T = gpt2_positions(folder) - 1
    chunks = torch.from_numpy(np.fromfile(workdir / 'data' / 'shakespeare' / 'val.bin', dtype=np.uint16)[:3 * T]
                              .astype(np.int64)).view(3, T)
    gpt2 = GPT2LMHeadModel.from_pretrained(folder).eval()
    with torch.no_grad():
        logits = gpt2(torch.cat([torch.full((3, 1), gpt2.config.bos_token_id), chunks], 1)).logits[:, :T]
    expected = F.cross_entropy(logits.flatten(0, 1), chunks.flatten(), reduction='none').view(3, T).mean(1)
    assert nll == pytest.approx(expected.tolist(), abs=1e-5)


@pytest.mark.needs('gpt2_bpe')  # sample.py decodes, export.py writes the tokenizer: GPT-2's BPE files
def test_a_run_from_gpt2_records_its_parent_and_every_script_reads_it(workdir, bpe_shakespeare, gpt2_folders):
    folder = gpt2_folders['gpt2']
    convert(workdir, folder, 'out-gpt2-run', '--max_iters=3', '--eval_interval=3', '--order_mix=l2r:0.5,fim:0.5')
    checkpoint = stored_checkpoint(workdir, 'out-gpt2-run')
    assert checkpoint['parent']['init_from'] == folder and 'GPT-2' in checkpoint['parent']['orders']
    assert metrics(workdir, 'out-gpt2-run')[0]['parent'] == folder
    run_here('sample.py', '--out_dir=out-gpt2-run', '--num_samples=1', '--max_new_tokens=4', '--order=l2r',
             '--device=cpu', cwd=workdir)
    run_here('export.py', '--out_dir=out-gpt2-run', '--out=gpt2-run-folder', cwd=workdir)
    card = (workdir / 'gpt2-run-folder' / 'README.md').read_text()
    assert f'Started from `{folder}`' in card


def test_a_run_from_a_gpt_starts_at_its_left_to_right_loss_and_records_it(workdir):
    """The child's evaluation at iteration 0 reads the parent's EMA weights on the same batches: the parent's last
    left-to-right loss. It trains in stages, and its checkpoint, metrics and card name the parent."""
    train(workdir, 'out-parent-gpt', '--order=l2r', '--max_iters=20', '--eval_interval=20', '--learning_rate=3e-3')
    stages = 'l2r:0.5,fim:0.5@0/l2r:0.1,fim:0.4,random:0.5@50%'
    train(workdir, 'out-child', '--init_from=out-parent-gpt/ckpt.pt', f'--order_stages={stages}', '--max_iters=10',
          '--eval_interval=10')
    parent, child = metrics(workdir, 'out-parent-gpt'), metrics(workdir, 'out-child')
    assert child[0]['val_l2r'] == pytest.approx(parent[-1]['val_l2r'], abs=1e-6)
    assert child[0]['val_ao'] != pytest.approx(child[0]['val_l2r'], abs=1e-3)  # any order: a different reading
    assert child[0]['parent'] == 'out-parent-gpt/ckpt.pt' and 'parent' not in child[-1]
    record = stored_checkpoint(workdir, 'out-child')['parent']
    assert record == dict(init_from='out-parent-gpt/ckpt.pt', iterations=20, tokens=20 * 8 * 32, orders='l2r',
                          parent=None)
    run_here('export.py', '--out_dir=out-child', '--out=child-folder', cwd=workdir)
    card = (workdir / 'child-folder' / 'README.md').read_text()
    assert 'Started from `out-parent-gpt/ckpt.pt` (20 iterations' in card and 'in stages' in card


def test_the_finetuning_recipe_runs_its_first_iterations_from_gpt2(workdir, bpe_shakespeare, gpt2_folders):
    folder = gpt2_folders['gpt2']
    run_here('train.py', os.path.join(ROOT, 'config', 'finetune_shakespeare.py'), f'--init_from={folder}',
             '--out_dir=out-finetune', '--block_size=32', '--batch_size=2', '--eval_iters=1', '--max_iters=3',
             '--eval_interval=3', '--warmup_iters=1', '--device=cpu', '--dtype=float32', '--compile=False', cwd=workdir)
    records = metrics(workdir, 'out-finetune')
    assert [r['iter'] for r in records] == [0, 3] and records[0]['parent'] == folder
    assert all(key in records[-1] for key in ('val_gap_span4', 'val_gap_span16_left'))
    assert stored_checkpoint(workdir, 'out-finetune')['config']['order_mix'] == FIM_MIX


def test_a_conversion_at_the_defaults_takes_the_parents_block_and_writes_at_once(workdir, bpe_shakespeare, tiny_gpt2):
    """--init_from=<a GPT-2 folder> --max_iters=0 with none of the block's or the evaluation's settings, as a nanoGPT
    user types it: the run takes the parent's block (1,023: GPT-2's 1,024 positions less the start slot), says so,
    and writes the converted weights without evaluating them (at the defaults 200 batches of 16 x 1,023 tokens
    through the 50,257-id head, hours on 2 cores), in seconds."""
    start = time.time()
    out = run_script('train.py', f'--init_from={tiny_gpt2}', '--max_iters=0', '--dataset=shakespeare',
                     '--out_dir=out-gpt2-defaults', '--device=cpu', '--compile=False', cwd=workdir).stdout
    seconds = time.time() - start
    assert f'block_size = 1023, the block of {tiny_gpt2}' in out and 'not evaluated' in out
    assert 'EMA loss' not in out and 'of training' not in out  # nothing evaluated, nothing trained
    checkpoint = stored_checkpoint(workdir, 'out-gpt2-defaults')
    assert checkpoint['config']['block_size'] == 1023 and checkpoint['iter_num'] == 0
    assert seconds < 60, seconds
