"""bench.py runs end to end at toy sizes and prints its tables (the figures themselves are the README's)."""
from conftest import run_script


def test_arch_compares_the_three_architectures(tmp_path, one_thread):
    out = run_script('bench.py', '--run=arch', '--n_layer=1', '--n_head=2', '--n_embd=16', '--cond_dim=8',
                     '--block_size=16', '--batch_size=2', '--vocab_size=50', '--train_steps=1', '--rounds=1',
                     '--sample_block_size=32', '--sample_steps=4,32', cwd=tmp_path).stdout
    lines = out.splitlines()
    for name in ('AO-GPT', 'sigma-GPT', 'encoder MDM'):  # params, tok/s and the ratio to AO-GPT
        assert any(line.startswith(name + ' ') and line.endswith('x') for line in lines), name
    generation = lines[next(i for i, line in enumerate(lines) if line.startswith('steps')) + 1:]
    assert [row.split()[0] for row in generation] == ['4', '32'] and all(row.endswith('x') for row in generation)


def test_speculate_compares_with_one_token_per_step(tmp_path, one_thread):
    out = run_script('bench.py', '--run=speculate', '--n_layer=1', '--n_head=2', '--n_embd=16', '--cond_dim=8',
                     '--batch_size=2', '--vocab_size=50', '--sample_block_size=32', '--sample_steps=4',
                     '--speculate_k=2,8', cwd=tmp_path).stdout
    lines = out.splitlines()
    rows = [line.split() for line in lines[next(i for i, line in enumerate(lines) if line.startswith('order')) + 1:]]
    assert [(r[0], r[1], r[2]) for r in rows] == [(o, b, k) for o in ('random', 'l2r') for b in '12' for k in '28']
    for r in rows:  # speedup, forwards per token in the batch and alone, drafts kept
        assert r[4].endswith('x') and 0 < float(r[6]) <= float(r[5]) <= 1 and r[7].endswith('%')


def test_train_compares_learned_and_rotary_positions(tmp_path, one_thread):
    out = run_script('bench.py', '--run=train', '--n_layer=1', '--n_head=2', '--n_embd=16', '--cond_dim=8',
                     '--block_size=16', '--batch_size=2', '--vocab_size=50', '--train_steps=1', '--rounds=1',
                     cwd=tmp_path).stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line[:1].isalpha()}
    for positions in ('learned', 'rotary'):  # tok/s left to right and mixed, then the any-order overhead
        assert float(rows[positions][1].replace(',', '')) > 0 and rows[positions][3].endswith('%'), out
    assert 'rotary cost' in out, out
