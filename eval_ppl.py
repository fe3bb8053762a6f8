"""
Zero-shot perplexity of a checkpoint, left-to-right, any-order, and ensembled over context orders,
on the authors' evaluation chunks.

    python eval_ppl.py --ensemble 8                      # out-shakespeare-char on its val.bin
    python eval_ppl.py --out_dir=out --dataset=wikitext2,ptb,lambada,lm1b --ensemble 8
    python eval_ppl.py --out_dir=out --dataset=wikitext2 --data_dir=path/to/mirror   # local copies
    python eval_ppl.py --out_dir=out --data_file=my_text.jsonl --out_json=ppl.json
    python eval_ppl.py --init_from=hf:Cauthyyy/AO-GPT-MDM/<file>.pt --dataset=lambada --ensemble 8
    python eval_ppl.py --init_from=gpt2-medium --dataset=wikitext2,ptb    # the GPT-2 baseline row

init_from: 'resume' (out_dir/ckpt.pt), a checkpoint path (ours or the authors' format) or a
Hugging Face Hub file hf:owner/repo/path, whose EMA weights are evaluated (--use_ema=False, or a
checkpoint without EMA weights: the raw ones); or a Hugging Face GPT-2 (gpt2, gpt2-medium, gpt2-large, gpt2-xl, or a folder saved with
save_pretrained; needs transformers), scored left-to-right only.

The chunks (--pipeline=paper, the default, as the authors' data pipeline makes them): every row of
a set exactly as the Hugging Face Hub serves it (WikiText: the raw lines with their newline, a
blank line an empty row; PTB: the stripped lines; LAMBADA: the jsonl texts; LM1B: the sentences) is
detokenized by the set's rule, GPT-2 BPE encoded and followed by an end-of-text token. The rows
fall into 8 contiguous shards, each read in batches of 1,000 rows (datasets.map(batched=True,
num_proc=8)), and each batch is concatenated and cut into block_size chunks on its own, its
remainder dropped. --pipeline=clean instead strips the rows, skips the blank ones and cuts their
one concatenation.

Each chunk x gets a seeded uniformly random order sigma. Reported per set:
- l2r: perplexity in the left-to-right order (--l2r_dtype; 'auto' is the authors' choice: bf16
  autocast on a GPU that has it, float32 for a Hugging Face model and on the CPU);
- M=1 (any-order): exp of the mean of -log p(x[sigma_i] | x[sigma_<i]);
- M=2, 4, ...: -log of p averaged over M members, member 1 reading the context set x[sigma_<i] in
  sigma's order and members 2..M in independent uniform orders; the members are nested, so one
  run gives the whole curve up to --ensemble.
Any-order and ensemble numbers are computed in --dtype: float32 by default, as the authors' AO-GPT
scripts; their sigma-GPT any-order script used bf16 autocast (--dtype=bfloat16).
A Hugging Face model scores tokens 2..block_size of each chunk (the first has no context), as the
authors scored GPT-2.

Sets: wikitext2, wikitext103 (raw), ptb, lambada (OpenAI's jsonl), lm1b from the Hugging Face Hub /
OpenAI's URL; openwebtext and shakespeare_char from data/<name>/val.bin; --data_file=path for a
.txt (a row per line), .jsonl ({"text": ...} per line) or .bin (uint16 tokens) file.
--data_dir reads the Hub sets from local copies instead (an offline mirror: wikitext-2-raw/wiki.test.raw,
ptb/ptb.test.txt, lambada/lambada_test.jsonl, lm1b/news.en.heldout-00000-of-00050, ...); it defaults
to the environment variable AOGPT_DATA_DIR, the project's one data-location setting, '' when unset.
--split defaults to 'test', the standard benchmark split (the authors' WikiText-2 script used
'train'; --split=train does that with network access).

Speed: only the prefix up to slot i matters for target i, so each (target, member) query is a row
of i+1 slots, rows of similar length are batched (at most --max_tokens slots per forward) and only
the query slot goes through the head: about half the slots of one full forward per query, and
none of the wasted vocabulary projections.
"""
import json
import math
import os
import time
from contextlib import nullcontext

import numpy as np
import torch
from torch.nn import functional as F
from torch.nn.utils.rnn import pad_sequence
from tqdm import tqdm

from benchmarks import (MAP_BATCH, MAP_SHARDS, SETS, chunk, concatenation, encode_rows, load_rows, paper_chunks,
                        read_text_file)
from common import (DTYPES, GPT2_VOCAB, autocast, check_device, check_vocab, checkpoint_path, checkpoint_tokens,
                    dataset_vocab, default_device, load_hf_causal_lm, print_table, read_checkpoint,
                    release_freed_memory)
from configurator import at_least, check_settings, fail, one_of

# -----------------------------------------------------------------------------
init_from = 'resume'  # 'resume' (out_dir/ckpt.pt), a path, hf:owner/repo/path, or gpt2, gpt2-medium, ... / an HF folder
out_dir = 'out-shakespeare-char'
dataset = 'shakespeare_char'  # one name or several, comma-separated
data_file = ''  # a local .txt/.jsonl/.bin file to evaluate instead of --dataset
data_dir = os.environ.get('AOGPT_DATA_DIR', '')  # '': the Hub / URL; else a folder holding local copies
split = 'test'  # 'test', 'validation' or 'train' (Hub sets)
pipeline = 'paper'  # 'paper': the authors' rows and per-batch chunks; 'clean': stripped rows, one concatenation
block_size = 0  # 0: the checkpoint's block_size
ensemble = 1  # M, the largest ensemble; M = 1, 2, 4, ... up to it are reported
max_chunks = 0  # 0: every chunk; else only the first max_chunks (quick looks)
max_tokens = 32768  # slots per forward pass, which bounds memory
use_ema = True  # the EMA weights (the raw ones if there are none); False: the raw ones
seed = 1337
out_json = ''
device = default_device()
dtype = 'float32'  # any-order and ensemble numbers (their AO-GPT scripts: float32; their sigma-GPT one: bfloat16)
l2r_dtype = 'auto'  # left-to-right: 'auto' (bf16 autocast on a GPU that has it, float32 for HF models) or a dtype
compile = False  # torch.compile the model's forward, with dynamic shapes (the query batches vary in size)
config_keys = [k for k, v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))]
# -----------------------------------------------------------------------------

BIN_SETS = ('openwebtext', 'shakespeare_char')  # already tokenized by their data/<name>/prepare.py
SPLITS = ('test', 'validation', 'train')
PIPELINES = ('paper', 'clean')
HF_GPT2 = ('gpt2', 'gpt2-medium', 'gpt2-large', 'gpt2-xl')
HEAD_COST = 64  # a query's logits row takes about as much memory as 64 slots of activations
KNOWN = (*SETS, *BIN_SETS)


# -----------------------------------------------------------------------------
# chunks (the sets' rows and the paper's chunking are in benchmarks.py)


def make_chunks(docs, n):
    return paper_chunks(docs, n) if pipeline == 'paper' else chunk(concatenation(docs), n)


def load_tokens(name):
    """(token documents, (what their ids mean, how many ids): see common.dataset_vocab) of a named set
    or --data_file; a .bin token file is one document, read with the meta.pkl beside it if any."""
    if name in BIN_SETS or name.endswith('.bin'):
        path = name if name.endswith('.bin') else os.path.join('data', name, 'val.bin')
        if not os.path.exists(path):
            fail(f'{path} not found' + ('' if name.endswith('.bin') else f': run python data/{name}/prepare.py'))
        if os.path.getsize(path) == 0 or os.path.getsize(path) % 2:
            fail(f'{path} is not a token file: expected uint16 token ids, got {os.path.getsize(path)} bytes')
        return [np.memmap(path, dtype=np.uint16, mode='r')], dataset_vocab(os.path.dirname(path))
    rows = read_text_file(name) if name == data_file else load_rows(name, split, data_dir)
    if not any(row.strip() for row in rows):
        fail(f'{name} holds no text')
    if pipeline == 'clean':
        rows = [row.strip() for row in rows if row.strip()]
    return encode_rows(rows, None if name == data_file else SETS[name][3]), ('gpt2', GPT2_VOCAB)


def check_tokens(name, docs, data, model, n):
    """Fail unless the model reads this set's tokens (the same tokenizer or, where one side gives only
    its vocabulary size, the same size; every id in range) and the set holds at least one block of
    them. Returns check_vocab's note."""
    note = check_vocab(model, data, name)
    top = max(int(np.max(doc)) for doc in docs)
    if top >= model[1]:
        fail(f'{name} holds token id {top} but the checkpoint has only {model[1]} tokens')
    total = sum(len(doc) for doc in docs)
    if total < n:
        fail(f'{name} has {total} tokens, fewer than one block of {n}')
    return note


# -----------------------------------------------------------------------------
# the fast ensemble


def random_context_orders(sigma, n_extra, seed):
    """context_orders(i) -> (n_extra, i): independent uniform orders of the context set sigma[:i].

    Seeded per target, so the orders do not depend on batching, and drawn row after row, so the
    members of a smaller ensemble are the first members of a larger one.
    """
    def context_orders(i):
        g = torch.Generator().manual_seed(hash((seed, i)))
        return sigma[:i][torch.rand(n_extra, i, generator=g, dtype=torch.float64).argsort(1)]
    return context_orders


def query_batches(sigma, context_orders, max_tokens):
    """Rows (target i >= 1, member j, context order), longest first, grouped under the token budget.

    Target 0 has an empty context, the same in every order, so it needs no query. A batch's rows are
    padded to its first (longest) row; keeping them within 1/8 of its length bounds the padding to
    12.5% of the slots.
    """
    batch, width = [], 0
    for i in reversed(range(1, len(sigma))):
        for j, order in enumerate(context_orders(i), start=1):
            width = width or i + 1
            if batch and ((len(batch) + 1) * (width + HEAD_COST) > max_tokens or 8 * (width - i - 1) > width):
                yield batch
                batch, width = [], i + 1
            batch.append((i, j, order))
    if batch:
        yield batch


@torch.no_grad()
def ensemble_logprobs(model, x, sigma, context_orders, n_members, max_tokens):
    """log p(x[sigma_i] | context set x[sigma_<i] read in member j's order): (n_members, n).

    Member 0 reads the context in sigma's order (one forward for every target); members 1.. read it
    in context_orders(i)[j-1]. A query is a row: the start slot, then the context in the member's
    order (each slot predicting the next position), the last slot predicting sigma[i]. Right
    padding is harmless under causal attention, and only the last real slot goes through the head.
    """
    n = len(x)
    out = torch.empty(n_members, n)
    _, loss = model(x[None], sigma[None], reduction='none')
    out[0] = -loss[0].float().cpu()
    if n_members == 1:
        return out
    out[1:, 0] = out[0, 0]  # an empty context reads the same in every order
    sigma_cpu = sigma.cpu()  # rows are built on the CPU, then moved in one piece
    for batch in query_batches(sigma_cpu, lambda i: context_orders(i)[:n_members - 1], max_tokens):
        if len(batch) == 1:  # twice: a compiled model then never meets one row, a shape it would compile again
            batch = batch * 2
        pos = pad_sequence([torch.cat([torch.tensor([-1]), order]) for _, _, order in batch],
                           batch_first=True, padding_value=-1)
        tgt = pad_sequence([torch.cat([order, sigma_cpu[i:i + 1]]) for i, _, order in batch],
                           batch_first=True, padding_value=-1)
        i, j = (torch.tensor(v) for v in list(zip(*batch))[:2])
        pos, tgt, i_dev = pos.to(x.device), tgt.to(x.device), i.to(x.device)
        logits = model.forward_slots(x[pos.clamp(min=0)], pos, tgt, out_slots=i_dev[:, None])[:, 0]
        out[j, i] = F.log_softmax(logits.float(), dim=-1).gather(1, x[sigma[i_dev]][:, None])[:, 0].cpu()
    return out


def ensemble_sizes(m):
    return [2 ** k for k in range(int(math.log2(m)) + 1)] + ([m] if m & (m - 1) else [])


@torch.no_grad()  # the kept per-token results must not hold each chunk's graph
def evaluate(model, chunks, n_members, max_tokens, seed, ctx=nullcontext(), desc=None, l2r_ctx=None):
    """Per-token log-probs of all chunks: l2r (N*n,) and the ensemble members (M, N*n), on the CPU.

    The any-order members run under ctx, the left-to-right pass under l2r_ctx (default: ctx).
    """
    l2r, members = [], []
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    for c, x in enumerate(tqdm(chunks, desc=desc, disable=desc is None)):
        n = len(x)
        sigma = torch.randperm(n, generator=generator)
        x, identity = x.to(device), torch.arange(n, device=device)
        with ctx if l2r_ctx is None else l2r_ctx:
            _, loss = model(x[None], identity[None], reduction='none')
        l2r.append(-loss[0].float().cpu())
        with ctx:
            orders = random_context_orders(sigma, n_members - 1, hash((seed, c)))
            members.append(ensemble_logprobs(model, x, sigma.to(device), orders, n_members, max_tokens))
        release_freed_memory()
    return torch.cat(l2r), torch.cat(members, dim=1)


@torch.no_grad()
def hf_l2r_logprobs(model, chunks, max_tokens, ctx=nullcontext(), desc=None):
    """log p(x_t | x_<t), t = 2..n, of every chunk under a Hugging Face causal LM: (N*(n-1),), on the CPU.

    The first token of a chunk has no context and is not scored, as the authors scored GPT-2.
    Every position goes through the head, so a chunk costs n*(1+HEAD_COST) slots of the budget.
    """
    device = next(model.parameters()).device
    rows = max(1, max_tokens // (chunks.size(1) * (1 + HEAD_COST)))
    out = []
    for batch in tqdm(chunks.split(rows), desc=desc, disable=desc is None):
        x = batch.to(device)
        with ctx:
            logits = model(x).logits[:, :-1]
        out.append(-F.cross_entropy(logits.float().flatten(0, 1), x[:, 1:].flatten(), reduction='none').cpu())
        release_freed_memory()
    return torch.cat(out)


def perplexities(l2r, members):
    ppl = {'l2r': math.exp(-l2r.mean().item())}
    for m in ensemble_sizes(members.size(0)):
        p_ens = members[:m].logsumexp(0) - math.log(m)
        ppl[m] = math.exp(-p_ens.mean().item())
    return ppl


def is_hf_model(name):
    """A Hugging Face GPT-2 name (openai-community/ optional) or a folder saved with save_pretrained."""
    return name.removeprefix('openai-community/') in HF_GPT2 or os.path.isfile(os.path.join(name, 'config.json'))


def l2r_precision(hf):
    """--l2r_dtype, where 'auto' is the authors' choice: bf16 autocast for an AO-GPT on a GPU that
    has it, float32 for a Hugging Face model (their GPT-2 row) and on the CPU."""
    if l2r_dtype != 'auto':
        return l2r_dtype
    gpu_bf16 = torch.device(device).type == 'cuda' and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return 'bfloat16' if gpu_bf16 and not hf else 'float32'


def check_inputs(names):
    """Everything that can be checked before any work: settings, device, names, output folder."""
    check_settings(globals(), {'ensemble': at_least(1), 'max_tokens': at_least(1), 'max_chunks': at_least(0),
                               'block_size': at_least(0), 'split': one_of(*SPLITS), 'pipeline': one_of(*PIPELINES),
                               'l2r_dtype': one_of('auto', *DTYPES)})
    hf = is_hf_model(init_from)
    check_device(device, dtype)
    check_device(device, l2r_precision(hf))
    if hf and ensemble > 1:
        fail(f'{init_from} is scored left-to-right only: --ensemble applies to AO-GPT checkpoints')
    if hf and compile:
        fail(f'--compile applies to AO-GPT checkpoints, not to the Hugging Face model {init_from}')
    if not names:
        fail('--dataset is empty: name one or more sets, comma-separated, or pass --data_file=path')
    for name in names:
        if name != data_file and name not in KNOWN:
            fail(f"unknown dataset {name!r}; known: {', '.join(KNOWN)} (or --data_file=path)")
    if data_file and not os.path.isfile(data_file):
        fail(f'{data_file} not found')
    if data_file and not data_file.endswith(('.txt', '.jsonl', '.bin')):
        fail(f'--data_file must be a .txt, .jsonl or .bin file, got {data_file}')
    if out_json and not os.path.isdir(os.path.dirname(os.path.abspath(out_json))):
        fail(f'--out_json={out_json}: its folder does not exist')


def load_model():
    """(model, its block size, (what its token ids mean, how many), a description for the output)."""
    if is_hf_model(init_from):
        model = load_hf_causal_lm(init_from, device)
        positions = getattr(model.config, 'n_positions', None) or model.config.max_position_embeddings
        return model, positions, ('gpt2', model.config.vocab_size), init_from
    path = checkpoint_path(init_from, out_dir)
    model, checkpoint = read_checkpoint(path, device, use_ema)
    return model, model.config.block_size, checkpoint_tokens(checkpoint, model.config.vocab_size), path


def main():
    names = [data_file] if data_file else [d.strip() for d in dataset.split(',') if d.strip()]
    check_inputs(names)
    hf = is_hf_model(init_from)
    model, model_block, model_tokens, source = load_model()
    n = block_size or model_block
    if n > model_block:
        fail(f"--block_size={n} is larger than the checkpoint's block_size {model_block}")
    sets = {}
    for name in names:  # read and check every set before evaluating any
        docs, data_tokens = load_tokens(name)
        note = check_tokens(name, docs, data_tokens, model_tokens, n)
        if note:
            print(note)
        sets[name] = make_chunks(docs, n)[:max_chunks or None]
        if not len(sets[name]):
            fail(f'{name} makes no {n}-token chunk: --pipeline=paper cuts each batch (at most {MAP_BATCH:,} rows '
                 f'of one of {MAP_SHARDS} shards) on its own; --pipeline=clean cuts all the rows at once')
    if compile:
        model.forward_slots = torch.compile(model.forward_slots, dynamic=True)
    precision = l2r_precision(hf)
    l2r_ctx = autocast(device, precision)
    print(f"pipeline: {pipeline}; left-to-right in {precision}" + ('' if hf else f', any-order in {dtype}'))
    if hf:
        print(f'{init_from}: left-to-right only; each {n}-token chunk scores its last {n - 1} tokens '
              f'(the first has no context), as the authors scored GPT-2')
    results = {}
    for name, chunks in sets.items():
        t0 = time.time()
        if hf:
            l2r = hf_l2r_logprobs(model, chunks, max_tokens, l2r_ctx, name)
            ppl = {'l2r': math.exp(-l2r.mean().item())}
        else:
            l2r, members = evaluate(model, chunks, ensemble, max_tokens, seed, autocast(device, dtype), name, l2r_ctx)
            ppl = perplexities(l2r, members)
        results[name] = dict(split=split, pipeline=pipeline, chunks=len(chunks), tokens=l2r.numel(), ppl=ppl,
                             seconds=round(time.time() - t0, 2))
    report(results)
    if out_json:
        with open(out_json, 'w') as f:
            json.dump(dict(checkpoint=source, block_size=n, ensemble=ensemble, seed=seed, dtype=dtype,
                           l2r_dtype=precision, results=results), f, indent=2)
        print(f'wrote {out_json}')


def report(results):
    """One row per set; a column a model does not have (any-order for GPT-2) reads '-'."""
    sizes = ensemble_sizes(ensemble)
    head = ['dataset', 'tokens', 'l2r ppl', 'any-order ppl'] + [f'M={m}' for m in sizes[1:]] + ['time']
    print_table(head, [[name, f"{r['tokens']:,}", *(f"{r['ppl'][k]:.3f}" if k in r['ppl'] else '-'
                                                     for k in ['l2r', *sizes]), f"{r['seconds']:.1f}s"]
                       for name, r in results.items()])


if __name__ == '__main__':
    from configurator import configure
    configure(globals(), config_keys, doc=__doc__)
    main()
