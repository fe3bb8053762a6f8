"""The static decoding step (engine.KVCache, Forward) and its compiled form (engine.compile_decoding): each step's
logits equal full uncached forwards, compiled samples equal eager ones, and the decoding loop never waits for
the device. Compiling on the CPU takes seconds a graph, so the compiled cases are few and marked slow."""
import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import TINY_BLOCK as T, tiny_mdm, tiny_model
from engine import Sampling, Speculation, compile_decoding, generate, store_linear_weights
from test_sample import KNOWN, uncached_logits

pytestmark = pytest.mark.usefixtures('one_thread')

KINDS = [dict(), dict(position_encoding='rotary'), dict(target_injection='add')]  # AO-GPT learned, rotary; sigma-GPT
SYNCING = ('aten._local_scalar_dense', 'aten.nonzero', 'aten.masked_select', 'aten.unique')


class CountSyncs(TorchDispatchMode):
    """Counts the operations that wait for the device: reading a value on the host (item, int, bool, float),
    sizes known only from values (nonzero, boolean indexing, masked_select, unique) and tolist."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        bool_index = func.name().startswith('aten::index') and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else ()) or ())
        self.count += str(func).startswith(SYNCING) or bool_index
        return func(*args, **(kwargs or {}))


class CountToList(TorchFunctionMode):
    def __init__(self, counter):
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.counter.count += func is torch.Tensor.tolist
        return func(*args, **(kwargs or {}))


def syncs(fn):
    with CountSyncs() as counter, CountToList(counter):
        fn()
    return counter.count


@pytest.mark.parametrize('order', ['random', 'l2r', 'confidence'])
@pytest.mark.parametrize('sampling', [Sampling(), Sampling(temperature=0.0), Sampling(top_k=3)],
                         ids=['default', 'greedy', 'top_k'])
def test_the_decoding_loop_never_waits_for_the_device(order, sampling):
    # a loop that syncs once per step syncs more for more steps: the counts must not depend on the steps
    model = tiny_model()

    def run(n):
        known = torch.arange(T) < T - n
        generate(model, torch.zeros(2, T, dtype=torch.long), known, n, sampling, order=order,
                 generator=torch.Generator().manual_seed(0))
    assert syncs(lambda: run(4)) == syncs(lambda: run(12))


def test_the_sync_count_sees_a_sync_in_the_loop(monkeypatch):
    # the test above fails if a step reads a value on the host, as an .item() in the loop would
    import engine
    real = engine.sample_tokens
    monkeypatch.setattr(engine, 'sample_tokens', lambda logits, *a: (logits.sum().item(), real(logits, *a))[1])
    model = tiny_model()

    def run(n):
        generate(model, torch.zeros(2, T, dtype=torch.long), torch.arange(T) < T - n, n,
                 generator=torch.Generator().manual_seed(0))
    assert syncs(lambda: run(12)) - syncs(lambda: run(4)) == 8


@pytest.mark.parametrize('order', ['random', 'l2r'])
@pytest.mark.parametrize('count', [2, 5])
def test_speculative_decoding_syncs_once_a_forward(order, count):
    # the loop's end test (whether any row goes on, or finished) is its one sync a forward, rows taking turns or not;
    # the same samples in more tokens take more forwards, and nothing else grows with them
    model = tiny_model()

    def extra(n):
        stats = Speculation()
        total = syncs(lambda: generate(model, torch.zeros(2, T, dtype=torch.long), torch.arange(T) < T - n, n,
                                       order=order, speculate=3, stats=stats, count=count,
                                       generator=torch.Generator().manual_seed(0)))
        return total - stats.forwards  # what is not one a forward: before and after the loop, and per sample
    assert extra(4) == extra(12)


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()  # graphs of earlier tests' models do not count against the recompile limit
    yield
    torch._dynamo.reset()


@pytest.mark.slow
@pytest.mark.parametrize('order,confidence', [('random', None), ('l2r', None), ('confidence', 'maxprob')])
@pytest.mark.parametrize('steps', [None, 5])
@pytest.mark.parametrize('kind', KINDS, ids=['adaln-learned', 'adaln-rotary', 'add-learned'])
def test_compiled_steps_equal_uncached_forwards(fresh_dynamo, kind, order, confidence, steps):
    eager, compiled = tiny_model(**kind), tiny_model(**kind)
    compile_decoding(compiled)
    known = torch.tensor(KNOWN['infill'])
    n = int((~known).sum())
    x = torch.randint(0, 11, (3, T), generator=torch.Generator().manual_seed(0))
    outs, records = [], []
    for model in (compiled, eager):
        record = []
        out, _ = generate(model, x.clone(), known, steps or n, schedule='cosine', order=order,
                          confidence=confidence or 'maxprob', generator=torch.Generator().manual_seed(1),
                          on_step=lambda t, l: record.append((t.clone(), l.clone())))
        outs.append(out)
        records.append(record)
    assert torch.equal(outs[0], outs[1])  # the same samples for the seed
    prefix = known.nonzero().squeeze(1).expand(3, -1)
    with torch.no_grad():
        for (targets, logits), (_, eager_logits) in zip(*records, strict=True):
            torch.testing.assert_close(logits, uncached_logits(eager, outs[0], prefix, targets), atol=1e-5, rtol=0)
            torch.testing.assert_close(logits, eager_logits, atol=1e-5, rtol=0)
            prefix = torch.cat([prefix, targets], 1)


@pytest.mark.slow
@pytest.mark.parametrize('order', ['random', 'l2r'])
@pytest.mark.parametrize('kind', KINDS[1:], ids=['adaln-rotary', 'add-learned'])
def test_compiled_speculative_decoding_draws_the_eager_samples(fresh_dynamo, kind, order):
    # ragged rows: each keeps its own number of drafts per forward, in its own cache length
    eager, compiled = tiny_model(**kind), tiny_model(**kind)
    compile_decoding(compiled)
    known = torch.tensor(KNOWN['prefix'])
    n = int((~known).sum())
    x = torch.randint(0, 11, (4, T), generator=torch.Generator().manual_seed(0))
    for sampling in (Sampling(), Sampling(temperature=0.0)):
        drawn = [generate(model, x.clone(), known, n, sampling, order=order, speculate=3,
                          generator=torch.Generator().manual_seed(2))[0] for model in (compiled, eager)]
        assert torch.equal(*drawn)
        if sampling.temperature == 0 and order == 'l2r':  # greedy: each token the argmax given those before it
            with torch.no_grad():
                logits, _ = eager(drawn[0], torch.arange(T).expand(4, T))
            g = int(known.sum())
            assert torch.equal(drawn[0][:, g:], logits[:, g:T].argmax(-1))


@pytest.mark.slow
@pytest.mark.parametrize('order', ['random', 'ancestral'])
def test_compiled_encoder_draws_the_eager_samples(fresh_dynamo, order):
    eager, compiled = (tiny_mdm(position_encoding="rotary", block_size=T, vocab_size=11) for _ in range(2))
    compile_decoding(compiled)
    known = torch.tensor(KNOWN['infill'])
    x = torch.randint(0, 11, (3, T), generator=torch.Generator().manual_seed(0))
    drawn = [generate(model, x.clone(), known, 5, order=order, generator=torch.Generator().manual_seed(3))[0]
             for model in (compiled, eager)]
    assert torch.equal(*drawn)


@pytest.mark.parametrize('make', [tiny_model, lambda: tiny_model(target_injection='add'),
                                  lambda: tiny_mdm(block_size=T, vocab_size=11)], ids=['ao-gpt', 'sigma-gpt', 'encoder'])
def test_linear_weights_stored_in_bf16_give_autocasts_logits(make):
    # what compile_decoding does on a GPU under bf16 autocast: the same logits as the float32 weights cast at every
    # forward, and sigma-GPT's head, tied to the embedding, leaves the embedding in float32
    model, stored = make(), make()
    store_linear_weights(stored, torch.bfloat16)
    assert stored.transformer.wte.weight.dtype == torch.float32
    x = torch.randint(0, 11, (3, T), generator=torch.Generator().manual_seed(0))
    mask = torch.rand(3, T, generator=torch.Generator().manual_seed(1)) < 0.5
    order = torch.randperm(T, generator=torch.Generator().manual_seed(2)).expand(3, T)
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        logits = [m(x, mask, torch.ones(3, T))[0] if m.config.is_encoder else m(x, order)[0] for m in (model, stored)]
    assert torch.equal(*logits)


def test_step_shapes_past_the_recompile_limit_run_eager_with_one_note(fresh_dynamo, monkeypatch, capsys):
    """Many step shapes (a cosine schedule, the encoder's shrinking confidence width, a batch remainder, two models)
    against a recompile limit of 2: no error, eager's tokens, one note. The graphs are dynamo's alone (backend
    'eager'), so the test costs seconds; the limit is dynamo's, whatever backend compiles the graphs."""
    import engine
    real = torch.compile
    monkeypatch.setattr(torch, 'compile', lambda fn, **kw: real(fn, dynamic=False, fullgraph=True, backend='eager'))
    monkeypatch.setattr(engine, '_fell_back', [])
    known = torch.tensor(KNOWN['infill'])
    x = torch.randint(0, 11, (3, T), generator=torch.Generator().manual_seed(0))
    with torch._dynamo.config.patch(recompile_limit=2):
        for make, order in ((tiny_model, 'random'), (lambda: tiny_model(position_encoding='rotary'), 'confidence'),
                            (lambda: tiny_mdm(block_size=T, vocab_size=11), 'confidence')):
            eager, compiled = make(), make()
            compiled.load_state_dict(eager.state_dict())
            compile_decoding(compiled)
            for rows in (3, 2):
                drawn = [generate(model, x[:rows].clone(), known, 7, schedule='cosine', order=order,
                                  generator=torch.Generator().manual_seed(1))[0] for model in (compiled, eager)]
                assert torch.equal(*drawn), (order, rows)
    out = capsys.readouterr().out
    assert out.count("recompile limit (2 graphs a function") == 1


def test_a_long_compiled_decoding_attends_to_a_few_widths_of_the_cache(fresh_dynamo, monkeypatch):
    """Past GRAPH_WIDTH slots a compiled step reads the cache's first power-of-two slots that hold every row's: the
    same tokens as eager (which reads exactly the filled ones), through one graph per width (dynamo's, backend
    'eager')."""
    import engine
    real = torch.compile
    monkeypatch.setattr(torch, 'compile', lambda fn, **kw: real(fn, dynamic=False, fullgraph=True, backend='eager'))
    monkeypatch.setattr(engine, 'GRAPH_WIDTH', 8)
    widths = []
    real_mask = engine.KVCache.mask
    traced = lambda cache: widths.append(cache.end) if torch.compiler.is_compiling() else None
    monkeypatch.setattr(engine.KVCache, 'mask', lambda cache, *a: (traced(cache), real_mask(cache, *a))[1])
    eager, compiled = tiny_model(block_size=40), tiny_model(block_size=40)
    compile_decoding(compiled)
    x = torch.zeros(2, 40, dtype=torch.long)
    known = torch.arange(40) < 3
    drawn = [generate(model, x.clone(), known, 37, generator=torch.Generator().manual_seed(4))[0]
             for model in (compiled, eager)]
    assert torch.equal(*drawn)
    assert engine.graph_width(9, 41) == 16 and engine.graph_width(33, 41) == 41 and engine.graph_width(3, 41) == 8
    assert widths == [8, 16, 32, 41]  # each traced once: the steps after the prompt's, ends 5 to 40
