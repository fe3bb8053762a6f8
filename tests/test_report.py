"""aogpt/report.py's figures as they are written: what their axes read."""
import pytest

from aogpt.report import line_figure


@pytest.mark.parametrize('a,b,labels', [([0.003, 0.01], [0.001, 0.003], ['0.001', '0.003', '0.01']),  # learning rates
                                        ([64, 256, 1024], [256], ['64', '256', '1024'])])  # block sizes
def test_a_log_x_axis_reads_the_values_plotted(tmp_path, a, b, labels):
    fig = line_figure(tmp_path / 'sweep.png', 'sweep', 'x', 'loss',
                      [('a', a, [[3.0]] * len(a)), ('b', b, [[2.5, 2.7]] * len(b))], logx=True)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == labels  # every series' x, once, in order
    assert len(ax.get_xticklabels(minor=True)) == 0  # and no unlabeled (or 2^n) ticks between them
