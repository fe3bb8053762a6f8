"""python peak_rss.py OUT SCRIPT ARGS...: run the repo's SCRIPT with ARGS as __main__ and, as it exits, write its
process's peak RSS in MB into the file OUT (tests' peak_memory_run: a process forked with torch imported has no
rusage of its own for the test to read)."""
import atexit
import os
import runpy
import sys

out, sys.argv = os.path.abspath(sys.argv[1]), sys.argv[2:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # the script's folder, as python SCRIPT has it
from aogpt.common import peak_memory_mb  # noqa: E402 (from the script's folder)


def record():
    with open(out, 'w') as f:
        f.write(str(peak_memory_mb('cpu')))


atexit.register(record)
runpy.run_path(sys.argv[0], run_name='__main__')
