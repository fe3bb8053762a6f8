"""
The FIM GPT (Bavarian et al. 2022, "Efficient Training of Language Models to Fill in the Middle", arXiv 2207.14255):
a plain left-to-right GPT trained on windows rearranged so that a middle comes last, after sentinels that mark where
the prefix, the suffix and the middle begin, and followed by an end-of-middle token. It reads both sides of a gap and
ends the gap itself. Not AO-GPT's fim orders (training.fim_orders), which keep every token at its place and read a
span last.

A training row is a window of the data cut into pieces of 1 to block_size tokens; each piece, at the FIM rate, is
split at two uniform points into prefix, middle and suffix and written as PSM or, half the time, as the paper's SPM
variant; the pieces are joined and the row cut to the block. So the end token sits anywhere in a row, not always
last (a fixed place would teach where the row ends, not where the middle does).
"""
import torch

SENTINELS = ('prefix', 'suffix', 'middle', 'end')  # their ids follow the tokens', in this order
PROMPT_SENTINELS = len(SENTINELS) - 1  # a prompt holds all but the end token (fim_prompt), which follows the middle


def sentinel_ids(n_tokens):
    """{name: id} of the sentinels of a vocabulary of n_tokens tokens: the ids just past them (past GPT-2's 50,257,
    in its padded table's spare rows)."""
    return {name: n_tokens + i for i, name in enumerate(SENTINELS)}


def fim_vocab_size(n_tokens, table_size):
    """The embedding rows a FIM GPT needs: a padded table (GPT-2's 50,304) holds the sentinels already."""
    return max(table_size, n_tokens + len(SENTINELS))


def psm(prefix, middle, suffix, ids):
    """prefix, suffix, middle: the middle read last, after both sides."""
    return [ids['prefix'], *prefix, ids['suffix'], *suffix, ids['middle'], *middle, ids['end']]


def spm(prefix, middle, suffix, ids):
    """The paper's SPM variant: both sentinels first, then the suffix, and the prefix runs on into the middle."""
    return [ids['prefix'], ids['suffix'], *suffix, ids['middle'], *prefix, *middle, ids['end']]


def fim_prompt(prefix, suffix, ids):
    """What the FIM GPT reads before it writes a middle (PSM, as psm() lays out a training piece)."""
    return [ids['prefix'], *prefix, ids['suffix'], *suffix, ids['middle']]


def rearrange(piece, n_tokens, generator=None):
    """One piece as PSM or SPM (half each), split at two uniform points (0 to its length, either side inclusive)."""
    i, j = sorted(torch.randint(len(piece) + 1, (2,), generator=generator).tolist())
    layout = psm if torch.rand((), generator=generator) < 0.5 else spm
    return layout(piece[:i], piece[i:j], piece[j:], sentinel_ids(n_tokens))


def fim_row(window, rate, n_tokens, generator=None):
    """A training row from a window of T tokens (a list): pieces of 1 to T tokens, each rearranged at `rate`, joined
    and cut to T. Each piece is at least as long rearranged, so the window's T tokens fill the row."""
    T, row, start = len(window), [], 0
    while len(row) < T:
        piece = window[start:start + int(torch.randint(1, T + 1, (), generator=generator))]
        start += len(piece)
        row += rearrange(piece, n_tokens, generator) if torch.rand((), generator=generator) < rate else piece
    return row[:T]


def fim_batch(x, rate, n_tokens, generator=None):
    """The rows of x (B, T), each made a FIM GPT's training row (fim_row)."""
    return torch.tensor([fim_row(row, rate, n_tokens, generator) for row in x.tolist()], dtype=x.dtype)
