"""
nanoNoPE model: a GPT with *no* position encoding (NoPE), the model of Wang, Ji et al. (2024),
"Length Generalization of Causal Transformers without Position Encoding" (arXiv 2404.12224).

It is nanoGPT's GPT-2 (pre-LayerNorm blocks, GELU MLP, tied embeddings) with the position
embedding `wpe` removed: the causal mask alone tells a token where it is. Everything the paper
changes inside the model is one factor on the attention logits in CausalSelfAttention:

    softmax(lam_h(i) q_i.k_j / sqrt(d))   # one lam per head (UniformScale, HeadScale)

lam comes from query_scale() below (piece T1), a buffer of ones until search_scales.py fills it.
The fast path folds it into q (q = q * lam, then SDPA); the written-out softmax that measures
attention entropy (piece T2, written_out_attention()) multiplies the logits, as the equation
reads. A test holds the two equal.
Read the file from the top: the paper's GPT first; below the line "Beyond the paper" come the
RoPE baseline and its extensions (PI, NTK-aware, YaRN), sliding windows, the hybrids of RoPE and
NoPE layers and Llama 4's temperature (docs/modern.md), ALiBi and Scalable-Softmax
(docs/beyond.md), and checkpoints.
"""

import math
import os
from dataclasses import asdict, dataclass, fields
from typing import NamedTuple

import torch
import torch.nn as nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    # the paper's GPT
    block_size: int = 128        # training length L; NOT a limit: the model runs at any length
    vocab_size: int = 128        # number of token ids
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = False           # biases in Linear and LayerNorm layers
    pos_encoding: str = "nope"   # "nope" (no position information), "rope" (the rotary baseline),
                                 # or "alibi" (linear biases, beyond the paper)
    rope_base: float = 10000.0   # RoPE: theta_i = base^(-2i/d)
    # beyond the paper (explained at the bottom of this file): the start token, RoPE's length
    # extensions, and NoPE as production models use it since the paper (docs/modern.md)
    bos: bool = False            # inputs begin with the start token (data/; train.py turns it on)
    rope_scaling: str = "none"   # RoPE length extension: none | pi | ntk | yarn
    rope_factor: float = 1.0     # RoPE extension factor s (target length / L)
    yarn_alpha: float = 1.0      # YaRN: dims with < alpha rotations in L are interpolated
    yarn_beta: float = 32.0      # YaRN: dims with > beta rotations in L are left alone
    nope_every: int = 0          # rope hybrid: layers with (index + 1) % k == 0 are NoPE (0 = none)
    rope_window: int = 0         # hybrid: the RoPE layers' sliding window W (0 = global)
    nope_temp: float = 0.0       # Llama 4's temperature on the NoPE layers (0 = off)
    nope_temp_floor: float = 1.0  # its floor scale F, in units of L
    ssmax: bool = False          # Scalable-Softmax: logits x s_h ln n, s learned per head

    def __post_init__(self):
        check_config(self)

    def nope_layers(self):
        """Indices of the layers without position encoding: every layer of a NoPE model; with
        rope, those with (index + 1) % nope_every == 0 (Llama 4's rule)."""
        if self.pos_encoding == "nope":
            return list(range(self.n_layer))
        k = self.nope_every
        return [i for i in range(self.n_layer) if k and (i + 1) % k == 0]


def query_scale(head_scale, slope, T, L):
    """Piece T1: the scale lam_h(i) each query gets, for heads h and query positions i = 1..T.

        lam_h(i) = head_scale_h * (1 + a_h * ln(max(i, L) / L)),   a_h = slope_h

    head_scale (nh,) is the paper's lambda (its UniformScale: one value for every head; its
    HeadScale: one per head); logits become lam_h q.k / sqrt(d), as in the authors' code
    (AntNLP/nope_head_scale), where lambda multiplies q. slope (nh,) lets lambda follow the
    position past L, the per-position law of the paper's grid search (a_h = 0: a constant).
    Position i counts from 1 at the window's first token; every i <= L gets exactly
    head_scale_h, so nothing changes on the training lengths.
    Returns (1, nh, 1, 1), or (1, nh, T, 1) when T > L."""
    lam = head_scale.view(1, -1, 1, 1)                                              # (1, nh, 1, 1)
    if T <= L:  # ln(max(i, L) / L) = 0 at every position
        return lam
    i = torch.arange(1, T + 1, device=head_scale.device, dtype=torch.float32).view(1, 1, T, 1)
    return lam * (1 + slope.view(1, -1, 1, 1) * torch.log(i.clamp(min=L) / L))       # (1, nh, T, 1)


class Explicit(NamedTuple):
    """Ask for the written-out softmax (T2) instead of SDPA: queries `chunk` at a time; with
    `entropy` a list, each layer appends its (B, nh, T) attention entropy in bits to it."""
    chunk: int = 256
    entropy: list | None = None


class CausalSelfAttention(nn.Module):

    def __init__(self, config, layer=0):
        super().__init__()
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.block_size = config.block_size  # L of the law in query_scale
        # The paper's lambda, one per head, and its slope past L (query_scale). Buffers, not
        # parameters: training never touches them; search_scales.py fits them.
        self.register_buffer("head_scale", torch.ones(config.n_head))
        self.register_buffer("head_slope", torch.zeros(config.n_head))
        # beyond the paper: RoPE in this layer or not (a hybrid's NoPE layers are global), a
        # hybrid's sliding window, and a window keeps the start token visible (an attention sink),
        # except in a hybrid's windowed RoPE layers: there key 0 would sit at a query-key distance
        # never seen in training (up to the whole length), and Cohere's windowed layers keep none
        self.use_rope = config.pos_encoding == "rope" and layer not in config.nope_layers()
        self.rope_window = config.rope_window if self.use_rope else 0
        self.sink = config.bos and not self.rope_window
        # beyond the paper: ALiBi's fixed slopes (derived from n_head: not saved), SSMax's s
        self.alibi = config.pos_encoding == "alibi"
        if self.alibi:
            self.register_buffer("alibi_slopes", alibi_slopes(config.n_head), persistent=False)
        self.ssmax = (nn.Parameter(torch.full((config.n_head,), SSMAX_INIT)) if config.ssmax
                      else None)  # (nh,), trained with the weights

    def forward(self, x, rope=None, temp=None, window=None, explicit=None):
        """x (B, T, C). rope: cos/sin tables (RoPE layers use them); temp: Llama 4's temperature
        (NoPE layers use it); window: each query sees at most its last `window` keys (None: all
        before it); explicit: None for SDPA, or Explicit(...) for the written-out softmax."""
        B, T, C = x.size()
        nh, hs = self.n_head, C // self.n_head
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        if rope is not None and self.use_rope:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        # The paper's method: softmax(lam q.k / sqrt(d)), lam per head and query position
        lam = query_scale(self.head_scale, self.head_slope, T, self.block_size)    # (1, nh, T|1, 1)
        if temp is not None and not self.use_rope:  # Llama 4's temperature: NoPE layers only
            lam = lam * temp                                                        # (1, nh, T, 1)
        if self.rope_window:  # a hybrid's windowed RoPE layer: the narrower of the two windows
            window = min(window or self.rope_window, self.rope_window)
        if self.ssmax is not None:  # Scalable-Softmax: lam * s_h ln n_i, n_i keys seen
            lam = lam * ssmax_scale(self.ssmax, T, window)                         # (1, nh, T, 1)
        if explicit is not None and self.training and self.dropout > 0:
            raise ValueError("the written-out softmax measures: call model.eval() first")
        dropout_p = self.dropout if self.training else 0.0
        entropy = None
        if self.alibi:  # beyond the paper: ALiBi's bias, both paths in one function
            y, entropy = alibi_attention(q, k, v, lam, self.alibi_slopes, window, self.sink,
                                         explicit, dropout_p)
        elif explicit is None:
            # softmax(lam q.k / sqrt(d)) = softmax((lam q).k / sqrt(d)): lam folded into q, so
            # SDPA stays the fast path. The product in float32, then back to q's dtype:
            # lam.to(bfloat16) would round lam itself (1.15 -> 1.1484, steps of 0.0078)
            q = (q.float() * lam).to(q.dtype)                                       # (B, nh, T, hs)
            mask = None if window is None else window_mask(T, window, x.device, self.sink)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                               is_causal=mask is None)
        else:
            y, entropy = written_out_attention(q, k, v, lam, window, self.sink, explicit.chunk)
        if explicit is not None and explicit.entropy is not None:
            explicit.entropy.append(entropy)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs
        return self.resid_dropout(self.c_proj(y))


def written_out_attention(q, k, v, lam=None, window=None, sink=False, chunk=256):
    """Piece T2: causal attention with the softmax written out, and its entropy in bits.

        a_ij = softmax_j(lam_i q_i.k_j / sqrt(d)) over the keys j <= i,   y_i = sum_j a_ij v_j
        H_i  = -sum_j a_ij log2 a_ij   (bits; log2 i when query i attends evenly to its i keys)

    lam scales the logits of query i before the softmax (the paper's temperature: lam > 1
    sharpens attention), on q's side only; the keys are never scaled. The paper ties NoPE's
    failure past L to this entropy growing ("distraction"); the authors' code measures it in
    bits, per layer, head and position, as here.
    q, k, v (B, nh, T, hs). lam: query_scale's (1, nh, 1, 1) or (1, nh, T, 1), None for 1.
    window / sink: see window_mask. Queries go `chunk` at a time, so memory holds at most a
    (B, nh, chunk, T) slice of the attention matrix. Scores and softmax in float32 (flash
    attention keeps its scores so too); never SDPA, whose softmax cannot be read.
    Returns y (B, nh, T, hs) in v's dtype and the entropy (B, nh, T) in float32."""
    B, nh, T, hs = q.shape
    lam = torch.ones(1, 1, 1, 1, device=q.device) if lam is None else lam.float()  # (1, nh, T|1, 1)
    y = torch.empty_like(q)
    entropy = torch.empty(B, nh, T, device=q.device, dtype=torch.float32)
    for s in range(0, T, chunk):
        e = min(s + chunk, T)
        # keys before lo are outside every window of queries s..e-1: skipped (a sink keeps key 0)
        lo = max(0, s - window + 1) if window is not None and not sink else 0
        with torch.autocast(q.device.type, enabled=False):
            att = q[:, :, s:e].float() @ k[:, :, lo:e].float().transpose(-2, -1)  # (B,nh,e-s,e-lo)
        lam_i = lam[:, :, s:e] if lam.size(2) > 1 else lam              # (1, nh, e-s|1, 1)
        att = att * lam_i / math.sqrt(hs)                                 # lam_i q_i.k_j / sqrt(d)
        allowed = window_mask(e, window, q.device, sink, start=s, lo=lo)  # (e-s, e-lo)
        att = att.masked_fill(~allowed, float("-inf"))                    # (B, nh, e-s, e-lo)
        att = F.softmax(att, dim=-1)                                      # fp32
        entropy[:, :, s:e] = torch.special.entr(att).sum(-1) / math.log(2)  # nats -> bits
        y[:, :, s:e] = att.to(v.dtype) @ v[:, :, lo:e]                    # (B, nh, e-s, hs)
    return y, entropy


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

    def __init__(self, config, layer=0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config, layer)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, **attn_kwargs):
        x = x + self.attn(self.ln_1(x), **attn_kwargs)
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),  # no wpe, in NoPE and RoPE alike
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config, layer) for layer in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def get_num_params(self):
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx, targets=None, window=None, explicit=False, entropy=None,
                chunk=256, reduction="mean"):
        """idx (B, T) token ids, any T. Returns (logits, loss) like nanoGPT.
        window:    each query attends to at most the last `window` keys (None: all before it)
        explicit:  use the written-out softmax (T2) instead of F.scaled_dot_product_attention
        entropy:   a list; with explicit=True, one (B, nh, T) tensor of entropies in bits
                   is appended per layer (so the caller can reduce it layer by layer)
        reduction: "mean" gives a scalar loss, "none" the (B, T) per-token losses"""
        B, T = idx.size()
        rope = (rope_cos_sin(self.config, T, idx.device) if self.config.pos_encoding == "rope"
                else None)  # (T, hs) cos and sin tables
        temp = llama4_temperature(T, self.config, idx.device)  # (1, 1, T, 1) or None
        path = Explicit(chunk, entropy) if explicit else None
        x = self.transformer.drop(self.transformer.wte(idx))  # (B, T, C): token embeddings only
        for block in self.transformer.h:
            x = block(x, rope=rope, temp=temp, window=window, explicit=path)
        x = self.transformer.ln_f(x)
        if targets is None:  # inference: only the last position's logits are needed
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)  # (B, T, vocab_size)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1),
                               ignore_index=-1, reduction=reduction)
        return logits, (loss.view(B, T) if reduction == "none" else loss)

    # --- the paper's lambda and its slope, read and written in one place --------------

    def get_head_scales(self):
        """(n_layer, n_head) tensor of the current lambda values."""
        return torch.stack([b.attn.head_scale.detach() for b in self.transformer.h]).cpu()

    def set_head_scales(self, lam):
        """lam: a number (UniformScale), a (1, 1) table, a (n_layer, 1) table (one per layer),
        or a (n_layer, n_head) table (HeadScale). A flat list is refused: with as many layers
        as heads it could mean either."""
        self._set_per_head("head_scale", lam, "head scales")

    def get_head_slopes(self):
        """(n_layer, n_head) tensor of the slopes a of query_scale's law."""
        return torch.stack([b.attn.head_slope.detach() for b in self.transformer.h]).cpu()

    def set_head_slopes(self, a):
        """a: the slopes, in the shapes set_head_scales takes, by the same rules."""
        self._set_per_head("head_slope", a, "head slopes")

    def _set_per_head(self, buffer, value, what):
        n_layer, n_head = self.config.n_layer, self.config.n_head
        value = torch.as_tensor(value, dtype=torch.float32, device=self.lm_head.weight.device)
        if value.dim() == 1 and value.numel() == 1:
            value = value.view(())
        if value.dim() == 1:
            raise ValueError(f"a flat list of {value.numel()} {what} is ambiguous: give one "
                             f"number, a ({n_layer}, 1) table (per layer) or a ({n_layer}, "
                             f"{n_head}) table")
        if value.dim() == 0 or (value.dim() == 2 and value.size(0) in (1, n_layer)
                                and value.size(1) in (1, n_head)):
            value = value.expand(n_layer, n_head)  # a view: a table that requires grad stays one
        if value.shape != (n_layer, n_head):
            raise ValueError(f"{what} of shape {tuple(value.shape)} do not fit {n_layer} layers x "
                             f"{n_head} heads")
        for layer, block in enumerate(self.transformer.h):
            # HeadScale's trick: a table that requires grad goes in as it is (each layer's buffer a
            # view of it), so the loss's gradient reaches the caller's tensor while every weight
            # stays frozen; a plain value is copied, so the caller's later edits do not leak in
            row = value[layer]  # (n_head,)
            setattr(block.attn, buffer, row if value.requires_grad else row.clone())

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        # weight decay on matrices (dim >= 2), none on biases and LayerNorm gains
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        fused = device_type == "cuda"
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=fused)

    def flops_per_token(self, T):
        """Forward+backward FLOPs per token at length T: 6N for the weight matmuls plus the
        attention scores and values, 6 * n_layer * T * n_embd (causal, so on average half of
        the 12 * n_layer * T * n_embd of the PaLM appendix)."""
        N = self.get_num_params()
        cfg = self.config
        return 6 * N + 6 * cfg.n_layer * T * cfg.n_embd

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, window=None,
                 generator=None):
        """Sample max_new_tokens continuing idx (B, T). No cropping to block_size: the
        point of this project is what happens past it (pass window= to crop; a model trained
        with the start token keeps it: the start token and the last window - 1 tokens)."""
        for _ in range(max_new_tokens):
            idx_cond = idx
            if window is not None and idx.size(1) > window:  # positions restart at 1 in the crop
                idx_cond = (torch.cat([idx[:, :1], idx[:, idx.size(1) - (window - 1):]], 1)
                            if self.config.bos else idx[:, -window:])
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :].float()  # (B, vocab_size)
            if temperature <= 0:  # greedy (passkey.py scores it)
                idx_next = logits.argmax(-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float("inf")
                idx_next = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


# =============================================================================================
# Beyond the paper: the settings' rules, sliding windows and the start token, the RoPE baseline
# and its length extensions, Llama 4's temperature, checkpoints. They live here, below the
# paper's model, so that the file stays the one place a model is defined (nanoGPT's single file)
# while the lesson reads first.

POS_ENCODINGS = ("nope", "rope", "alibi")
ROPE_SCALINGS = ("none", "pi", "ntk", "yarn")


def check_config(c):
    """GPTConfig's rules, each refused with what to set."""
    if c.pos_encoding not in POS_ENCODINGS:
        raise ValueError(f"pos_encoding must be one of {POS_ENCODINGS}, got {c.pos_encoding!r}")
    if c.rope_scaling not in ROPE_SCALINGS:
        raise ValueError(f"rope_scaling must be one of {ROPE_SCALINGS}, got {c.rope_scaling!r}")
    if c.n_embd % c.n_head:
        raise ValueError(f"n_embd={c.n_embd} is not a multiple of n_head={c.n_head}")
    if c.pos_encoding == "rope" and (c.n_embd // c.n_head) % 2:
        raise ValueError("RoPE needs an even head size (n_embd / n_head)")
    if c.rope_factor < 1.0:
        raise ValueError(f"rope_factor must be >= 1, got {c.rope_factor}")
    if c.nope_every < 0 or c.rope_window < 0 or c.nope_temp < 0 or c.nope_temp_floor <= 0:
        raise ValueError("nope_every, rope_window and nope_temp must be >= 0, nope_temp_floor > 0")
    if (c.nope_every or c.rope_window) and c.pos_encoding != "rope":
        raise ValueError("nope_every and rope_window mix NoPE layers into a RoPE model: "
                         "set pos_encoding=rope")
    if c.rope_window and not c.nope_every:
        raise ValueError("rope_window windows the RoPE layers of a hybrid: set nope_every too")
    if c.nope_temp and not c.nope_layers():
        raise ValueError("nope_temp scales the NoPE layers and this model has none "
                         "(pos_encoding=nope, or rope with nope_every)")


def window_mask(T, window, device, sink=False, start=0, lo=0):
    """Boolean (T - start, T - lo) mask, True where query i (start <= i < T) may attend to key j
    (lo <= j < T): i - window < j <= i, and with sink=True also j = 0. The start token (bos) is
    such a sink, as in StreamingLLM: a window of W then holds the start token and the last W - 1
    tokens, the text a model trained with the token always saw. window=None: plain causal."""
    i = torch.arange(start, T, device=device).unsqueeze(1)
    j = torch.arange(lo, T, device=device).unsqueeze(0)
    if window is None:
        return j <= i
    if sink:  # the start token, then the last window - 1 keys
        return (j <= i) & ((j > i - window + 1) | (j == 0))
    return (j <= i) & (j > i - window)


def rope_cos_sin(config, T, device):
    """cos and sin tables of shape (T, hs) for positions 0..T-1, computed on the fly
    (no maximum length). The extension variants only change the frequencies theta_i
    and, for YaRN, the attention temperature, which is folded into the tables."""
    hs = config.n_embd // config.n_head
    s = config.rope_factor
    base = config.rope_base
    if config.rope_scaling == "ntk":
        # NTK-aware scaling (bloc97, 2023): enlarge the base so the lowest frequency is
        # interpolated by s while the highest stays put: base' = base * s^(d/(d-2))
        base = base * s ** (hs / (hs - 2))
    theta = base ** (-torch.arange(0, hs, 2, device=device, dtype=torch.float32) / hs)  # (hs/2,)
    mscale = 1.0
    if config.rope_scaling == "pi":
        # Position Interpolation (Chen et al., 2023): positions divided by s, i.e. theta_i / s
        theta = theta / s
    elif config.rope_scaling == "yarn":
        # YaRN (Peng et al., 2023), "NTK-by-parts": r_i = L / wavelength_i rotations fit in the
        # training length L. gamma(r) = 0 below alpha (interpolate like PI), 1 above beta
        # (keep), linear in between:  theta_i' = (1 - gamma) * theta_i / s + gamma * theta_i
        r = config.block_size * theta / (2 * math.pi)
        gamma = ((r - config.yarn_alpha) / (config.yarn_beta - config.yarn_alpha)).clamp(0, 1)
        theta = (1 - gamma) * theta / s + gamma * theta
        # and its attention temperature: logits * (0.1 ln s + 1)^2, as q and k are both
        # rotated by these tables, each carries one factor (0.1 ln s + 1)
        mscale = 0.1 * math.log(s) + 1.0
    pos = torch.arange(T, device=device, dtype=torch.float32)
    angles = torch.outer(pos, theta)                  # (T, hs/2)
    angles = torch.cat([angles, angles], dim=-1)      # (T, hs), the rotate-half layout
    return angles.cos() * mscale, angles.sin() * mscale


def apply_rope(x, cos, sin):
    """Rotate pairs (x_i, x_{i+hs/2}) of x (B, nh, T, hs) by the position angles."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos + rotated * sin


def llama4_temperature(T, config, device):
    """Llama 4's attention temperature of its NoPE layers at 0-based positions i0 = 0..T-1, shape
    (1, 1, T, 1): 1 + nope_temp * ln(1 + floor(i0 / F)), F = nope_temp_floor * L. Llama 4 itself
    takes floor((i0 + 1) / F), which with F = L already scales the last position of a training
    window; floor(i0 / F) leaves every i0 < L at 1, as query_scale's law does.
    None when off, or when T <= F (1 everywhere)."""
    F_ = config.nope_temp_floor * config.block_size
    if not config.nope_temp or T <= F_:
        return None
    i0 = torch.arange(T, device=device, dtype=torch.float32).view(1, 1, T, 1)
    return 1 + config.nope_temp * torch.log1p(torch.floor(i0 / F_))


# ---------------------------------------------------------------------------------------------
# The two other families of answer to "attend past L": a bias that grows with the distance
# (ALiBi), and a temperature that grows with the number of keys, learned in training (SSMax).
# Both enter the attention outside the paper's query_scale and written_out_attention, as Llama 4's
# temperature does; the study trains them beside NoPE (reproduce.py --beyond, docs/beyond.md).

def alibi_slopes(n_head):
    """ALiBi's slopes m_h (Press, Smith and Lewis, ICLR 2022, "Train Short, Test Long"): the
    geometric sequence m_h = 2^(-8h/H), h = 1..H, for H a power of two. Otherwise the paper's
    rule: the 2^k slopes of the largest power of two below H, then every other slope of 2^(k+1)
    heads (the odd h of 2^(-8h/2^(k+1))) until there are H. Returns (n_head,) float32."""
    k = 2 ** int(math.floor(math.log2(n_head)))
    m = [2 ** (-8 * h / k) for h in range(1, k + 1)]
    m += [2 ** (-8 * h / (2 * k)) for h in range(1, 2 * k + 1, 2)][:n_head - k]
    return torch.tensor(m, dtype=torch.float32)


def alibi_bias(slopes, T, window=None, sink=False, start=0, lo=0):
    """ALiBi's bias on the logits of queries start <= i < T over keys lo <= j < T, float32
    (nh, T - start, T - lo):

        b_hij = -m_h (i - j)  where query i may attend to key j (window_mask),  -inf elsewhere

    Under a window with a sink, the start token is counted at distance min(i, window - 1), where
    it would sit if the model read the crop [start token, last window - 1 tokens] instead: the
    window-of-L reference then sees no distance it was not trained on."""
    i = torch.arange(start, T, device=slopes.device).unsqueeze(1)       # (T - start, 1)
    j = torch.arange(lo, T, device=slopes.device).unsqueeze(0)          # (1, T - lo)
    dist = (i - j).float()                                              # (T - start, T - lo)
    if window is not None and sink and lo == 0:
        dist[:, 0] = dist[:, 0].clamp(max=window - 1)
    bias = -slopes.float().view(-1, 1, 1) * dist                        # (nh, T - start, T - lo)
    allowed = window_mask(T, window, slopes.device, sink, start=start, lo=lo)
    return bias.masked_fill(~allowed, float("-inf"))


def alibi_attention(q, k, v, lam, slopes, window=None, sink=False, explicit=None, dropout_p=0.0):
    """Causal attention with ALiBi's bias, queries a chunk at a time so that the bias never holds
    more than (nh, chunk, T) numbers (at 8,192 positions a whole (nh, T, T) bias would be GBs):

        a_ij = softmax_j(lam_i q_i.k_j / sqrt(d) - m_h (i - j))

    lam (query_scale's, times any other temperature) scales q.k only; the bias is left as
    trained. explicit=None: SDPA with the bias as an additive mask in q's dtype (lam folded into
    q in float32, as the NoPE path does), 1,024 queries a chunk; Explicit(chunk): the written-out
    softmax in float32, as written_out_attention, with its entropy in bits.
    Returns y (B, nh, T, hs) and the entropy (B, nh, T) (None on the fast path)."""
    T, hs = q.size(2), q.size(3)
    chunk = 1024 if explicit is None else explicit.chunk
    ys, entropies = [], []
    for a in range(0, T, chunk):  # queries a..b-1, keys lo..b-1
        b = min(a + chunk, T)
        lo = max(0, a - window + 1) if window is not None and not sink else 0
        bias = alibi_bias(slopes, b, window, sink, start=a, lo=lo)      # (nh, b-a, b-lo)
        lam_i = lam[:, :, a:b] if lam.size(2) > 1 else lam              # (1, nh, b-a|1, 1)
        q_i = q[:, :, a:b].float() * lam_i                              # (B, nh, b-a, hs)
        if explicit is None:
            ys.append(F.scaled_dot_product_attention(
                q_i.to(q.dtype), k[:, :, lo:b], v[:, :, lo:b], attn_mask=bias.to(q.dtype),
                dropout_p=dropout_p))                                    # (B, nh, b-a, hs)
            continue
        with torch.autocast(q.device.type, enabled=False):
            scores = q_i @ k[:, :, lo:b].float().transpose(-2, -1) / math.sqrt(hs) + bias
        p = F.softmax(scores, dim=-1)                                    # (B, nh, b-a, b-lo)
        entropies.append(torch.special.entr(p).sum(dim=-1) / math.log(2))  # bits
        ys.append(p.to(v.dtype) @ v[:, :, lo:b])
    return torch.cat(ys, 2), (torch.cat(entropies, 2) if entropies else None)


# Scalable-Softmax's s at initialisation. Nakanishi (2025) was not readable here; 0.43 is the
# value gdevos010/Scalable-Softmax (an unofficial PyTorch version) gives "as used in paper".
SSMAX_INIT = 0.43


def ssmax_scale(s, T, window=None):
    """Scalable-Softmax (SSMax; Nakanishi 2025, arXiv 2501.19399): softmax(z) over n keys
    becomes softmax(s ln n * z), s learned per (layer, head). Here n_i is the number of keys
    query i sees: its position i = 1..T (the start token among them), at most `window`.
    Returns s_h ln n_i, (1, nh, T, 1) float32: a factor of the logits, beside lam."""
    i = torch.arange(1, T + 1, device=s.device, dtype=torch.float32)     # (T,)
    n = i if window is None else i.clamp(max=window)
    return s.float().view(1, -1, 1, 1) * torch.log(n).view(1, 1, T, 1)   # (1, nh, T, 1)


# ---------------------------------------------------------------------------------------------
# Checkpoints: tensors and plain values only (torch.load(weights_only=True) works),
# written atomically, carrying the model config so a script can rebuild the model.

class CheckpointError(Exception):
    """A checkpoint file that is missing, not ours, or does not fit."""


def save_checkpoint(path, model, **extra):
    """Write {'model': state_dict, 'model_args': config dict, **extra} to path atomically:
    to a temporary file first, then renamed, so a kill never leaves a half-written file."""
    raw = model.module if hasattr(model, "module") else model
    raw = getattr(raw, "_orig_mod", raw)  # unwrap torch.compile
    ckpt = {"model": {k: v.detach().clone() for k, v in raw.state_dict().items()},
            "model_args": asdict(raw.config), **extra}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(ckpt, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path, device="cpu", **config_overrides):
    """Rebuild the model from a checkpoint file alone. config_overrides change evaluation-time
    settings (for example rope_scaling, rope_factor). Returns (model, checkpoint dict)."""
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint at {path}: train one with train.py first "
                              "(or check --ckpt)")
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:
        raise CheckpointError(f"{path} is not a readable nanoNoPE checkpoint ({type(e).__name__}: "
                              f"{str(e).splitlines()[0][:120]})") from None
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_args" not in ckpt:
        raise CheckpointError(f"{path} is not a nanoNoPE checkpoint (no 'model'/'model_args'); "
                              "use one written by train.py or search_scales.py")
    # the state without torch.compile's `_orig_mod.` and DDP's `module.` prefixes
    state = {k.removeprefix("_orig_mod.").removeprefix("module."): v
             for k, v in ckpt["model"].items()}
    # an older nanoNoPE: no start token ("bos"), or no slopes (head_slope, once head_scale_log)
    if ("bos" not in ckpt["model_args"] or not any(k.endswith(".head_slope") for k in state)
            or any(k.endswith(".head_scale_log") for k in state)):
        raise CheckpointError(f"{path} was written by an older nanoNoPE (before the start token "
                              "existed or before the head_slope buffers), whose measurements are "
                              "not comparable: retrain it with this version")
    known = {f.name for f in fields(GPTConfig)}
    args = {k: v for k, v in ckpt["model_args"].items() if k in known}
    for k, v in config_overrides.items():
        if k not in known:
            raise CheckpointError(f"unknown model setting {k!r}")
        args[k] = v
    try:
        model = GPT(GPTConfig(**args))
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from None
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise CheckpointError(f"{path} does not fit its own config "
                              f"({str(e).splitlines()[-1].strip()[:160]})") from None
    return model.to(device), ckpt
