"""bench.py runs end to end at toy sizes and prints its tables (the figures themselves are the README's)."""
import os
import re
import shutil
import subprocess

import huggingface_hub
import pytest

from conftest import ROOT, one_line_error, run_here, run_script, says, synthetic_gpt2_ids


def test_arch_compares_the_architectures_and_target_settings(tmp_path, one_thread):
    out = run_script('bench.py', '--run=arch', '--n_layer=1', '--n_head=2', '--n_embd=16', '--cond_dim=8',
                     '--block_size=16', '--batch_size=2', '--vocab_size=50', '--train_steps=1', '--rounds=1',
                     '--sample_block_size=32', '--sample_steps=4,32', cwd=tmp_path).stdout
    lines = out.splitlines()
    for name in ('AO-GPT', 'sigma-GPT', 'encoder MDM', 'two streams', 'target in queries'):  # params, tok/s, ratio
        assert any(line.startswith(name + ' ') and line.endswith('x') for line in lines), name
    generation = lines[next(i for i, line in enumerate(lines) if line.startswith('steps')) + 1:]
    assert [row.split()[0] for row in generation] == ['4', '32'] and all(row.endswith('x') for row in generation)


@pytest.mark.slow  # every setting of the bench, each k timed
def test_speculate_compares_with_one_token_per_step(tmp_path, one_thread):
    out = run_script('bench.py', '--run=speculate', '--n_layer=1', '--n_head=2', '--n_embd=16', '--cond_dim=8',
                     '--batch_size=2', '--vocab_size=50', '--sample_block_size=32', '--sample_steps=4',
                     '--speculate_k=2,auto', '--speculate_tokens=24', '--rounds=1', cwd=tmp_path).stdout
    lines = out.splitlines()
    assert '24 tokens per sample' in out
    rows = [line.replace('auto (', 'auto(').split()
            for line in lines[next(i for i, line in enumerate(lines) if line.startswith('top_p')) + 1:]]
    auto = {('random', '1'): 'auto(8)', ('random', '2'): 'auto(4)', ('l2r', '1'): 'auto(0)', ('l2r', '2'): 'auto(0)'}
    assert [tuple(r[:4]) for r in rows] == [(p, o, b, k) for p in ('1.0', '0.9') for o in ('random', 'l2r')
                                            for b in '12' for k in ('2', auto[o, b])]
    for r in rows:  # speedup, forwards per token in the batch and alone, drafts kept (none tested at k=0), the
        # share of the time in the model's forwards, and the speedup were the rest free: at least the speedup
        assert r[5].endswith('x') and 0 < float(r[7]) <= float(r[6]) <= 1 and (r[8].endswith('%') or r[8] == '-')
        assert 0 < float(r[9][:-1]) <= 100 and float(r[10][:-1]) >= float(r[5][:-1])
        assert (r[3] == 'auto(0)') == (r[6] == '1.00' and r[8] == '-')


def test_the_checkpoint_is_named_as_every_script_names_it(workdir, char_ckpt, monkeypatch, capsys, one_thread):
    # a run folder: the ckpt.pt in it, as sample.py says, before any benchmark runs
    says(one_line_error('bench.py', '--run=train,speculate', f'--checkpoint={char_ckpt}', cwd=workdir),
         'is a folder without a config.json', f'{char_ckpt}/ckpt.pt')
    asked = []  # a Hub file, fetched (offline: the download answered by the local checkpoint)
    fetch = lambda repo, filename: asked.append((repo, filename)) or str(workdir / char_ckpt / 'ckpt.pt')
    monkeypatch.setattr(huggingface_hub, 'hf_hub_download', fetch)
    run_here('bench.py', '--run=speculate', '--checkpoint=hf:own/rep/ckpt.pt', '--speculate_random=False',
             '--speculate_k=2', '--speculate_top_p=1.0', '--batch_size=1', '--speculate_tokens=8', '--rounds=1',
             cwd=workdir)
    assert asked == [('own/rep', 'ckpt.pt')] and 'speculative decoding: hf:own/rep/ckpt.pt' in capsys.readouterr().out


def test_train_compares_learned_and_rotary_positions(tmp_path, one_thread):
    out = run_script('bench.py', '--run=train', '--n_layer=1', '--n_head=2', '--n_embd=16', '--cond_dim=8',
                     '--block_size=16', '--batch_size=2', '--vocab_size=50', '--train_steps=1', '--rounds=1',
                     cwd=tmp_path).stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line[:1].isalpha()}
    for positions in ('learned', 'rotary'):  # tok/s left to right and mixed, then the any-order overhead
        assert float(rows[positions][1].replace(',', '')) > 0 and rows[positions][3].endswith('%'), out
    assert 'rotary cost' in out, out


def rows_after_batch_header(out):
    """The split lines of a bench table after its header row, which starts with 'batch'."""
    lines = out.splitlines()
    return [line.split() for line in lines[next(i for i, line in enumerate(lines) if line.split()[:1] == ['batch']) + 1:]]


@pytest.mark.slow  # transformers in a fresh interpreter
def test_generate_compares_transformers_cache_with_none_and_with_the_folders_sampler(tmp_path, one_thread):
    out = run_script('bench.py', '--run=generate', '--n_layer=1', '--n_head=2', '--n_embd=16', '--cond_dim=8',
                     '--vocab_size=50', '--sample_block_size=16', '--sample_steps=4', '--generate_tokens=12',
                     '--batch_size=2', '--rounds=1', cwd=tmp_path).stdout
    rows = rows_after_batch_header(out)
    # each batch: the three timings, two ratios, and the same greedy tokens by all three
    assert [r[0] for r in rows] == ['1', '2'] and all(r[4].endswith('x') and r[6] == 'yes' for r in rows), out
    says(one_line_error('bench.py', '--run=generate', '--sample_block_size=16', '--sample_steps=4',
                        '--generate_tokens=15', cwd=tmp_path), 'generate_tokens must be an int from 1 to')


def test_infill_times_the_posterior_and_the_fim_gpt_side_by_side(tmp_path, one_thread):
    out = run_script('bench.py', '--run=infill', '--n_layer=1', '--n_head=2', '--n_embd=16', '--cond_dim=8',
                     '--vocab_size=20', '--sample_block_size=24', '--infill_cap=6', '--infill_context=3',
                     '--infill_batches=1,3', '--rounds=1', cwd=tmp_path).stdout
    rows = rows_after_batch_header(out)
    # each batch: the length chosen, AO-GPT's time, the posterior's, the FIM GPT's, both ratios
    assert [r[0] for r in rows] == ['1', '3'] and all(1 <= int(r[1]) <= 6 and r[5].endswith('x') for r in rows), out
    says(one_line_error('bench.py', '--run=infill', '--sample_block_size=24', '--infill_cap=20', cwd=tmp_path),
         'infill_cap must be an int from 1 to sample_block_size - 5')


@pytest.mark.slow  # torch.compile
def test_step_compares_eager_and_compiled(tmp_path, one_thread):
    out = run_script('bench.py', '--run=step', '--n_layer=1', '--n_head=2', '--n_embd=16', '--cond_dim=8',
                     '--vocab_size=50', '--sample_block_size=16', '--sample_steps=16', '--step_tokens=8',
                     '--step_batches=2', '--rounds=1', cwd=tmp_path).stdout
    lines = out.splitlines()
    rows = [line.split() for line in lines[next(i for i, line in enumerate(lines) if line.startswith('model')) + 1:]]
    # 'random model': eager and compiled ms a token, the speedup, the compile's first call (one batch size: each
    # compiles its graphs again, and auto's k for each is test_speculative.py's)
    assert [r[2] for r in rows] == ['2'] and all(r[5].endswith('x') and r[6].endswith('s') for r in rows), out
    # speculative decoding compiled at auto's k, 4 for a batch (50 tokens: a small vocabulary)
    assert [r[8] for r in rows] == ['(k=4)'] and all(r[9].endswith('x') for r in rows), out


@pytest.mark.slow  # torch.compile
def test_long_compares_eager_and_compiled_over_the_step_counts(tmp_path, one_thread):
    out = run_script('bench.py', '--run=long', '--n_layer=1', '--n_head=2', '--n_embd=16', '--cond_dim=8',
                     '--vocab_size=50', '--sample_block_size=16', '--sample_steps=16', '--rounds=1',
                     cwd=tmp_path).stdout
    lines = out.splitlines()
    rows = [line.split() for line in lines[next(i for i, line in enumerate(lines) if line.startswith('steps')) + 1:]]
    # the step count (one: each compiles its own graphs): eager and compiled seconds, and their ratio
    assert [r[0] for r in rows] == ['16'] and all(r[1].endswith('s') and r[3].endswith('x') for r in rows), out


@pytest.mark.slow
def test_gpu_check_dry_run(tmp_path, workdir):
    # the GPU check's every step, on the CPU at tiny sizes (SMALL=1), in a copy of the repo whose data are the
    # suite's synthetic play (characters: the char model, and the tax's arms in the dry run) and synthetic GPT-2 ids
    # (BPE): the report says each ended well
    root = tmp_path / 'repo'
    shutil.copytree(ROOT, root, ignore=shutil.ignore_patterns('.git', 'out*', 'tests', 'docs', '__pycache__', '*.bin',
                                                              'meta.pkl', 'input.txt', 'wandb'))
    shutil.copytree(workdir / 'data' / 'shakespeare_char', root / 'data' / 'shakespeare_char', dirs_exist_ok=True)
    for split in ('train', 'val'):
        synthetic_gpt2_ids(20000, 0).tofile(root / 'data' / 'shakespeare' / f'{split}.bin')
    # not the Python corpus's runs (python) nor the rotary training step (rotary): tax trains the Python corpus's
    # rotary config for each of its arms, and train runs torchrun with the config of the learned run;
    # nor the decoding steps (decode): half of this test's time in compiles, and test_step_compares_eager_and_compiled
    # runs that bench
    env = dict(os.environ, SMALL='1', OUT=str(tmp_path / 'out'),
               ONLY='env tax train char ensemble speculate generate arch')
    subprocess.run(['bash', 'tools/gpu_check.sh'], cwd=root, env=env, check=True, capture_output=True)
    report = (tmp_path / 'out' / 'report.md').read_text()
    verdicts = re.findall(r'^## (.*): (\S+)', report, flags=re.M)
    assert len(verdicts) == 10 and all(v == 'ok,' for _, v in verdicts), report
    for table in ('encoder / AO-GPT', 'ensemble=8', 'forwards/token', 'metrics.jsonl, fim-mix',
                  'ensemble=2', 'cached/sample()'):
        assert table in report, table
    assert sorted(os.listdir(tmp_path / 'out')) == ['all.log', 'report.md'] + \
        [f'tax-{arm}-gaps.json' for arm in ('fim-mix', 'gpt', 'paper')]


@pytest.mark.parametrize('env, words', [(dict(ONLY='decode bogus'), ('ONLY=decode bogus', 'bogus is not a step')),
                                        (dict(BUDGET='abc'), ('BUDGET=abc', 'whole number'))])
def test_gpu_check_refuses_a_setting_it_cannot_read(tmp_path, env, words):
    result = subprocess.run(['bash', os.path.join(ROOT, 'tools', 'gpu_check.sh')], capture_output=True, text=True,
                            env=dict(os.environ, OUT=str(tmp_path / 'out'), **env))
    assert result.returncode == 1 and result.stderr.count('\n') == 1 and all(w in result.stderr for w in words)
    assert not (tmp_path / 'out').exists()  # refused before anything is written
