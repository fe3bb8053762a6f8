"""Model tests: parity with the authors' code, an independent slow forward (every position encoding), causality,
orders, EMA, KV cache."""
import math

import pytest
import torch
from torch.nn import functional as F

from conftest import DECODERS, decoder_id, rotate, tiny_model
from fixtures.reference import load
from aogpt.checkpoints import load_checkpoint, reference_state_dict
from aogpt.engine import Engine, KVCache
from model import GPT, GPTConfig, build_model
from aogpt.training import make_ema, make_fixed_order, paper_mix, sample_orders


@pytest.fixture(scope='module')
def fixture():
    return load('ao_gpt')


def reference_model(fixture, use_ema=True):
    model = GPT(GPTConfig(**fixture['model_args']))
    model.load_state_dict(reference_state_dict(fixture, use_ema))
    return model.eval()


@pytest.mark.parametrize('weights', ['ema', 'model'])
def test_parity_with_authors_code(fixture, weights):
    model = reference_model(fixture, weights == 'ema')
    with torch.no_grad():
        logits, loss = model(fixture['inputs'], fixture['orders'], reduction='none')
    torch.testing.assert_close(logits, fixture[f'expected_logits_{weights}'], atol=1e-4, rtol=0)
    torch.testing.assert_close(loss, fixture[f'expected_loss_{weights}'], atol=1e-4, rtol=0)


def test_load_authors_checkpoint_file(fixture, tmp_path):
    # a compiled run of their trainer prefixes keys with _orig_mod.
    ckpt = dict(fixture, model={'_orig_mod.' + k: v for k, v in fixture['model'].items()})
    torch.save(ckpt, tmp_path / 'ref.pt')
    for use_ema, name in [(True, 'ema'), (False, 'model')]:
        model, _ = load_checkpoint(tmp_path / 'ref.pt', use_ema=use_ema)
        with torch.no_grad():
            logits, _ = model(fixture['inputs'], fixture['orders'])
        torch.testing.assert_close(logits, fixture[f'expected_logits_{name}'], atol=1e-4, rtol=0)


def slow_forward(model, x, order):
    """The forward written out slot by slot with explicit attention loops (one row): AO-GPT's adaLN
    blocks, or sigma-GPT's plain LayerNorm blocks on an input that carries the target embedding; positions
    added from the learned table, or each key turned by explicit 2x2 rotations at its slot's position (the
    start slot: -1) and each query at the position its slot predicts (rotary; none: -1) or at its own
    (rotary_plain); rotary_half_heads: head 0 of each layer at the target, the others at their own;
    rotary_upper_layers: the first half of the layers at their own, the rest at the target. queries: no target
    condition. two_stream: the slots with the zero condition and their queries at their own position (the
    content stream: every key and value), then a row per slot (the query stream: wqe, plus wpe at the target
    with learned positions; the target's condition; queries as above) whose row i reads content rows 0..i and
    predicts."""
    cfg, p = model.config, model.state_dict()  # the state dict names a tied head under both names
    T, C, nh = x.numel(), cfg.n_embd, cfg.n_head
    hs = C // nh
    adaln = cfg.target_injection != 'add'
    own = [-1] + order.tolist()  # each slot's position, and the position it predicts
    predicts = order.tolist() + [-1]
    pe = cfg.position_encoding
    at_target = lambda layer, head: (pe == 'rotary' or (pe == 'rotary_half_heads' and head < nh // 2)
                                     or (pe == 'rotary_upper_layers' and layer >= cfg.n_layer // 2))
    learned = cfg.position_encoding == 'learned'
    rms = lambda v, w: v / torch.sqrt((v * v).mean(-1, keepdim=True) + 1e-5) * w
    centred = lambda v: v - v.mean(-1, keepdim=True)
    layer_norm = lambda v, name: rms(centred(v), p[name + '.weight']) + p.get(name + '.bias', 0)  # LN = RMS of centred
    norm = (lambda v, name: rms(v, p[name + '.weight'])) if adaln else layer_norm
    lin = lambda v, name: v @ p[name + '.weight'].T + (p[name + '.bias'] if name + '.bias' in p else 0)
    gelu = lambda v: 0.5 * v * (1 + torch.erf(v / math.sqrt(2)))
    silu = lambda v: v * torch.sigmoid(v)
    rows = [p['transformer.wnonee.weight'][0]] + [p['transformer.wte.weight'][x[o]] for o in order]
    h = torch.stack(rows) + (p['transformer.wpe.weight'][torch.tensor(own) + 1] if learned else 0)
    if cfg.target_injection == 'queries':
        cond = torch.zeros(T + 1, cfg.cond_dim)
    else:
        cond = torch.stack([p['transformer.wtpe.weight'][o] for o in order] +
                           [torch.zeros(p['transformer.wtpe.weight'].size(1))])
    if not adaln:
        h = h + cond
    streams = [[h, cond, True]]  # each stream's rows, condition, and whether its queries may turn at the target
    if cfg.target_injection == 'two_stream':
        g = p['transformer.wqe.weight'][0] + (p['transformer.wpe.weight'][torch.tensor(predicts) + 1] if learned else 0)
        streams = [[h, torch.zeros_like(cond), False], [g.expand(T + 1, C), cond, True]]
    for layer in range(cfg.n_layer):
        pre = f'transformer.h.{layer}.'
        qk_norm = (lambda v, name: rms(v, p[pre + f'attn.{name}.weight'])) if adaln else (lambda v, name: v)
        mods = [lin(silu(c), pre + 'adaLN.1').chunk(6, -1) if adaln else [0, 0, 1, 0, 0, 1] for _, c, _ in streams]
        qkv = [lin(norm(r, pre + 'ln_1') * (1 + m[1]) + m[0], pre + 'attn.c_attn') for (r, _, _), m in zip(streams, mods)]
        outs = [torch.zeros_like(r) for r, _, _ in streams]
        for head in range(nh):
            k = qk_norm(qkv[0][:, C + head * hs:C + (head + 1) * hs], 'k_norm')  # the first stream's keys, values
            v = qkv[0][:, 2 * C + head * hs:2 * C + (head + 1) * hs]
            if not learned:
                k = torch.stack([rotate(k[i], own[i]) for i in range(T + 1)])
            for (_, _, targeted), a, out in zip(streams, qkv, outs):
                q = qk_norm(a[:, head * hs:(head + 1) * hs], 'q_norm')
                if not learned:
                    query_at = predicts if targeted and at_target(layer, head) else own
                    q = torch.stack([rotate(q[i], query_at[i]) for i in range(T + 1)])
                for i in range(T + 1):
                    w = torch.softmax(torch.stack([q[i] @ k[j] / math.sqrt(hs) for j in range(i + 1)]), 0)
                    out[i, head * hs:(head + 1) * hs] = sum(w[j] * v[j] for j in range(i + 1))
        for stream, m, out in zip(streams, mods, outs):
            r = stream[0] + m[2] * lin(out, pre + 'attn.c_proj')
            n = norm(r, pre + 'ln_2') * (1 + m[4]) + m[3]
            stream[0] = r + m[5] * lin(gelu(lin(n, pre + 'mlp.c_fc')), pre + 'mlp.c_proj')
    h, cond, _ = streams[-1]
    if not adaln:  # the head is the token embedding
        return norm(h, 'transformer.ln_f') @ p['transformer.wte.weight'].T
    h = norm(h, 'transformer.final_layer.ln_f')
    shift, scale = lin(silu(cond), 'transformer.final_layer.adaLN_final.1').chunk(2, -1)
    return lin(h * (1 + scale) + shift, 'lm_head')


@pytest.mark.parametrize('bias', [True, False])
@pytest.mark.parametrize('kind', DECODERS + [dict(target_injection='two_stream', position_encoding='learned')],
                         ids=decoder_id)  # two streams' learned positions: here and in the cache's test below
def test_forward_matches_slow_forward(kind, bias):
    model = tiny_model(bias=bias, **kind)
    x = torch.randint(0, 11, (2, 16))
    order = sample_orders('random', 2, 16, torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, loss = model(x, order, reduction='none')
        for b in range(2):
            torch.testing.assert_close(logits[b], slow_forward(model, x[b], order[b]), atol=1e-5, rtol=0)
    expected = F.cross_entropy(logits[:, :16].transpose(1, 2), x.gather(1, order), reduction='none')
    torch.testing.assert_close(loss, expected)


def test_cudnn_attention_only_in_training(monkeypatch):
    # cuDNN's attention plans each new shape (~8 ms on an H200): decoding and scoring, whose shapes change at nearly
    # every call, run without it (5x faster sampling there); training, whose shapes repeat, keeps it
    seen, sdpa = [], F.scaled_dot_product_attention
    def recording(*args, **kwargs):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return sdpa(*args, **kwargs)
    monkeypatch.setattr(F, 'scaled_dot_product_attention', recording)
    before = torch.backends.cuda.cudnn_sdp_enabled()
    model = tiny_model()
    x, order = torch.randint(0, 11, (2, 16)), torch.arange(16).expand(2, -1)
    model.train()(x, order)
    assert seen == [True] * model.config.n_layer
    seen.clear()
    with torch.no_grad():
        model.eval()(x, order)
    assert seen == [False] * model.config.n_layer
    assert torch.backends.cuda.cudnn_sdp_enabled() == before


@pytest.mark.parametrize('kind', DECODERS, ids=decoder_id)
def test_causality_over_random_orders(kind):
    model = tiny_model(**kind)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 11, (4, 16), generator=gen)
    order = sample_orders('random', 4, 16, gen)
    with torch.no_grad():
        logits, _ = model(x, order)
        for j in [0, 5, 14]:
            # new tokens at the positions read after slot j, and those later slots reshuffled
            x2 = x.clone()
            later = order[:, j:]
            x2.scatter_(1, later, torch.randint(0, 11, later.shape, generator=gen))
            order2 = order.clone()
            order2[:, j + 1:] = later[:, 1:].gather(1, torch.rand(later[:, 1:].shape, generator=gen).argsort(1))
            logits2, _ = model(x2, order2)
            torch.testing.assert_close(logits2[:, :j + 1], logits[:, :j + 1], atol=1e-6, rtol=0)
            assert not torch.allclose(logits2[:, j + 1:-1], logits[:, j + 1:-1])


@pytest.mark.parametrize('kind', DECODERS, ids=decoder_id)
def test_l2r_order_is_an_ordinary_causal_lm(kind):
    model = tiny_model(**kind)
    x = torch.randint(0, 11, (3, 16))
    identity = sample_orders('l2r', 3, 16)
    with torch.no_grad():
        logits, loss = model(x, identity)
        # slot t predicts x[t] from x[:t] alone: running the model on a prefix changes no earlier slot
        torch.testing.assert_close(loss, F.cross_entropy(logits[:, :16].flatten(0, 1), x.flatten()))
        for t in [1, 7, 15]:
            prefix_logits, _ = model(x[:, :t], identity[:, :t])
            torch.testing.assert_close(prefix_logits[:, :t], logits[:, :t], atol=1e-6, rtol=0)


def test_order_modes():
    gen = torch.Generator().manual_seed(0)
    B, T = 20000, 8
    for mode in ['mixed', 'l2r', 'random', 'fixed_random', 'block_random']:
        fixed = make_fixed_order(mode, T, 4, gen)
        orders = sample_orders(mode, B, T, gen, paper_mix(0.9), fixed_order=fixed)
        assert orders.shape == (B, T)
        assert torch.equal(orders.sort(1).values, torch.arange(T).expand(B, T)), mode
    identity = torch.arange(T)
    mixed = sample_orders('mixed', B, T, gen, paper_mix(0.9))
    l2r_fraction = (mixed == identity).all(1).float().mean().item()
    assert abs(l2r_fraction - (0.1 + 0.9 / math.factorial(T))) < 0.01
    random = sample_orders('random', B, T, gen)
    assert (random == identity).all(1).float().mean() < 0.001
    first = torch.bincount(random[:, 0], minlength=T).float() / B  # uniform over positions
    assert (first - 1 / T).abs().max() < 0.015
    assert (sample_orders('l2r', 5, T) == identity).all()
    fixed = make_fixed_order('fixed_random', 64, 4, gen)
    assert not torch.equal(fixed, torch.arange(64))
    assert (sample_orders('fixed_random', 3, 64, gen, fixed_order=fixed) == fixed).all()
    block = make_fixed_order('block_random', 64, 16, gen)
    for start in range(0, 64, 16):  # each block is a shuffle of its own positions
        assert torch.equal(block[start:start + 16].sort().values, torch.arange(start, start + 16))
    assert not torch.equal(block, torch.arange(64))


def test_ema_update_rule():
    model = tiny_model()
    ema = make_ema(model, decay=0.5)
    expected = [p.detach().clone() for p in model.parameters()]
    for n in range(1, 6):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        ema.update_parameters(model)
        d = min(0.5, (1 + n) / (10 + n))
        expected = [d * e + (1 - d) * p.detach() for e, p in zip(expected, model.parameters())]
    for e, p in zip(expected, ema.module.parameters()):
        torch.testing.assert_close(p, e)


@pytest.mark.parametrize('kind', DECODERS, ids=decoder_id)
def test_kv_cache_in_chunks_matches_full_forward(kind):
    model = tiny_model(**kind)
    x = torch.randint(0, 11, (2, 16))
    order = sample_orders('random', 2, 16, torch.Generator().manual_seed(3))
    with torch.no_grad():
        full, _ = model(x, order)
        none = torch.full((2, 1), -1)
        tokens = torch.cat([torch.zeros_like(none), x.gather(1, order)], 1)
        positions, targets = torch.cat([none, order], 1), torch.cat([order, none], 1)
        cache = KVCache(model.config, 2, 17)
        for start, stop in [(0, 1), (1, 5), (5, 6), (6, 17)]:  # chunks of slots, causal within
            logits = model.forward_slots(tokens[:, start:stop], positions[:, start:stop],
                                         targets[:, start:stop], cache)
            cache.commit(stop - start)
            torch.testing.assert_close(logits, full[:, start:stop], atol=1e-5, rtol=0)


@pytest.mark.parametrize('positions', ['learned', 'rotary'])
def test_two_streams_cache_the_same_keys_and_values_whatever_the_targets(positions):
    """two_stream: a prefix's cached keys and values are equal bit for bit under two sets of targets (a mutant that
    gives the content stream the targets' condition fails); the single stream's differ, as its slots carry them."""
    x = torch.randint(0, 11, (2, 16))
    order = sample_orders('random', 2, 16, torch.Generator().manual_seed(4))
    none = torch.full((2, 1), -1)
    tokens = torch.cat([torch.zeros_like(none), x.gather(1, order)], 1)[:, :9]
    places = torch.cat([none, order], 1)[:, :9]
    for injection in ('two_stream', 'adaln'):
        model = tiny_model(target_injection=injection, position_encoding=positions)
        caches = []
        for seed in (5, 6):  # two sets of targets
            targets = torch.stack([torch.randperm(16, generator=torch.Generator().manual_seed(seed + b))[:9]
                                   for b in range(2)])
            caches.append(KVCache(model.config, 2, 9))
            with torch.no_grad():
                model.forward_slots(tokens, places, targets, caches[-1])
        same = all(torch.equal(a, b) for a, b in zip(caches[0].k + caches[0].v, caches[1].k + caches[1].v))
        assert same == (injection == 'two_stream'), injection


def test_engine_refuses_a_step_past_its_cache():
    engine = Engine(tiny_model(), 1, 4)
    start = torch.tensor([[-1, 0, 1]])
    engine.step(torch.zeros(1, 3, dtype=torch.long), start, torch.tensor([[2, 3]]))  # 3 slots and a copy: 4
    with pytest.raises(ValueError, match='KV cache overflow: 5 slots needed, 4 allocated'):
        engine.step(torch.zeros(1, 3, dtype=torch.long), start, torch.tensor([[2, 3, 4]]))


def test_kv_cache_reproduces_authors_cached_decoding(fixture):
    """Teacher-forced any-order decoding with several targets per step, as the authors' sampler does.

    Engine.step feeds the tokens decoded in the previous step (each with the next target in the
    order) plus copies of the last one, one per target of the step; only copy 0 stays cached.
    """
    model = reference_model(fixture)
    for gen in fixture['generation']:
        orders, tokens = gen['sampling_orders'], gen['tokens']
        B, T = tokens.shape
        engine = Engine(model, B, T)
        logits = torch.zeros(B, T, model.config.vocab_size)
        positions = torch.full((B, 1), -1)  # the start slot
        done = 0
        for s in gen['step_sizes'].tolist():
            targets = orders[:, done:done + s]
            with torch.no_grad():
                logits[:, done:done + s] = engine.step(tokens.gather(1, positions.clamp(min=0)), positions, targets)
            engine.accept()
            positions, done = targets, done + s
        torch.testing.assert_close(logits, gen['logits'], atol=1e-4, rtol=0, msg=gen['name'])


@pytest.mark.parametrize('injection', ['adaln', 'add'])
def test_attention_dropout_only_in_sigma_gpt(injection):
    # the authors drop nothing inside AO-GPT's attention but do inside sigma-GPT's (nanoGPT's): with
    # the other dropouts off, training mode gives the eval-mode logits for AO-GPT only
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=16, vocab_size=40, n_layer=2, n_head=2, n_embd=32, cond_dim=16, dropout=0.5,
                          target_injection=injection))
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    x, order = torch.randint(40, (2, 16)), torch.randperm(16).expand(2, 16)
    expected, _ = model.eval()(x, order)
    logits, _ = model.train()(x, order)
    assert torch.equal(logits, expected) == (injection == 'adaln')



@pytest.mark.parametrize('injection', ['adaln', 'add'])
def test_target_init_std_scales_only_the_target_position_embedding(injection):
    # the same random draws, so a run with another target_init_std differs only in that table
    def init(std):
        torch.manual_seed(0)
        return GPT(GPTConfig(block_size=16, vocab_size=40, n_layer=2, n_head=2, n_embd=32, cond_dim=16,
                             target_init_std=std, target_injection=injection)).state_dict()
    small, large = init(0.02), init(1.0)
    for name, weight in small.items():
        if name == 'transformer.wtpe.weight':
            torch.testing.assert_close(large[name], weight * 50, rtol=1e-5, atol=0)
            assert 0.8 < large[name].std() < 1.2
        else:
            assert torch.equal(large[name], weight), name


@pytest.mark.parametrize('kind', [dict(architecture='decoder'), dict(architecture='encoder'),
                                  dict(target_injection='add')])
def test_gate_init_sets_only_the_gate_biases(kind):
    # no random draws: a run with another gate_init differs only in the adaLN biases of the two gates
    # (sigma-GPT has none, so nothing at all)
    def init(gate):
        torch.manual_seed(0)
        return build_model(GPTConfig(block_size=16, vocab_size=40, n_layer=2, n_head=2, n_embd=32, cond_dim=16,
                                     gate_init=gate, **kind)).state_dict()
    shut, open_ = init(0.0), init(1.0)
    assert any(name.endswith('adaLN.1.bias') for name in shut) == ('target_injection' not in kind)
    for name, weight in shut.items():
        if name.endswith('adaLN.1.bias'):  # (shift1, scale1, gate1, shift2, scale2, gate2), 32 wide each
            assert torch.equal(weight, torch.zeros(6 * 32))
            assert torch.equal(open_[name], torch.tensor([0., 0., 1., 0., 0., 1.]).repeat_interleave(32)), name
        else:
            assert torch.equal(open_[name], weight), name


def test_open_gates_start_each_block_as_a_plain_residual_block():
    # with gate 1 and no condition, AdaLNBlock is x + attn(norm(x)), then + mlp(norm(.)): written out here
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=16, vocab_size=40, n_layer=1, n_head=2, n_embd=32, cond_dim=16, gate_init=1.0))
    block = model.transformer.h[0]
    with torch.no_grad():
        block.adaLN[1].weight.zero_()
    x, c = torch.randn(2, 5, 32), torch.randn(2, 5, 16)
    h = x + block.attn(block.ln_1(x))
    torch.testing.assert_close(block(x, c), h + block.mlp(block.ln_2(h)), rtol=0, atol=1e-6)



def test_rotary_decoders_state_dicts_and_checkpoints(tmp_path):
    # no position table (the cos/sin tables are made from the config, not saved); a checkpoint records its
    # encoding, and one without the key (the authors', or from before the option) is a learned one
    learned, rotary = tiny_model(), tiny_model(position_encoding='rotary')
    assert list(rotary.state_dict()) == [k for k in learned.state_dict() if k != 'transformer.wpe.weight']
    x, order = torch.randint(0, 11, (2, 16)), torch.randperm(16).expand(2, 16)
    for model, args in [(rotary, dict(position_encoding='rotary')), (learned, {})]:
        model_args = dict(block_size=16, vocab_size=11, n_layer=2, n_head=2, n_embd=32, cond_dim=8) | args
        torch.save({'model': model.state_dict(), 'model_args': model_args}, tmp_path / 'ckpt.pt')
        loaded, _ = load_checkpoint(tmp_path / 'ckpt.pt')
        assert loaded.config.position_encoding == args.get('position_encoding', 'learned')
        with torch.no_grad():
            torch.testing.assert_close(loaded(x, order)[0], model(x, order)[0])



@pytest.mark.parametrize('injection', ['adaln', 'add'])  # a head with a bias, and sigma-GPT's tied one without
def test_the_head_gives_the_linear_layers_logits_for_any_number_of_rows(injection):
    """Network.head multiplies a few rows the other way round on a CPU: the Linear's logits (random bias included)
    for 1, 2 and FEW_ROWS - 1 rows and past FEW_ROWS, in any batch shape."""
    import model
    assert 30 < model.FEW_ROWS
    net = tiny_model(target_injection=injection)
    if net.lm_head.bias is not None:
        torch.nn.init.normal_(net.lm_head.bias)
    g = torch.Generator().manual_seed(0)
    for shape in ((1, 1), (2, 1), (1, 2), (3, 10), (model.FEW_ROWS + 1,)):  # 1, 2, 30 rows and past FEW_ROWS
        h = torch.randn(*shape, net.config.n_embd, generator=g)
        out = net.head(h)
        assert out.shape == (*shape, net.config.vocab_size) and out.is_contiguous()
        torch.testing.assert_close(out, net.lm_head(h), rtol=1e-6, atol=1e-6)
