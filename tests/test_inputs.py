"""What every script accepts: init_from (Hub names included) and, for each bad input, one line up front."""
import contextlib
import copy
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import conftest
from conftest import one_line_error, run_here, run_script, samples, says
from model import GPT, GPTConfig
from aogpt.training import parse_stages, shares_at

pytestmark = pytest.mark.usefixtures('one_thread')  # tiny models: one thread, here and in the scripts run

AUTHORS = 'authors.pt'  # in workdir: the authors' format, 96 tokens, no vocab stored


@pytest.fixture(scope='module')
def files(workdir, char_ckpt):
    """Broken and mismatched inputs, written once into workdir/bad/."""
    bad = workdir / 'bad'
    bad.mkdir(exist_ok=True)
    (bad / 'truncated.pt').write_bytes((workdir / char_ckpt / 'ckpt.pt').read_bytes()[:5000])
    (bad / 'notes.pt').write_text('not a checkpoint\n')
    (bad / 'empty.txt').write_text('')
    (bad / 'blank.txt').write_text('\n  \n')
    (bad / 'words.txt').write_text('plain English words, far more than one block of thirty-two tokens. ' * 20)
    (bad / 'latin1.txt').write_bytes('caf\xe9 au lait\n'.encode('latin-1'))
    (bad / 'notext.jsonl').write_text('{"body": "hello"}\n')
    (bad / 'nulltext.jsonl').write_text('{"text": "hello"}\n{"text": null}\n')
    (bad / 'broken.jsonl').write_text('{"text": "hello"\n')
    (bad / 'table.csv').write_text('a,b\n')
    (bad / 'syntax.py').write_text('batch_size = 4\nlearning_rate = = 3\n')
    (bad / 'raises.py').write_text('batch_size = 1 / 0\n')
    (bad / 'listed.py').write_text('batch_size = [4, 8]\n')
    np.arange(5000, dtype=np.uint16).tofile(bad / 'big_ids.bin')  # GPT-2-range ids, no meta.pkl beside it
    (bad / 'odd.bin').write_bytes(b'\x01\x02\x03')
    (bad / 'empty.bin').write_bytes(b'')
    return 'bad'


@pytest.fixture(scope='module')
def hub_cache(workdir, char_ckpt, tmp_path_factory):
    """A Hugging Face Hub cache holding hf:own/rep/runs/ckpt.pt (the char checkpoint), as a download leaves it."""
    cache = tmp_path_factory.mktemp('hub')
    commit = 'a' * 40
    repo = cache / 'models--own--rep'
    (repo / 'refs').mkdir(parents=True)
    (repo / 'refs' / 'main').write_text(commit)
    snapshot = repo / 'snapshots' / commit / 'runs'
    snapshot.mkdir(parents=True)
    shutil.copy(workdir / char_ckpt / 'ckpt.pt', snapshot / 'ckpt.pt')
    return cache


@pytest.mark.parametrize('script,args,check', [
    ('sample.py', ['--num_samples=1', '--order=l2r', '--start=ROMEO:'], lambda out: 'ROMEO:' in out),
    ('eval_ppl.py', ['--dataset=shakespeare_char', '--max_chunks=2', '--ensemble=2'],
     lambda out: 'shakespeare_char' in out.splitlines()[-1]),
    ('train.py', [*conftest.TINY, '--dataset=shakespeare_char', '--out_dir=out-from-hub', '--max_iters=1',
                  '--eval_interval=1'], lambda out: 'saved checkpoint to out-from-hub' in out),
])
def test_init_from_a_hub_file(workdir, hub_cache, monkeypatch, script, args, check):
    monkeypatch.setenv('HF_HUB_CACHE', str(hub_cache))
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')  # served from the cache alone
    out = run_script(script, '--init_from=hf:own/rep/runs/ckpt.pt', '--device=cpu', *args, cwd=workdir)
    assert check(out.stdout), out.stdout


def test_hub_name_that_cannot_be_fetched(workdir, hub_cache, monkeypatch):
    monkeypatch.setenv('HF_HUB_CACHE', str(hub_cache))
    message = one_line_error('sample.py', '--init_from=hf:own/rep/missing.pt', cwd=workdir)
    says(message, 'could not fetch missing.pt', 'own/rep')


# every table row: the arguments, then the pieces of the one-line error they must give (the setting or
# value at fault, the file, the fix), whatever the words around them
TRAIN = [
    (['--batch_size=0'], ('--batch_size', 'at least 1', 'got 0')),
    (['--block_size=-4'], ('--block_size', 'at least 1')),
    (['--gradient_accumulation_steps=0'], ('--gradient_accumulation_steps', 'at least 1')),
    (['--eval_interval=0'], ('--eval_interval', 'at least 1')),
    (['--log_interval=-1'], ('--log_interval', 'at least 1')),
    (['--eval_iters=0'], ('--eval_iters', 'at least 1')),
    (['--max_iters=-1'], ('--max_iters', 'at least 0')),
    (['--learning_rate=0'], ('--learning_rate', '> 0')),
    (['--learning_rate=nan'], ('--learning_rate expects a finite float',)),
    (['--dropout=1'], ('--dropout', '[0, 1)')),
    (['--gate_init=-1e9', '--dtype=float16'], ('--gate_init', '[-10, 10]', 'got -1000000000.0')),
    (['--random_ratio=1.5'], ('--random_ratio', '[0, 1]')),
    (['--order_mix=l2r:0.5,random:0.4'], ('--order_mix', 'sum to 1', 'got 0.9')),
    (['--order_mix=l2r:-0.5,random:1.5'], ('--order_mix', 'share of l2r', '[0, 1]', 'got -0.5')),
    (['--fim_rate=0.5'], ('--fim_rate', 'add --order=l2r', 'got --order=mixed', 'drop --fim_rate')),
    (['--fim_rate=0.5', '--architecture=encoder', '--order=random'], ('--fim_rate', '--architecture=encoder')),
    (['--fim_rate=2', '--order=l2r'], ('--fim_rate', 'in [0, 1]', 'got 2')),
    (['--fim_rate=\u0665', '--order=l2r'], ('--fim_rate',)),
    (['--order_mix=l2r:0.5,sideways:0.5'], ('--order_mix', "'sideways' is not an order family", 'random, l2r, fim')),
    (['--order_mix=l2r:half,random:0.5'], ('--order_mix', 'share of l2r must be a number', "'half'")),
    (['--order_mix=l2r:0.5,random:0.5', '--random_ratio=0.5'],
     ('--order_mix', '--random_ratio', 'drop --random_ratio')),
    (['--order=l2r', '--order_mix=l2r:0.5,fim:0.5'], ('--order_mix', 'add --order=mixed', 'got --order=l2r')),
    (['--order_curriculum=500', '--max_iters=100'],
     ('--order_curriculum=500', 'longer than training', '--max_iters=100')),
    (['--order_curriculum=-1'], ('--order_curriculum', 'at least 0')),
    (['--order_stages=l2r:1@0/fim:1@500', '--max_iters=100'],
     ('--order_stages', 'iteration 500', 'after training ends', '--max_iters=100')),
    (['--order_stages=l2r:1@0/fim:1@50', '--order_mix=l2r:0.5,fim:0.5'], ('--order_stages', 'drop --order_mix')),
    (['--order_stages=l2r:1@0/fim:1@50', '--order_curriculum=10'], ('--order_stages', 'drop --order_curriculum')),
    (['--order_stages=l2r:1@0/fim:0.5@50'], ('--order_stages', 'sum to 1', 'got 0.5')),
    (['--order_stages=l2r:1@0/fim:1@٥٠'], ('--order_stages', 'MIX@ITERATION', 'whole number')),
    (['--order_stages=l2r:1@0/fim:1@\u0663'], ('--order_stages', "'\u0663' (U+0663)", 'digits 0-9')),
    (['--order_stages=l2r:1@0/fim:1@\u00b2'], ('--order_stages', "'\u00b2' (U+00B2)", 'digits 0-9')),
    (['--order_stages=l2r:1@0/fim:1@50%/random:1@100%', '--max_iters=1'],
     ('--order_stages', 'max_iters=1', "'random:1@100%'", 'no iteration of its own', 'train for more iterations')),
    (['--order=l2r', '--order_stages=l2r:1@0'], ('--order_stages', 'add --order=mixed', 'got --order=l2r')),
    (['--order_stages=l2r:1@0/random:1@50', '--fim_max_span=8'], ('--fim_max_span', 'add fim to --order_stages')),
    (['--order_mix=l2r:0.5,fim:0.5', '--fim_max_span=33'],
     ('--fim_max_span=33', 'longer than the block', 'at most 32')),
    (['--fim_max_span=8'], ('--fim_max_span', 'the mix has none', 'add fim to --order_mix')),
    # Python's int() and float() read other scripts' digits: every setting is read by configurator.parse_number
    (['--fim_max_span=\u0668', '--order_mix=l2r:0.5,fim:0.5'], ('--fim_max_span', "'\u0668' (U+0668)", 'digits 0-9')),
    (['--learning_rate=\u0663e-4'], ('--learning_rate', "'\u0663' (U+0663)", 'digits 0-9')),
    (['--architecture=encoder', '--fim_max_span=4', '--out_dir=out-enc-span'], ('encoder', 'drop --fim_max_span')),
    (['--architecture=encoder', '--order_mix=l2r:0.5,fim:0.5', '--out_dir=out-enc-mix'],
     ('encoder', 'not on a mix of orders', 'drop --order_mix')),
    (['--eval_gaps=span:4,middle:2'], ('--eval_gaps', "'middle:2'", 'span:L')),
    (['--eval_gaps=span:64'], ('--eval_gaps=span:64', '1 to 32 tokens')),
    (['--eval_gaps=range:1-8'], ('--eval_gaps', 'range or line gap', 'eval_ppl.py --gaps')),
    (['--lr_decay_iters=5'], ('--lr_decay_iters (5)', 'larger than --warmup_iters (5)')),
    (['--min_lr=1.0'], ('--min_lr (1.0)', 'not exceed --learning_rate')),
    (['--order=sideways'], ('--order', 'one of')),
    (['--target_injection=mul'], ('--target_injection', 'one of')),
    (['--target_injection=two_stream', '--architecture=encoder'], ("encoder is built from AO-GPT's adaLN blocks",
                                                                   "must be 'adaln'", "got 'two_stream'")),
    (['--target_injection=queries', '--position_encoding=learned'], ("target_injection='queries'",
                                                                     "position_encoding must turn queries at the target",
                                                                     "got 'learned'")),
    (['--init_from=out-char/ckpt.pt', '--out_dir=out-new', '--target_injection=two_stream', '--max_iters=0'],
     ('--target_injection=two_stream', "checkpoint's target_injection=adaln", 'takes its model')),
    (['--n_head=3'], ('divisible by n_head',)),
    (['--lerning_rate=1'], ("did you mean 'learning_rate'",)),
    (['--device=cuda'], ('--device=cuda', '0 CUDA device(s)', 'use --device=cpu')),
    (['--device=mps'], ('--device=mps', 'MPS is not available', 'use --device=cpu')),
    (['--device=gpu'], ('--device', "'cpu', 'cuda', 'cuda:N' or 'mps'", "got 'gpu'")),
    (['--dtype=float64'], ('--dtype', 'float32, bfloat16, float16')),
    (['--dataset=nope'], ('run python data/nope/prepare.py first',)),
    (['--block_size=200000'], ('use a smaller --block_size',)),
    (['--init_from=resume', '--out_dir=missing'], ('no checkpoint at missing/ckpt.pt',)),
    (['--eval_only', '--out_dir=missing'], ('no checkpoint at missing/ckpt.pt',)),
    (['--init_from=nowhere.pt'], ('checkpoint nowhere.pt not found',)),
    (['--init_from=gpt2-small'],
     ('checkpoint gpt2-small not found', 'gpt2 is GPT-2 small', 'gpt2-xl', 'save_pretrained')),
    (['--init_from=AUTO'], ('--init_from=AUTO', 'lower case', '--init_from=auto')),
    (['--init_from=bad/truncated.pt'], ('bad/truncated.pt', 'not a readable checkpoint')),
    (['--init_from=bad/notes.pt'], ('bad/notes.pt', 'not a readable checkpoint')),
    (['--init_from=hf:own'], ('hf:own is not a Hub name', 'hf:owner/repo for a model folder')),
    (['--out_dir=out-char'], ('out-char/ckpt.pt already exists',)),
    (['--init_from=out-bpe/ckpt.pt', '--out_dir=out-new'], ('reads GPT-2 BPE', 'shakespeare_char')),
    (['--init_from=resume', '--out_dir=out-bpe'], ('reads GPT-2 BPE', 'shakespeare_char')),
    (['--init_from=out-char/ckpt.pt', '--dataset=webtext', '--out_dir=out-new'],
     ('reads the ids of a 65-character', 'webtext', 'GPT-2 BPE')),
    (['--init_from=resume', '--out_dir=out-char', '--block_size=16'],
     ('--block_size=16', 'block_size=32', 'start a new out_dir')),
    (['--init_from=resume', '--out_dir=out-char', '--n_layer=8', '--max_iters=0'],
     ('--n_layer=8', 'n_layer=2', 'start a new out_dir')),
    (['--init_from=resume', '--out_dir=out-char', '--dropout=0.1', '--target_injection=add', '--max_iters=0'],
     ('--dropout=0.1', '--target_injection=add', 'dropout=0.0', 'target_injection=adaln', 'drop them to resume')),
    (['--init_from=out-char/ckpt.pt', '--out_dir=out-new', '--architecture=encoder', '--max_iters=0'],
     ('--architecture=encoder', "checkpoint's architecture=decoder", 'takes its model', 'train from scratch')),
    (['--init_from=resume', '--out_dir=out-char', '--dataset=sized96', '--max_iters=0'],
     ('reads the ids of a 65-character', 'sized96', '96-token')),
    ([f'--init_from={AUTHORS}', '--out_dir=out-new', '--max_iters=0'],
     ('reads the ids of a 96-token', 'shakespeare_char', '65-character')),
    (['--out_dir=bad/notes.pt/run', '--max_iters=0'],
     ('--out_dir=bad/notes.pt/run', 'Not a directory', 'pick a folder you can write to')),
    (['--out_dir=bad/notes.pt', '--max_iters=0'], ('--out_dir=bad/notes.pt', 'File exists')),
    (['bad'], ("'bad' is a directory", 'name a python file')),
    (['--init_from=data/shakespeare_char/meta.pkl'], ('data/shakespeare_char/meta.pkl', 'not a readable checkpoint')),
    (['bad/syntax.py'], ('bad/syntax.py', 'line 2', 'invalid syntax')),
    (['bad/raises.py'], ('bad/raises.py', 'ZeroDivisionError')),
    (['bad/listed.py'], ('batch_size', 'bad/listed.py', 'plain value')),
    (['bad/missing.py'], ("config file 'bad/missing.py' not found",)),
    (['--train_tokens=1e9'], ('--train_tokens=1,000,000,000 is more than', 'train.bin holds', 'at most that')),
    (['--train_tokens=32'], ('--train_tokens=32', 'block_size + 1', 'at least 33')),
    (['--train_tokens=5e3.5'], ('--train_tokens',)),
    (['--train_tokens=1.5'], ('--train_tokens', 'int')),
    (['--train_tokens=-1'], ('--train_tokens', 'at least 0')),
    (['--keep_best=val'], ('--keep_best', "'l2r', 'ao' or both weighted", "got 'val'")),
    (['--keep_best=l2r:0.1,ao:0'], ('--keep_best', 'l2r:0.1,ao:0.9')),
    (['--keep_best=l2r:1,l2r:2'], ('--keep_best', 'l2r:0.1,ao:0.9')),
    (['--keep_best=ao:\u0661'], ('--keep_best', 'l2r:0.1,ao:0.9')),
    (['--keep_best=l2r:0.5,'], ('--keep_best', 'l2r:0.1,ao:0.9')),
    (['--keep_best=l2r', '--val_dataset=wikitext2'], ('--keep_best', 'first half', 'drop --val_dataset=wikitext2')),
    (['--input_mask=1'], ('--input_mask', '[0, 1)')),
    (['--input_mask=0.1', '--architecture=encoder'], ('--input_mask', 'the encoder', 'drop it')),
]


@pytest.mark.parametrize('args,parts', TRAIN)
def test_train_bad_input(workdir, char_ckpt, bpe_ckpt, files, sized_data, args, parts):
    says(one_line_error('train.py', *conftest.TINY, '--dataset=shakespeare_char', *args, cwd=workdir), *parts)


SAMPLE = [
    (['--temperature=nan'], ('--temperature expects a finite float',)),
    (['--temperature=-0.5'], ('--temperature', '>= 0')),
    (['--top_p=0'], ('--top_p', '(0, 1]')),
    (['--top_p=1.5'], ('--top_p', '(0, 1]')),
    (['--top_k=0'], ('--top_k', 'None or an int >= 1')),
    (['--top_k=ten'], ('--top_k', 'None or an int >= 1', "got 'ten'")),
    (['--num_samples=0'], ('--num_samples', 'an int >= 1')),
    (['--max_new_tokens=0'], ('--max_new_tokens', 'None or an int >= 1')),
    (['--steps=0'], ('--steps', 'None or an int >= 1')),
    (['--steps=33'], ('--steps', 'from 1 to the 32 tokens', 'got 33')),
    (['--order=backwards'], ('--order', 'random, l2r, confidence')),
    (['--schedule=cubic'], ('--schedule', 'linear, cosine')),
    (['--confidence=margin'], ('--confidence', 'maxprob, entropy')),
    (['--mask_token='], ('--mask_token', 'at least 2 characters')),
    (['--device=cuda'], ('--device=cuda', '0 CUDA device(s)')),
    (['--dtype=half'], ('--dtype', 'one of')),
    (['--init_from=bad/truncated.pt'], ('is not a readable checkpoint',)),
    (['--init_from=bad/notes.pt'], ('is not a readable checkpoint',)),
    (['--out_dir=missing'], ('no checkpoint at missing/ckpt.pt',)),
    ([f'--init_from={AUTHORS}'], ('does not store its characters',)),
    (['--start=ROMEO{}'], ('not in the vocabulary', "'{', '}'")),
    (['--start=FILE:bad/none.txt'], ('cannot read', 'bad/none.txt')),
    (['--start=FILE:bad/latin1.txt'], ('cannot read', 'bad/latin1.txt', 'UTF-8')),
    (['--start=' + 'x' * 40], ('prompt is 40 tokens', 'block_size 32')),
    (['--infill=no marker'], ('infill template', 'no [MASK] marker')),
    (['--infill=a[MASK:0]'], ('[MASK:0]', 'whole number of tokens', 'as in [MASK:5]')),
    (['--infill=ROMEO: [MASK:-3] x'], ('[MASK:-3]', 'whole number')),
    (['--infill=a[MASK:2.5]'], ('[MASK:2.5] in the infill template',)),
    (['--infill=a[MASK:]'], ('[MASK:] in the infill template',)),
    (['--start=ROMEO:', '--infill=JULIET: [MASK:5]'], ('--start', '--infill', 'both give the prompt')),
    (['--infill=a[MASK:40]'], ('the infill template is 41 tokens long',)),
    (['--infill=a [MASK:\u0665] b [MASK:0] c'], ('[MASK:\u0665], [MASK:0] in the infill template', 'digits 0-9')),
    (['--infill=ROMEO@ [MASK:5] my lord \u00e9.'], ('not in the vocabulary', "'@', '\u00e9'")),
    (['--infill=a [MASK] b [MASK] c'], ('2 gaps of no given length', 'as [MASK:5]')),
    (['--infill=ROMEO: [MASK] lord', '--gap_cap=0'], ('--gap_cap', 'None or an int >= 1')),
    (['--infill=ROMEO: [MASK] lord', '--gap_cap=21'], ('gap_cap=21', 'from 1 to the 20 tokens', 'block_size 32')),
    (['--infill=ROMEO: [MASK] lord', '--gap_cap=\u0665'], ('--gap_cap',)),
    (['--infill=ROMEO: [MASK] lord', '--gap_context=0'], ('--gap_context', 'None or an int >= 1')),
    (['--infill=ROMEO: [MASK] lord', '--gap_choice=best'], ('--gap_choice', 'sample, mode')),
    (['--infill=ROMEO: [MASK] lord', '--steps=2'], ('no given length', 'drop --steps')),
    (['--infill=ROMEO: [MASK] lord', '--speculate=2'], ('no given length', 'drop --steps and --speculate')),
    (['--infill=' + 'x' * 32 + '[MASK]'], ('32 tokens long and a gap', 'block_size 32')),
]

FIM_SAMPLE = [
    (['--infill=a [MASK:2] b [MASK:3] c'], ('FIM GPT fills one gap', 'one [MASK]')),
    (['--infill=a [MASK] b [MASK:3] c'], ('FIM GPT fills one gap',)),
    (['--infill=ROMEO: [MASK] lord', '--order=random'], ('FIM GPT', 'drop --order')),
    (['--infill=ROMEO: [MASK] lord', '--gap_cap=18'], ('gap_cap=18', 'the 17 tokens', "3 sentinels")),
]


@pytest.mark.parametrize('args,parts', FIM_SAMPLE)
def test_a_fim_gpts_bad_gaps_are_one_line(workdir, fim_ckpt, args, parts):
    says(one_line_error('sample.py', f'--out_dir={fim_ckpt}', '--device=cpu', *args, cwd=workdir), *parts)


def test_the_encoder_refuses_a_gap_of_no_length_and_gen_ppl_what_sample_py_does(workdir, char_ckpt, mdm_ckpt):
    says(one_line_error('sample.py', f'--out_dir={mdm_ckpt}', '--device=cpu', '--infill=ROMEO: [MASK] lord',
                        cwd=workdir), 'the encoder fills a gap of a given length', '[MASK:n]')
    says(one_line_error('gen_ppl.py', f'--out_dir={mdm_ckpt}', '--device=cpu', '--infill=ROMEO: [MASK] lord',
                        f'--scorer={mdm_ckpt}/ckpt.pt', cwd=workdir), 'the encoder fills a gap of a given length',
         '[MASK:n]')
    says(one_line_error('gen_ppl.py', f'--out_dir={char_ckpt}', '--device=cpu', '--infill=ROMEO: [MASK] lord',
                        '--steps=4', f'--scorer={char_ckpt}/ckpt.pt', cwd=workdir), 'one token a step', 'drop --steps')
    says(one_line_error('gen_ppl.py', f'--out_dir={char_ckpt}', '--device=cpu', '--infill=ROMEO: [MASK] lord',
                        '--gap_cap=99', f'--scorer={char_ckpt}/ckpt.pt', cwd=workdir), 'gap_cap=99', 'from 1 to the')


@pytest.mark.parametrize('args,parts', SAMPLE)
def test_sample_bad_input(workdir, char_ckpt, files, args, parts):
    says(one_line_error('sample.py', f'--out_dir={char_ckpt}', '--device=cpu', *args, cwd=workdir), *parts)


EVAL = [
    (['--half=first'], ('--half', "'select' or 'report'", "got 'first'")),
    (['--half=report', '--dataset=wikitext2'], ('--half=report', 'token file', 'not wikitext2', 'drop --half')),
    (['--dataset=wikitext3'], ("unknown dataset 'wikitext3'", 'wikitext2, wikitext103, ptb')),
    (['--dataset=,'], ('--dataset is empty',)),
    (['--ensemble=0'], ('--ensemble', 'at least 1')),
    (['--max_tokens=0'], ('--max_tokens', 'at least 1')),
    (['--max_chunks=-1'], ('--max_chunks', 'at least 0')),
    (['--block_size=-1'], ('--block_size', 'at least 0')),
    (['--block_size=64'], ('larger than the checkpoint',)),
    (['--split=dev'], ('--split', 'test, validation, train')),
    (['--gaps=span:\u0664'], ('--gaps', "'span:\u0664'", "'\u0664' (U+0664)", 'digits 0-9')),
    (['--fills=greedy'], ('--fills=greedy', 'length is not given', '--gaps=range:1-16')),
    (['--fills=greedy,best', '--gaps=range:1-4'], ('--fills', "got 'best'", 'greedy and/or sample')),
    (['--gaps=range:1-8', '--block_size=32'], ('--block_size=32', 'AO-GPT place the suffix', 'at most 25')),
    (['--device=cuda'], ('--device=cuda', '0 CUDA device(s)')),
    (['--out_dir=missing'], ('no checkpoint at missing/ckpt.pt',)),
    (['--init_from=bad/truncated.pt'], ('is not a readable checkpoint',)),
    (['--init_from=out-char'], ('out-char is a folder without a config.json', 'out-char/ckpt.pt')),  # a run folder
    (['--out_json=nowhere/ppl.json'], ('--out_json=nowhere/ppl.json', 'folder does not exist')),
    (['--data_file=nope.txt'], ('nope.txt not found',)),
    (['--data_file=bad/table.csv'], ('--data_file', '.txt, .jsonl or .bin')),
    (['--data_file=bad/empty.txt'], ('bad/empty.txt holds no text',)),
    (['--data_file=bad/blank.txt'], ('bad/blank.txt holds no text',)),
    (['--data_file=bad/latin1.txt'], ('bad/latin1.txt is not UTF-8 text',)),
    (['--data_file=bad/notext.jsonl'], ('bad/notext.jsonl line 1', 'no "text" string')),
    (['--data_file=bad/nulltext.jsonl'], ('bad/nulltext.jsonl line 2', 'no "text" string')),
    (['--data_file=bad/broken.jsonl'], ('bad/broken.jsonl line 1 is not JSON',)),
    (['--data_file=bad/odd.bin'], ('bad/odd.bin is not a token file',)),
    (['--data_file=bad/empty.bin'], ('bad/empty.bin is not a token file',)),
    pytest.param(['--data_file=bad/words.txt'], ('reads the ids of a 65-character', 'bad/words.txt', 'GPT-2 BPE'),
                 marks=pytest.mark.needs('gpt2_bpe')),
    (['--out_dir=out-bpe'], ('reads GPT-2 BPE', 'shakespeare_char', '65-character')),
    ([f'--init_from={AUTHORS}', '--data_file=bad/big_ids.bin'],
     ('reads the ids of a 96-token', 'bad/big_ids.bin', 'GPT-2 BPE')),
    ([f'--init_from={AUTHORS}', '--data_file=bad/sized96/big_ids.bin'],
     ('bad/sized96/big_ids.bin', 'token id 4999', 'only 96 tokens')),
    ([f'--init_from={AUTHORS}', '--max_chunks=2'],  # no characters stored, and 96 ids against 65
     ('reads the ids of a 96-token', 'shakespeare_char', '65-character')),
    (['--data_file=data/sized96/val.bin'], ('reads the ids of a 65-character', 'data/sized96/val.bin', '96-token')),
    (['--dataset=ptb', '--data_dir=nowhere'], ('--data_dir=nowhere does not exist', 'drop --data_dir')),
    (['--dataset=ptb', '--data_dir=bad/notes.pt'], ('--data_dir=bad/notes.pt is a file', 'drop --data_dir')),
    (['--dataset=ptb', '--data_dir=bad'], ('bad/ptb/ptb.test.txt not found', 'in --data_dir=bad')),
    # HF_DATASETS_OFFLINE=1: no network
    (['--dataset=ptb', '--data_dir=', '--out_dir=out-bpe'], ('could not fetch ptb',)),
]


@pytest.mark.parametrize('args,parts', EVAL)
def test_eval_ppl_bad_input(workdir, char_ckpt, bpe_ckpt, files, sized_data, args, parts):
    says(one_line_error('eval_ppl.py', f'--out_dir={char_ckpt}', '--device=cpu', *args, cwd=workdir), *parts)


def test_a_resume_with_another_prefix_or_moved_knots_is_one_line_and_keeps_the_checkpoint(workdir):
    """A resumed run goes on with the prefix, the selection and the order stages it started with: another
    --train_tokens or --keep_best, or knots in percentages that another --max_iters would move, end in one line."""
    stages = '--order_stages=l2r:1@0/random:1@50%'
    first = ['--train_tokens=2000', '--keep_best=l2r', stages]
    conftest.train(workdir, 'out-resume-checks', *first, '--max_iters=4', '--eval_interval=4', '--lr_decay_iters=8')
    path = workdir / 'out-resume-checks' / 'ckpt.pt'
    before = path.read_bytes()
    for args, parts in [(['--train_tokens=3000', '--keep_best=l2r', stages], ('--train_tokens=3000', '2000',
                                                                               'resume with --train_tokens=2000')),
                        (['--keep_best=l2r', stages], ('--train_tokens=0', 'resume with --train_tokens=2000')),
                        (['--train_tokens=2000', stages], ("--keep_best=''", "resume with --keep_best='l2r'")),
                        ([*first[:2], stages], ('--order_stages', '--max_iters=8', 'percentage', 'in iterations'))]:
        says(one_line_error('train.py', *conftest.TINY, '--dataset=shakespeare_char', '--out_dir=out-resume-checks',
                            '--init_from=resume', '--max_iters=8', '--lr_decay_iters=8', *args, cwd=workdir), *parts)
    assert path.read_bytes() == before


@pytest.mark.parametrize('mirror,problem', [('nowhere', 'does not exist'), ('bad/notes.pt', 'is a file')])
def test_a_wrong_data_dir_in_the_environment_is_named(workdir, char_ckpt, files, monkeypatch, mirror, problem):
    monkeypatch.setenv('AOGPT_DATA_DIR', mirror)  # --data_dir's default
    says(one_line_error('eval_ppl.py', f'--out_dir={char_ckpt}', '--device=cpu', '--dataset=ptb', cwd=workdir),
         f'AOGPT_DATA_DIR={mirror} {problem}', 'unset AOGPT_DATA_DIR')


BENCH = [
    (['--train_steps=0'], ('--train_steps', 'at least 1')),
    (['--rounds=0'], ('--rounds', 'at least 1')),
    (['--batch_size=-1'], ('--batch_size', 'at least 1')),
    (['--dtype=float64'], ('--dtype', 'one of')),
    (['--device=cuda'], ('--device=cuda', '0 CUDA device(s)')),
    (['--n_embd=30'], ('--n_embd (30)', 'divisible by --n_head (4)')),
    (['--run=train,speed'], ('--run', 'train, eval, sample')),
    (['--sample_steps=0'], ('--sample_steps', 'from 1 to sample_block_size')),
    (['--sample_steps=64,2048'], ('--sample_steps', 'from 1 to sample_block_size')),
    (['--run=speculate', '--speculate_random=False'], ('--speculate_random=False', 'give it a --checkpoint')),
    (['--run=train', '--checkpoint=ckpt.pt'], ('--checkpoint is read only by --run=speculate and --run=step',
                                                'not by --run=train')),
    (['--run=step', '--step_batches=0'], ('--step_batches entries', 'at least 1')),
    (['--run=step', '--step_batches=1,x'], ('--step_batches', 'comma list of ints', "'x'")),
    (['--run=step', '--step_tokens=0'], ('--step_tokens', 'at least 1')),
    (['--run=step', '--sync_check=True'], ('--sync_check', 'needs --device=cuda')),
    # --sample_steps's default does not fit a block of 64, but --run=generate does not read it
    (['--run=generate', '--sample_block_size=64', '--generate_tokens=100'],
     ('--generate_tokens', 'sample_block_size - 2 (62)', 'got 100')),
    # ², a digit to str.isdigit that int() refuses
    (['--run=speculate', '--speculate_k=\u00b2'], ('--speculate_k', "'auto'", "got '\u00b2'")),
    (['--sample_steps=\u00b2'], ('--sample_steps', 'from 1 to sample_block_size')),
    (['--sample_steps=\u0666\u0664'], ('--sample_steps', 'from 1 to sample_block_size', "got '\u0666\u0664'")),
    (['--run=step', '--authors_dir=.'], ('--authors_dir', 'give --run=long --sample_block_size=1024 --cond_dim=128')),
    (['--run=long', '--cond_dim=128', '--authors_dir=data'], ('--authors_dir=data has no model_AOGPT_generate.py',
                                                              "a checkout of the authors' repository")),
]


@pytest.mark.parametrize('args,parts', BENCH)
def test_bench_bad_input(workdir, args, parts):
    says(one_line_error('bench.py', *args, cwd=workdir), *parts)


def test_bench_speculate_refuses_an_encoder_in_one_line(workdir, mdm_ckpt):
    says(one_line_error('bench.py', '--run=speculate', f'--checkpoint={mdm_ckpt}/ckpt.pt', '--speculate_random=False',
                        cwd=workdir), 'is an encoder', 'give a decoder checkpoint')


def test_no_gpt2_bpe_offline_is_one_line(workdir, bpe_ckpt, tmp_path, monkeypatch):
    monkeypatch.setenv('TIKTOKEN_CACHE_DIR', str(tmp_path))  # an empty cache, and no network:
    monkeypatch.setenv('HTTPS_PROXY', 'http://127.0.0.1:9')  # nothing listens there
    out = run_script('sample.py', f'--out_dir={bpe_ckpt}', '--device=cpu', cwd=workdir, check=False)
    assert out.returncode == 1 and out.stderr.startswith('error: could not load the GPT-2 BPE')
    assert out.stderr.count('\n') == 1


# -----------------------------------------------------------------------------
# inputs that say less than ours (a tokenizer known by its size, no EMA weights): the scripts go on

SIGMA = 'sigma.pt'  # in workdir: the authors' sigma-GPT format, raw weights only, 96 tokens


def stripped(workdir, char_ckpt, name, *keys):
    """The char checkpoint without some of its entries, saved as name in workdir."""
    checkpoint = torch.load(workdir / char_ckpt / 'ckpt.pt', weights_only=True)
    torch.save({k: v for k, v in checkpoint.items() if k not in keys}, workdir / name)
    return name


def output_of(script, *args, cwd):
    """Run a script to the end in this process (fast: torch is already imported); return its stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run_here(script, *args, cwd=cwd)
    return out.getvalue()


def ppl_of(workdir, *args):
    """(the perplexities eval_ppl.py reports for 3 chunks of one set, its stdout)."""
    out = output_of('eval_ppl.py', '--device=cpu', '--max_chunks=3', '--out_json=ppl.json', *args, cwd=workdir)
    return next(iter(json.loads((workdir / 'ppl.json').read_text())['results'].values()))['ppl'], out


@pytest.fixture(scope='module')
def char_ppl(workdir, char_ckpt):
    return ppl_of(workdir, f'--out_dir={char_ckpt}', '--dataset=shakespeare_char')[0]


def test_meta_with_only_vocab_size_is_scored_by_its_ids(workdir, char_ckpt, sized_data, char_ppl):
    # the same ids as shakespeare_char, without their characters: the same numbers
    ppl, out = ppl_of(workdir, f'--out_dir={char_ckpt}', '--data_file=data/sized65/val.bin')
    assert ppl == char_ppl
    assert 'note: data/sized65/val.bin gives only a vocabulary size (65), so the tokens cannot be checked' in out


def test_checkpoint_without_vocabulary_is_scored_with_a_note(workdir, char_ckpt, char_ppl):
    path = stripped(workdir, char_ckpt, 'no-vocab.pt', 'vocab')  # as nanoGPT saves one: 65 ids, no characters
    ppl, out = ppl_of(workdir, f'--init_from={path}')
    assert ppl == char_ppl
    assert 'note: the checkpoint gives only a vocabulary size (65), so the tokens cannot be checked' in out


def test_train_on_meta_with_only_vocab_size(workdir, sized_data):
    output_of('train.py', *conftest.TINY, '--dataset=sized65', '--out_dir=out-sized', '--max_iters=2',
              '--eval_interval=2', cwd=workdir)
    checkpoint = torch.load(workdir / 'out-sized' / 'ckpt.pt', weights_only=True)
    assert checkpoint['vocab'] is None and checkpoint['model_args']['vocab_size'] == 65


def test_train_from_a_checkpoint_without_ema_weights(workdir, sized_data):
    # at iteration 0 the warm-up learning rate is 0, so after one step the weights are still those read
    out = output_of('train.py', *conftest.TINY_RUN, '--dataset=sized96', f'--init_from={SIGMA}',
                    '--out_dir=out-sigma-raw', '--max_iters=1', '--eval_interval=1', cwd=workdir)
    assert f'note: {SIGMA} holds no EMA weights: reading its raw weights' in out
    assert 'note: the checkpoint and sized96 give only a vocabulary size (96)' in out
    saved = torch.load(workdir / 'out-sigma-raw' / 'ckpt.pt', weights_only=True)
    assert saved['model_args']['target_injection'] == 'add'
    raw = torch.load(workdir / SIGMA, weights_only=True)['model']
    assert saved['model'].keys() == raw.keys()
    assert all(torch.equal(saved['model'][k], v) for k, v in raw.items())


def test_eval_of_a_checkpoint_without_ema_weights(workdir, sized_data):
    out = output_of('eval_ppl.py', f'--init_from={SIGMA}', '--data_file=data/sized96/val.bin',
                    '--max_chunks=2', '--out_json=sigma.json', '--device=cpu', cwd=workdir)
    assert f'note: {SIGMA} holds no EMA weights: reading its raw weights' in out
    # independently: the raw weights' own left-to-right loss on the first two 32-token pieces of val.bin
    fixture = torch.load(workdir / SIGMA, weights_only=True)
    model = GPT(GPTConfig(**fixture['model_args'], target_injection='add')).eval()
    model.load_state_dict(fixture['model'])
    x = torch.from_numpy(np.fromfile(workdir / 'data' / 'sized96' / 'val.bin', dtype=np.uint16)[:64].astype(np.int64))
    with torch.no_grad():
        _, loss = model(x.view(2, 32), torch.arange(32).expand(2, 32))
    result = json.loads((workdir / 'sigma.json').read_text())['results']['data/sized96/val.bin']
    assert result['ppl']['l2r'] == pytest.approx(math.exp(loss.item()), rel=1e-5)


def test_a_checkpoint_trained_left_to_right_samples_left_to_right_with_a_note(workdir, char_ckpt):
    checkpoint = torch.load(workdir / char_ckpt / 'ckpt.pt', weights_only=True)
    checkpoint['config']['order'] = 'l2r'  # as train.py --order=l2r records it
    torch.save(checkpoint, workdir / 'l2r-only.pt')
    args = ['--init_from=l2r-only.pt', '--device=cpu', '--num_samples=2', '--infill=ROMEO: [MASK:6] lord']
    out = output_of('sample.py', *args, cwd=workdir)
    assert 'note: decoding left to right (order=l2r): the model was trained left to right only' in out
    assert samples(out) == samples(output_of('sample.py', *args, '--order=l2r', cwd=workdir))


def test_sample_from_a_checkpoint_without_ema_weights(workdir, char_ckpt):
    path = stripped(workdir, char_ckpt, 'no-ema.pt', 'ema', 'ema_updates', 'optimizer', 'scaler')  # nanoGPT's kind
    args = ['--device=cpu', '--num_samples=2', '--steps=8']
    out = output_of('sample.py', f'--init_from={path}', *args, cwd=workdir)
    raw = output_of('sample.py', f'--out_dir={char_ckpt}', '--use_ema=False', *args, cwd=workdir)
    ema = output_of('sample.py', f'--out_dir={char_ckpt}', *args, cwd=workdir)
    assert f'note: {path} holds no EMA weights: reading its raw weights' in out
    assert samples(out) == samples(raw) != samples(ema)


@pytest.mark.parametrize('path', ['bad/truncated.pt', 'data/shakespeare_char/meta.pkl'])
def test_unreadable_checkpoint_is_one_line_on_stderr(workdir, files, path):
    # a pickle that is not a checkpoint made torch warn about its protocol, in two more lines
    out = run_script('sample.py', f'--init_from={path}', '--device=cpu', cwd=workdir, check=False)
    assert out.returncode == 1 and out.stderr.startswith('error: ')
    says(out.stderr, path, 'not a readable checkpoint')
    assert out.stderr.count('\n') == 1, out.stderr


def test_empty_dataset_names_the_folders(workdir):
    message = one_line_error('train.py', *conftest.TINY, '--dataset=', cwd=workdir)
    says(message, '--dataset is empty', 'name a folder of data/', 'shakespeare_char')


# -----------------------------------------------------------------------------
# a new run from GPT-2 or from a checkpoint of ours: each bad start one line, the checkpoint in out_dir kept

@pytest.mark.parametrize('shape, parts', [
    (dict(tie_word_embeddings=False), ('an untied head', "sigma-GPT's recipe", 'only GPT-2')),
    (dict(activation_function='relu'), ("activation_function='relu'",)),
    (dict(n_inner=24), ('n_inner=24',)),
])
def test_gpt2_variants_the_recipe_cannot_hold_are_one_line(workdir, bpe_shakespeare, tmp_path, shape, parts):
    folder = conftest.save_gpt2(tmp_path / 'bad-gpt2', **shape)
    says(one_line_error('train.py', *conftest.GPT2_RUN, f'--init_from={folder}', '--out_dir=out-bad', '--max_iters=0',
                        cwd=workdir), folder, *parts)
    assert not (workdir / 'out-bad' / 'ckpt.pt').exists()


@pytest.fixture
def kept_checkpoint(workdir, char_ckpt):
    """A run folder holding a checkpoint: every bad start below leaves it byte for byte (--overwrite=True)."""
    folder = workdir / 'out-kept'
    folder.mkdir(exist_ok=True)
    (folder / 'ckpt.pt').write_bytes((workdir / char_ckpt / 'ckpt.pt').read_bytes())
    before = (folder / 'ckpt.pt').read_bytes()
    yield ['--out_dir=out-kept', '--overwrite=True']
    assert (folder / 'ckpt.pt').read_bytes() == before


@pytest.mark.parametrize('args, parts', [
    (['--dataset=shakespeare_char'], ('reads GPT-2 BPE tokens', 'shakespeare_char', '65-character')),
    (['--n_layer=4'], ('--n_layer=4', 'n_layer=2', 'takes its model')),
    (['--block_size=40'], ('--block_size=40', 'block_size 39', 'use --block_size=39 or less')),
    (['--target_injection=adaln'], ('--target_injection=adaln', "target_injection=add", 'takes its model')),
    (['--target_injection=two_stream'], ('--target_injection=two_stream', "target_injection=add", 'takes its model')),
])
def test_bad_starts_from_gpt2_are_one_line_and_keep_the_checkpoint(workdir, bpe_shakespeare, gpt2_folder,
                                                                   kept_checkpoint, args, parts):
    says(one_line_error('train.py', *conftest.GPT2_RUN, f'--init_from={gpt2_folder}', '--max_iters=0',
                        *kept_checkpoint, *args, cwd=workdir), *parts)


@pytest.mark.parametrize('args, parts', [
    (['--init_from=out-mdm/ckpt.pt', '--order_mix=l2r:0.5,fim:0.5'], ('encoder', 'drop --order_mix')),
    (['--init_from=out-mdm/ckpt.pt', '--order=l2r', '--fim_rate=0.5'], ('--fim_rate', 'an encoder')),
    (['--init_from=out-mdm/ckpt.pt', '--architecture=decoder'], ('--architecture=decoder', 'architecture=encoder')),
    (['--init_from=out-char/ckpt.pt', '--block_size=64'], ('--block_size=64', 'block_size 32', 'or less')),
])
def test_bad_starts_from_our_checkpoints_are_one_line_and_keep_the_checkpoint(workdir, mdm_ckpt, kept_checkpoint,
                                                                              args, parts):
    says(one_line_error('train.py', *conftest.TINY_RUN, '--dataset=shakespeare_char', '--max_iters=0',
                        *kept_checkpoint, *args, cwd=workdir), *parts)


def test_gpt2_offline_without_a_copy_says_how_to_provide_it(workdir, bpe_shakespeare, kept_checkpoint, tmp_path):
    """A fresh process with the Hub offline and an empty cache (huggingface_hub reads both when imported)."""
    env = os.environ | dict(HF_HUB_OFFLINE='1', HF_HOME=str(tmp_path / 'empty-hf-home'))
    out = subprocess.run([sys.executable, os.path.join(conftest.ROOT, 'train.py'), *conftest.GPT2_RUN, '--init_from=gpt2',
                          '--max_iters=0', *kept_checkpoint], cwd=workdir, env=env, capture_output=True, text=True,
                         timeout=300)
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0 and len(lines) == 1, out.stderr
    says(lines[0], "could not load GPT-2's weights 'gpt2'", 'save_pretrained', '--init_from=gpt2-local')


def test_a_gpt2_folder_cut_in_half_is_one_line_and_keeps_the_checkpoint(workdir, bpe_shakespeare, gpt2_folder,
                                                                        kept_checkpoint, tmp_path):
    folder = shutil.copytree(gpt2_folder, tmp_path / 'cut-gpt2')
    weights = folder / 'model.safetensors'
    weights.write_bytes(weights.read_bytes()[:weights.stat().st_size // 2])
    says(one_line_error('train.py', *conftest.GPT2_RUN, f'--init_from={folder}', '--max_iters=0', *kept_checkpoint,
                        cwd=workdir), f"GPT-2's weights '{folder}' cannot be read", 'SafetensorError', 'cut short',
         'save the model again')


def test_a_folder_of_another_model_type_is_named(workdir, bpe_shakespeare, kept_checkpoint, tmp_path):
    from transformers import BertConfig, BertModel
    BertModel(BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=16)).save_pretrained(tmp_path / 'bert')
    says(one_line_error('train.py', *conftest.GPT2_RUN, f'--init_from={tmp_path}/bert', '--max_iters=0',
                        *kept_checkpoint, cwd=workdir), "model_type 'bert'", "GPT-2's (model_type 'gpt2')")


@pytest.mark.parametrize('name', ['gpt2', 'openai-community/gpt2', 'openai-community/gpt2-xl'])
def test_gpt2_by_the_hubs_names_old_and_new(workdir, bpe_shakespeare, kept_checkpoint, monkeypatch, name):
    """train.py hands each name to the conversion (stood in for here: no download), as it does 'gpt2'."""
    from aogpt import checkpoints, runs

    def convert(path):
        raise checkpoints.CheckpointError(f'converting {path}')
    monkeypatch.setattr(runs, 'gpt2_checkpoint', convert)
    says(one_line_error('train.py', *conftest.GPT2_RUN, f'--init_from={name}', '--max_iters=0', *kept_checkpoint,
                        cwd=workdir), f'converting {name}')
    assert not checkpoints.is_gpt2('openai-community/gpt3')


@pytest.fixture(scope='module')
def folder_lm():
    """A model folder's causal LM (aogpt/modeling_ao_gpt.py) of random weights, and two rows of 4 ids."""
    from aogpt.modeling_ao_gpt import AOGPTConfig, AOGPTForCausalLM
    torch.manual_seed(0)
    model = AOGPTForCausalLM(AOGPTConfig(model_args=dict(block_size=16, vocab_size=11, n_layer=1, n_head=2, n_embd=16,
                                                         cond_dim=8))).eval()
    model.generation_config.pad_token_id = model.config.bos_token_id
    return model, torch.randint(11, (2, 4))


def both_caches(model, x):
    """forward's cache and past_key_values, both given: an empty cache, and one holding x's first two columns."""
    from transformers import DynamicCache
    from aogpt.modeling_ao_gpt import CACHE_FIELD
    return dict(cache=DynamicCache(), past_key_values=getattr(model(x[:, :2]), CACHE_FIELD))


@pytest.mark.parametrize('call, words', [
    (lambda m, x: m.log_likelihood(x, orders='random'), ("orders (E, 4)", "got 'random'", 'torch.randperm(4)')),
    (lambda m, x: m(x, attention_mask=torch.tensor([[1, 1, 0.5, 1], [1, 1, 1, 1]])),
     ('values other than 0 and 1 (0.5)',)),
    (lambda m, x: m(x[:, 2:], **both_caches(m, x)),
     ('cache given twice', 'pass one of them')),
    (lambda m, x: m.generate(x, attention_mask=torch.tensor([[0, 0, 0, 0], [1, 1, 1, 1]]), max_new_tokens=2),
     ('prompt row(s) [0] hold padding alone',)),
    (lambda m, x: m.generate(x, attention_mask=torch.ones(2, 5, dtype=torch.long), max_new_tokens=2),
     ('attention_mask of shape (2, 5) for (2, 4)',)),
    (lambda m, x: m.generate(x, attention_mask=torch.ones(2, 3, dtype=torch.long), max_new_tokens=2),
     ('attention_mask of shape (2, 3) for (2, 4)',))],
    ids=['orders-by-name', 'half-a-mask', 'two-caches', 'a-row-of-padding', 'mask-too-wide', 'mask-too-narrow'])
def test_a_folders_methods_name_the_bad_input(folder_lm, call, words):
    with pytest.raises(ValueError) as error:
        call(*folder_lm)
    says(str(error.value), *words)
    assert '\n' not in str(error.value)


def test_percentage_stages_never_share_an_iteration():
    """At 50 iterations 1% is iteration 0.5: rounded half up, and a knot after the one before it gets an iteration of
    its own, so each stage's mix is trained on; two knots written at one place stay a step."""
    stages = parse_stages('l2r:1@0/fim:1@1%/random:1@2%', 50)
    assert [i for i, _ in stages] == [0, 1, 2]
    assert [shares_at(stages, i) for i in range(3)] == [mix for _, mix in stages]
    assert [i for i, _ in parse_stages('l2r:1@0/fim:1@5%/random:1@10%/l2r:1@10%', 50)] == [0, 3, 5, 5]


def test_samples_and_chunks_fill_the_block_the_run_trained_on(workdir, short_trained):
    out = output_of('sample.py', f'--init_from={short_trained}', '--device=cpu', '--num_samples=2', cwd=workdir)
    assert 'note: the checkpoint was trained on blocks of 16 tokens (its model reads 32): a sample fills 16' in out
    assert [len(text) for text in samples(out)] == [16, 16]
    longer = output_of('sample.py', f'--init_from={short_trained}', '--device=cpu', '--num_samples=1',
                       '--max_new_tokens=32', cwd=workdir)
    assert [len(text) for text in samples(longer)] == [32]
    _, out = ppl_of(workdir, f'--init_from={short_trained}', '--dataset=shakespeare_char')
    assert 'chunks of 16; --block_size sets their length' in out
    # a gap of no given length: up to what the template of 12 leaves in 16, unless --gap_cap says more
    gap = ['--device=cpu', '--num_samples=4', '--infill=ROMEO: [MASK] lord']
    out = output_of('sample.py', f'--init_from={short_trained}', *gap, cwd=workdir)
    assert 'gaps of up to 4 tokens are tried; --gap_cap sets the longest' in out
    assert all(1 <= int(L) <= 4 for L in re.findall(r'gap of (\d+) tokens', out)) and out.count('gap of') == 4
    assert 'gaps of up to' not in output_of('sample.py', f'--init_from={short_trained}', *gap, '--gap_cap=10',
                                            cwd=workdir)
    says(one_line_error('sample.py', f'--init_from={short_trained}', '--device=cpu', '--infill=ROMEO: [MASK] my lord!',
                        cwd=workdir), 'the template of 16 tokens', 'trained on', 'set --gap_cap')
    assert json.loads((workdir / 'ppl.json').read_text())['block_size'] == 16


def test_the_head_runs_what_wraps_or_replaces_it_at_any_rows():
    """A decoding step's few rows go through the head's module, as many rows do: peft's LoRA around it,
    quantize_dynamic's head in its place (where the fast path, reading weight and bias, gave other logits or raised)."""
    from peft import LoraConfig, get_peft_model
    lora = conftest.tiny_model()
    get_peft_model(lora, LoraConfig(r=2, target_modules=['lm_head'], init_lora_weights=False))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # torch.ao.quantization's move to torchao
        quantized = torch.ao.quantization.quantize_dynamic(conftest.tiny_model(), {torch.nn.Linear}, torch.qint8)
    h = torch.randn(6, 32)
    with torch.no_grad():
        for model in (lora, quantized):
            torch.testing.assert_close(model.head(h), model.lm_head(h), atol=1e-6, rtol=0)


def test_lora_on_a_folders_head_is_the_networks(folder_lm):
    """peft puts its LoRA on the folder's lm_head, which the network's forward reads: the logits move, and are the
    merged model's."""
    from peft import LoraConfig, get_peft_model
    model, x = copy.deepcopy(folder_lm[0]), folder_lm[1]
    with torch.no_grad():
        base = model(x).logits[..., :-1]
        tuned = get_peft_model(model, LoraConfig(r=2, target_modules=['lm_head'], init_lora_weights=False))
        adapted = tuned(input_ids=x).logits[..., :-1]
        merged = tuned.merge_and_unload()(x).logits[..., :-1]
    assert (adapted - base).abs().max() > 0.1
    torch.testing.assert_close(merged, adapted, atol=1e-5, rtol=0)


def test_a_libc_without_mallopt_leaves_malloc_as_it_is(monkeypatch):
    from aogpt import common
    monkeypatch.setattr(common.ctypes, 'CDLL', lambda name: object())  # musl's libc: no mallopt
    common.hold_freed_memory()


# -----------------------------------------------------------------------------
# messages that pointed the wrong way (issue 88): each now names the right problem and fix


def test_a_converted_gpt2_evaluates_at_the_block_it_took(workdir, bpe_shakespeare, gpt2_folder, capsys):
    """A conversion takes the parent's block (39 of 40 positions); --eval_only of its output reads that block too."""
    run_here('train.py', *conftest.GPT2_RUN, f'--init_from={gpt2_folder}', '--max_iters=0', '--out_dir=out-converted',
             cwd=workdir)
    capsys.readouterr()
    run_here('train.py', *conftest.GPT2_RUN, '--out_dir=out-converted', '--eval_only', cwd=workdir)
    assert 'iter 0: EMA loss l2r' in capsys.readouterr().out


SCARCE = os.path.join(conftest.ROOT, 'config', 'train_shakespeare_char_scarce.py')
SCARCE_RUN = [*conftest.TINY, '--dataset=shakespeare_char', '--train_tokens=0', '--max_iters=2', '--eval_interval=2',
              '--warmup_iters=1', '--lr_decay_iters=2']


@pytest.mark.parametrize('args', [['--order=l2r'], ['--order=l2r', '--order_mix='], ['--architecture=encoder']])
def test_the_little_data_config_trains_a_gpt_or_the_encoder_without_its_mix(workdir, char_ckpt, args, capsys):
    """The config's mix is a mixed run's: --order=l2r (or the encoder) on the command line drops it with a note, and
    the run records none."""
    out_dir = f"out-scarce-{'-'.join(a.strip('-').replace('=', '') for a in args)}"
    run_here('train.py', SCARCE, *SCARCE_RUN, *args, f'--out_dir={out_dir}', cwd=workdir)
    out = capsys.readouterr().out
    assert ('note: --order_mix of a config file' in out) == (args[-1] != '--order_mix='), out
    assert torch.load(workdir / out_dir / 'ckpt.pt', weights_only=False)['config']['order_mix'] == ''


def test_a_mix_typed_for_a_gpt_or_the_encoder_is_still_refused(workdir, char_ckpt):
    says(one_line_error('train.py', SCARCE, *SCARCE_RUN, '--order=l2r', '--order_mix=l2r:0.5,fim:0.5',
                        '--out_dir=out-scarce-typed', cwd=workdir), '--order_mix', 'add --order=mixed')
    says(one_line_error('train.py', SCARCE, *SCARCE_RUN, '--architecture=encoder', '--order_curriculum=5',
                        '--out_dir=out-scarce-typed', cwd=workdir), 'encoder', 'drop --order_curriculum')


def test_auto_with_another_prefix_names_the_runs_own_not_a_resume(workdir, char_ckpt):
    """--init_from=resume refuses another --train_tokens too: auto names the run's own value."""
    run_here('train.py', *conftest.TINY, '--dataset=shakespeare_char', '--train_tokens=5000', '--max_iters=2',
             '--out_dir=out-auto-prefix', cwd=workdir)
    message = one_line_error('train.py', *conftest.TINY, '--dataset=shakespeare_char', '--train_tokens=6000',
                             '--max_iters=2', '--out_dir=out-auto-prefix', '--init_from=auto', cwd=workdir)
    says(message, "give the run's own --train_tokens=5000", 'or start a new out_dir')
    assert '--init_from=resume' not in message


def test_the_encoder_choosing_its_best_by_l2r_is_noted(workdir, char_ckpt, capsys):
    run_here('train.py', *conftest.TINY, '--dataset=shakespeare_char', '--architecture=encoder', '--max_iters=2',
             '--keep_best=l2r', '--out_dir=out-encoder-best', cwd=workdir)
    says(capsys.readouterr().out, 'note: --keep_best=l2r', 'encoder', '--keep_best=ao')


def test_a_prefix_shorter_than_a_gpt2_parents_block_says_the_block_is_the_parents(workdir, bpe_shakespeare,
                                                                                  gpt2_folder):
    says(one_line_error('train.py', *conftest.GPT2_RUN, f'--init_from={gpt2_folder}', '--train_tokens=30',
                        '--out_dir=out-gpt2-prefix', cwd=workdir),
         '--train_tokens=30', 'use at least 40', f'block_size 39 is the block of {gpt2_folder}', '--block_size=N')


def test_the_gpt2_recipe_offline_without_data_or_weights_says_both(tmp_path):
    """config/finetune_shakespeare.py with neither data/shakespeare nor GPT-2's weights: one line naming both."""
    env = os.environ | dict(HF_HUB_OFFLINE='1', HF_HOME=str(tmp_path / 'empty-hf-home'))
    out = subprocess.run([sys.executable, os.path.join(conftest.ROOT, 'train.py'),
                          os.path.join(conftest.ROOT, 'config', 'finetune_shakespeare.py'), '--device=cpu'],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0 and len(lines) == 1, out.stderr
    says(lines[0], 'data/shakespeare/train.bin not found', 'prepare.py', "GPT-2's weights are not on this machine",
         '--init_from=gpt2-local')


def test_a_finding_the_gpu_preset_lacks_gives_its_own_reason(workdir, tmp_path):
    for name, reason in (('scarce', 'little-data prefixes'), ('orders', 'order arms')):
        says(one_line_error('findings.py', '--preset=gpu', f'--only={name}', f'--out_dir={tmp_path}', '--dry_run',
                            cwd=workdir), f'--only={name}', reason, '--preset=cpu')
