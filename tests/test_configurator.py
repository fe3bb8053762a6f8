"""Tests for configurator.configure: flags, config files, type checks, errors and --help."""
import subprocess
import sys
import textwrap

import pytest

from configurator import configure
from conftest import ROOT, says

DEFAULTS = dict(out_dir='out', learning_rate=6e-4, max_iters=5000, compile=True, init_from=None)


def run(*argv):
    """Configure a fresh copy of the defaults; return (namespace, changed keys)."""
    namespace = dict(DEFAULTS)
    changed = configure(namespace, list(DEFAULTS), argv=list(argv))
    return namespace, changed


def error_of(*argv):
    with pytest.raises(SystemExit) as exc:
        run(*argv)
    message = str(exc.value.code)
    assert message.startswith('error: ') and '\n' not in message, message
    return message


def write(tmp_path, name, source):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


def test_equals_and_space_forms():
    ns, _ = run('--max_iters=10', '--out_dir', 'runs/a')
    assert ns['max_iters'] == 10 and ns['out_dir'] == 'runs/a'


def test_no_arguments_changes_nothing():
    ns, changed = run()
    assert ns == DEFAULTS and changed == {}


@pytest.mark.parametrize('text, expected', [('False', False), ('true', True), ('0', False),
                                            ('YES', True), ('no', False)])
def test_bool_words(text, expected):
    assert run(f'--compile={text}')[0]['compile'] is expected


def test_bool_flag_alone_means_true():
    namespace = dict(DEFAULTS, compile=False)
    configure(namespace, list(DEFAULTS), argv=['--compile', '--max_iters=3'])
    assert namespace['compile'] is True and namespace['max_iters'] == 3
    configure(namespace, list(DEFAULTS), argv=['--compile=false', '--compile'])
    assert namespace['compile'] is True


def test_bad_bool_is_an_error():
    assert 'compile' in error_of('--compile=maybe')


def test_non_bool_flag_alone_needs_a_value():
    assert error_of('--max_iters') == 'error: --max_iters needs a value'
    assert error_of('--max_iters', '--compile') == 'error: --max_iters needs a value'


def test_values_follow_the_type_of_the_default():
    ns, _ = run('--out_dir=123', '--learning_rate=1', '--max_iters=2e3', '--init_from=[1, 2]')
    assert ns['out_dir'] == '123'
    assert ns['learning_rate'] == 1.0 and isinstance(ns['learning_rate'], float)
    assert ns['max_iters'] == 2000 and isinstance(ns['max_iters'], int)
    assert ns['init_from'] == [1, 2]
    assert run('--max_iters=1_000')[0]['max_iters'] == 1000
    assert run('--init_from=gpt2')[0]['init_from'] == 'gpt2'  # not a literal: kept as text


@pytest.mark.parametrize('arg, parts', [
    ('--max_iters=abc', ('--max_iters', 'an int', "'abc' is not a whole number")),
    ('--max_iters=2.5', ('--max_iters', 'an int', "'2.5' is not a whole number")),
    ('--learning_rate=fast', ('--learning_rate', 'a float', "'fast' is not a number")),
    ('--learning_rate=nan', ('--learning_rate', 'a finite float', "got 'nan'")),
    ('--learning_rate=-inf', ('--learning_rate', 'a finite float', "got '-inf'")),
])
def test_bad_numbers_are_errors(arg, parts):
    says(error_of(arg), *parts)


def test_unknown_key_suggests_the_closest():
    message = error_of('--lerning_rate=1e-3')
    assert "unknown config key 'lerning_rate'" in message
    assert "did you mean 'learning_rate'" in message
    assert '--help' in error_of('--zzz=1')


def test_errors_leave_the_namespace_untouched():
    namespace = dict(DEFAULTS)
    with pytest.raises(SystemExit):
        configure(namespace, list(DEFAULTS), argv=['--max_iters=7', '--nope=1'])
    assert namespace == DEFAULTS


def test_config_file_then_flag_wins(tmp_path):
    path = write(tmp_path, 'cfg.py', """
        import math
        max_iters = 100
        learning_rate = 1  # int is fine for a float setting
        out_dir = 'from_file'
        _private = 'ignored'

        def warmup(n):  # helpers and modules are ignored
            return math.ceil(n / 10)

        class Helper:
            pass

        compile = warmup(max_iters) > 5
    """)
    ns, changed = run(path, '--max_iters=7')
    assert ns['max_iters'] == 7 and ns['out_dir'] == 'from_file' and ns['compile'] is True
    assert ns['learning_rate'] == 1.0 and isinstance(ns['learning_rate'], float)
    assert run('--max_iters=7', path)[0]['max_iters'] == 100  # left to right: the file wins here
    assert changed == {'max_iters': 7, 'learning_rate': 1.0, 'out_dir': 'from_file', 'compile': True}
    assert changed.flags == {'max_iters'} and run('--max_iters=7', path)[1].flags == set()  # who set each last


def test_config_file_with_unknown_key_is_an_error(tmp_path):
    path = write(tmp_path, 'cfg.py', 'lerning_rate = 1e-3\n')
    message = error_of(path)
    assert "unknown config key 'lerning_rate'" in message and path in message
    assert "did you mean 'learning_rate'" in message


def test_config_file_with_wrong_type_is_an_error(tmp_path):
    assert 'max_iters' in error_of(write(tmp_path, 'a.py', 'max_iters = 2.5\n'))
    assert 'max_iters' in error_of(write(tmp_path, 'b.py', 'max_iters = True\n'))
    assert 'compile' in error_of(write(tmp_path, 'c.py', 'compile = 1\n'))


@pytest.mark.parametrize('source, message', [
    ('max_iters = (\n', 'line 1'),  # a syntax error names the line
    ('max_iters = 1 / 0\n', 'ZeroDivisionError: division by zero'),
    ('max_iters = [1, 2]\n', 'max_iters in'),  # a list under a setting's name is not silently dropped
    ('orders = [2, 0, 1]\n', 'orders in'),  # nor under another name
    ('table = {"a": 1}\n', 'table in'),
    ("learning_rate = float('nan')\n", 'learning_rate in'),
])
def test_broken_config_file_is_one_line(tmp_path, source, message):
    error = error_of(write(tmp_path, 'cfg.py', source))
    assert message in error and '\n' not in error


def test_check_settings():
    from aogpt.common import at_least, check_settings, one_of, optional_int
    rules = {'max_iters': at_least(1), 'out_dir': one_of('out', 'runs'), 'init_from': optional_int(2)}
    check_settings(dict(DEFAULTS), rules)
    check_settings(dict(DEFAULTS, init_from=3), rules)
    for bad, parts in [(dict(max_iters=0), ('--max_iters', 'at least 1', 'got 0')),
                       (dict(out_dir='x'), ('--out_dir', 'out, runs', "got 'x'")),
                       (dict(init_from='abc'), ('--init_from', 'None or an int >= 2', "got 'abc'")),
                       (dict(init_from=1), ('--init_from', 'None or an int >= 2', 'got 1'))]:
        with pytest.raises(SystemExit) as exc:
            check_settings(dict(DEFAULTS, **bad), rules)
        message = str(exc.value.code)
        assert message.startswith('error: ') and '\n' not in message, message
        says(message, *parts)


def test_only_rank_zero_speaks_under_torchrun(monkeypatch):
    from configurator import fail
    monkeypatch.setenv('RANK', '1')
    with pytest.raises(SystemExit) as exc:
        fail('bad')
    assert exc.value.code == 1  # the exit status, no second copy of the message


def test_config_file_helpers_are_ignored(tmp_path):
    path = write(tmp_path, 'cfg.py', 'import os\n_scratch = [1, 2]\ndef helper():\n    pass\nmax_iters = 3\n')
    assert run(path)[1] == {'max_iters': 3}


def test_missing_config_file():
    assert error_of('config/nope.py') == "error: config file 'config/nope.py' not found"


def test_directory_given_as_config_file(tmp_path):
    says(error_of(str(tmp_path)), f"'{tmp_path}' is a directory", 'name a python file')


@pytest.mark.parametrize('value', ['1000.0', '1e3', '1_000'])
def test_a_whole_float_is_an_int_in_a_file_and_a_flag_alike(tmp_path, value):
    from_file, _ = run(write(tmp_path, 'cfg.py', f'max_iters = {value}\n'))
    from_flag, _ = run(f'--max_iters={value}')
    assert from_file['max_iters'] == from_flag['max_iters'] == 1000
    assert type(from_file['max_iters']) is type(from_flag['max_iters']) is int


def test_a_fractional_float_is_refused_in_a_file_and_a_flag_alike(tmp_path):
    path = write(tmp_path, 'cfg.py', 'max_iters = 1000.5\n')
    says(error_of(path), f'max_iters in {path}', 'an int', 'got 1000.5')
    says(error_of('--max_iters=1000.5'), '--max_iters', 'an int', "'1000.5' is not a whole number")


@pytest.mark.parametrize('value', ['1e1', '10.0'])
def test_a_whole_float_is_an_int_where_the_default_is_none(tmp_path, value):
    # a None default stands for an optional int (sample.py's --max_new_tokens, --top_k): the same rule as --max_iters
    from aogpt.common import check_settings, optional_int
    from_file, _ = run(write(tmp_path, 'cfg.py', f'init_from = {value}\n'))
    from_flag, _ = run(f'--init_from={value}')
    assert from_file['init_from'] == from_flag['init_from'] == 10
    assert type(from_file['init_from']) is type(from_flag['init_from']) is int
    check_settings(from_flag, {'init_from': optional_int(1)})


def test_a_fractional_float_is_refused_where_the_default_is_none():
    from aogpt.common import check_settings, optional_int
    namespace, _ = run('--init_from=1.5')
    with pytest.raises(SystemExit) as exc:
        check_settings(namespace, {'init_from': optional_int(1)})
    message = str(exc.value.code)
    assert message.startswith('error: ') and '\n' not in message, message
    says(message, '--init_from', 'None or an int >= 1', 'got 1.5')


@pytest.mark.parametrize('arg, fix', [('-x', '--x'), ('-max_iters=10', '--max_iters=10')])
def test_an_option_with_one_dash_is_one_line_naming_the_fix(arg, fix):
    says(error_of(arg), f"'{arg}' is not an option", '--key=value', f'did you mean {fix}?', '--help')


def test_a_value_may_start_with_a_dash():
    assert run('--learning_rate', '-1e-3')[0]['learning_rate'] == -1e-3


def test_return_value_holds_only_changed_keys(capsys):
    _, changed = run('--compile=False', '--learning_rate', '3e-4', '--compile=no')
    assert changed == {'compile': False, 'learning_rate': 3e-4}
    assert capsys.readouterr().out == 'override: compile = False\noverride: learning_rate = 0.0003\n'


@pytest.mark.parametrize('flag', ['--help', '-h'])
def test_help_lists_every_key_and_default(flag, capsys):
    namespace = dict(DEFAULTS)
    with pytest.raises(SystemExit) as exc:
        configure(namespace, list(DEFAULTS), argv=['--max_iters=1', flag], doc='\n  Train a model.\n')
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith('Train a model.\n\n')
    assert '  --learning_rate = 0.0006' in out
    assert "  --out_dir       = 'out'" in out
    for key, value in DEFAULTS.items():
        assert f'--{key}' in out and repr(value) in out
    assert namespace == DEFAULTS


def test_script_with_bad_key_exits_with_one_line(tmp_path):
    script = write(tmp_path, 'script.py', f"""
        \"\"\"A tiny script.\"\"\"
        import sys
        sys.path.insert(0, {ROOT!r})
        max_iters = 10
        learning_rate = 6e-4
        config_keys = [k for k, v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str, type(None)))]
        from configurator import configure
        configure(globals(), config_keys, doc=__doc__)
        config = {{k: globals()[k] for k in config_keys}}
        print(config)
    """)
    ok = subprocess.run([sys.executable, script, '--max_iters', '3'], capture_output=True, text=True)
    assert ok.returncode == 0 and "'max_iters': 3" in ok.stdout
    bad = subprocess.run([sys.executable, script, '--lerning_rate=1'], capture_output=True, text=True)
    assert bad.returncode == 1
    assert bad.stderr.startswith('error:') and bad.stderr.count('\n') == 1
    assert 'Traceback' not in bad.stderr
