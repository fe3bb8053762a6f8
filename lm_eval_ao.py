"""
The lm-evaluation-harness on a checkpoint of this repo: the harness's own command line (`lm-eval run`),
with the model of aogpt/harness.py registered as ao-gpt and chosen unless --model says otherwise.

    python lm_eval_ao.py --tasks lambada_openai --model_args checkpoint=out/ckpt.pt
    python lm_eval_ao.py --tasks lambada_openai,wikitext --model_args checkpoint=out/ckpt.pt,ensemble=8 \\
        --output_path results
    python lm_eval_ao.py --tasks lambada_openai_local,wikitext_local --include_path tasks --limit 100 \\
        --model_args checkpoint=out-shakespeare-char/ckpt.pt     # offline: the local copies in AOGPT_DATA_DIR
    python lm_eval_ao.py --tasks wikitext_local --include_path tasks --model_args checkpoint=out-mdm/ckpt.pt,score=nelbo
    python lm_eval_ao.py ls tasks --include_path tasks                      # the harness's other commands pass through

Every flag is the harness's (--help lists them); the model_args are aogpt/harness.py's (its docstring).
Defaults that differ from the harness's: --model ao-gpt, --device this machine's (cuda if there
is one, else cpu; the harness's is cuda:0), --batch_size auto (requests per forward as many as
the model_arg max_tokens allows; the harness's is 1). Needs lm-eval (pip install "lm-eval>=0.4.9,<0.5").
"""
import importlib.util
import os
import sys

from aogpt.common import default_device
from configurator import fail

ROOT = os.path.dirname(os.path.abspath(__file__))

SUBCOMMANDS = ('run', 'ls', 'validate')


def given(argv, *flags):
    """Whether argv sets one of flags (as --flag value or --flag=value)."""
    return any(arg in flags or arg.split('=')[0] in flags for arg in argv)


def with_defaults(argv):
    """argv with this script's defaults added to an evaluation run (see the docstring)."""
    if argv[:1] and argv[0] in SUBCOMMANDS[1:]:
        return argv
    defaults = [(('--model', '-M'), 'ao-gpt'), (('--device',), default_device()), (('--batch_size', '-b'), 'auto')]
    return argv + [arg for flags, value in defaults if not given(argv, *flags) for arg in (flags[0], value)]


def value(argv, flag):
    """The text argv gives flag (--flag value or --flag=value), or None."""
    for i, arg in enumerate(argv):
        if arg.startswith(flag + '='):
            return arg[len(flag) + 1:]
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
    return None


def check_run(argv):
    """The mistakes the harness would report only after loading the model, or in a traceback, as one line."""
    limit = value(argv, '--limit')
    try:
        empty = limit is not None and float(limit) <= 0
    except ValueError:
        empty = False  # the harness's own parser names it
    if empty:
        fail(f'--limit {limit} leaves no documents: give a count >= 1, or a fraction in (0, 1)')
    local = [arg for arg in ' '.join(argv).replace('=', ' ').replace(',', ' ').split() if arg.endswith('_local')]
    if local:
        spec = importlib.util.spec_from_file_location('task_utils', os.path.join(ROOT, 'tasks', 'utils.py'))
        tasks = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tasks)
        for task in set(local) & set(tasks.FILES):
            try:
                tasks.mirror_file(task)
            except FileNotFoundError as e:
                fail(e)


def main():
    try:
        import aogpt.harness  # noqa: F401 (registers ao-gpt)
        from lm_eval.__main__ import cli_evaluate
    except ImportError as e:
        fail(e)
    if given(sys.argv[1:], '--help', '-h'):
        print(__doc__)
    check_run(sys.argv[1:])
    sys.argv[1:] = with_defaults(sys.argv[1:])
    try:
        cli_evaluate()
    except ValueError as e:  # the harness raises its unknown task names; anything else keeps its traceback
        if not str(e).startswith('Tasks not found'):
            raise
        fail(f'{e}: `python lm_eval_ao.py ls tasks` lists the known ones; --include_path tasks adds this repo\'s '
             f'lambada_openai_local and wikitext_local')


if __name__ == '__main__':
    main()
