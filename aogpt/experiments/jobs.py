"""
The findings' jobs: training, then evaluations, each a process of one of the scripts (processes.run_python: train.py,
eval_ppl.py, gen_ppl.py), each run in its own folder out_dir/runs/<name>, run side by side by a pool of workers.

Resumable: a run whose metrics.jsonl reached max_iters is not trained again, one with a ckpt.pt short
of it resumes (--init_from=resume), an evaluation whose json exists is kept; a second call only
redraws. A run folder remembers its settings (args.json): other settings in the same folder stop
the script with one line (a folder moved or copied elsewhere is the same run).
"""
import contextlib
import json
import os
import signal
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace

from aogpt.common import read_jsonl, write_json
from aogpt.experiments.processes import run_python
from configurator import fail

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo: the scripts it runs


@dataclass
class Job:
    """One script run: its folder, its log, the json or metrics that say it is done, and for a
    training run the settings its folder records (args.json) when it starts."""
    name: str
    argv: list
    log: str
    done: bool
    settings: dict = None
    needs: tuple = ()  # the run folders whose checkpoint it reads


def read_metrics(folder):
    """A run's metrics.jsonl records, [] before its first evaluation."""
    path = os.path.join(folder, 'metrics.jsonl')
    return [r for _, r in read_jsonl(path, "one evaluation's losses")] if os.path.exists(path) else []


def read_json(path, fix='delete it and run again (its step is redone)'):
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        fail(f'{path} is not JSON ({e.msg}), cut by a kill perhaps: {fix}')


def train_job(name, p, flags, folder):
    """train.py for one run: done when its metrics reach max_iters, resumed when it left a checkpoint; a run whose
    flags name a parent run (init_from) starts from that run's checkpoint, once it is trained."""
    settings = dict(config=p['config'], **flags)
    check_same_run(folder, settings)
    records = read_metrics(folder)
    done = bool(records) and records[-1]['iter'] >= flags['max_iters']
    resume = os.path.exists(os.path.join(folder, 'ckpt.pt'))
    parent = os.path.join(os.path.dirname(folder), flags['init_from']) if 'init_from' in flags else None
    start = ['--init_from=resume'] if resume else [f"--init_from={os.path.join(parent, 'ckpt.pt')}"] if parent else []
    argv = [os.path.join(ROOT, 'train.py'), os.path.join(ROOT, p['config']),
            *(f'--{k}={os.path.join(ROOT, v) if k == "order_file" else v}' for k, v in flags.items() if k != 'init_from'),
            f'--out_dir={folder}', *start]
    return Job(f'train {name}' + (' (resume)' if resume and not done else ''), argv, os.path.join(folder, 'train.log'),
               done, settings, (parent,) if parent else ())


def with_checkpoints(jobs, earlier=()):
    """jobs, with the training of each finished run whose checkpoint a job still to run reads (needs) but which kept
    no ckpt.pt (a committed run folder keeps its records only: .gitignore) done again from the start: the same
    flags, so the same run, and that job finds its checkpoint. earlier: the training jobs of the calls before."""
    trained = {os.path.dirname(job.log): job for job in [*earlier, *jobs] if job.settings is not None}
    while True:
        gone = sorted({folder for job in jobs if not job.done for folder in job.needs if folder in trained and
                       trained[folder].done and not os.path.exists(os.path.join(folder, 'ckpt.pt'))})
        if not gone:
            return jobs
        again = [replace(trained[folder], name=f'{trained[folder].name} again (a job reads its checkpoint, which is '
                                                'gone)', done=False) for folder in gone]
        trained |= {os.path.dirname(job.log): job for job in again}
        jobs = again + [job for job in jobs if job.settings is None or os.path.dirname(job.log) not in gone]


def check_same_run(folder, settings):
    """A run folder holds one run: its args.json says which settings (not paths, so a moved folder is the
    same run); other settings there stop the script."""
    path = os.path.join(folder, 'args.json')
    fix = f'the settings of its run are unknown, so delete the run folder {folder} to train it again'
    if os.path.exists(path) and read_json(path, fix) != settings:
        fail(f'{folder} holds a run with other settings (see its args.json): use another --out_dir, or delete '
             f'that run folder to train it again')


def script_job(name, script, flags, out_json, needs=()):
    """An evaluation script with --out_json: done when that file exists; needs: the run folders whose checkpoint it
    reads."""
    return Job(name, [os.path.join(ROOT, script), *(f'--{k}={v}' for k, v in flags.items()), f'--out_json={out_json}'],
               out_json.replace('.json', '.log'), os.path.exists(out_json), needs=tuple(needs))


def gaps_job(p, name, folder, dataset=None):
    """eval_ppl.py --gaps at the preset's spans on one run (gaps.json), on the val text of its dataset (the
    preset's unless given)."""
    infill = p['infill']
    flags = dict(out_dir=folder, dataset=dataset or p['dataset'],
                 gaps=','.join(f'span:{L}' for L in infill['spans'])) | \
        {k: v for k, v in infill.items() if k != 'spans'}
    return script_job(f'gaps {name}', 'eval_ppl.py', flags, os.path.join(folder, 'gaps.json'), needs=[folder])


def unique(jobs):
    """The jobs, each output once: an evaluation two findings read (the same log) runs once, as the first listed."""
    first = {}
    for job in jobs:
        first.setdefault(job.log, job)
    return list(first.values())


PREEMPTED = 75  # EX_TEMPFAIL, as train.py's: stopped by a signal, what ran is saved; the same command goes on


class Stopped(Exception):
    """SIGTERM stopped the jobs: the running ones were passed it and have ended (a training run saves its
    checkpoint first and exits 75), none was started after it."""


class Running:
    """The pids of the jobs' processes while they run (processes.run_python adds and discards them), and the signal
    that stops them: each is passed it, one that starts after it too."""
    def __init__(self):
        self.pids, self.signal = set(), None

    def add(self, pid):
        self.pids.add(pid)
        if self.signal:
            os.kill(pid, self.signal)

    def discard(self, pid):
        self.pids.discard(pid)

    def stop(self, signum, frame):
        self.signal = signum
        for pid in list(self.pids):
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(pid, signum)


def run_jobs(jobs, n_workers, threads):
    """Run the jobs not done yet, n_workers at a time, the first ready one in the list next: a job is ready once
    the training jobs here of the run folders it needs have finished. Return how many ran; stop with one line
    naming the log of a failed one (after the running ones end). SIGTERM is passed to the running jobs, which
    end, and then raises Stopped."""
    # each log line written as printed: a run's train.log shows where it is
    env = os.environ | {'PYTHONUNBUFFERED': '1'} | ({'OMP_NUM_THREADS': str(threads)} if threads else {})
    live = Running()
    for job in jobs:
        if job.done:
            print(f'{job.name}: done, skipped')

    def launch(job):
        print(f'{job.name}: started')
        if job.settings is not None:
            os.makedirs(os.path.dirname(job.log), exist_ok=True)
            write_json(os.path.join(os.path.dirname(job.log), 'args.json'), job.settings)
        t0 = time.time()
        code = run_python(job.argv, os.getcwd(), env, job.log, pids=live)
        ended = 'finished' if code == 0 else 'stopped' if live.signal else f'failed ({code})'
        print(f'{job.name}: {ended} in {time.time() - t0:.0f}s')
        return code

    pending = [job for job in jobs if not job.done]
    training = {os.path.dirname(job.log): job for job in pending if job.settings is not None}
    finished, failed, running, n_ran = set(), [], {}, len(pending)
    ready = lambda job: all(training[f].name in finished for f in job.needs if f in training)
    previous = signal.signal(signal.SIGTERM, live.stop)
    try:
        with ThreadPoolExecutor(n_workers) as pool:
            while running or (pending and not failed and not live.signal):
                for job in [job for job in pending if ready(job)][:n_workers - len(running)] \
                        if not (failed or live.signal) else []:
                    pending.remove(job)
                    running[pool.submit(launch, job)] = job
                if not running:
                    fail(f'{pending[0].name} waits for a training job that is not planned (a bug)')
                for future in wait(running, return_when=FIRST_COMPLETED).done:
                    job = running.pop(future)
                    (finished.add(job.name) if future.result() == 0 else failed.append(job))
    finally:
        signal.signal(signal.SIGTERM, previous)
    if live.signal:
        raise Stopped
    if failed:
        fail(f'{failed[0].name} failed: {last_line(failed[0].log)} (the whole log: {failed[0].log})')
    return n_ran


def add_wall_minutes(runs_dir, minutes):
    """The wall minutes of every call that ran jobs, this one's added (kept in runs/wall_minutes.json), so a
    call that only redraws reports the time the results took, not its own few seconds."""
    path = os.path.join(runs_dir, 'wall_minutes.json')
    total = (read_json(path) if os.path.exists(path) else 0) + minutes
    write_json(path, round(total, 1))
    return round(total, 1)


def last_line(path):
    with open(path) as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[-1] if lines else 'no output'
