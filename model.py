"""
Any-Order GPT (AO-GPT) and its sigma-GPT baseline, the whole model in one file.

A causal decoder that reads a sequence in a permuted order: slot 0 is a learned start token and
slot j+1 holds token x[order[j]] with the position embedding of order[j]. Slot j is told which
position it must predict (order[j]), so with causal attention slot j predicts x[order[j]] from
x[order[0..j-1]]. Trained over uniformly random orders this is an any-order autoregressive model,
i.e. a masked diffusion model; with the identity order it is a plain GPT.

How a slot is told its target is `target_injection`, and each names the paper's whole model:
- 'adaln' (AO-GPT): a 128-wide target-position embedding drives adaLN shift/scale/gate in every
  block and before the head; RMSNorm, QK-norm, an untied head with a bias, truncated-normal init;
- 'add' (sigma-GPT, the paper's baseline): an n_embd-wide target-position embedding is added to
  the slot's input of a plain nanoGPT: LayerNorm, no QK-norm, a bias-free head tied to wte,
  normal init, dropout inside attention too.

References: Xue et al., "Any-Order GPT as Masked Diffusion Model: Decoupling Formulation and
Architecture" (arXiv 2506.19935); Pannatier et al., "sigma-GPTs" (arXiv 2404.09562); Karpathy's
nanoGPT for the overall shape. Parameter names follow the authors' code, so their state dicts
load as they are.
"""
import math
import warnings
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

ORDER_MODES = ('mixed', 'l2r', 'random', 'fixed_random', 'block_random')
TARGET_INJECTIONS = ('adaln', 'add')


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304  # GPT-2's 50257 padded up to a multiple of 64
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    cond_dim: int = 128  # width of the target-position embedding fed to adaLN
    target_init_std: float = 0.02  # init std of the target-position embedding (the authors': 0.02)
    dropout: float = 0.0
    bias: bool = True  # biases in the attention and MLP Linears (and sigma-GPT's LayerNorms), as in GPT-2
    target_injection: str = 'adaln'  # 'adaln' (AO-GPT) or 'add' (the sigma-GPT baseline), see above

    def __post_init__(self):
        if self.target_injection not in TARGET_INJECTIONS:
            raise ValueError(f"target_injection must be one of {TARGET_INJECTIONS}, got {self.target_injection!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f'n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})')

    @property
    def adaln(self):
        return self.target_injection == 'adaln'


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.rms_norm(x, (x.size(-1),), self.weight, self.eps)


def make_norm(config, dim):
    return RMSNorm(dim) if config.adaln else nn.LayerNorm(dim, bias=config.bias)


def modulate(x, shift, scale):
    return torch.addcmul(shift, x, 1 + scale)


class KVCache:
    """Keys and values of the slots decoded so far, per layer, in buffers allocated once.

    A forward with a cache writes the keys and values of all its new slots after the `length`
    committed ones; `commit(n)` then keeps the first n of them. Slots written but not committed
    (e.g. extra copies that only served as queries) are overwritten by the next forward.
    """

    def __init__(self, config, batch_size, max_slots, device=None, dtype=torch.float32):
        shape = (config.n_layer, batch_size, config.n_head, max_slots, config.n_embd // config.n_head)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0

    def update(self, layer, k, v):
        end = self.length + k.size(2)
        if end > self.k.size(3):
            raise ValueError(f'KV cache overflow: {end} slots needed, {self.k.size(3)} allocated')
        self.k[layer, :, :, self.length:end] = k
        self.v[layer, :, :, self.length:end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]

    def commit(self, n, last=None):
        """Keep the first n new slots; with last (B,), row b keeps new slot n-1+last[b] as its n-th.

        `last` picks, after the forward, which of the copies that ended a decoding step goes on.
        """
        if last is not None:
            rows = torch.arange(self.k.size(1), device=last.device)
            src, dst = self.length + n - 1 + last, torch.full_like(last, self.length + n - 1)
            for buf in (self.k, self.v):
                buf[:, rows, :, dst] = buf[:, rows, :, src]
        self.length += n


class CausalSelfAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.n_head = config.n_head
        head_size = config.n_embd // config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        # QK-norm keeps AO-GPT's attention logits bounded; sigma-GPT has none
        self.q_norm = RMSNorm(head_size) if config.adaln else nn.Identity()
        self.k_norm = RMSNorm(head_size) if config.adaln else nn.Identity()
        # the authors drop nothing inside AO-GPT's attention, but do inside sigma-GPT's (nanoGPT's)
        self.attn_dropout = 0.0 if config.adaln else config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x, cache=None, attn_mask=None):
        B, S, C = x.size()
        q, k, v = self.c_attn(x).view(B, S, 3, self.n_head, C // self.n_head).unbind(2)
        q, k, v = self.q_norm(q).transpose(1, 2), self.k_norm(k).transpose(1, 2), v.transpose(1, 2)  # (B, nh, S, hs)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=attn_mask is None,
                                           dropout_p=self.attn_dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, S, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.ln_1 = make_norm(config, config.n_embd)
        self.attn = CausalSelfAttention(config, layer_idx)
        self.ln_2 = make_norm(config, config.n_embd)
        self.mlp = MLP(config)
        # shift, scale, gate for attention and for the MLP, from the slot's target position
        self.adaLN = nn.Sequential(nn.SiLU(), nn.Linear(config.cond_dim, 6 * config.n_embd)) if config.adaln else None

    def forward(self, x, c, cache=None, attn_mask=None):
        if self.adaLN is None:  # sigma-GPT: a plain pre-norm block (the target is in x already)
            x = x + self.attn(self.ln_1(x), cache, attn_mask)
            return x + self.mlp(self.ln_2(x))
        shift1, scale1, gate1, shift2, scale2, gate2 = self.adaLN(c).chunk(6, dim=-1)
        x = torch.addcmul(x, gate1, self.attn(modulate(self.ln_1(x), shift1, scale1), cache, attn_mask))
        return torch.addcmul(x, gate2, self.mlp(modulate(self.ln_2(x), shift2, scale2)))


class FinalLayer(nn.Module):
    """AO-GPT's last norm, modulated by the target position (sigma-GPT has a plain ln_f instead)."""

    def __init__(self, config):
        super().__init__()
        self.ln_f = RMSNorm(config.n_embd)
        self.adaLN_final = nn.Sequential(nn.SiLU(), nn.Linear(config.cond_dim, 2 * config.n_embd))

    def forward(self, x, c):
        shift, scale = self.adaLN_final(c).chunk(2, dim=-1)
        return modulate(self.ln_f(x), shift, scale)


class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size + 1, config.n_embd),  # row 0: the start slot
            # target-position embedding: adaLN's input, or added to the slot's input
            wtpe=nn.Embedding(config.block_size, config.cond_dim if config.adaln else config.n_embd),
            wnonee=nn.Embedding(1, config.n_embd),  # the start token ("[None]")
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config, i) for i in range(config.n_layer)]),
            **(dict(final_layer=FinalLayer(config)) if config.adaln else dict(ln_f=make_norm(config, config.n_embd))),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=config.adaln)
        if not config.adaln:  # sigma-GPT ties the head to the token embedding
            self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith('c_proj.weight'):  # residual projections, scaled as in GPT-2
                self._init_normal(p, 0.02 / math.sqrt(2 * config.n_layer))

    def _init_normal(self, weight, std):
        if self.config.adaln:  # AO-GPT truncates at 3 std, sigma-GPT (nanoGPT) does not
            nn.init.trunc_normal_(weight, std=std, a=-3 * std, b=3 * std)
        else:
            nn.init.normal_(weight, std=std)

    def _init_weights(self, module):
        if module is self.transformer.wtpe:
            self._init_normal(module.weight, self.config.target_init_std)
        elif isinstance(module, (nn.Linear, nn.Embedding)):
            self._init_normal(module.weight, 0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def get_num_params(self):
        return sum(p.numel() for p in self.parameters())

    def forward(self, x, order, reduction='mean'):
        """Read tokens x (B, T) in `order` (B, T); return logits (B, T+1, V) and the loss.

        logits[:, j] (j < T) predicts x[order[j]] from x[order[:j]]; the last slot has no target.
        The loss is the cross-entropy of slots 0..T-1, averaged, or per token (B, T) in decoding
        order with reduction='none'.
        """
        B, T = x.size()
        if T > self.config.block_size:
            raise ValueError(f'sequence of length {T} is longer than block_size {self.config.block_size}')
        targets = x.gather(1, order)
        none = torch.full((B, 1), -1, dtype=order.dtype, device=order.device)
        tokens = torch.cat([torch.zeros_like(none), targets], dim=1)
        logits = self.forward_slots(tokens, torch.cat([none, order], 1), torch.cat([order, none], 1))
        loss = F.cross_entropy(logits[:, :T].flatten(0, 1).float(), targets.flatten(), reduction='none')
        loss = loss.view(B, T)
        return logits, (loss.mean() if reduction == 'mean' else loss)

    def forward_slots(self, tokens, positions, targets, cache=None, attn_mask=None, out_slots=None):
        """The general forward over explicit slots, for training, cached sampling and evaluation.

        tokens, positions, targets: (B, S). A slot holds `tokens` at original position `positions`
        (-1 marks the start slot, whose token is ignored) and predicts position `targets` (-1: no
        target, zero condition). With a KVCache the slots also attend to the cached ones.
        attn_mask: bool, broadcastable to (B, n_head, S, cache.length + S), True where a slot may
        attend; default causal (all cached slots, then the new slots in order).
        out_slots: optional (B, Q) slot indices; only these go through the head, which saves
        most of the work and memory when few slots are queries (as in ensembled evaluation).
        Returns logits (B, S, V), or (B, Q, V) with out_slots.
        """
        wt = self.transformer
        is_start = (positions < 0).unsqueeze(-1)
        h = torch.where(is_start, wt.wnonee.weight[0], wt.wte(tokens)) + wt.wpe(positions + 1)
        c = wt.wtpe(targets.clamp(min=0)).masked_fill((targets < 0).unsqueeze(-1), 0.0)
        if not self.config.adaln:
            h = h + c
        h = wt.drop(h)
        if cache is not None and attn_mask is None:
            S = tokens.size(1)
            attn_mask = torch.ones(S, cache.length + S, dtype=torch.bool, device=h.device).tril(cache.length)
        for block in wt.h:
            h = block(h, c, cache, attn_mask)
        if out_slots is not None:
            index = out_slots.unsqueeze(-1)
            h, c = h.gather(1, index.expand(-1, -1, h.size(-1))), c.gather(1, index.expand(-1, -1, c.size(-1)))
        return self.lm_head(wt.final_layer(h, c) if self.config.adaln else wt.ln_f(h))

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        # matrices and embeddings decay; biases and norm weights do not
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {'params': [p for p in params if p.dim() >= 2], 'weight_decay': weight_decay},
            {'params': [p for p in params if p.dim() < 2], 'weight_decay': 0.0},
        ]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=device_type == 'cuda')

    def estimate_mfu(self, tokens_per_second, peak_flops):
        """Model flops utilization: achieved training flops over `peak_flops` (PaLM appendix B)."""
        cfg = self.config
        flops_per_token = 6 * self.get_num_params() + 12 * cfg.n_layer * cfg.n_embd * (cfg.block_size + 1)
        return flops_per_token * tokens_per_second / peak_flops


# -----------------------------------------------------------------------------
# cached any-order decoding

def decode_step(model, cache, tokens, positions, targets):
    """One step of cached decoding: logits (B, k, V) for each target position in targets (B, k).

    tokens, positions (B, m): the slots not yet in the cache, in decoding order: on the first step
    the start slot (position -1) and any known tokens, later the tokens decoded by the previous
    step. Each predicts the position after it; the last one is run once per target, and these
    copies see the cache, the other new slots and themselves only, so every target is predicted
    from the same context. Then cache.commit(m, last) keeps the slots, with the copy whose target
    comes next in the order (copy 0 if last is None).
    """
    B, m = positions.shape
    k = targets.size(1)
    tok = torch.cat([tokens, tokens[:, -1:].expand(B, k - 1)], 1)
    pos = torch.cat([positions, positions[:, -1:].expand(B, k - 1)], 1)
    tgt = torch.cat([positions[:, 1:], targets], 1)
    S, L = m + k - 1, cache.length
    mask = torch.ones(S, L + S, dtype=torch.bool, device=tok.device).tril(L)
    mask[m:, L + m - 1:] = torch.eye(S, dtype=torch.bool, device=tok.device)[m:, m - 1:]
    queries = torch.arange(m - 1, S, device=tok.device).expand(B, k)  # no logits for the other slots
    return model.forward_slots(tok, pos, tgt, cache, mask, out_slots=queries)


# -----------------------------------------------------------------------------
# orders

def make_fixed_order(mode, block_size, order_block, generator=None):
    """The one order used for a whole run by 'fixed_random' and 'block_random', else None."""
    if mode == 'fixed_random':
        return torch.randperm(block_size, generator=generator)
    if mode == 'block_random':
        # random within consecutive blocks of order_block tokens, blocks left to right
        key = torch.arange(block_size) // order_block + torch.rand(block_size, generator=generator, dtype=torch.float64)
        return key.argsort()
    return None


def sample_orders(mode, batch_size, seq_len, generator=None, random_ratio=0.9, fixed_order=None):
    """One order (a permutation of 0..seq_len-1) per row, (batch_size, seq_len), on the CPU."""
    identity = torch.arange(seq_len).expand(batch_size, seq_len)
    if mode == 'l2r':
        return identity.clone()
    if mode in ('fixed_random', 'block_random'):
        return fixed_order[:seq_len].expand(batch_size, seq_len).clone()
    # argsort of i.i.d. uniforms is a uniform permutation; float64 makes ties vanishingly rare
    random = torch.rand(batch_size, seq_len, generator=generator, dtype=torch.float64).argsort(dim=1)
    if mode == 'random':
        return random
    if mode != 'mixed':
        raise ValueError(f'unknown order mode {mode!r}, expected one of {ORDER_MODES}')
    l2r_rows = torch.rand(batch_size, 1, generator=generator) >= random_ratio
    return torch.where(l2r_rows, identity, random)


# -----------------------------------------------------------------------------
# EMA of the weights

def make_ema(model, decay):
    """EMA with the warm-up rule decay_n = min(decay, (1 + n) / (10 + n)) at the n-th update.

    The average starts from the current weights (update 0 copies them), like the authors' EMA.
    """
    def ema_update(averaged, current, n):
        d = torch.clamp((1.0 + n) / (10.0 + n), max=decay)
        torch._foreach_lerp_(averaged, current, 1.0 - d)

    ema = torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=ema_update)
    ema.update_parameters(model)
    return ema


# -----------------------------------------------------------------------------
# checkpoints

def injection_of(state):
    """The target injection of a state dict, from its keys: only sigma-GPT has a top-level ln_f."""
    return 'add' if 'transformer.ln_f.weight' in state else 'adaln'


def reference_state_dict(checkpoint, use_ema=True):
    """A state dict for GPT from a checkpoint of the authors' trainer (EMA weights by default).

    Their EMA keeps `shadow_params` as a list in parameter order, which is the key order of
    their `model` state dict; their compiled runs prefix keys with `_orig_mod.`. sigma-GPT's
    state dict holds its tied head twice, as transformer.wte.weight and lm_head.weight, but
    parameters() yields the shared tensor once, under its first name (wte): we assume their EMA
    of a sigma-GPT has no entry for lm_head.weight and take it from wte.
    """
    raw = {k.removeprefix('_orig_mod.'): v for k, v in checkpoint['model'].items()}
    if not use_ema:
        return raw
    tied = injection_of(raw) == 'add'
    names = [k for k in raw if not (tied and k == 'lm_head.weight')]
    shadow = checkpoint['ema_model']['shadow_params']
    if len(shadow) != len(names):
        raise ValueError(f'EMA holds {len(shadow)} tensors but the model has {len(names)} parameters')
    state = dict(zip(names, shadow))
    if tied:
        state['lm_head.weight'] = state['transformer.wte.weight']
    return state


def one_line(error, limit=300):
    """An exception as one short line, for error messages."""
    text = ' '.join(str(error).split())
    return f'{type(error).__name__}: {text[:limit]}' + ('...' if len(text) > limit else '')


def weights_read(checkpoint, use_ema=True):
    """'EMA' or 'raw': the weights load_checkpoint reads, the EMA ones (ours: 'ema', the authors':
    'ema_model') unless use_ema=False or the checkpoint has none (the authors' sigma-GPT, nanoGPT's)."""
    return 'EMA' if use_ema and {'ema', 'ema_model'} & checkpoint.keys() else 'raw'


def load_weights_only(path, device='cpu'):
    """torch.load(weights_only=True), without torch's warning about the pickle protocol of a file
    that is not a checkpoint (the caller's one-line error says that)."""
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='Detected pickle protocol')
        return torch.load(path, map_location=device, weights_only=True)


def load_checkpoint(path, device='cpu', use_ema=True):
    """A GPT (eval mode) and the checkpoint dict, from one of our checkpoints or the authors' ones.

    The EMA weights by default, the raw ones with use_ema=False or when the checkpoint has no EMA
    weights; weights_read(checkpoint, use_ema) says which. A missing, truncated or foreign file
    stops with a one-line error.
    """
    try:
        checkpoint = load_weights_only(path, device)
    except FileNotFoundError:
        raise SystemExit(f'error: checkpoint {path} not found')
    except Exception as e:  # truncated, not a torch file, or pickled objects other than tensors
        raise SystemExit(f'error: {path} is not a readable checkpoint: truncated, or not written by '
                         f'torch.save ({type(e).__name__})')
    if not isinstance(checkpoint, dict) or not {'model', 'model_args'} <= checkpoint.keys():
        raise SystemExit(f"error: {path} is not an AO-GPT checkpoint (no 'model' and 'model_args' in it)")
    ema = weights_read(checkpoint, use_ema) == 'EMA'
    try:
        if 'ema' in checkpoint:  # ours
            state = checkpoint['ema'] if ema else checkpoint['model']
        else:  # the authors' format (whose model_args do not say which model it is), or nanoGPT's
            state = reference_state_dict(checkpoint, ema)
        model = GPT(GPTConfig(**{'target_injection': injection_of(state), **checkpoint['model_args']}))
        model.load_state_dict(state)
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise SystemExit(f'error: {path} does not hold a model this code can build ({one_line(e)})')
    return model.to(device).eval(), checkpoint
