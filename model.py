"""
nanoNoPE model: a GPT with *no* position encoding (NoPE), the model of Wang, Ji et al. (2024),
"Length Generalization of Causal Transformers without Position Encoding" (arXiv 2404.12224):
nanoGPT's GPT-2 without its position embedding `wpe`, so the causal mask alone tells a token
where it is. All the paper changes inside it is one factor on the attention logits,
softmax(lam_h q.k / sqrt(d)), lam from query_scale (piece T1): folded into q before SDPA in
CausalSelfAttention.attend, or multiplying the logits of the written-out softmax that measures
attention entropy (piece T2, written_out_attention). The RoPE twin is the paper's baseline.
Everything past the paper lives in families.py, one subclass of CausalSelfAttention each,
registered in FAMILIES and chosen by GPTConfig.family.
"""

import math
import os
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn
from torch.nn import functional as F

ROPE_BASE = 10000.0  # RoPE: theta_i = base^(-2i/d)


@dataclass
class GPTConfig:
    block_size: int = 128        # training length L; NOT a limit: the model runs at any length
    vocab_size: int = 128        # number of token ids
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = False           # biases in Linear and LayerNorm layers
    pos_encoding: str = "nope"   # "nope" (no position information at all) or "rope" (the twin)
    bos: bool = True             # every window begins with the start token (data/ says why)
    family: str = ""             # '' the paper's attention; else a family of families.py
    pos_encodings = ("nope", "rope")  # (not a field) the pos_encoding values this family takes

    def __post_init__(self):  # the settings' rules, each refused with what to set
        self.check()

    def check(self):  # (a family's Config adds its own)
        if self.pos_encoding not in self.pos_encodings:
            raise ValueError(f"pos_encoding must be {' or '.join(self.pos_encodings)}, got "
                             f"{self.pos_encoding!r}")
        if self.n_embd % (self.n_head * (2 if self.pos_encoding == "rope" else 1)):
            raise ValueError(f"n_embd={self.n_embd} is not a multiple of n_head={self.n_head} "
                             "(RoPE: of 2 n_head, an even head size)")


def query_scale(head_scale, slope, T, L):
    """Piece T1: the scale lam_h(i) each query gets, for heads h and query positions i = 1..T.

        lam_h(i) = head_scale_h * (1 + a_h * ln(max(i, L) / L)),   a_h = slope_h

    head_scale (nh,) is the paper's lambda: its UniformScale gives every head one value, its
    HeadScale one per head, and logits become lam_h q.k / sqrt(d), as in the authors' code
    (AntNLP/nope_head_scale), where lambda multiplies q. The slope a_h (nh,) is this project's
    own, not the paper's: it lets lambda follow the position past L, the shape of the paper's
    per-position grid (docs/slopes.md); a_h = 0 gives the paper's constant.
    Position i counts from 1 at the window's first token; every i <= L gets exactly
    head_scale_h, so nothing changes on the training lengths.
    Returns (1, nh, 1, 1), or (1, nh, T, 1) when T > L."""
    lam = head_scale.view(1, -1, 1, 1)                                              # (1, nh, 1, 1)
    if T <= L:  # ln(max(i, L) / L) = 0 at every position
        return lam
    i = torch.arange(1, T + 1, device=head_scale.device, dtype=torch.float32).view(1, 1, T, 1)
    return lam * (1 + slope.view(1, -1, 1, 1) * torch.log(i.clamp(min=L) / L))       # (1, nh, T, 1)


class CausalSelfAttention(nn.Module):
    Config = GPTConfig  # the settings of this attention (a family's subclass adds its own)
    scaled = True       # lambda applies in this layer (a hybrid's RoPE layers keep lambda = 1)

    def __init__(self, config, layer=0):
        super().__init__()
        self.config, self.n_head, self.n_embd = config, config.n_head, config.n_embd
        self.dropout = config.dropout
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.rotary = config.pos_encoding == "rope"  # the RoPE twin rotates q and k; NoPE nothing
        self.sink = config.bos  # a window keeps the start token visible (window_mask)
        # lambda, one per head, and its slope past L (query_scale): buffers search_scales.py fits
        self.register_buffer("head_scale", torch.ones(config.n_head))
        self.register_buffer("head_slope", torch.zeros(config.n_head))

    def forward(self, x, window=None, entropy=False, chunk=256):
        """x (B, T, C) -> (y (B, T, C), attention entropy (B, nh, T) in bits with entropy=True
        (the written-out softmax), else None). window: each query sees its last `window` keys."""
        B, T, C = x.size()
        nh, hs = self.n_head, C // self.n_head
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        if self.rotary:
            cos, sin = self.rope_tables(T, x.device)  # (T, hs) each
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        lam = self.logit_scale(T, window)                                      # (1, nh, T|1, 1)
        y, ent = self.attend(q, k, v, lam, window, entropy, chunk)             # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs
        return self.resid_dropout(self.c_proj(y)), ent

    def rope_tables(self, T, device):  # families.py's PI, NTK-aware and YaRN change them
        return rope_cos_sin(self.n_embd // self.n_head, T, device)

    def logit_scale(self, T, window):  # the paper's lambda (T1); some families multiply in more
        return query_scale(self.head_scale, self.head_slope, T, self.config.block_size)

    def attend(self, q, k, v, lam, window, entropy, chunk):
        """softmax(lam q.k / sqrt(d)) v over the keys each query may see. Returns (y, entropy)."""
        if entropy:
            return written_out_attention(q, k, v, lam, window, self.sink, chunk)
        # The paper's method: softmax(lam q.k / sqrt(d)) = softmax((lam q).k / sqrt(d)), so SDPA
        # stays the fast path; in float32 (in bfloat16, lam 1.15 would round to 1.1484)
        q = (q.float() * lam).to(q.dtype)                                       # (B, nh, T, hs)
        mask = None if window is None else window_mask(q.size(2), window, q.device, self.sink)
        dropout = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                           is_causal=mask is None)
        return y, None


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


def rope_cos_sin(hs, T, device, theta=None):
    """RoPE's cos and sin (T, hs) at positions 0..T-1, any T: position p turns the pair
    (x_i, x_{i+hs/2}) by p theta_i, theta_i = base^(-2i/hs) (families.py's: theta given)."""
    if theta is None:
        theta = ROPE_BASE ** (-torch.arange(0, hs, 2, device=device, dtype=torch.float32) / hs)
    pos = torch.arange(T, device=device, dtype=torch.float32)
    angles = torch.outer(pos, theta)                  # (T, hs/2)
    angles = torch.cat([angles, angles], dim=-1)      # (T, hs), the rotate-half layout
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """Rotate pairs (x_i, x_{i+hs/2}) of x (B, nh, T, hs) by the position angles."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin  # the pair rotated a quarter turn


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
        self.attn = FAMILIES[config.family](config, layer)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, window=None, entropy=False, chunk=256):
        a, ent = self.attn(self.ln_1(x), window, entropy, chunk)
        x = x + a
        return x + self.mlp(self.ln_2(x)), ent


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
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)

    def get_num_params(self):
        return sum(p.numel() for p in self.parameters())  # wte and lm_head: one tied matrix

    def forward(self, idx, targets=None, window=None, entropy=False, chunk=256, reduction="mean"):
        """idx (B, T) token ids, any T. Returns (logits, loss) like nanoGPT, and with
        entropy=True a third value: the attention entropy (B, n_layer, n_head, T) in bits, from
        the written-out softmax (T2), `chunk` queries at a time. reduction="none": (B, T) losses.
        window: each query attends to at most its last `window` keys (None: all before it)."""
        if entropy and self.training and self.config.dropout > 0:  # T2 has no dropout
            raise ValueError("the written-out softmax measures: call model.eval() first")
        x = self.transformer.drop(self.transformer.wte(idx))  # (B, T, C): token embeddings only
        entropies = []
        for block in self.transformer.h:
            x, ent = block(x, window, entropy, chunk)
            entropies.append(ent)
        x = self.transformer.ln_f(x)
        if targets is None:  # inference: only the last position's logits are needed
            logits, loss = self.lm_head(x[:, [-1], :]), None
        else:
            logits = self.lm_head(x)  # (B, T, vocab_size)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1),
                                   ignore_index=-1, reduction=reduction)
            loss = loss.view(idx.shape) if reduction == "none" else loss  # (B, T) or ()
        return (logits, loss, torch.stack(entropies, 1)) if entropy else (logits, loss)

    def scaled_layers(self):  # the layers lambda (and its slope) applies to: all, in the paper's
        return [i for i, block in enumerate(self.transformer.h) if block.attn.scaled]

    def get_head_scales(self):  # (n_layer, n_head): lambda
        return torch.stack([b.attn.head_scale.detach() for b in self.transformer.h]).cpu()

    def set_head_scales(self, lam):
        """lam: a number (UniformScale), a (1, 1), (n, 1) (per layer) or (n, n_head) table
        (HeadScale), n the scaled layers or every layer. A flat list is refused as ambiguous."""
        self._set_per_head("head_scale", lam, "head scales", 1.0)

    def get_head_slopes(self):  # (n_layer, n_head): the slopes a of query_scale's law
        return torch.stack([b.attn.head_slope.detach() for b in self.transformer.h]).cpu()

    def set_head_slopes(self, a):  # in the shapes set_head_scales takes
        self._set_per_head("head_slope", a, "head slopes", 0.0)

    def _set_per_head(self, buffer, value, what, fill):
        n_layer, n_head, layers = self.config.n_layer, self.config.n_head, self.scaled_layers()
        value = torch.as_tensor(value, dtype=torch.float32, device=self.lm_head.weight.device)
        value = value.view(()) if value.dim() == 1 and value.numel() == 1 else value
        if value.dim() == 1:
            raise ValueError(f"a flat list of {value.numel()} {what} is ambiguous: give one "
                             f"number, a ({len(layers)}, 1) table (per layer) or a "
                             f"({len(layers)}, {n_head}) table")
        rows = n_layer if value.dim() == 2 and value.size(0) == n_layer else len(layers)
        if value.dim() == 0 or (value.dim() == 2 and value.size(0) in (1, rows)
                                and value.size(1) in (1, n_head)):
            value = value.expand(rows, n_head)  # a view: a table that requires grad stays one
        if value.shape != (rows, n_head):
            raise ValueError(f"{what} of shape {tuple(value.shape)} do not fit {len(layers)} "
                             f"layers x {n_head} heads")
        at = {i: r for r, i in enumerate(range(n_layer) if rows == n_layer else layers)}
        for layer, block in enumerate(self.transformer.h):
            # HeadScale's trick: a table that requires grad goes in as a view, so the loss's
            # gradient reaches it while every weight stays frozen; a plain value is copied
            row = value[at[layer]] if layer in at else torch.full_like(value[0], fill)
            setattr(block.attn, buffer, row if value.requires_grad else row.clone())

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        # weight decay on matrices (dim >= 2), none on biases and LayerNorm gains
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=device_type == "cuda")

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, window=None,
                 generator=None):
        """Sample max_new_tokens continuing idx (B, T), never cropped to block_size (what
        happens past it is the point); window= crops to the start token and the last ones."""
        for _ in range(max_new_tokens):
            idx_cond = idx
            if window is not None and idx.size(1) > window:  # positions restart at 1 in the crop
                idx_cond = (torch.cat([idx[:, :1], idx[:, idx.size(1) - (window - 1):]], 1)
                            if self.config.bos else idx[:, -window:])
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :].float()  # (B, vocab_size)
            if temperature <= 0:  # greedy (study/passkey.py scores it)
                idx_next = logits.argmax(-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float("inf")
                idx_next = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


# Each family's attention by name: the paper's here, the rest registered by families.py
FAMILIES = {"": CausalSelfAttention}


def make_config(**args):
    """The config of a model's family (its attention's Config) from plain values, checked."""
    family = args.get("family", "")
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r} (known: {', '.join(sorted(FAMILIES)[1:])}; "
                         "families.py registers them)")
    own = {name: {f.name for f in fields(a.Config)} for name, a in FAMILIES.items()}
    for k in (k for k in args if k not in own[family]):  # a setting of another family: say which
        owner = next((n for n in own if k in own[n]), None)
        raise ValueError(f"{k} is not a setting of the {family or 'paper'} family" + (
            f": it is the {owner} family's (family={owner})" if owner else ""))
    return FAMILIES[family].Config(**args)


# ---------------------------------------------------------------------------------------------
# Checkpoints: tensors and plain values only (torch.load(weights_only=True)), written atomically,
# with the model's config, so a script rebuilds the model from the file alone.

class CheckpointError(Exception):  # a checkpoint file missing, not ours, or that does not fit
    pass


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
    """Rebuild the model from a checkpoint file alone. config_overrides change settings for this
    use (a family's rope_factor, DroPE's pos_encoding). Returns (model, checkpoint dict)."""
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint at {path}: train one with train.py (or check --ckpt)")
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:
        raise CheckpointError(f"{path} is not a readable nanoNoPE checkpoint ({type(e).__name__}: "
                              f"{str(e).splitlines()[0][:120]})") from None
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_args" not in ckpt:
        raise CheckpointError(f"{path} is not a nanoNoPE checkpoint (no 'model'/'model_args')")
    if "family" not in ckpt["model_args"]:
        raise CheckpointError(f"{path} was written by an older nanoNoPE (before families.py), "
                              "whose settings this version does not read: retrain it")
    try:
        model = GPT(make_config(**ckpt["model_args"] | config_overrides))
        # the state without torch.compile's `_orig_mod.` and DDP's `module.` prefixes
        model.load_state_dict({k.removeprefix("_orig_mod.").removeprefix("module."): v
                               for k, v in ckpt["model"].items()})
    except (TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{path} does not fit its own config "
                              f"({str(e).splitlines()[-1].strip()[:160]})") from None
    return model.to(device), ckpt

