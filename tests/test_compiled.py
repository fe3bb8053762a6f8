"""The static decoding step (engine.KVCache, Forward) and its compiled form (engine.compile_decoding): each step's
logits equal full uncached forwards, compiled samples equal eager ones, and the decoding loop never waits for
the device. Compiling on the CPU takes seconds a graph, so the compiled cases are few and marked slow."""
import itertools

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from aogpt import engine
from conftest import TINY_BLOCK as T, tiny_mdm, tiny_model
from aogpt.decoding import generate, generate_many
from aogpt.engine import Engine, Sampling, compile_decoding, inverse_cdf, step_sizes, store_linear_weights
from aogpt.speculative import Speculation
from model import attend
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
    from aogpt import decoding
    real = decoding.sample_tokens
    monkeypatch.setattr(decoding, 'sample_tokens', lambda logits, *a: (logits.sum().item(), real(logits, *a))[1])
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


@pytest.fixture
def no_eager_steps(monkeypatch):
    """Fails the test where a compiled step would run eager past the recompile limit (its samples would then be
    eager's, and a comparison with eager would hold whatever the graphs do)."""
    monkeypatch.setattr(engine, 'note_eager_fallback', lambda: pytest.fail('a compiled step ran eager'))


@pytest.mark.slow
@pytest.mark.parametrize('steps', [None, 5])
@pytest.mark.parametrize('kind', KINDS, ids=['adaln-learned', 'adaln-rotary', 'add-learned'])
def test_compiled_steps_equal_uncached_forwards(fresh_dynamo, no_eager_steps, kind, steps):
    """Each order in turn on one compiled model (its graphs shared by the orders, as in a process that samples
    several ways), none of its steps run eager past the recompile limit."""
    eager, compiled = tiny_model(**kind), tiny_model(**kind)
    compile_decoding(compiled)
    known = torch.tensor(KNOWN['infill'])
    n = int((~known).sum())
    x = torch.randint(0, 11, (3, T), generator=torch.Generator().manual_seed(0))
    for order in ('random', 'l2r', 'confidence'):
        outs, records = [], []
        for model in (compiled, eager):
            record = []
            out, _ = generate(model, x.clone(), known, steps or n, schedule='cosine', order=order,
                              generator=torch.Generator().manual_seed(1),
                              on_step=lambda t, l: record.append((t.clone(), l.clone())))
            outs.append(out)
            records.append(record)
        assert torch.equal(outs[0], outs[1]), order  # the same samples for the seed
        prefix = known.nonzero().squeeze(1).expand(3, -1)
        with torch.no_grad():
            for (targets, logits), (_, eager_logits) in zip(*records, strict=True):
                torch.testing.assert_close(logits, uncached_logits(eager, outs[0], prefix, targets), atol=1e-5, rtol=0)
                torch.testing.assert_close(logits, eager_logits, atol=1e-5, rtol=0)
                prefix = torch.cat([prefix, targets], 1)


@pytest.mark.slow
@pytest.mark.parametrize('kind', KINDS[1:], ids=['adaln-rotary', 'add-learned'])
def test_compiled_speculative_decoding_draws_the_eager_samples(fresh_dynamo, no_eager_steps, kind):
    # ragged rows: each keeps its own number of drafts per forward, in its own cache length; both orders on one
    # compiled model
    eager, compiled = tiny_model(**kind), tiny_model(**kind)
    compile_decoding(compiled)
    known = torch.tensor(KNOWN['prefix'])
    n = int((~known).sum())
    x = torch.randint(0, 11, (4, T), generator=torch.Generator().manual_seed(0))
    for order, sampling in itertools.product(('random', 'l2r'), (Sampling(), Sampling(temperature=0.0))):
        drawn = [generate(model, x.clone(), known, n, sampling, order=order, speculate=3,
                          generator=torch.Generator().manual_seed(2))[0] for model in (compiled, eager)]
        assert torch.equal(*drawn), (order, sampling)
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


def stepped_logits(model, x, order, bf16):
    """The logits (T, B, 1, V) of a decoding of x (B, T) in order (B, T), a position a step, each step given x's
    tokens before it (the same context for every model compared), under bf16 autocast if bf16."""
    (B, T), logits = x.shape, []
    engine = Engine(model, B, T + 1)
    tokens, positions = torch.zeros(B, 1, dtype=torch.long), torch.full((B, 1), -1)
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16, enabled=bf16):
        for i in range(T):
            logits.append(engine.step(tokens, positions, order[:, i:i + 1]).float())
            engine.accept()
            positions = order[:, i:i + 1]
            tokens = x.gather(1, positions)
    return torch.stack(logits)


@pytest.mark.slow
def test_compiled_steps_under_bf16_differ_from_eager_within_bf16s_own_rounding(fresh_dynamo):
    """bf16 cannot give eager's logits bit for bit through other kernels; the bar is its own noise. Step by step
    along one text (a cascade of different draws would compare different contexts), the compiled logits are
    within twice eager bf16's distance from float32, no farther from float32 on average, and draw the same
    tokens as eager at least as often as eager bf16 draws float32's (measured: 96 to 97%)."""
    T = 64
    eager, compiled = tiny_model(block_size=T), tiny_model(block_size=T)
    compile_decoding(compiled, 'bfloat16')
    x = torch.randint(0, 11, (2, T), generator=torch.Generator().manual_seed(0))
    order = torch.stack([torch.randperm(T, generator=torch.Generator().manual_seed(r)) for r in range(2)])
    bf16, ours, f32 = (stepped_logits(m, x, order, b) for m, b in ((eager, True), (compiled, True), (eager, False)))
    dist = lambda a, b: (a - b).abs()
    assert dist(ours, bf16).max() <= 2 * dist(bf16, f32).max()
    assert dist(ours, f32).mean() <= 1.25 * dist(bf16, f32).mean()
    u = torch.rand(T, 2, 1, 1, generator=torch.Generator().manual_seed(5))
    drawn = [inverse_cdf(logits.softmax(-1), u) for logits in (bf16, ours, f32)]
    assert (drawn[1] == drawn[0]).float().mean() >= (drawn[0] == drawn[2]).float().mean() - 0.02


def eager_graphs(monkeypatch):
    """compile_decoding's graphs made by dynamo alone (backend 'eager'): its guards, recompile limit and traced code
    (attend for the cache) as compiled decoding has them, in seconds rather than inductor's minutes."""
    real = torch.compile
    monkeypatch.setattr(torch, 'compile', lambda fn, **kw: real(fn, dynamic=False, fullgraph=True, backend='eager'))


MATRIX_DECODERS = [('ao-gpt', tiny_model), ('ao-gpt-rotary', lambda: tiny_model(position_encoding='rotary')),
                   ('sigma-gpt', lambda: tiny_model(target_injection='add')),
                   ('two-stream', lambda: tiny_model(target_injection='two_stream', position_encoding='rotary'))]


@pytest.mark.slow  # 25 decodings traced by dynamo
def test_compiled_sampling_draws_eager_tokens_over_every_documented_use(fresh_dynamo, monkeypatch):
    """One process, the recompile limit as shipped, five models: every order, both schedules, a grid of steps,
    infill templates, speculation with several k, batches with a remainder (generate_many, as gen_ppl and the
    harness draw): no error, and the tokens of eager decoding."""
    eager_graphs(monkeypatch)
    x = torch.randint(0, 11, (1, T), generator=torch.Generator().manual_seed(0)).tolist()[0]
    decodings = [('random', 'linear', 4, 'infill'), ('random', 'cosine', 7, 'prefix'),
                 ('l2r', 'linear', None, 'infill'), ('confidence', 'cosine', 7, 'infill')]
    runs = [(name, make, dict(order=order, schedule=schedule, steps=steps), KNOWN[known])
            for name, make in MATRIX_DECODERS for order, schedule, steps, known in decodings]
    runs += [(name, make, dict(order=order, speculate=k), KNOWN['prefix'])
             for name, make in MATRIX_DECODERS[1:] for order, k in (('random', 2), ('l2r', 4))]
    encoder = lambda: tiny_mdm(block_size=T, vocab_size=11)
    runs += [('encoder', encoder, dict(order=order, schedule=schedule, steps=5), KNOWN['infill'])
             for order, schedule in (('random', 'cosine'), ('ancestral', 'linear'), ('confidence', 'cosine'))]
    models = {}
    for name, make, options, known in runs:
        if name not in models:
            models[name] = make(), make()
            compile_decoding(models[name][0])
        steps = options.pop('steps', None) or sum(not k for k in known)
        drawn = [generate_many(model, x, known, 3, 2, steps, generator=torch.Generator().manual_seed(1), **options)
                 for model in models[name]]
        assert drawn[0] == drawn[1], (name, options, known)


@pytest.mark.slow  # 20 loops, twice each
def test_a_compiled_loop_meets_one_graph_whatever_its_steps(fresh_dynamo, no_eager_steps, monkeypatch):
    """Schedules, step counts, both orders and templates on one compiled model: each loop pads its steps to its widest
    one's power of two, so the graphs are one per (that width, batch size), all under a recompile limit lowered to
    their number, none run eager, and the tokens are eager's (whose steps are unpadded)."""
    from torch._dynamo.utils import counters
    counters.clear()
    eager_graphs(monkeypatch)
    eager, compiled = tiny_model(), tiny_model()
    compile_decoding(compiled)
    x = torch.randint(0, 11, (1, T), generator=torch.Generator().manual_seed(0)).tolist()[0]
    loops = [(schedule, steps, known) for schedule in ('linear', 'cosine')
             for steps, known in ((3, 'none'), (4, 'prefix'), (5, 'infill'), (7, 'none'), (8, 'prefix'))]
    runs = [(('random', 'l2r')[i % 2], *loop) for i, loop in enumerate(loops)]
    widest = [max(step_sizes(KNOWN[known].count(False), steps, schedule)) for _, schedule, steps, known in runs]
    shapes = {(1 << (n - 1).bit_length(), batch) for n in widest for batch in (2, 1)}  # 3 samples in batches of 2
    assert len(shapes) == 8 < 2 * len(set(widest))  # the loops share graphs
    with torch._dynamo.config.patch(recompile_limit=len(shapes)):
        for order, schedule, steps, known in runs:
            drawn = [generate_many(model, x, KNOWN[known], 3, 2, steps, order=order, schedule=schedule,
                                   generator=torch.Generator().manual_seed(1)) for model in (compiled, eager)]
            assert drawn[0] == drawn[1], (order, schedule, steps, known)
    assert counters['stats']['unique_graphs'] == len(shapes)


def test_compiled_attention_accumulates_in_float32_as_the_eager_kernel_does():
    """Under bf16 autocast the compiled step's attention (attend, over a long cache with peaked scores) is as close
    to float32's as the eager step's fused kernel (scaled_dot_product_attention): scores rounded to bf16 before the
    softmax were 7x as far."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, n, 64, generator=g) * s for n, s in ((3, 2), (1024, 2), (1024, 1)))
    mask = torch.rand(2, 1, 3, 1024, generator=g) < 0.7
    q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    exact = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        fused = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        ours = attend(q, k, v, mask)
    assert ours.dtype == fused.dtype == torch.bfloat16
    assert (ours.float() - exact).abs().max() <= 1.25 * (fused.float() - exact).abs().max()


def test_step_shapes_past_the_recompile_limit_run_eager_with_one_note(fresh_dynamo, monkeypatch, capsys):
    """Many step shapes (a cosine schedule, the encoder's shrinking confidence width, a batch remainder, two models)
    against a recompile limit of 2: no error, eager's tokens, one note. The graphs are dynamo's alone (backend
    'eager'), so the test costs seconds; the limit is dynamo's, whatever backend compiles the graphs."""
    eager_graphs(monkeypatch)
    monkeypatch.setattr(engine, '_fell_back', [])
    monkeypatch.setattr(engine, 'decoding_graphs', lambda config: 0)  # the limit stays the test's
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


def test_random_and_left_to_right_orders_share_their_graphs(fresh_dynamo, no_eager_steps, monkeypatch):
    """One token per step is one step shape, so one graph for both orders (a graph guards strides: an expanded
    left-to-right order would need its own): under a recompile limit of 1 no step runs eager."""
    eager_graphs(monkeypatch)
    known = torch.tensor(KNOWN['infill'])
    x = torch.randint(0, 11, (3, T), generator=torch.Generator().manual_seed(0))
    eager, compiled = tiny_model(), tiny_model()
    compile_decoding(compiled)
    with torch._dynamo.config.patch(recompile_limit=1):
        for order in ('random', 'l2r', 'random'):
            drawn = [generate(model, x.clone(), known, int((~known).sum()), order=order,
                              generator=torch.Generator().manual_seed(1))[0] for model in (compiled, eager)]
            assert torch.equal(*drawn), order


def test_a_long_compiled_decoding_attends_to_a_few_widths_of_the_cache(fresh_dynamo, monkeypatch):
    """Past GRAPH_WIDTH slots a compiled step reads the cache's first power-of-two slots that hold every row's: the
    same tokens as eager (which reads exactly the filled ones), through one graph per width (dynamo's, backend
    'eager')."""
    from aogpt import engine
    eager_graphs(monkeypatch)
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
    assert engine.graph_width(9, 41, 41) == 16 and engine.graph_width(33, 41, 45) == 45 and engine.graph_width(3, 41, 41) == 8
    assert widths == [8, 16, 32, 41]  # each traced once: the steps after the prompt's, ends 5 to 40


@pytest.mark.slow  # 20 graphs of dynamo's
def test_a_grid_of_long_loops_on_two_models_stays_compiled(fresh_dynamo, no_eager_steps, monkeypatch):
    """gen_ppl.py's --steps grid at a block of several cache widths, on two models in one process, from the limits as
    torch ships them: compile_decoding raises them by each model's decoding_graphs, so none of the loops' graphs
    (more than the shipped limit of 8) runs eager, and each draws eager's tokens."""
    from torch._dynamo.utils import counters
    counters.clear()
    eager_graphs(monkeypatch)
    monkeypatch.setattr(engine, 'GRAPH_WIDTH', 4)  # cache widths 4, 8, 16 and all at a block of 24
    monkeypatch.setattr(torch._dynamo.config, 'recompile_limit', 8)
    monkeypatch.setattr(torch._dynamo.config, 'accumulated_recompile_limit', 256)
    x = torch.randint(0, 11, (24,), generator=torch.Generator().manual_seed(0)).tolist()
    known = [False] * 24
    for kind in KINDS[:2]:
        eager, compiled = tiny_model(block_size=24, **kind), tiny_model(block_size=24, **kind)
        compile_decoding(compiled)
        for steps in (24, 3):  # steps of 1 and 8 tokens
            drawn = [generate_many(model, x, known, 3, 2, steps, generator=torch.Generator().manual_seed(1))
                     for model in (compiled, eager)]
            assert drawn[0] == drawn[1], (kind, steps)
    assert counters['stats']['unique_graphs'] == 20  # past the shipped limit for one model, let alone two
