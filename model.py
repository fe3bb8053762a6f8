"""
Any-Order GPT (AO-GPT), its sigma-GPT baseline and the encoder-only masked diffusion model (MDM):
the networks of the paper's comparison in one file.

A causal decoder that reads a sequence in a permuted order: slot 0 is a learned start token and
slot j+1 holds token x[order[j]] at position order[j] (see position_encoding). Slot j is told which
position it must predict (order[j]), so with causal attention slot j predicts x[order[j]] from
x[order[0..j-1]]. Trained over uniformly random orders this is an any-order autoregressive model,
i.e. a masked diffusion model; with the identity order it is a plain GPT.

How a slot is told its target is `target_injection`, and each names the paper's whole model (its
Recipe in RECIPES says all that differs):
- 'adaln' (AO-GPT): a 128-wide target-position embedding drives adaLN shift/scale/gate in every
  block and before the head; RMSNorm, QK-norm, an untied head with a bias, truncated-normal init;
- 'add' (sigma-GPT, the paper's baseline): an n_embd-wide target-position embedding is added to
  the slot's input of a plain nanoGPT: LayerNorm, no QK-norm, a bias-free head tied to wte,
  normal init, dropout inside attention too.
Two more (ours) keep AO-GPT's recipe and move the target out of the keys and values:
- 'two_stream' (XLNet's two-stream attention, Yang et al. 2019): a content stream of the slots with
  no target (the zero condition) makes every key and value, and a query stream, one row per slot,
  predicts: row j starts from a learned query token (plus its target's row of wpe with learned
  positions), takes the target's condition in every adaLN, and attends to the content slots that
  slot j sees. The weights are shared; a forward runs both streams (about twice the work), and a
  slot's cached keys and values no longer depend on its target;
- 'queries': no target condition at all (adaLN gets the zero condition): only the rotary queries,
  turned at the target, know it (a rotary position_encoding that turns some queries at the target).

The encoder (architecture='encoder', class MDM) is the other column of the paper's comparison, built
from AO-GPT's blocks: full attention over the tokens in their own positions, a [MASK] token in
place of each unknown one, no target position and no time (MDLM's design, Sahoo et al. 2024).
Its output at a masked position is a distribution over the vocabulary, [MASK] excluded; it is
trained on the NELBO of the log-linear masking schedule, which in expectation is the any-order
loss (the paper's Remark 1).

How a network is told where its tokens are is `position_encoding`, for every network:
- 'learned' (the authors'): an absolute position table added to the input;
- 'rotary' (ours for the decoders, MDLM's for the encoder): no table; in every attention layer the
  key of a slot is rotated (RoPE) at the slot's own position and its query at the position the slot
  predicts, so the score between the query that predicts position t and the key of the token at p
  depends on t - p. The start slot's key and a slot without a target sit at position -1. For the
  encoder a position predicts itself, so this is plain RoPE; left to right it is RoPE shifted by one;
- 'rotary_plain' (the decoders' ablation): the query at the slot's own position, as in a GPT;
- 'rotary_half_heads' and 'rotary_upper_layers' (ours, for the decoders): in the first half of each
  layer's heads, or in every head of the upper half of the layers, the query at the target; in the
  others at its own position. Only queries change, so the cache and every decoding path stay as they are.
The target's other path stays as it is: AO-GPT's adaLN condition, sigma-GPT's added embedding.

References: Xue et al., "Any-Order GPT as Masked Diffusion Model: Decoupling Formulation and
Architecture" (arXiv 2506.19935); Pannatier et al., "sigma-GPTs" (arXiv 2404.09562); Karpathy's
nanoGPT for the overall shape. Parameter names follow the authors' code, so their state dicts
load as they are.
"""
import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304  # GPT-2's 50257 padded up to a multiple of 64
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    cond_dim: int = 128  # width of the target-position embedding fed to adaLN
    target_init_std: float = 0.02  # init std of the target-position embedding (the authors': 0.02)
    gate_init: float = 0.0  # initial bias of adaLN's gates (the authors': 0, every block nearly shut); sigma-GPT: none
    dropout: float = 0.0
    bias: bool = True  # biases in the attention and MLP Linears (and sigma-GPT's LayerNorms), as in GPT-2
    target_injection: str = 'adaln'  # 'adaln' (AO-GPT), 'add' (sigma-GPT), 'two_stream' or 'queries': RECIPES
    architecture: str = 'decoder'  # 'decoder' (causal, slots in an order: GPT) or 'encoder' (full attention: MDM)
    position_encoding: str = 'learned'  # 'learned' (an added table), 'rotary' (queries at the target), ... (above)
    gelu: str = 'none'  # the MLP's GELU: 'none' (exact) or 'tanh' (GPT-2's approximation: its converted weights)

    def __post_init__(self):
        if self.target_injection not in RECIPES:
            raise ValueError(f"target_injection must be one of {tuple(RECIPES)}, got {self.target_injection!r}")
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"architecture must be one of {ARCHITECTURES}, got {self.architecture!r}")
        if self.is_encoder and self.target_injection != 'adaln':
            raise ValueError(f"the encoder is built from AO-GPT's adaLN blocks: target_injection must be 'adaln', "
                             f"got {self.target_injection!r}")
        if not self.recipe.target_table and self.position_encoding in ('learned', 'rotary_plain'):
            raise ValueError(f"target_injection={self.target_injection!r} tells the target to the rotary queries only: "
                             f"position_encoding must turn queries at the target ('rotary', 'rotary_half_heads' or "
                             f"'rotary_upper_layers'), got {self.position_encoding!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f'n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})')
        if self.position_encoding not in POSITION_ENCODINGS:
            raise ValueError(f'position_encoding must be one of {POSITION_ENCODINGS}, got {self.position_encoding!r}')
        if self.position_encoding in DECODER_POSITIONS and self.is_encoder:
            raise ValueError(f"position_encoding={self.position_encoding!r} is for the decoders (it places queries at "
                             "their own position); the encoder's position predicts itself, so use 'rotary'")
        if self.position_encoding == 'rotary_half_heads' and self.n_head < 2:
            raise ValueError("position_encoding='rotary_half_heads' splits each layer's heads: n_head must be 2 or "
                             f"more, got {self.n_head}")
        if self.position_encoding == 'rotary_upper_layers' and self.n_layer < 2:
            raise ValueError("position_encoding='rotary_upper_layers' splits the layers: n_layer must be 2 or more, "
                             f"got {self.n_layer}")
        if self.gelu not in GELUS:
            raise ValueError(f'gelu must be one of {GELUS}, got {self.gelu!r}')
        if self.is_rotary and self.n_embd // self.n_head % 2:
            raise ValueError(f"position_encoding={self.position_encoding!r} turns pairs of channels: the head size "
                             f"n_embd / n_head ({self.n_embd // self.n_head}) must be even")

    @property
    def recipe(self):
        return RECIPES[self.target_injection]

    @property
    def is_rotary(self):
        """Whether positions are rotations in attention (RoPE) rather than a table added to the input."""
        return self.position_encoding != 'learned'

    def target_heads(self, layer):
        """How many of layer's heads (the first ones) turn their queries at the target position (rotary encodings);
        the others turn them at their slot's own position."""
        return {'rotary': self.n_head, 'rotary_plain': 0, 'rotary_half_heads': self.n_head // 2,
                'rotary_upper_layers': self.n_head if layer >= self.n_layer // 2 else 0}[self.position_encoding]

    @property
    def is_encoder(self):
        """Whether the network is the encoder (MDM), which reads tokens through masks, not in an order."""
        return self.architecture == 'encoder'


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.rms_norm(x, (x.size(-1),), self.weight, self.eps)


def modulate(x, shift, scale):
    return torch.addcmul(shift, x, 1 + scale)


class Rotary(nn.Module):
    """Rotary position embedding (RoPE; Su et al. 2021) in the rotate-half form of GPT-NeoX and LLaMA:
    channels i and i + hs/2 of a head turn together by the angle position * 10000^(-2i/hs).
    rotary(positions) gives the cos and sin of positions (B, S), -1 to block_size - 1, as float32
    (B, 1, S, hs), for rotate()."""

    def __init__(self, head_size, block_size, base=10000):
        super().__init__()
        inv_freq = base ** -(torch.arange(0, head_size, 2, dtype=torch.float32) / head_size)
        angles = torch.outer(torch.arange(-1, block_size, dtype=torch.float32), inv_freq).repeat(1, 2)  # row p + 1
        self.register_buffer('cos', angles.cos(), persistent=False)  # not in state dicts: made from the config
        self.register_buffer('sin', angles.sin(), persistent=False)

    def forward(self, positions):
        return self.cos[positions + 1].unsqueeze(1), self.sin[positions + 1].unsqueeze(1)


def rotate(x, turn):
    """Queries or keys x (B, nh, S, hs) turned by turn = Rotary's (cos, sin), in x's dtype."""
    cos, sin = turn
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos.to(x.dtype) + torch.cat((-x2, x1), dim=-1) * sin.to(x.dtype)


def attend(q, k, v, mask):
    """Attention written out, as a compiled decoding step runs it: its few queries over the cache's every slot
    fuse into a few loops, cheaper than a call of the CPU's fused attention kernel (docs/speed.md)."""
    with torch.autocast(q.device.type, enabled=False):
        scores = (q.float() @ k.float().transpose(-2, -1)) * q.size(-1) ** -0.5
        return (scores.masked_fill(~mask, -math.inf).softmax(-1) @ v.float()).to(v.dtype)


class SelfAttention(nn.Module):
    """Causal for a decoder (each slot sees the slots before it), full for the encoder. With two streams the rows
    are the content slots then as many query slots: every row queries, the content slots alone are keys and
    values, and query slot j sees what content slot j sees."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.causal = not config.is_encoder
        self.n_head = config.n_head
        self.streams = config.recipe.streams
        head_size = config.n_embd // config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        recipe = config.recipe
        self.q_norm = RMSNorm(head_size) if recipe.qk_norm else nn.Identity()
        self.k_norm = RMSNorm(head_size) if recipe.qk_norm else nn.Identity()
        self.attn_dropout = config.dropout if recipe.attn_dropout else 0.0
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x, cache=None, attn_mask=None, rope=None):
        """rope: None (learned positions), or the (cos, sin) of the queries' and of the keys' positions."""
        B, L, C = x.size()
        S = L // self.streams  # the content slots: they alone are keys and values
        # c_attn on every row (a query slot's key and value go unused), so that a wrapped c_attn (LoRA) holds for all
        q, k, v = self.c_attn(x).view(B, L, 3, self.n_head, C // self.n_head).unbind(2)
        k, v = k[:, :S], v[:, :S]
        q, k, v = self.q_norm(q).transpose(1, 2), self.k_norm(k).transpose(1, 2), v.transpose(1, 2)  # (B, nh, S, hs)
        if rope is not None:  # after QK-norm, as MDLM's rotary DiT; the cache keeps rotated keys
            q, k = rotate(q, rope[0]), rotate(k, rope[1])
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v)
        ys = [self.attention(stream, k, v, cache, attn_mask) for stream in q.split(S, dim=2)]
        y = ys[0] if self.streams == 1 else torch.cat(ys, 2)
        y = y.transpose(1, 2).contiguous().view(B, L, C)
        return self.resid_dropout(self.c_proj(y))

    def attention(self, q, k, v, cache, attn_mask):
        if cache is not None and torch.compiler.is_compiling():
            return attend(q, k, v, attn_mask)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=self.causal and attn_mask is None,
                                              dropout_p=self.attn_dropout if self.training else 0.0)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU(approximate=config.gelu)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """A pre-norm transformer block (sigma-GPT's: the target is in x already)."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.ln_1 = config.recipe.norm(config, config.n_embd)
        self.attn = SelfAttention(config, layer_idx)
        self.ln_2 = config.recipe.norm(config, config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x, c, cache=None, attn_mask=None, rope=None):
        x = x + self.attn(self.ln_1(x), cache, attn_mask, rope)
        return x + self.mlp(self.ln_2(x))


class AdaLNBlock(Block):
    """AO-GPT's block: the slot's target condition c sets a shift, scale and gate around attention
    and around the MLP."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.adaLN = nn.Sequential(nn.SiLU(), nn.Linear(config.cond_dim, 6 * config.n_embd))

    def open_gates(self, value):
        """Set the bias of both gates: with the authors' 0 a gate is the product of two small initial
        weights (~0.002), a saddle that any-order training sits on at small scale; 1 starts the block
        as a plain residual block."""
        with torch.no_grad():
            bias = self.adaLN[1].bias.view(6, -1)
            bias[2].fill_(value)
            bias[5].fill_(value)

    def forward(self, x, c, cache=None, attn_mask=None, rope=None):
        shift1, scale1, gate1, shift2, scale2, gate2 = self.adaLN(c).chunk(6, dim=-1)
        x = torch.addcmul(x, gate1, self.attn(modulate(self.ln_1(x), shift1, scale1), cache, attn_mask, rope))
        return torch.addcmul(x, gate2, self.mlp(modulate(self.ln_2(x), shift2, scale2)))


class FinalLayer(nn.Module):
    """AO-GPT's last norm, modulated by the target position."""

    def __init__(self, config):
        super().__init__()
        self.ln_f = RMSNorm(config.n_embd)
        self.adaLN_final = nn.Sequential(nn.SiLU(), nn.Linear(config.cond_dim, 2 * config.n_embd))

    def forward(self, x, c):
        shift, scale = self.adaLN_final(c).chunk(2, dim=-1)
        return modulate(self.ln_f(x), shift, scale)


@dataclass(frozen=True)
class Recipe:
    """What sets one network of the paper apart, in one place; the rest of the code is shared.

    adaln: the target position drives adaLN in every block and before the head (a cond_dim-wide
    embedding); else its n_embd-wide embedding is added to the slot's input. target_table and
    streams are where the target goes (ours). The others are each model's house style."""
    adaln: bool
    norm: object  # (config, dim) -> the norm of the blocks (and of sigma-GPT's head)
    qk_norm: bool  # RMSNorm on queries and keys, which keeps the attention logits bounded
    attn_dropout: bool  # dropout inside attention too, not only after it
    tied_head: bool  # the head is wte, without a bias
    truncated_init: bool  # normal init cut at 3 std
    target_table: bool = True  # a target-position embedding (wtpe) conditions the slot; else only rotary queries
    streams: int = 1  # 2: keys and values from a content stream without targets, predictions from a query stream


RECIPES = {
    'adaln': Recipe(adaln=True, norm=lambda config, dim: RMSNorm(dim), qk_norm=True, attn_dropout=False,
                    tied_head=False, truncated_init=True),  # AO-GPT, as the authors' code
    'add': Recipe(adaln=False, norm=lambda config, dim: nn.LayerNorm(dim, bias=config.bias), qk_norm=False,
                  attn_dropout=True, tied_head=True, truncated_init=False),  # sigma-GPT: a nanoGPT
}
RECIPES['two_stream'] = dataclasses.replace(RECIPES['adaln'], streams=2)  # ours, AO-GPT's otherwise
RECIPES['queries'] = dataclasses.replace(RECIPES['adaln'], target_table=False)  # ours, AO-GPT's otherwise
TARGET_INJECTIONS = tuple(RECIPES)
ARCHITECTURES = ('decoder', 'encoder')
DECODER_POSITIONS = ('rotary_plain', 'rotary_half_heads', 'rotary_upper_layers')  # a query at its own position
POSITION_ENCODINGS = ('learned', 'rotary') + DECODER_POSITIONS
GELUS = ('none', 'tanh')  # nn.GELU's approximate


def build_model(config):
    """The network a config describes: GPT (a decoder) or MDM (the encoder)."""
    return (MDM if config.is_encoder else GPT)(config)


# cuDNN's attention builds a plan for each new shape: worth it in training, whose shapes repeat, not in decoding and
# scoring, where nearly every forward has a new one (docs/speed.md)
NO_CUDNN = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
ALL_BACKENDS = NO_CUDNN + [SDPBackend.CUDNN_ATTENTION]
FEW_ROWS = 32  # Network.head's rows that a CPU multiplies the other way round (docs/speed.md)


class Network(nn.Module):
    """What the networks share: the blocks' loop, the rotary table, the init, the optimizer's parameter groups,
    the MFU estimate."""

    def run_blocks(self, h, c, cache=None, attn_mask=None, ropes=None):
        """h through every block, with cuDNN's attention in training only (NO_CUDNN); ropes: each layer's (query turn,
        key turn), or None (learned positions)."""
        with sdpa_kernel(ALL_BACKENDS if self.training else NO_CUDNN):
            for block, rope in zip(self.transformer.h, ropes or [None] * len(self.transformer.h)):
                h = block(h, c, cache, attn_mask, rope)
        return h

    def head(self, h):
        """lm_head(h). On a CPU fewer than FEW_ROWS rows (a decoding step's) go as lm_head.weight @ h.T, which MKL
        runs faster for them than h @ weight.T, and a single row goes twice (one row is a matrix-vector product,
        which runs on one thread; docs/speed.md). Only for a plain nn.Linear: a head wrapped (peft's LoRA) or
        replaced (quantize_dynamic) computes more than its weight and bias say."""
        rows = h.shape[:-1].numel()
        if h.device.type != 'cpu' or rows >= FEW_ROWS or type(self.lm_head) is not nn.Linear:
            return self.lm_head(h)
        columns = h.reshape(rows, -1).expand(max(rows, 2), -1).t()
        weight, bias = self.lm_head.weight, self.lm_head.bias
        out = weight @ columns if bias is None else torch.addmm(bias.unsqueeze(1), weight, columns)
        return out.t()[:rows].contiguous().view(*h.shape[:-1], -1)

    def make_rotary(self):
        """One RoPE table for every layer (rotary encodings), built once from the config; a forward looks up its slots'
        rows once and every layer turns with them."""
        cfg = self.config
        self.rotary = Rotary(cfg.n_embd // cfg.n_head, cfg.block_size) if cfg.is_rotary else None

    def init_weights(self, cond_table):
        """The authors' init (normal, std 0.02; residual projections scaled as in GPT-2), with
        cond_table, the embedding that feeds the condition, at target_init_std."""
        def init(module):
            if isinstance(module, (nn.Linear, nn.Embedding)):
                self._init_normal(module.weight, self.config.target_init_std if module is cond_table else 0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        self.apply(init)  # in apply's order (children first), which fixes the random stream
        for name, p in self.named_parameters():
            if name.endswith('c_proj.weight'):
                self._init_normal(p, 0.02 / math.sqrt(2 * self.config.n_layer))
        for block in self.transformer.h:
            if isinstance(block, AdaLNBlock):
                block.open_gates(self.config.gate_init)

    def _init_normal(self, weight, std):
        if self.config.recipe.truncated_init:
            nn.init.trunc_normal_(weight, std=std, a=-3 * std, b=3 * std)
        else:
            nn.init.normal_(weight, std=std)

    def get_num_params(self):
        return sum(p.numel() for p in self.parameters())

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
        extra = (cfg.recipe.streams - 1) * sum(p.numel() for p in self.transformer.h.parameters())  # a second stream
        flops_per_token = 6 * (self.get_num_params() + extra) + \
            12 * cfg.recipe.streams * cfg.n_layer * cfg.n_embd * (cfg.block_size + 1)
        return flops_per_token * tokens_per_second / peak_flops


class GPT(Network):
    """The decoder: AO-GPT or sigma-GPT, by the config's target_injection."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        recipe = config.recipe
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            # row 0: the start slot; rotary encodings turn queries and keys instead
            **({} if config.is_rotary else dict(wpe=nn.Embedding(config.block_size + 1, config.n_embd))),
            # target-position embedding: adaLN's input, or added to the slot's input
            **(dict(wtpe=nn.Embedding(config.block_size, config.cond_dim if recipe.adaln else config.n_embd))
               if recipe.target_table else {}),
            wnonee=nn.Embedding(1, config.n_embd),  # the start token ("[None]")
            **(dict(wqe=nn.Embedding(1, config.n_embd)) if recipe.streams == 2 else {}),  # the query stream's start
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([(AdaLNBlock if recipe.adaln else Block)(config, i) for i in range(config.n_layer)]),
            **(dict(final_layer=FinalLayer(config)) if recipe.adaln else dict(ln_f=recipe.norm(config, config.n_embd))),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=not recipe.tied_head)
        if recipe.tied_head:
            self.transformer.wte.weight = self.lm_head.weight
        self.make_rotary()
        self.init_weights(self.transformer.get_submodule('wtpe') if recipe.target_table else None)

    def forward(self, x, order, hidden=None, reduction='mean'):
        """Read tokens x (B, T) in `order` (B, T); return logits (B, T+1, V) and the loss.

        logits[:, j] (j < T) predicts x[order[j]] from x[order[:j]]; the last slot has no target.
        hidden (B, T, bool): tokens of x the inputs read as [None] (input masking, training.hide_inputs);
        their targets stay. The loss is the cross-entropy of slots 0..T-1, averaged, or per token (B, T)
        in decoding order with reduction='none'.
        """
        B, T = x.size()
        if T > self.config.block_size:
            raise ValueError(f'sequence of length {T} is longer than block_size {self.config.block_size}')
        targets = x.gather(1, order)
        none = torch.full((B, 1), -1, dtype=order.dtype, device=order.device)
        tokens = torch.cat([torch.zeros_like(none), targets], dim=1)
        hidden = None if hidden is None else F.pad(hidden.gather(1, order), (1, 0))  # the start slot: [None] already
        logits = self.forward_slots(tokens, torch.cat([none, order], 1), torch.cat([order, none], 1), hidden=hidden)
        loss = F.cross_entropy(logits[:, :T].flatten(0, 1).float(), targets.flatten(), reduction='none')
        loss = loss.view(B, T)
        return logits, (loss.mean() if reduction == 'mean' else loss)

    def layer_turns(self, at_target, own):
        """Each layer's (query turn, key turn) from Rotary's turns at the slots' targets and own positions: keys at their
        own position, the first target_heads(layer) heads' queries at the target and the other heads' at their own."""
        cfg = self.config

        def queries(n):
            if n in (0, cfg.n_head):
                return own if n == 0 else at_target
            return tuple(torch.cat((t.expand(-1, n, -1, -1), o.expand(-1, cfg.n_head - n, -1, -1)), 1)
                         for t, o in zip(at_target, own))
        turns = {n: queries(n) for n in {cfg.target_heads(layer) for layer in range(cfg.n_layer)}}
        return [(turns[cfg.target_heads(layer)], own) for layer in range(cfg.n_layer)]

    def forward_slots(self, tokens, positions, targets, cache=None, attn_mask=None, out_slots=None, hidden=None):
        """The general forward over explicit slots, for training, cached sampling and evaluation.

        tokens, positions, targets: (B, S). A slot holds `tokens` at original position `positions`
        (-1 marks the start slot, whose token is ignored and reads as [None]) and predicts position
        `targets` (-1: no target, zero condition). With a KVCache the slots also attend to the cached
        ones. hidden: optional (B, S) bool, slots whose token reads as [None] too (input masking).
        attn_mask: bool, broadcastable to (B, n_head, S, S) or with a cache to (B, n_head, S, the
        slots it attends: cache.end or all), True where a slot may attend; default causal (a row's
        committed slots, then the new slots in order).
        out_slots: optional (B, Q) slot indices; only these go through the head, which saves
        most of the work and memory when few slots are queries (as in ensembled evaluation).
        Returns logits (B, S, V), or (B, Q, V) with out_slots.
        """
        wt = self.transformer
        is_none = positions < 0 if hidden is None else (positions < 0) | hidden
        h = torch.where(is_none.unsqueeze(-1), wt.wnonee.weight[0], wt.wte(tokens))
        ropes = None
        if self.rotary is None:
            h = h + wt.wpe(positions + 1)
        else:
            ropes = self.layer_turns(self.rotary(targets), self.rotary(positions))
        c = self.condition(targets, h)
        recipe = self.config.recipe
        if not recipe.adaln:
            h = h + c
        if recipe.streams == 2:
            h, c, ropes = self.two_streams(h, c, targets, ropes)
        h = wt.drop(h)
        if cache is not None:  # the new slots go after each row's committed ones
            S = tokens.size(1)
            cache.begin(S)
            attn_mask = cache.mask(S, S) if attn_mask is None else attn_mask
        h = self.run_blocks(h, c, cache, attn_mask, ropes)
        if recipe.streams == 2:  # the query stream predicts
            h, c = h[:, tokens.size(1):], c[:, tokens.size(1):]
        if out_slots is not None:
            index = out_slots.unsqueeze(-1)
            h, c = h.gather(1, index.expand(-1, -1, h.size(-1))), c.gather(1, index.expand(-1, -1, c.size(-1)))
        return self.head(wt.final_layer(h, c) if recipe.adaln else wt.ln_f(h))

    def condition(self, targets, h):
        """The slots' target condition (B, S, cond_dim or n_embd): wtpe's row of the target, zero where there is none
        (and everywhere without the table)."""
        if not self.config.recipe.target_table:
            return h.new_zeros(*targets.shape, self.config.cond_dim)
        return self.transformer.wtpe(targets.clamp(min=0)).masked_fill((targets < 0).unsqueeze(-1), 0.0)

    def two_streams(self, h, c, targets, ropes):
        """The content slots h without a target (the zero condition; the queries turned at their own position) and
        after them a query slot for each: the query token (at its target's position with learned positions), the
        target's condition, the queries turned at the target; the keys stay the content slots'."""
        wt = self.transformer
        g = wt.wqe.weight[0].expand_as(h)
        if self.rotary is None:
            g = g + wt.wpe(targets + 1)
        if ropes is not None:
            ropes = [(stack_turns(keys, queries), keys) for queries, keys in ropes]
        return torch.cat((h, g), 1), torch.cat((torch.zeros_like(c), c), 1), ropes


def stack_turns(first, then):
    """Two Rotary turns (cos, sin) of (B, 1 or nh, S, hs) one after the other along the slots."""
    heads = max(first[0].size(1), then[0].size(1))
    return tuple(torch.cat((a.expand(-1, heads, -1, -1), b.expand(-1, heads, -1, -1)), 2) for a, b in zip(first, then))


class MDM(Network):
    """The encoder: AO-GPT's blocks with full attention over the tokens in their own positions.

    z (B, T) holds the known tokens and mask_id (= vocab_size, one more row of wte) at the masked
    positions. The adaLN blocks and the final layer get one learned condition for every position (no
    target, no time), so the network is AO-GPT's apart from the target-position embedding. The head
    has vocab_size outputs: [MASK] is never predicted, and only the masked positions are scored.
    Positions are a learned table wpe added to the input, or with position_encoding='rotary' no table
    and RoPE on the queries and keys of every layer.
    """

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.mask_id = config.vocab_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size + 1, config.n_embd),  # the last row is [MASK]
            **({} if config.is_rotary else dict(wpe=nn.Embedding(config.block_size, config.n_embd))),
            wcond=nn.Embedding(1, config.cond_dim),  # adaLN's one condition
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([AdaLNBlock(config, i) for i in range(config.n_layer)]),
            final_layer=FinalLayer(config),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size)
        self.make_rotary()
        self.init_weights(self.transformer.wcond)

    def forward(self, x, mask, weights, reduction='mean'):
        """Score x (B, T) with the positions in `mask` (B, T, bool) hidden: logits (B, T, V) and the
        loss, the sum of weights * -log p(x_i | the unmasked tokens) over the masked positions, per
        token (averaged over B*T), or the weighted terms (B, T) with reduction='none'.

        With weights 1/t (t the row's masking level) the loss is the NELBO of the log-linear
        schedule (training.sample_masks); with the positions from i on masked and weight T at i,
        it is the left-to-right loss of position i (training.l2r_cuts).
        """
        logits = self.forward_masked(torch.where(mask, self.mask_id, x))
        nll = F.cross_entropy(logits.flatten(0, 1).float(), x.flatten(), reduction='none').view_as(x)
        terms = torch.where(mask, weights * nll, 0.0)  # an unmasked position adds nothing, even with nll = inf
        return logits, (terms.mean() if reduction == 'mean' else terms)

    def forward_masked(self, z, out_positions=None):
        """Logits (B, T, V) of z (B, T), or (B, Q, V) at out_positions (B, Q) only (a cheaper head)."""
        B, T = z.size()
        if T > self.config.block_size:
            raise ValueError(f'sequence of length {T} is longer than block_size {self.config.block_size}')
        wt = self.transformer
        h = wt.wte(z)
        positions = torch.arange(T, device=z.device)
        ropes = None
        if self.rotary is None:
            h = h + wt.wpe(positions)
        else:  # each position predicts itself: queries and keys at the same place
            ropes = [(self.rotary(positions[None]),) * 2] * self.config.n_layer
        h = wt.drop(h)
        c = wt.wcond.weight.expand(B, T, -1)
        h = self.run_blocks(h, c, ropes=ropes)
        if out_positions is not None:
            h = h.gather(1, out_positions.unsqueeze(-1).expand(-1, -1, h.size(-1)))
            c = c[:, :out_positions.size(1)]
        return self.head(wt.final_layer(h, c))
