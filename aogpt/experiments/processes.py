"""
A script in a new process that starts with torch imported (run_python): `python script.py` spends 4 s of a slow
core importing torch (and torch._dynamo, which its optimizers import), more than a toy run takes. The findings'
jobs (jobs.py) and the tests run the scripts this way.
"""
import atexit
import multiprocessing
import multiprocessing.connection
import os
import runpy
import subprocess
import sys
import threading

import torch


def run_python(argv, cwd, env, out, err=None, timeout=None, pids=None):
    """Run `python *argv` (a script and its arguments) in cwd with env, printing into the file out (and err, or
    out); return its exit status, None if it ran past timeout seconds (then it is killed). The process is forked
    from a server that imported torch once, where the platform has one (not Windows). pids: a set (or what has
    add and discard) that holds the process's pid while it runs, for the caller to signal it."""
    pids = set() if pids is None else pids
    if 'forkserver' not in multiprocessing.get_all_start_methods():
        with open(out, 'w') as o, open(err or os.devnull, 'w') as e:
            process = subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, stdout=o,
                                       stderr=e if err else subprocess.STDOUT)
            pids.add(process.pid)
            try:
                return process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                return None
            finally:
                pids.discard(process.pid)
    process = start_python(argv, cwd, env, out, err)
    pids.add(process.pid)
    ended = multiprocessing.connection.wait([process.sentinel], timeout)
    with FORKING:
        pids.discard(process.pid)
        if not ended:
            process.kill()
            process.join()
        return process.exitcode if ended else None


def start_python(argv, cwd, env, out, err=None):
    """Start `python *argv` as run_python runs it, where the platform has a fork server: the multiprocessing Process
    (its pid to signal, its sentinel to wait on). With PYTHONUNBUFFERED set in env, each line is written as printed."""
    forks = multiprocessing.get_context('forkserver')
    forks.set_forkserver_preload(['torch', 'torch._dynamo'])
    process = forks.Process(target=exec_script, args=(list(argv), str(cwd), dict(env), out, err or out))
    with FORKING:
        process.start()
    return process


# a Process is not thread-safe (findings.py runs jobs from threads): start() reads the exit status of every other
# process that has ended, and two threads reading one status get it and EOF (exit status 255)
FORKING = threading.Lock()


def exec_script(argv, cwd, env, out, err):
    """In the new process: become `python *argv` in cwd with env, printing into out and err (the exit status is
    multiprocessing's: SystemExit's, or 1 after printing an exception)."""
    os.environ.clear()
    os.environ.update(env)
    if env.get('OMP_NUM_THREADS', '').isdecimal():  # torch read it when the server imported it
        torch.set_num_threads(int(env['OMP_NUM_THREADS']))
    os.chdir(cwd)
    os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
    os.dup2(1 if err == out else os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
    sys.stdout = open(1, 'w', buffering=1 if env.get('PYTHONUNBUFFERED') else -1, closefd=False)
    sys.stderr = open(2, 'w', buffering=1, closefd=False)
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    try:
        runpy.run_path(argv[0], run_name='__main__')
    finally:
        atexit._run_exitfuncs()  # multiprocessing ends its processes with os._exit, past atexit
