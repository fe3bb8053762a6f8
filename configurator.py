"""
Command-line overrides for the module-level settings of a script, and the readers every setting shares: one-line
errors (fail), the rules of values (check_rules), numbers (parse_number) and infill templates (parse_infill). It
imports nothing of the repo and no torch: the ground the rest stands on.

A script defines its settings as plain globals with defaults (its public lower-case globals of a
plain type: setting_keys), then hands them over:

    configure(globals(), doc=__doc__)

and is run as

    python train.py config/x.py --key=value --key value --some_bool_flag

Arguments are applied left to right, so a later one wins:
- a path (no leading -) is a python config file; its plain values (int, float, bool, str,
  None) whose names do not start with _ override the settings; imports and helpers are ignored,
  and a list, tuple, dict or set is an error (an explicit order goes in a file: train.py --order_file)
- --key=value or --key value overrides one setting; the text is parsed by the type of the
  default (a str stays as typed, a None default goes through ast.literal_eval)
- a whole number written as a float (1e3, 1000.0) is an int wherever the default is an int or None
  (a None default stands for an optional int: top_k, steps, ...), in a file or a flag alike; 1.5 is
  refused where an int is expected; numbers are read by parse_number, the reader of every setting and
  template, in ASCII digits only (int() and float() also read other scripts' digits, such as '٥')
- --key alone sets a bool setting to True
- --help or -h lists every setting with its default and exits; any other -x is an error

A mistake (unknown key, bad value, missing or broken file) stops the script with one line on
stderr (fail); under torchrun only rank 0 prints it. common.check_settings() checks ranges
the same way.
"""
import ast
import difflib
import math
import os
import re
import sys

PLAIN_TYPES = (int, float, bool, str, type(None))
DATA_TYPES = (list, tuple, dict, set)  # never silently dropped, whatever their name
TRUE_WORDS = {'true', '1', 'yes'}
FALSE_WORDS = {'false', '0', 'no'}


def rank():
    """This process's rank under torchrun, 0 otherwise."""
    return int(os.environ.get('RANK', 0))


def fail(message):
    """Stop a script with a one-line error (no traceback); under torchrun only rank 0 says it."""
    raise SystemExit(f'error: {message}' if rank() == 0 else 1)


def setting_keys(namespace):
    """The settings of a script: its public lower-case globals of a plain type."""
    return [k for k, v in namespace.items() if not k.startswith('_') and k.islower() and isinstance(v, PLAIN_TYPES)]


class Overrides(dict):
    """{key: new value}, and `flags`: the keys the command line's --key=value set (the rest came from config files)."""

    def __init__(self, values, flags):
        super().__init__(values)
        self.flags = flags


def configure(namespace, keys=None, argv=None, doc=None):
    """Apply the overrides in argv (default sys.argv[1:]) to the settings `keys` (default
    setting_keys(namespace)) of namespace; return them as Overrides ({key: new value}, and which came from flags).

    Types are checked against the defaults and namespace is only updated once every argument
    is valid, so a mistake leaves the settings untouched.
    """
    keys = setting_keys(namespace) if keys is None else keys
    args = list(sys.argv[1:] if argv is None else argv)
    if '--help' in args or '-h' in args:
        print_help(namespace, keys, doc)
        raise SystemExit(0)
    overrides, flags = {}, set()
    while args:
        arg = args.pop(0)
        if arg.startswith('-') and not arg.startswith('--'):  # a flag with one dash, not a config file
            fail(f"'{arg}' is not an option: settings take two dashes, --key=value (did you mean -{arg}?); "
                 f"--help lists them")
        if not arg.startswith('--'):
            for key, value in read_config_file(arg, keys).items():
                check_key(key, keys, where=f' in {arg}')
                overrides[key] = check_value(f'{key} in {arg}', value, namespace[key])
                flags.discard(key)  # a file after the flag sets it last
            continue
        key, has_value, text = arg[2:].partition('=')
        check_key(key, keys)
        if not has_value:
            if args and not args[0].startswith('--'):
                text = args.pop(0)  # --key value
            elif isinstance(namespace[key], bool):
                text = 'true'  # --flag alone switches a bool on
            else:
                fail(f'--{key} needs a value')
        overrides[key] = parse_text(key, text, namespace[key])
        flags.add(key)
    if rank() == 0:
        for key, value in overrides.items():
            print(f'override: {key} = {value!r}')
    namespace.update(overrides)
    return Overrides(overrides, flags)


def read_config_file(path, keys=()):
    """Run a python config file and return its plain public values by name.

    A value of another type under the name of a setting, or a list, tuple, dict or set under any
    public name, is an error, not ignored.
    """
    if os.path.isdir(path):
        fail(f"config file '{path}' is a directory: name a python file in it")
    if not os.path.isfile(path):
        fail(f"config file '{path}' not found")
    scope = {'__file__': path}
    try:
        with open(path) as f:
            exec(compile(f.read(), path, 'exec'), scope)
    except SyntaxError as e:
        fail(f'config file {path}, line {e.lineno}: {e.msg}')
    except Exception as e:  # the file is user code: report whatever it raised in one line
        fail(f'config file {path} failed: {type(e).__name__}: {e}')
    for key, value in scope.items():  # helpers (imports, functions) may be anything; data may not
        public_data = not key.startswith('_') and isinstance(value, DATA_TYPES)
        if public_data or (key in keys and not isinstance(value, PLAIN_TYPES)):
            fail(f'{key} in {path} must be a plain value (int, float, bool, str or None), '
                 f'got {type(value).__name__}')
    return {k: v for k, v in scope.items() if not k.startswith('_') and isinstance(v, PLAIN_TYPES)}


def check_key(key, keys, where=''):
    if key in keys:
        return
    close = difflib.get_close_matches(key, keys, n=1)
    hint = f"did you mean '{close[0]}'?" if close else 'run with --help to list the keys'
    fail(f"unknown config key '{key}'{where} ({hint})")


def parse_text(key, text, default, flag='--{}'):
    """Turn command-line text into a value of the same type as the default; flag names the setting in an error."""
    if isinstance(default, bool):  # before int: bool is a subclass of int
        word = text.lower()
        if word not in TRUE_WORDS | FALSE_WORDS:
            fail(f'{flag.format(key)} expects a bool (true/false), got {text!r}')
        return word in TRUE_WORDS
    if isinstance(default, (int, float)):  # configurator.parse_number: ASCII digits, an int also as 2e5 (iteration counts)
        kind = type(default)
        try:
            number = parse_number(text, kind)
        except ValueError as e:
            fail(f'{flag.format(key)} expects {article(kind.__name__)}: {e}')
        if not math.isfinite(number):
            fail(f'{flag.format(key)} expects a finite float, got {text!r}')
        return number
    if isinstance(default, str):
        return text
    try:  # a None default says nothing about the type, so take a python literal if it is one
        return whole(ast.literal_eval(text))
    except (ValueError, SyntaxError):
        return text


def check_value(name, value, default):
    """Check a python value from a config file against the type of the default."""
    if default is None:
        return whole(value)
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        value = whole(value)
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, str)
    if not ok:
        fail(f'{name} expects {article(type(default).__name__)}, got {value!r}')
    return value


def article(type_name):
    return f'an {type_name}' if type_name == 'int' else f'a {type_name}'


def print_help(namespace, keys, doc):
    if doc:
        print(doc.strip())
        print()
    print('settings and their defaults (override with a config file, --key=value or --key value):')
    width = max((len(k) for k in keys), default=0)
    for key in keys:
        print(f'  --{key:<{width}} = {namespace[key]!r}')


def check_rules(values, rules, flag='{}'):
    """Raise ValueError naming the first value that breaks its rule; rules: {key: (test, what)}; flag names a value
    as its user wrote it (a script's --key, an argument's key)."""
    for key, (test, what) in rules.items():
        try:
            ok = test(values[key])
        except TypeError:  # e.g. a str where a number was expected (None defaults take any literal)
            ok = False
        if not ok:
            raise ValueError(f'{flag.format(key)} must be {what}, got {values[key]!r}')


def whole(value):
    """A float that is a whole number (1000.0, 1e3) as that int, the one rule for ints written as floats; any other
    value as it is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def parse_number(text, kind=float):
    """The number that text writes, the one reader of numbers in settings and templates: kind=int takes a whole
    number, also written as a float (2e5). ASCII only: int() and float() also read other scripts' digits ('٥' is 5).
    ValueError naming what is wrong, every other character included."""
    what = 'a whole number' if kind is int else 'a number'
    others = sorted({c for c in text if not c.isascii()})
    if others:
        raise ValueError(f"{text!r} holds {', '.join(f'{c!r} (U+{ord(c):04X})' for c in others)}, not ASCII: write "
                         f"{what} with the digits 0-9")
    try:
        return kind(text)  # an int exactly, however long
    except ValueError:
        pass
    try:
        number = whole(float(text))  # an int written as a float
    except ValueError:
        number = None
    if type(number) is not kind:
        raise ValueError(f'{text!r} is not {what}')
    return number


def parse_infill(template, marker, encode):
    """Token ids and a known-mask (lists) for an infill template, whose text encode() turns into ids, and where its gap
    of no given length goes: marker alone is a gap whose length the model chooses (at most one a template; its index
    in ids, else None), and with a count before its last character (e.g. [MASK:5]) that many masked tokens.
    ValueError naming every bad count."""
    pattern = re.escape(marker[:-1]) + f'(?::([^{re.escape(marker[-1])}]*))?' + re.escape(marker[-1])
    parts = re.split(pattern, template)
    texts, counts = parts[::2], parts[1::2]
    if not counts:
        raise ValueError(f'the infill template has no {marker} marker')
    if counts.count(None) > 1:
        raise ValueError(f'the infill template has {counts.count(None)} gaps of no given length ({marker}), and one '
                         f'is the most a model chooses: give the others theirs, as {marker[:-1]}:5{marker[-1]}')
    sizes = [0 if count is None else count_of(count) for count in counts]
    bad = [f'{marker[:-1]}:{count}{marker[-1]}' for count, size in zip(counts, sizes) if count is not None and not size]
    if bad:
        raise ValueError(f"{', '.join(bad)} in the infill template: a masked span needs a whole number of tokens, at "
                         f"least one, in the digits 0-9 (as in {marker[:-1]}:5{marker[-1]}), or no count ({marker}) "
                         f"for the model to choose it")
    encode(''.join(texts))  # a tokenizer's error names every character it does not read, not one piece's
    ids, known, at = [], [], None
    for text, count, size in zip(texts, counts + [''], sizes + [0]):  # no marker after the last text
        piece = encode(text)
        ids += piece + [0] * size
        known += [True] * len(piece) + [False] * size
        at = len(ids) if count is None else at
    return ids, known, at


def count_of(text):
    """The whole number >= 1 that text writes (parse_number), such as the 5 of [MASK:5]; 0 for any other text."""
    try:
        return max(parse_number(text, int), 0)
    except ValueError:
        return 0
