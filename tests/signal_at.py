"""
Run train.py with SIGTERM sent to itself at one point of its first evaluation's exit, for tests/test_train.py:

    python tests/signal_at.py K path/to/train.py --key=value ...

sends the signal at the K-th line (or return) that train.py runs from the evaluation's last step (gap_losses' line in
estimate_losses) on, up to the loop's check for a stop after it; K=0 sends none and prints how many such points
there are.
"""
import linecache
import os
import runpy
import signal
import sys

LAST_STEP = 'gaps = gap_losses('  # the evaluation's last line
CHECKED = 'a stop signal dropped the evaluation'  # on the loop's check after it

at, script = int(sys.argv[1]), os.path.abspath(sys.argv[2])
points = []  # the points passed since the last step, while it is the first evaluation's


def point(frame, event, arg):
    if event not in ('line', 'return') or points == ['done']:
        return point
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    if LAST_STEP in line and not points:
        points.append(line)
    elif points:
        points.append(line)
        if len(points) - 1 == at:
            os.kill(os.getpid(), signal.SIGTERM)
        if CHECKED in line and event == 'line':
            if at == 0:
                print(f'points: {len(points) - 1}')
            points[:] = ['done']
    return point


sys.argv = [script, *sys.argv[3:]]
sys.path.insert(0, os.path.dirname(script))
sys.settrace(lambda frame, event, arg: point if os.path.abspath(frame.f_code.co_filename) == script else None)
runpy.run_path(script, run_name='__main__')
