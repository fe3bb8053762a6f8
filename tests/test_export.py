"""export.py and model folders: a folder gives its checkpoint's logits, samples and perplexities for every kind
(char and BPE), the authors' parity fixtures convert and keep their logits, nothing is unpickled, a bad folder
or setting is one line, and the card quotes the JSONs it is given."""
import contextlib
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys

import huggingface_hub
import pytest
import torch
from torch.nn import functional as F

from aogpt.checkpoints import load_checkpoint
from aogpt.common import gpt2_encoding
from conftest import one_line_error, run_here, run_script, samples, says, train
from fixtures.reference import load
from aogpt.scoring import content_seed, gap_orders

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture(scope='module')
def sigma_ckpt(workdir):
    """out_dir of a tiny char-level sigma-GPT (its head tied to the embedding)."""
    train(workdir, 'out-sigma', '--target_injection=add', '--max_iters=10', '--eval_interval=10')
    return 'out-sigma'


def export(workdir, *args):
    run_here('export.py', *args, cwd=workdir)


# A fresh interpreter, isolated (-I: nothing of the repository on its path), that imports torch and transformers
# once and forks a process for each program it reads (a json line: code, argv, folder, log), which runs as
# `python -I -c code *argv` would there, with /dev/null for its input; it answers each line with the exit status
FORK_SERVER = '''
import json, os, sys, traceback
import torch, transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer
for line in sys.stdin:
    code, argv, cwd, log = json.loads(line)
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
            os.dup2(1, 2)
            os.chdir(cwd)
            sys.argv = ['-c', *argv]
            exec(compile(code, '<string>', 'exec'), {'__name__': '__main__'})
            status = 0
        except SystemExit as e:  # as the interpreter takes it: None is 0, a message is printed and gives 1
            if e.code is None or isinstance(e.code, int):
                status = e.code or 0
            else:
                print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
'''


@pytest.fixture(scope='module')
def isolated(tmp_path_factory):
    """run(code, *argv, cwd=folder): `python -I -c code *argv` in folder, offline, in a process forked from
    FORK_SERVER (the seconds of importing torch and transformers spent once); its output, which a failure shows."""
    home = tmp_path_factory.mktemp('isolated')
    server = subprocess.Popen([sys.executable, '-I', '-c', FORK_SERVER], cwd=home, text=True, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env=dict(os.environ, HF_HUB_OFFLINE='1'))
    logs = iter(range(10 ** 6))

    def run(code, *argv, cwd):
        log = home / f'{next(logs)}.log'
        server.stdin.write(json.dumps([code, [str(a) for a in argv], str(cwd), str(log)]) + '\n')
        server.stdin.flush()
        status = server.stdout.readline()
        output = log.read_text() if log.exists() else ''
        assert status.strip() == '0', f'exit status {status.strip() or "none: the server ended"}\n{output}'
        return output
    yield run
    server.stdin.close()
    server.wait()


def run_here_output(workdir, script, *args):
    """A script's stdout, run in this process (so a monkeypatch applies)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        run_here(script, *args, cwd=workdir)
    return buffer.getvalue()


@torch.no_grad()
def logits(model, seed=0):
    torch.manual_seed(seed)
    x = torch.randint(model.config.vocab_size, (2, model.config.block_size))
    if model.config.is_encoder:
        return model.forward_masked(torch.where(torch.rand(x.shape) < 0.5, model.mask_id, x))
    return model(x, torch.stack([torch.randperm(x.size(1)) for _ in x]))[0]


@pytest.mark.parametrize('kind', ['char_ckpt', 'mdm_ckpt', 'sigma_ckpt',
                                  pytest.param('bpe_ckpt', marks=pytest.mark.needs('gpt2_bpe'))])  # sample.py decodes
def test_a_folder_gives_its_checkpoints_logits_and_samples(workdir, request, kind):
    out_dir = request.getfixturevalue(kind)
    folder = f'{out_dir}-folder'
    export(workdir, f'--out_dir={out_dir}', f'--out={folder}')
    tokenizer = ['tokenizer_config.json', 'vocab.json'] + (['merges.txt'] if kind == 'bpe_ckpt' else [])
    start = [] if kind == 'mdm_ckpt' else ['generation_config.json']  # a decoder's start id
    assert sorted(p.name for p in (workdir / folder).iterdir()) == sorted(
        ['README.md', 'config.json', 'configurator.py', 'decoding.py', 'engine.py', 'model.py', 'model.safetensors',
         'fim.py', 'infilling.py', 'modeling_ao_gpt.py', 'scoring.py', 'speculative.py']
        + tokenizer + start)
    ckpt, stored = load_checkpoint(workdir / out_dir / 'ckpt.pt')
    model, config = load_checkpoint(workdir / folder)
    assert torch.equal(logits(model), logits(ckpt)) and config['vocab'] == stored['vocab']
    if kind == 'sigma_ckpt':
        assert model.lm_head.weight is model.transformer.wte.weight  # tied again, stored once
    start = [] if kind == 'bpe_ckpt' else ['--start=RO']
    order = '--order=ancestral' if kind == 'mdm_ckpt' else '--order=random'
    outputs = [run_script('sample.py', f'--init_from={path}', '--num_samples=2', '--device=cpu', order, *start,
                          cwd=workdir).stdout for path in (f'{out_dir}/ckpt.pt', folder)]
    assert samples(outputs[0]) == samples(outputs[1]) and len(samples(outputs[0])) == 2


def test_raw_weights_on_request_and_perplexities_as_the_checkpoints(workdir, char_ckpt):
    export(workdir, f'--out_dir={char_ckpt}', '--out=raw-folder', '--use_ema=False')
    raw, _ = load_checkpoint(workdir / char_ckpt / 'ckpt.pt', use_ema=False)
    model, config = load_checkpoint(workdir / 'raw-folder')
    assert config['weights'] == 'raw' and torch.equal(logits(model), logits(raw))
    results = []
    for path, name in ((f'{char_ckpt}/ckpt.pt', 'a.json'), ('raw-folder', 'b.json')):
        run_here('eval_ppl.py', f'--init_from={path}', '--use_ema=False', '--max_chunks=3', '--ensemble=2',
                 '--device=cpu', f'--out_json={name}', cwd=workdir)
        [result] = json.loads((workdir / name).read_text())['results'].values()
        results.append({k: v for k, v in result.items() if k != 'seconds'})
    assert results[0] == results[1] and results[0]['ppl']


def test_the_authors_checkpoints_convert_with_their_parity_logits(workdir):
    for name, fixture, expected in (('authors.pt', load('ao_gpt'), 'expected_logits_ema'),
                                    ('sigma.pt', load('sigma_gpt'), 'expected_logits')):
        export(workdir, f'--init_from={name}', f'--out={name}-folder')
        model, config = load_checkpoint(workdir / f'{name}-folder')
        with torch.no_grad():
            got, _ = model(fixture['inputs'], fixture['orders'])
        torch.testing.assert_close(got, fixture[expected], atol=1e-4, rtol=0)
        assert config['trained']['iterations'] is None or config['trained']['iterations'] >= 0


def test_a_hub_model_folder_is_read_by_its_repo_name(workdir, char_ckpt, monkeypatch):
    export(workdir, f'--out_dir={char_ckpt}', '--out=hub-folder')
    asked = []
    fetch = lambda repo, allow_patterns: asked.append((repo, allow_patterns)) or str(workdir / 'hub-folder')
    monkeypatch.setattr(huggingface_hub, 'snapshot_download', fetch)  # the Hub's download, offline
    out = run_here_output(workdir, 'sample.py', '--init_from=hf:owner/ao-gpt', '--num_samples=1', '--device=cpu')
    local = run_here_output(workdir, 'sample.py', '--init_from=hub-folder', '--num_samples=1', '--device=cpu')
    assert asked == [('owner/ao-gpt', ['config.json', 'model.safetensors', 'README.md', 'generation_config.json',
                                       'model.py', 'configurator.py', 'engine.py', 'speculative.py', 'decoding.py',
                                       'scoring.py', 'infilling.py', 'fim.py', 'modeling_ao_gpt.py', 'vocab.json',
                                       'merges.txt', 'tokenizer_config.json'])]
    assert samples(out) == samples(local) and samples(out)


def test_a_folder_is_read_without_unpickling(workdir, char_ckpt, monkeypatch):
    export(workdir, f'--out_dir={char_ckpt}', '--out=plain-folder')
    monkeypatch.setattr(torch, 'load', lambda *a, **k: pytest.fail('a model folder was unpickled'))
    model, _ = load_checkpoint(workdir / 'plain-folder')
    assert model.config.vocab_size == 65
    # as readable as the folder's other files (safetensors writes for its owner alone): a shared folder is read by all
    mode = lambda name: (workdir / 'plain-folder' / name).stat().st_mode
    assert mode('model.safetensors') == mode('config.json')


@pytest.fixture(scope='module')
def result_files(workdir):
    """ppl.json, gen.json and harness.json in workdir: results as eval_ppl.py, gen_ppl.py and lm_eval_ao.py write
    them."""
    (workdir / 'ppl.json').write_text(json.dumps({'results': {'shakespeare_char': {
        'chunks': 7, 'ppl': {'l2r': 7.5261, '1': 9.0001, '8': 8.98503}}}}))
    (workdir / 'gen.json').write_text(json.dumps({'results': [
        {'steps': 64, 'temperature': 0.7, 'top_p': 0.95, 'gen_ppl': 13.966, 'entropy': 2.6412, 'n': 32},
        {'steps': None, 'temperature': 1.0, 'top_p': 1.0, 'gen_ppl': 31.88, 'entropy': 2.898, 'n': 32}]}))
    (workdir / 'harness.json').write_text(json.dumps({'results': {'lambada_openai_local': {
        'alias': 'lambada_openai_local', 'acc,none': 0.25, 'acc_stderr,none': 0.0123, 'perplexity,none': 40.56789}}}))
    return workdir


def test_the_card_quotes_the_jsons_and_says_what_trained_it(workdir, char_ckpt, result_files):
    export(workdir, f'--out_dir={char_ckpt}', '--out=card-folder', '--eval_json=ppl.json', '--gen_json=gen.json',
           '--harness_json=harness.json', '--license=mit')
    card = (workdir / 'card-folder' / 'README.md').read_text()
    meta = card.split('---\n')[1]
    says(meta, 'library_name: ao-gpt', 'license: mit', '- any-order', '- masked-diffusion', 'pipeline_tag')
    says(card, '| shakespeare_char | 7 | 7.53 | 9.00 | 8.99 |', '| 64 | 0.7 | 0.95 | 13.97 | 2.641 | 32 |',
         '| one token per step | 1.0 | 1.0 | 31.88 | 2.898 | 32 |', '| lambada_openai_local | acc | 0.25 | 0.012 |',
         '| lambada_openai_local | perplexity | 40.57 |  |', '30 iterations', 'AO-GPT',
         'python sample.py --init_from=card-folder')
    assert 'out_dir' not in card and str(workdir) not in card  # nothing of the machine it ran on


def bad_folder(workdir, char_ckpt, setup):
    """The name of a model folder of char_ckpt's, broken as setup says (see test_a_bad_folder_is_one_line)."""
    folder = workdir / f'bad-{setup}'
    export(workdir, f'--out_dir={char_ckpt}', f'--out={folder.name}')
    config = json.loads((folder / 'config.json').read_text())
    if setup == 'no_config':
        (folder / 'config.json').unlink()
    elif setup == 'foreign':
        (folder / 'config.json').write_text(json.dumps(config | {'format': 'other'}))
    elif setup == 'not_json':
        (folder / 'config.json').write_text('{"format": ')
    elif setup == 'no_weights':
        (folder / 'model.safetensors').unlink()
    elif setup == 'short_vocab':  # fewer characters than ids: its text could not be decoded
        (folder / 'config.json').write_text(json.dumps(config | {'vocab': config['vocab'][:40]}))
    else:  # a config of another size than its weights
        config['model_args']['n_layer'] += 1
        (folder / 'config.json').write_text(json.dumps(config))
    return folder.name


BAD_FOLDERS = {'no_config': ('is a folder without a config.json', 'ckpt.pt'),
               'foreign': ("is not an AO-GPT model folder's", "format 'other'", 'export.py'),
               'not_json': ('config.json cannot be read as JSON',),
               'no_weights': ('holds no model.safetensors',),
               'short_vocab': ("config.json's vocab is 40 characters", 'vocab_size=65', 'export the model again'),
               'other_size': ('model.safetensors does not fit', 'config.json')}


@pytest.mark.parametrize('setup', BAD_FOLDERS)
def test_a_bad_folder_is_one_line(workdir, char_ckpt, setup):
    folder = bad_folder(workdir, char_ckpt, setup)
    says(one_line_error('sample.py', f'--init_from={folder}', '--device=cpu', cwd=workdir), *BAD_FOLDERS[setup])


@pytest.mark.parametrize('setup', ['no_config', 'foreign', 'not_json'])  # none is a Hugging Face model's folder
@pytest.mark.parametrize('script,args', [('eval_ppl.py', ['--init_from={}']),
                                         ('gen_ppl.py', ['--out_dir=out-char', '--num_samples=1', '--scorer={}'])])
def test_a_bad_folder_is_the_same_line_where_a_hugging_face_model_is_taken(workdir, char_ckpt, setup, script, args):
    folder = bad_folder(workdir, char_ckpt, setup)
    message = one_line_error(script, '--device=cpu', *(a.format(folder) for a in args), cwd=workdir)
    says(message, *BAD_FOLDERS[setup])


def test_bad_export_settings_are_one_line(workdir, char_ckpt):
    (workdir / 'occupied').mkdir(exist_ok=True)
    (workdir / 'occupied' / 'notes.txt').write_text('mine')
    export(workdir, f'--out_dir={char_ckpt}', '--out=annotated')  # a model folder a file was added to since
    (workdir / 'annotated' / 'notes.txt').write_text('mine')
    for args, parts in [([], ('--out names the model folder',)),
                        (['--out=occupied'], ('--out=occupied exists and is not a model folder',)),
                        (['--out=annotated'], ('--out=annotated is a model folder that also holds notes.txt',
                                               'writing it again would delete', 'move them out')),
                        (['--out=x', '--eval_json=none.json'], ('--eval_json=none.json', 'no such file')),
                        (['--out=x', '--push=just-a-name'], ('--push=just-a-name', 'owner/repo')),
                        (['--out=x', '--push=owner/bad name'], ('--push=owner/bad name', 'owner/repo', 'letters')),
                        (['--out=x', '--license=mit\nfoo'], ('--license', 'a Hub license id', "'mit\\nfoo'")),
                        (['--out=occupied/notes.txt/x'], ('--out=occupied/notes.txt/x', 'cannot be created or written',
                                                          'pick a folder'))]:
        says(one_line_error('export.py', f'--out_dir={char_ckpt}', *args, cwd=workdir), *parts)
    assert (workdir / 'occupied' / 'notes.txt').read_text() == 'mine' and not (workdir / 'x').exists()
    assert (workdir / 'annotated' / 'notes.txt').read_text() == 'mine'
    # offline, a push fails in one line after the folder is written
    says(one_line_error('export.py', f'--out_dir={char_ckpt}', '--out=pushed', '--push=owner/repo', cwd=workdir),
         'could not push pushed', 'owner/repo', 'can be pushed again')
    assert (workdir / 'pushed' / 'model.safetensors').is_file()


@pytest.mark.parametrize('key,given,parts', [
    ('eval_json', 'gen.json', ("gen.json holds gen_ppl.py's results, not eval_ppl.py's", 'give it as --gen_json')),
    ('harness_json', 'ppl.json', ("ppl.json holds eval_ppl.py's results, not lm_eval_ao.py's", '--eval_json')),
    ('gen_json', 'harness.json', ("harness.json holds lm_eval_ao.py's results", '--harness_json')),
])
def test_results_of_another_script_are_one_line_before_the_work(workdir, char_ckpt, result_files, key, given, parts):
    says(one_line_error('export.py', '--out_dir=missing', '--out=x', f'--{key}={given}', cwd=workdir), *parts)


def test_a_folder_exported_again_keeps_its_training_record(workdir, char_ckpt):
    export(workdir, f'--out_dir={char_ckpt}', '--out=first-folder')
    export(workdir, '--init_from=first-folder', '--out=again-folder')
    config = lambda name: json.loads((workdir / name / 'config.json').read_text())
    first, again = config('first-folder'), config('again-folder')
    assert again == first and first['trained']['iterations'] == 30 and first['trained']['config']
    assert '30 iterations' in (workdir / 'again-folder' / 'README.md').read_text()


@pytest.fixture(scope='module')
def rotary_ckpt(workdir):
    """out_dir of a tiny char-level AO-GPT with rotary positions."""
    train(workdir, 'out-rotary', '--position_encoding=rotary', '--max_iters=10', '--eval_interval=10')
    return 'out-rotary'


TEXT = 'ROMEO:\n  What light through yonder window?'
# run by a fresh interpreter in an empty folder, isolated (-I): nothing of the repository on its path, transformers
# loads each folder's own code
READ_WITH_TRANSFORMERS = '''
import importlib.util, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
assert importlib.util.find_spec('engine') is None  # the repository is not on the path
x, out = torch.load(sys.argv[1]), {}
for folder in sys.argv[3:]:
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    with torch.no_grad():
        read = model(x, labels=x)
        started = model(torch.cat([torch.full_like(x[:, :1], tokenizer.bos_token_id), x], 1)).logits
        greedy = model.generate(x[:, :5], max_new_tokens=8, do_sample=False)
    ids = tokenizer(TEXT)['input_ids']
    try:  # ids of another tokenizer (GPT-2's)
        model(torch.tensor([[15496, 995]]))
    except ValueError as e:
        foreign = str(e)
    out[folder] = dict(logits=read.logits, started=started, loss=read.loss, greedy=greedy, ids=ids,
                       text=tokenizer.decode(ids), foreign=foreign)
torch.save(out, sys.argv[2])
'''


def test_transformers_loads_a_folder_as_a_causal_lm_read_left_to_right(workdir, char_ckpt, rotary_ckpt, sigma_ckpt,
                                                                        tmp_path, isolated):
    """AutoModelForCausalLM on folders of AO-GPT (learned and rotary positions) and sigma-GPT: logits[:, t] are the
    repository's full forward's for the token after t (after the start id: also the first token's, from the start
    slot), labels give their cross-entropy, greedy generate() is the argmax chain of full forwards; AutoTokenizer
    encodes and decodes text as the checkpoint's characters; another tokenizer's ids are refused in one line."""
    folders, vocabs = {}, {}
    for out_dir in (char_ckpt, rotary_ckpt, sigma_ckpt):
        export(workdir, f'--out_dir={out_dir}', f'--out={out_dir}-hf')
        folder = str(workdir / f'{out_dir}-hf')
        folders[folder], stored = load_checkpoint(workdir / out_dir / 'ckpt.pt')
        vocabs[folder] = stored['vocab']
    x = torch.randint(0, 20, (2, 12), generator=torch.Generator().manual_seed(0))
    torch.save(x, tmp_path / 'x.pt')
    isolated(f'TEXT = {TEXT!r}' + READ_WITH_TRANSFORMERS, tmp_path / 'x.pt', tmp_path / 'out.pt', *folders, cwd=tmp_path)
    read = torch.load(tmp_path / 'out.pt')
    for folder, model in folders.items():
        full = lambda y: model(torch.cat([y, y[:, :1]], 1), torch.arange(y.size(1) + 1).expand(2, -1))[0]
        with torch.no_grad():
            expected = full(x)[:, 1:x.size(1) + 1]  # slot t + 1 predicts the token after t
            greedy = x[:, :5]
            for _ in range(8):
                greedy = torch.cat([greedy, full(greedy)[:, greedy.size(1)].argmax(-1, keepdim=True)], 1)
        for logits in (read[folder]['logits'], read[folder]['started'][:, 1:]):
            torch.testing.assert_close(logits[..., :-1], expected, atol=1e-5, rtol=0)
            assert (logits[..., -1] == -math.inf).all()  # the start id, never predicted
        torch.testing.assert_close(read[folder]['started'][:, 0, :-1], full(x)[:, 0], atol=1e-5, rtol=0)
        loss = F.cross_entropy(expected[:, :-1].flatten(0, 1), x[:, 1:].flatten())
        torch.testing.assert_close(read[folder]['loss'], loss, atol=1e-5, rtol=0)
        assert torch.equal(read[folder]['greedy'], greedy), folder
        assert read[folder]['ids'] == [vocabs[folder].index(c) for c in TEXT] and read[folder]['text'] == TEXT
        assert 'ids from 995 to 15496, but this model reads ids 0 to 65' in read[folder]['foreign']


# the any-order methods of folders' models, in an isolated interpreter: argv[1] maps each folder to its calls,
# (template, options of model.sample): a template is infilled, '' samples a block; argv[2] holds rows to score and
# the orders and gaps to score them in; what the methods give goes to argv[3]
ANY_ORDER_WITH_TRANSFORMERS = '''
import importlib.util, json, sys, torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer
assert importlib.util.find_spec('scoring') is None  # the repository is not on the path
scored, out = torch.load(sys.argv[2]), {}
for folder, calls in json.loads(sys.argv[1]).items():
    encoder = AutoConfig.from_pretrained(folder, trust_remote_code=True).model_args['architecture'] == 'encoder'
    model = (AutoModelForMaskedLM if encoder else AutoModelForCausalLM).from_pretrained(folder, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    x = scored['x']
    out[folder] = dict(
        texts=[model.infill(template, tokenizer, **options) if template else
               tokenizer.batch_decode(model.sample(**options), clean_up_tokenization_spaces=False)
               for template, options in calls],
        text=model.log_likelihood(x, None if encoder else scored['orders']),
        gaps=[model.gap_log_likelihood(x, gap, 0 if encoder else 3, seed=7) for gap in scored['gaps']])
for name, load in [('untrusted', lambda: AutoModelForCausalLM.from_pretrained(folder)),
                   ('codeless', lambda: AutoModelForCausalLM.from_pretrained(sys.argv[4], trust_remote_code=True)),
                   ('vocabless', lambda: AutoTokenizer.from_pretrained(sys.argv[5], trust_remote_code=True))]:
    try:
        load()
    except (OSError, ValueError) as e:
        out[name] = str(e)
torch.save(out, sys.argv[3])
'''
DECODINGS = {  # (template, the options of model.sample): the orders, the schedules, speculation, templates
    'decoder': [('', dict(num_samples=2, seed=3)), ('', dict(num_samples=2, order='l2r', steps=10, schedule='cosine')),
                ('ROMEO: [MASK:6] my [MASK:1].', dict(num_samples=2, order='confidence', steps=3, temperature=0.8)),
                ('ROMEO: [MASK] my lord', dict(num_samples=3, seed=4, temperature=0.9)),
                ('', dict(num_samples=3, speculate=4, seed=5, top_k=10))],
    'encoder': [('', dict(num_samples=2, order='ancestral', steps=40)),
                ('ROMEO: [MASK:6] my [MASK:1].', dict(num_samples=2, order='confidence', steps=3, top_p=0.9))],
}
SCORED = dict(x=torch.randint(0, 60, (2, 24), generator=torch.Generator().manual_seed(0)),
              orders=torch.stack([torch.arange(24), torch.arange(24).flip(0),
                                  torch.randperm(24, generator=torch.Generator().manual_seed(1))]),
              gaps=[torch.arange(5, 9), torch.tensor([0, 3, 17, 23])])  # a span; scattered, at both ends


@pytest.fixture(scope='module')
def any_order_methods(workdir, char_ckpt, rotary_ckpt, sigma_ckpt, mdm_ckpt, tmp_path_factory, isolated):
    """{folder: what its methods gave}, folders exported from AO-GPT with learned and rotary positions, sigma-GPT
    and the encoder, loaded by transformers alone; and {folder: the calls of model.sample}."""
    tmp, calls = tmp_path_factory.mktemp('methods'), {}
    for out_dir in (char_ckpt, rotary_ckpt, sigma_ckpt, mdm_ckpt):
        export(workdir, f'--out_dir={out_dir}', f'--out={out_dir}-methods')
        calls[str(workdir / f'{out_dir}-methods')] = DECODINGS['encoder' if out_dir == mdm_ckpt else 'decoder']
    torch.save(SCORED, tmp / 'scored.pt')
    shutil.copytree(workdir / f'{char_ckpt}-methods', tmp / 'codeless')
    os.remove(tmp / 'codeless' / 'scoring.py')
    shutil.copytree(workdir / f'{char_ckpt}-methods', tmp / 'vocabless')
    os.remove(tmp / 'vocabless' / 'vocab.json')
    isolated(ANY_ORDER_WITH_TRANSFORMERS, json.dumps(calls), tmp / 'scored.pt', tmp / 'out.pt', tmp / 'codeless',
             tmp / 'vocabless', cwd=tmp)
    out = torch.load(tmp / 'out.pt')
    return {folder: out[folder] for folder in calls}, calls, out


def test_a_folders_any_order_methods_draw_sample_pys_tokens(workdir, any_order_methods):
    """model.sample and model.infill give sample.py's samples of the folder for the same settings and seed, in every
    order, schedule, template and with speculation."""
    methods, calls, _ = any_order_methods
    for folder, got in methods.items():
        for texts, (template, options) in zip(got['texts'], calls[folder], strict=True):
            flags = [f'--{k}={v}' for k, v in options.items()] + \
                ([f'--infill={template}', '--fill_marks='] if template else [])
            expected = [text.split('\n', 1)[1] if text.startswith('gap of ') else text  # the length's line
                        for text in samples(run_script('sample.py', f'--init_from={folder}', '--device=cpu', *flags,
                                                       cwd=workdir).stdout)]
            assert texts == expected and len(set(texts)) > 1, (folder, template, options)


@torch.no_grad()
def decoder_log_likelihood(model, x, order, first=0):
    """log p(x[order[first:]] | x[order[:first]]) of a row x read in order, from one full forward of the network."""
    return -model(x[None], order[None], reduction='none')[1][0, first:].double().sum()


@torch.no_grad()
def revealed_log_likelihood(model, x, gap):
    """log p(x[gap] | the rest) of the encoder, the gap revealed left to right: a full forward per gap token."""
    total = torch.zeros((), dtype=torch.float64)
    for i in gap.tolist():
        z = torch.where(torch.isin(torch.arange(len(x)), gap) & (torch.arange(len(x)) >= i), model.mask_id, x)
        total += F.log_softmax(model.forward_masked(z[None])[0, i].double(), -1)[x[i]]
    return total


def test_a_folders_log_likelihoods_are_its_networks_in_those_orders(any_order_methods):
    """model.log_likelihood (the whole text, in given orders) and model.gap_log_likelihood (the rest read first, then
    the gap left to right and in eval_ppl.py's seeded random orders; the encoder's gap revealed left to right) are
    the sums of the network's log-probs in those orders, each from full forwards of the folder as the scripts read
    it."""
    x = SCORED['x']
    for folder, got in any_order_methods[0].items():
        model, _ = load_checkpoint(folder)
        if model.config.is_encoder:
            text = [[revealed_log_likelihood(model, row, torch.arange(24))] for row in x]
            gaps = [[[revealed_log_likelihood(model, row, gap)] for row in x] for gap in SCORED['gaps']]
        else:
            text = [[decoder_log_likelihood(model, row, order) for order in SCORED['orders']] for row in x]
            gaps = [[[decoder_log_likelihood(model, row, order, 24 - len(gap))
                      for order in gap_orders(24, gap, 3, content_seed(7, row.tolist()))] for row in x]
                    for gap in SCORED['gaps']]
        torch.testing.assert_close(got['text'], torch.tensor(text, dtype=torch.float64), atol=1e-4, rtol=0)
        for got_gap, gap in zip(got['gaps'], gaps, strict=True):
            torch.testing.assert_close(got_gap, torch.tensor(gap, dtype=torch.float64), atol=1e-4, rtol=0)
        assert len(set(got['gaps'][0][0].tolist())) == got['gaps'][0].size(1), folder  # the orders differ


@pytest.mark.parametrize('call,words', [
    (lambda m, x, t: m.sample(order='bogus'), "order must be one of random, l2r, confidence, ancestral, got 'bogus'"),
    (lambda m, x, t: m.sample(steps=0), 'steps must be an int from 1 to the 8 tokens to generate'),
    (lambda m, x, t: m.sample(steps=100), 'got 100'),
    (lambda m, x, t: m.sample(order='ancestral'), 'order=ancestral'),
    (lambda m, x, t: m.sample(temperature=-1), 'temperature must be >= 0'),
    (lambda m, x, t: m.sample(num_samples=0), 'num_samples must be an int >= 1'),
    (lambda m, x, t: m.infill('ab [MASK:100] c', t), '105 positions to decode: this model reads 1 to 8'),
    (lambda m, x, t: m.infill('a [MASK:\u0665] b [MASK:0]', t), '[MASK:\u0665], [MASK:0] in the infill template'),
    (lambda m, x, t: m.infill('a@ [MASK] \u00e9', t), "'@', '\u00e9': not among the 11 characters"),
    (lambda m, x, t: m.infill('a [MASK] b', t, gap_cap=0), 'gap_cap=0: the longest gap tried is an int from 1'),
    (lambda m, x, t: m.infill('a [MASK] b', t, gap_cap=5), 'from 1 to the 4 tokens that the template of 4 tokens in block_size 8 leaves'),
    (lambda m, x, t: m.infill('a [MASK] b', t, steps=2), 'written one token a step'),
    (lambda m, x, t: m.infill('a [MASK] b', t, gap_choice='best'), "gap_choice must be 'sample' or 'mode'"),
    (lambda m, x, t: m(x[:, :0]), 'input_ids of shape (2, 0) holds no tokens'),
    (lambda m, x, t: m.generate(x[:, :0], max_new_tokens=2), 'holds no tokens'),
    (lambda m, x, t: m(x, attention_mask=torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])), 'pad on the left'),
    (lambda m, x, t: m(x, attention_mask=torch.ones(2, 3)), 'attention_mask of shape (2, 3)'),
    (lambda m, x, t: m(x, attention_mask=torch.full((2, 4), 2)), 'values other than 0 and 1'),
    (lambda m, x, t: m(x, cache=foreign_cache()), 'not filled by this model'),
    (lambda m, x, t: m(torch.tensor([[1, 11, 2]])), 'the start id 11 begins every row or none'),
    (lambda m, x, t: m.generate(x, max_new_tokens=5), '8 tokens in a row: this model reads at most 7'),
    (lambda m, x, t: m.log_likelihood(x, [[0, 1, 2, 2]]), 'each a permutation'),
    (lambda m, x, t: m.log_likelihood(x, [0, 1, 2]), 'orders (E, 4)'),
    (lambda m, x, t: m.gap_log_likelihood(x, []), 'at least one'),
    (lambda m, x, t: m.gap_log_likelihood(x, [2, 4]), 'positions of the 4 tokens'),
    (lambda m, x, t: m.gap_log_likelihood(x, [2, 1]), 'sorted'),
    (lambda m, x, t: m.log_likelihood(x[0]), 'pass rows'),
    (lambda m, x, t: m.log_likelihood(x + 50), 'tokenizer of its folder')])
def test_the_methods_name_a_bad_input_in_one_line(call, words, tmp_path):
    """Each public method refuses what sample.py refuses, with a ValueError of one line."""
    from aogpt.modeling_ao_gpt import AOGPTCharTokenizer, AOGPTConfig, AOGPTForCausalLM
    model = AOGPTForCausalLM(AOGPTConfig(model_args=dict(block_size=8, vocab_size=11, n_layer=1, n_head=2, n_embd=16,
                                                         cond_dim=8)))
    (tmp_path / 'vocab.json').write_text(json.dumps(list('abcdefghij ')))
    with pytest.raises(ValueError, match=re.escape(words)) as error:
        call(model, torch.randint(11, (2, 4)), AOGPTCharTokenizer(str(tmp_path / 'vocab.json')))
    assert '\n' not in str(error.value)


def test_a_folder_refuses_a_known_id_past_its_tokens():
    """A FIM GPT's folder (7 tokens, its sentinels 7 to 10): a prompt holding a sentinel or a padding id is refused in
    one line, as its tokenizer never writes one; below the tokens it samples."""
    from aogpt.modeling_ao_gpt import AOGPTConfig, AOGPTForCausalLM
    model = AOGPTForCausalLM(AOGPTConfig(model_args=dict(block_size=8, vocab_size=11, n_layer=1, n_head=2, n_embd=16,
                                                         cond_dim=8), n_tokens=7))
    known = torch.tensor([True, True, False, False])
    with pytest.raises(ValueError, match=re.escape('a known id of 8: ids from 7 on pad the table or are a FIM GPT')) \
            as error:
        model.sample(torch.tensor([1, 8, 0, 0]), known)
    assert '\n' not in str(error.value)
    assert model.sample(torch.tensor([1, 6, 0, 0]), known, num_samples=2).shape == (2, 4)


def foreign_cache():
    """A transformers cache that another model filled."""
    from transformers import DynamicCache
    cache = DynamicCache()
    cache.update(torch.zeros(2, 2, 3, 8), torch.zeros(2, 2, 3, 8), 0)
    return cache


def tiny_causal_lm(**model_args):
    """A folder's causal LM of random weights, large enough (std 0.3) that every slot predicts differently."""
    from aogpt.modeling_ao_gpt import AOGPTConfig, AOGPTForCausalLM
    torch.manual_seed(0)
    model = AOGPTForCausalLM(AOGPTConfig(model_args=dict(block_size=24, vocab_size=11, n_layer=2, n_head=2, n_embd=16,
                                                         cond_dim=8, gate_init=1.0, **model_args))).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(std=0.3)
    model.generation_config.pad_token_id = model.config.bos_token_id
    return model


def next_token_logits(model, row):
    """(len(row), V): the logits of the token after each of row, by the repository's network reading row alone in
    one forward, without a cache."""
    y = torch.cat([row, row[:1]])[None]
    return model.net(y, torch.arange(y.size(1))[None])[0][0, 1:len(row) + 1]


def left_padded(rows, pad, start=()):
    """rows (each after the ids `start`) padded on their left with pad to one width, and their attention_mask."""
    rows = [torch.tensor([*start, *row]) for row in rows]
    width = max(map(len, rows))
    ids = torch.stack([F.pad(row, (width - len(row), 0), value=pad) for row in rows])
    mask = torch.stack([(torch.arange(width) >= width - len(row)).long() for row in rows])
    return ids, mask


@pytest.mark.parametrize('args', [{}, pytest.param(dict(position_encoding='rotary'), marks=pytest.mark.slow),
                                  pytest.param(dict(target_injection='add'), marks=pytest.mark.slow),
                                  pytest.param(dict(target_injection='two_stream'), marks=pytest.mark.slow)],
                         ids=['ao-gpt', 'rotary', 'sigma-gpt', 'two-stream'])
def test_generate_with_the_cache_and_left_padding_gives_each_rows_tokens_alone(args):
    """A folder's causal LM with transformers' cache and left padding: a padded batch read in two cached forwards
    gives each row's logits from the network reading the row alone (with and without the start id); greedy
    generate() is each row's argmax chain of such full forwards; sampling and beam search give the same tokens with
    and without the cache."""
    from aogpt.modeling_ao_gpt import CACHE_FIELD
    model = tiny_causal_lm(**args)
    bos, rows = model.config.bos_token_id, [[3, 1, 4, 1, 5], [9, 2], [6]]
    with torch.no_grad():  # the cache by transformers' name and by its name before (past_key_values)
        for start, name in (((), 'cache'), ((bos,), 'past_key_values')):
            ids, mask = left_padded(rows, bos, start)
            first = model(ids[:, :3], attention_mask=mask[:, :3])
            rest = model(ids[:, 3:], attention_mask=mask, **{name: getattr(first, CACHE_FIELD)})
            logits = torch.cat([first.logits, rest.logits], 1)
            for b, row in enumerate(rows):
                torch.testing.assert_close(logits[b, -len(row):, :-1], next_token_logits(model, torch.tensor(row)),
                                           atol=1e-5, rtol=0)
        ids, mask = left_padded(rows, bos)
        greedy = model.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
        for b, row in enumerate(rows):
            chain = torch.tensor(row)
            for _ in range(12):
                chain = torch.cat([chain, next_token_logits(model, chain)[-1:].argmax(-1)])
            assert torch.equal(greedy[b, -len(chain):], chain), b
        for options in (dict(do_sample=True, top_k=5), dict(num_beams=3, do_sample=False)):
            runs = []
            for use_cache in (True, False):
                torch.manual_seed(0)
                runs.append(model.generate(ids, attention_mask=mask, max_new_tokens=12, use_cache=use_cache, **options))
            assert torch.equal(*runs), options


def test_transformers_names_the_fix_of_a_load_without_trust_or_a_folder_without_its_code(any_order_methods):
    errors = any_order_methods[2]
    assert 'trust_remote_code=True' in errors['untrusted']
    assert 'scoring.py' in errors['codeless'] and 'No such file' in errors['codeless']
    says(errors['vocabless'], 'holds no vocab.json', 'export the model again')


FINE_TUNE_WITH_PEFT = '''
import json, sys, torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
folder, tuned, out = sys.argv[1:]
x = torch.randint(0, 20, (4, 24), generator=torch.Generator().manual_seed(0))
model = get_peft_model(AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True),
                       LoraConfig(r=4, target_modules=['c_attn', 'c_proj']))
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1)
losses = []
for _ in range(12):
    loss = model(input_ids=x, labels=x).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
model.merge_and_unload().save_pretrained(tuned)
again = AutoModelForCausalLM.from_pretrained(tuned, trust_remote_code=True)
with torch.no_grad():
    torch.save(dict(x=x, losses=losses, logits=again(x).logits), out)
'''


@pytest.mark.slow  # transformers and peft in a fresh interpreter
def test_a_lora_fine_tune_through_transformers_lowers_the_loss_and_saves_a_folder_every_script_reads(
        workdir, rotary_ckpt, tmp_path, isolated):
    export(workdir, f'--out_dir={rotary_ckpt}', f'--out={tmp_path}/folder')
    isolated(FINE_TUNE_WITH_PEFT, tmp_path / 'folder', tmp_path / 'tuned', tmp_path / 'out.pt', cwd=tmp_path)
    out = torch.load(tmp_path / 'out.pt')
    assert out['losses'][-1] < out['losses'][0] - 0.05, out['losses']
    model, _ = load_checkpoint(tmp_path / 'tuned')  # the merged weights, read as the scripts read a folder
    x = out['x']
    with torch.no_grad():
        logits = model(torch.cat([x, x[:, :1]], 1), torch.arange(x.size(1) + 1).expand(len(x), -1))[0][:, 1:-1]
    torch.testing.assert_close(out['logits'][..., :-1], logits, atol=1e-5, rtol=0)
    base, _ = load_checkpoint(workdir / rotary_ckpt / 'ckpt.pt')
    assert not torch.equal(model.transformer.h[0].attn.c_attn.weight, base.transformer.h[0].attn.c_attn.weight)


READ_THE_ENCODER = '''
import sys, torch
from transformers import AutoModelForMaskedLM, AutoTokenizer
folder, out = sys.argv[1:]
model = AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
x = torch.randint(0, 20, (2, 16), generator=torch.Generator().manual_seed(0))
z = torch.where(torch.arange(16) % 3 == 0, tokenizer.mask_token_id, x)
labels = torch.where(z == tokenizer.mask_token_id, x, -100)
with torch.no_grad():
    read = model(z, labels=labels)
torch.save(dict(z=z, logits=read.logits, loss=read.loss, mask_id=model.config.mask_token_id,
                tokenizer_mask_id=tokenizer.mask_token_id), out)
'''


def test_transformers_loads_the_encoders_folder_as_a_masked_lm(workdir, mdm_ckpt, tmp_path, isolated):
    """AutoModelForMaskedLM on the encoder's folder: the repository's logits where [MASK] (the tokenizer's mask
    token, the network's mask_id) stands, and the cross-entropy of the masked positions' labels."""
    export(workdir, f'--out_dir={mdm_ckpt}', f'--out={tmp_path}/folder')
    isolated(READ_THE_ENCODER, tmp_path / 'folder', tmp_path / 'out.pt', cwd=tmp_path)
    read = torch.load(tmp_path / 'out.pt')
    model, _ = load_checkpoint(workdir / mdm_ckpt / 'ckpt.pt')
    assert read['mask_id'] == read['tokenizer_mask_id'] == model.mask_id
    with torch.no_grad():
        expected = model.forward_masked(read['z'])
    torch.testing.assert_close(read['logits'][..., :-1], expected, atol=1e-5, rtol=0)
    masked = read['z'] == model.mask_id
    x = torch.randint(0, 20, (2, 16), generator=torch.Generator().manual_seed(0))
    loss = F.cross_entropy(expected[masked], x[masked])
    torch.testing.assert_close(read['loss'], loss, atol=1e-5, rtol=0)


@pytest.mark.parametrize('kind', ['char_ckpt', 'mdm_ckpt',
                                  pytest.param('bpe_ckpt', marks=pytest.mark.needs('gpt2_bpe'))])
def test_the_cards_transformers_lines_run_as_they_are(workdir, request, kind, tmp_path, isolated):
    out_dir = request.getfixturevalue(kind)
    export(workdir, f'--out_dir={out_dir}', f'--out={tmp_path}/card-folder')
    card = (tmp_path / 'card-folder' / 'README.md').read_text()
    code = card.split('With `transformers`')[1].split('```python\n')[1].split('```')[0]
    assert 'from_pretrained(\'card-folder\', trust_remote_code=True)' in code
    isolated(code, cwd=tmp_path)


READ_A_BPE_FOLDER = '''
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
folder, out = sys.argv[1:]
tokenizer = AutoTokenizer.from_pretrained(folder)  # transformers' own GPT-2 tokenizer: no code of ours
model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
ids = tokenizer(TEXT, return_tensors='pt').input_ids
with torch.no_grad():
    logits = model(torch.cat([torch.tensor([[tokenizer.bos_token_id]]), ids], 1)).logits
torch.save(dict(ids=ids, text=tokenizer.decode(ids[0]), bos=tokenizer.bos_token_id, logits=logits), out)
'''


@pytest.mark.needs('gpt2_bpe')
def test_a_bpe_folders_tokenizer_is_gpt2s_with_the_start_id_after_the_networks(workdir, bpe_ckpt, tmp_path,
                                                                               isolated):
    export(workdir, f'--out_dir={bpe_ckpt}', f'--out={tmp_path}/folder')
    text = "ROMEO: what light, through yonder window, breaks?\n  It's the east."
    isolated(f'TEXT = {text!r}' + READ_A_BPE_FOLDER, tmp_path / 'folder', tmp_path / 'out.pt', cwd=tmp_path)
    read = torch.load(tmp_path / 'out.pt')
    model, _ = load_checkpoint(workdir / bpe_ckpt / 'ckpt.pt')
    assert read['ids'][0].tolist() == gpt2_encoding().encode(text) and read['text'] == text
    assert read['bos'] == model.config.vocab_size
    x = read['ids']
    with torch.no_grad():
        expected = model(torch.cat([x, x[:, :1]], 1), torch.arange(x.size(1) + 1).expand(1, -1))[0][:, :-1]
    torch.testing.assert_close(read['logits'][..., :-1], expected, atol=1e-5, rtol=0)
