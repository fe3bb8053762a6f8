"""The FIM GPT (aogpt/fim.py, train.py --fim_rate): its training rows hold the window's tokens with each rearranged
piece's middle after its sides, the end token anywhere in a row, and a run records what it is."""
import torch

from aogpt.fim import SENTINELS, fim_batch, fim_prompt, fim_row, psm, sentinel_ids, spm
import conftest
from conftest import metrics, one_line_error, run_script, samples, says, stored_checkpoint

N = 10  # tokens 0..9; the sentinels are 10..13
PRE, SUF, MID, END = (sentinel_ids(N)[name] for name in SENTINELS)


def read_row(row):
    """An independent reading of a training row: [(layout, the piece's tokens in the data's order)], 'plain' for
    tokens outside a rearranged piece; the last piece may be cut by the row's end, and comes back as 'cut'."""
    pieces, i = [], 0
    while i < len(row):
        if row[i] != PRE:
            j = next((k for k in range(i, len(row)) if row[k] == PRE), len(row))
            pieces.append(('plain', row[i:j]))
            i = j
            continue
        if END not in row[i:]:
            return pieces + [('cut', row[i:])]
        end = row.index(END, i)
        body = row[i + 1:end]
        if body[0] == SUF:  # SPM: PRE SUF suffix MID prefix+middle END
            suffix, rest = body[1:body.index(MID)], body[body.index(MID) + 1:]
            pieces.append(('spm', rest + suffix))
        else:  # PSM: PRE prefix SUF suffix MID middle END
            prefix, suffix = body[:body.index(SUF)], body[body.index(SUF) + 1:body.index(MID)]
            pieces.append(('psm', prefix + body[body.index(MID) + 1:] + suffix))
        i = end + 1
    return pieces


def test_the_layouts_are_the_papers():
    ids = sentinel_ids(N)
    assert psm([1, 2], [3], [4, 5], ids) == [PRE, 1, 2, SUF, 4, 5, MID, 3, END]
    assert spm([1, 2], [3], [4, 5], ids) == [PRE, SUF, 4, 5, MID, 1, 2, 3, END]
    assert fim_prompt([1, 2], [4, 5], ids) == [PRE, 1, 2, SUF, 4, 5, MID]
    assert sentinel_ids(50257) == {'prefix': 50257, 'suffix': 50258, 'middle': 50259, 'end': 50260}


def test_a_row_holds_the_windows_tokens_in_order_and_is_the_window_at_rate_0():
    g = torch.Generator().manual_seed(0)
    layouts = []
    for _ in range(200):
        window = torch.randint(N, (48,), generator=g).tolist()
        assert fim_row(window, 0.0, N, g) == window
        row = fim_row(window, 0.5, N, g)
        assert len(row) == 48
        pieces = read_row(row)
        read = [t for layout, tokens in pieces if layout != 'cut' for t in tokens]
        assert read == window[:len(read)]  # the whole pieces give the window back, in order
        layouts += [layout for layout, _ in pieces]
    psm_share = layouts.count('psm') / (layouts.count('psm') + layouts.count('spm'))
    assert 0.35 < psm_share < 0.65, psm_share
    assert layouts.count('plain') > 50 and layouts.count('cut') > 20


def test_the_end_token_is_not_at_a_fixed_place():
    x = torch.randint(N, (256, 64), generator=torch.Generator().manual_seed(1))
    rows = fim_batch(x, 0.9, N, torch.Generator().manual_seed(2))
    ends = [i for row in rows.tolist() for i, t in enumerate(row) if t == END]
    assert len(set(ends)) > 40, sorted(set(ends))  # of 64 places
    assert ends.count(63) < 0.2 * len(ends)
    assert rows.dtype == x.dtype and rows.shape == x.shape and int(rows.max()) <= END


def test_a_fim_gpt_trains_records_its_rate_and_samples_no_sentinel(workdir, fim_ckpt):
    ckpt = stored_checkpoint(workdir, fim_ckpt)
    assert ckpt['config']['fim_rate'] == 0.5 and ckpt['model_args']['vocab_size'] == 65 + len(SENTINELS)
    assert metrics(workdir, fim_ckpt)[0]['fim_rate'] == 0.5
    plain = samples(run_script('sample.py', f'--out_dir={fim_ckpt}', '--num_samples=4', '--max_new_tokens=24',
                               '--device=cpu', cwd=workdir).stdout)  # a sentinel has no text: decoding it fails
    assert len(plain) == 4 and all(len(text) == 24 for text in plain)
    for gap, lengths in (('[MASK]', range(1, 9)), ('[MASK:5]', [5])):
        out = run_script('sample.py', f'--out_dir={fim_ckpt}', '--num_samples=6', f'--infill=ROMEO: {gap} lord',
                         '--gap_cap=8', '--device=cpu', cwd=workdir).stdout
        fills = samples(out)
        assert len(fills) == 6
        for fill in fills:
            header, text = fill.split('\n', 1)
            L = int(header.split()[2])
            assert L in lengths and text.startswith('ROMEO: «') and text.endswith('» lord') and len(text) == 14 + L
    says(one_line_error('train.py', '--dataset=shakespeare_char', *conftest.TINY, f'--out_dir={fim_ckpt}',
                        '--init_from=resume', '--order=l2r', '--fim_rate=0.9', '--max_iters=30', cwd=workdir),
         "--fim_rate=0.9 is not the run's (0.5")


def test_a_fim_gpts_readings_are_of_plain_windows(workdir, fim_ckpt):
    """The FIM rate sets what a FIM GPT trains on, not what its evaluations read: train's and val's readings of one
    checkpoint are the same at its rate and at 0 (rearranged train windows would also move val's, drawn after them
    from the same generator)."""
    def readings(rate):
        out = run_script('train.py', '--dataset=shakespeare_char', *conftest.TINY_RUN, '--order=l2r',
                         f'--fim_rate={rate}', '--eval_only=True', f'--init_from={fim_ckpt}/ckpt.pt',
                         '--out_dir=out-fim-readings', cwd=workdir).stdout
        return [line for line in out.splitlines() if 'EMA loss' in line]
    at_its_rate = readings(0.5)
    assert len(at_its_rate) == 1 and at_its_rate == readings(0.0)


def test_bad_fim_settings_end_in_one_line(workdir):
    says(one_line_error('train.py', '--dataset=shakespeare_char', '--fim_rate=0.5', cwd=workdir),
         '--order=l2r', '--order=mixed', 'drop --fim_rate')
    says(one_line_error('train.py', '--dataset=shakespeare_char', '--fim_rate=0.5', '--architecture=encoder',
                        cwd=workdir), '--architecture=encoder', 'FIM GPT')
    says(one_line_error('train.py', '--dataset=shakespeare_char', '--fim_rate=1.5', '--order=l2r', cwd=workdir),
         '--fim_rate', '[0, 1]')
