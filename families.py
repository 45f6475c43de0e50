"""
Families past the paper, each one subclass of model.py's CausalSelfAttention (with its settings,
a Config subclass of GPTConfig, inside it) and one line registering it in model.FAMILIES. A model
is built from GPTConfig.family, so a checkpoint loads wherever this module was imported.

    rope_scaled  RoPE stretched past L: Position Interpolation, NTK-aware, YaRN (the paper's
                 baselines; zero-shot in evaluate.py --rope_scaling, or fine-tuned)
    hybrid       RoPE layers with every k-th layer NoPE (Llama 4, SmolLM3), the RoPE layers
                 optionally windowed (Cohere), and Llama 4's temperature on the NoPE layers
                 (docs/modern.md)
    alibi        ALiBi's linear bias on the distance, no position embedding (docs/beyond.md)
    ssmax        Scalable-Softmax: the logits times s_h ln n, s learned (docs/beyond.md)
    fox          NoPE with FoX's forget gate: logits + sum of ln f_l over the tokens between
                 (docs/beyond2025.md)
    nope_gated   NoPE with the head-wise output gate: each head's output times sigmoid(x W_g)
    nope_sink    NoPE with a learned sink: one logit per head, an extra softmax column dropped

Adding a family: a subclass overriding the hook it changes (rope_tables, logit_scale or
attend), its Config with the settings it adds, a register() line, and its tests
(tests/test_beyond.py, tests/test_modern.py, tests/test_families2025.py). model.py and the
scripts stay as they are. A family that reads the layer's input x (FoX's gate, the output gate)
subclasses ReadsInput, whose forward hands x to two hooks of its own: model.py's hooks see q, k,
v and lambda, never x.
"""

import contextlib
import functools
import math
from dataclasses import dataclass, fields

import torch
from torch.nn import functional as F

from model import FAMILIES, ROPE_BASE, CausalSelfAttention, GPTConfig, rope_cos_sin, window_mask


def register(name, attention):
    """Make `name` a value of GPTConfig.family: its layers are `attention`'s."""
    FAMILIES[name] = attention


# ---------------------------------------------------------------------------------------------
# RoPE's length extensions: only the frequencies change (and YaRN's temperature, folded into
# the tables), so every layer rotates by the stretched tables

class RopeScaled(CausalSelfAttention):
    """The RoPE twin with its rotary frequencies stretched by a factor s (target length / L)."""

    @dataclass
    class Config(GPTConfig):
        family: str = "rope_scaled"
        pos_encoding: str = "rope"
        rope_scaling: str = "pi"     # pi | ntk | yarn
        rope_factor: float = 1.0     # the extension factor s (target length / L)
        yarn_alpha: float = 1.0      # YaRN: dims with < alpha rotations in L are interpolated
        yarn_beta: float = 32.0      # YaRN: dims with > beta rotations in L are left alone

        def check(self):
            super().check()
            if self.pos_encoding != "rope":
                raise ValueError("rope_scaled stretches RoPE: set pos_encoding=rope")
            if self.rope_scaling not in ("pi", "ntk", "yarn"):
                raise ValueError(f"rope_scaling must be pi, ntk or yarn, got {self.rope_scaling!r}")
            if self.rope_factor < 1.0:
                raise ValueError(f"rope_factor must be >= 1, got {self.rope_factor}")

    def rope_tables(self, T, device):
        return scaled_rope_cos_sin(self.config, T, device)


def scaled_rope_cos_sin(c, T, device):
    """cos and sin tables (T, hs) of RoPE stretched by c.rope_factor = s, by c.rope_scaling."""
    hs, s, base = c.n_embd // c.n_head, c.rope_factor, ROPE_BASE
    if c.rope_scaling == "ntk":
        # NTK-aware scaling (bloc97, 2023): enlarge the base so the lowest frequency is
        # interpolated by s while the highest stays put: base' = base * s^(d/(d-2))
        base = base * s ** (hs / (hs - 2))
    theta = base ** (-torch.arange(0, hs, 2, device=device, dtype=torch.float32) / hs)  # (hs/2,)
    mscale = 1.0
    if c.rope_scaling == "pi":
        # Position Interpolation (Chen et al., 2023): positions divided by s, i.e. theta_i / s
        theta = theta / s
    elif c.rope_scaling == "yarn":
        # YaRN (Peng et al., 2023), "NTK-by-parts": r_i = L / wavelength_i rotations fit in the
        # training length L. gamma(r) = 0 below alpha (interpolate like PI), 1 above beta
        # (keep), linear in between:  theta_i' = (1 - gamma) * theta_i / s + gamma * theta_i
        r = c.block_size * theta / (2 * math.pi)
        gamma = ((r - c.yarn_alpha) / (c.yarn_beta - c.yarn_alpha)).clamp(0, 1)
        theta = (1 - gamma) * theta / s + gamma * theta
        # and its attention temperature: logits * (0.1 ln s + 1)^2, as q and k are both
        # rotated by these tables, each carries one factor (0.1 ln s + 1)
        mscale = 0.1 * math.log(s) + 1.0
    cos, sin = rope_cos_sin(hs, T, device, theta)
    return cos * mscale, sin * mscale


register("rope_scaled", RopeScaled)


# ---------------------------------------------------------------------------------------------
# Hybrids of RoPE and NoPE layers, as production models use NoPE since the paper (docs/modern.md)

class Hybrid(CausalSelfAttention):
    """A RoPE model whose every nope_every-th layer is NoPE (Llama 4's rule: the layers with
    (index + 1) % nope_every == 0), its RoPE layers optionally windowed to rope_window keys
    (Cohere), and Llama 4's temperature on its NoPE layers past L. lambda (and its slope)
    scales the NoPE layers alone; the RoPE layers keep lambda = 1, as Llama 4 scales its NoPE
    layers alone."""

    @dataclass
    class Config(GPTConfig):
        family: str = "hybrid"
        pos_encoding: str = "rope"
        nope_every: int = 4          # every k-th layer NoPE (0 = none; pos_encoding=nope: all)
        rope_window: int = 0         # the RoPE layers' sliding window W (0 = global)
        nope_temp: float = 0.0       # Llama 4's temperature on the NoPE layers (0 = off)
        nope_temp_floor: float = 1.0  # its floor scale F, in units of L

        def check(self):
            super().check()
            if (self.nope_every < 0 or self.rope_window < 0 or self.nope_temp < 0
                    or self.nope_temp_floor <= 0):
                raise ValueError("nope_every, rope_window and nope_temp must be >= 0, "
                                 "nope_temp_floor > 0")
            if self.rope_window and not (self.nope_every and self.pos_encoding == "rope"):
                raise ValueError("rope_window windows the RoPE layers of a hybrid: set "
                                 "pos_encoding=rope and nope_every")
            if self.nope_temp and not self.nope_layers():
                raise ValueError("nope_temp scales the NoPE layers and this model has none "
                                 "(pos_encoding=nope, or rope with nope_every)")

        def nope_layers(self):
            """The layers without position encoding: every layer of a NoPE model; with rope,
            those with (index + 1) % nope_every == 0 (Llama 4's rule)."""
            if self.pos_encoding == "nope":
                return list(range(self.n_layer))
            k = self.nope_every
            return [i for i in range(self.n_layer) if k and (i + 1) % k == 0]

    def __init__(self, config, layer=0):
        super().__init__(config, layer)
        self.rotary = layer not in config.nope_layers()
        self.scaled = not self.rotary
        self.window = config.rope_window if self.rotary else 0
        # a windowed RoPE layer keeps no sink: key 0 would sit at a query-key distance never seen
        # in training (up to the whole length), and Cohere's windowed layers keep none
        self.sink = config.bos and not self.window

    def logit_scale(self, T, window):
        lam = super().logit_scale(T, window)
        temp = None if self.rotary else llama4_temperature(T, self.config, lam.device)
        return lam if temp is None else lam * temp                            # (1, nh, T, 1)

    def attend(self, q, k, v, lam, window, entropy, chunk):
        if self.window:  # a windowed RoPE layer: the narrower of the two windows
            window = min(window or self.window, self.window)
        return super().attend(q, k, v, lam, window, entropy, chunk)


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


register("hybrid", Hybrid)


# ---------------------------------------------------------------------------------------------
# The two other families of answer to "attend past L": a bias that grows with the distance
# (ALiBi), and a temperature that grows with the number of keys, learned in training (SSMax).
# The study trains them beside NoPE (reproduce.py --beyond, docs/beyond.md).

class ALiBi(CausalSelfAttention):
    """ALiBi: no position embedding, a fixed bias -m_h (i - j) on every logit (alibi_attention).
    lambda scales q.k only; the bias stays as trained."""

    @dataclass
    class Config(GPTConfig):
        family: str = "alibi"
        pos_encoding: str = "alibi"
        pos_encodings = ("alibi",)

    def __init__(self, config, layer=0):
        super().__init__(config, layer)
        # its fixed slopes, derived from n_head (not saved)
        self.register_buffer("alibi_slopes", alibi_slopes(config.n_head), persistent=False)

    def attend(self, q, k, v, lam, window, entropy, chunk):
        return alibi_attention(q, k, v, lam, self.alibi_slopes, window, self.sink, entropy,
                               chunk, self.dropout if self.training else 0.0)


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


def alibi_attention(q, k, v, lam, slopes, window=None, sink=False, entropy=False, chunk=256,
                    dropout_p=0.0):
    """Causal attention with ALiBi's bias, queries a chunk at a time so that the bias never holds
    more than (nh, chunk, T) numbers (at 8,192 positions a whole (nh, T, T) bias would be GBs):

        a_ij = softmax_j(lam_i q_i.k_j / sqrt(d) - m_h (i - j))

    lam (query_scale's, times any other temperature) scales q.k only; the bias is left as
    trained. entropy=False: SDPA with the bias as an additive mask in q's dtype (lam folded into
    q in float32, as the NoPE path does), 1,024 queries a chunk; entropy=True: its softmax
    written out in float32, `chunk` queries at a time, with its entropy in bits.
    Returns y (B, nh, T, hs) and the entropy (B, nh, T) (None on the fast path)."""
    T, hs = q.size(2), q.size(3)
    chunk = chunk if entropy else 1024
    ys, entropies = [], []
    for a in range(0, T, chunk):  # queries a..b-1, keys lo..b-1
        b = min(a + chunk, T)
        lo = max(0, a - window + 1) if window is not None and not sink else 0
        bias = alibi_bias(slopes, b, window, sink, start=a, lo=lo)      # (nh, b-a, b-lo)
        lam_i = lam[:, :, a:b] if lam.size(2) > 1 else lam              # (1, nh, b-a|1, 1)
        q_i = q[:, :, a:b].float() * lam_i                              # (B, nh, b-a, hs)
        if not entropy:
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


register("alibi", ALiBi)


# Scalable-Softmax's s at initialisation. Nakanishi (2025) was not readable here; 0.43 is the
# value gdevos010/Scalable-Softmax (an unofficial PyTorch version) gives "as used in paper".
SSMAX_INIT = 0.43


class SSMax(CausalSelfAttention):
    """Scalable-Softmax: the logits of query i times s_h ln n_i, one s per (layer, head) learned
    with the weights; it multiplies lambda, which the paper's remedies still fit on top."""

    @dataclass
    class Config(GPTConfig):
        family: str = "ssmax"

    def __init__(self, config, layer=0):
        super().__init__(config, layer)
        self.ssmax = torch.nn.Parameter(torch.full((config.n_head,), SSMAX_INIT))  # (nh,)

    def logit_scale(self, T, window):
        return super().logit_scale(T, window) * ssmax_scale(self.ssmax, T, window)  # (1,nh,T,1)


def ssmax_scale(s, T, window=None):
    """Scalable-Softmax (SSMax; Nakanishi 2025, arXiv 2501.19399): softmax(z) over n keys
    becomes softmax(s ln n * z), s learned per (layer, head). Here n_i is the number of keys
    query i sees: its position i = 1..T (the start token among them), at most `window`.
    Returns s_h ln n_i, (1, nh, T, 1) float32: a factor of the logits, beside lam."""
    i = torch.arange(1, T + 1, device=s.device, dtype=torch.float32)     # (T,)
    n = i if window is None else i.clamp(max=window)
    return s.float().view(1, -1, 1, 1) * torch.log(n).view(1, 1, T, 1)   # (1, nh, T, 1)


register("ssmax", SSMax)


# ---------------------------------------------------------------------------------------------
# 2025's answers (reproduce.py --beyond2025, docs/beyond2025.md): where a head puts the attention
# it does not need, learned in training. A forget gate (FoX) and an output gate read the layer's
# input x; a learned sink adds one softmax column. All three are NoPE, start token kept.

class ReadsInput(CausalSelfAttention):
    """The attention of a family that reads its layer's input x (the block's normed input) beside
    q, k and v. model.py's hooks (rope_tables, logit_scale, attend) see q, k, v and lambda, never
    x, so this overrides forward: model.py's lines without RoPE (these families are NoPE), and two
    hooks of its own, gates(x): the extra arguments attend takes, and gate_output(y, x): each
    head's output (B, nh, T, hs) before c_proj."""

    @dataclass
    class Config(GPTConfig):
        pos_encodings = ("nope",)

    def forward(self, x, window=None, entropy=False, chunk=256):
        B, T, C = x.size()
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in self.c_attn(x).split(C, dim=2))                  # (B, nh, T, hs)
        lam = self.logit_scale(T, window)                                    # (1, nh, T|1, 1)
        y, ent = self.attend(q, k, v, lam, window, entropy, chunk, *self.gates(x))
        y = self.gate_output(y, x).transpose(1, 2).reshape(B, T, C)
        return self.resid_dropout(self.c_proj(y)), ent

    def gates(self, x):  # nothing more for attend
        return ()

    def gate_output(self, y, x):  # no output gate
        return y


class FoX(ReadsInput):
    """The Forgetting Transformer (Lin et al., ICLR 2025, arXiv 2503.02130), on NoPE: per head a
    scalar forget gate per token, f_t = sigmoid(w_h.x_t + b_h), and logits

        lam_i q_i.k_j / sqrt(d) + sum_{l=j+1..i} ln f_l                      (fox_attention)

    lambda (UniformScale, HeadScale) scales q.k only; the gate's decay stays as trained, as
    ALiBi's bias does. w and b start as every Linear of the model (normal(0, 0.02), b = 0, so
    f is about 1/2), as the authors' data-dependent ("full") gate starts."""

    @dataclass
    class Config(ReadsInput.Config):
        family: str = "fox"

    def __init__(self, config, layer=0):
        super().__init__(config, layer)
        self.forget = torch.nn.Linear(config.n_embd, config.n_head, bias=True)  # w_h, b_h

    def gates(self, x):  # ln f_t, (B, nh, T) float32
        return (F.logsigmoid(self.forget(x).float()).transpose(1, 2),)

    def attend(self, q, k, v, lam, window, entropy, chunk, log_f):
        return fox_attention(q, k, v, lam, log_f, window, self.sink, entropy, chunk,
                             self.dropout if self.training else 0.0)


class OutputGated(ReadsInput):
    """Gated attention (Qiu et al., arXiv 2505.06708, NeurIPS 2025), its head-wise variant, on
    NoPE: each head's output times sigmoid(x W_g), one value per head and token, before c_proj
    (W_g (C, nh), with a bias only where the model's Linears have one). The attention itself is
    the paper's (attend: SDPA, and T2 for the entropy), so lambda composes as on NoPE; the gate
    comes after the softmax and leaves it, its entropy and its sink share alone."""

    @dataclass
    class Config(ReadsInput.Config):
        family: str = "nope_gated"

    def __init__(self, config, layer=0):
        super().__init__(config, layer)
        self.gate = torch.nn.Linear(config.n_embd, config.n_head, bias=config.bias)

    def gate_output(self, y, x):
        g = torch.sigmoid(self.gate(x).float()).transpose(1, 2).unsqueeze(-1)  # (B, nh, T, 1)
        return y * g.to(y.dtype)


class LearnedSink(CausalSelfAttention):
    """NoPE with a learned sink, OpenAI's gpt-oss `sinks`: one logit s_h per head appended to
    every row of logits as an extra softmax column whose probability is dropped after the
    softmax, so a head may attend to nothing (sink_attention): each row of attention sums to
    1 - p_sink. The start token stays (bos, as on every row). lambda scales q.k only; s_h stays
    as trained. s starts at 0 (gpt-oss: normal(0, 0.02)); a vector, it gets no weight decay."""

    @dataclass
    class Config(GPTConfig):
        family: str = "nope_sink"
        pos_encodings = ("nope",)

    def __init__(self, config, layer=0):
        super().__init__(config, layer)
        self.sinks = torch.nn.Parameter(torch.zeros(config.n_head))  # s_h

    def attend(self, q, k, v, lam, window, entropy, chunk):
        return sink_attention(q, k, v, lam, self.sinks, window, self.sink, entropy, chunk,
                              self.dropout if self.training else 0.0)


def fox_bias(c, stop, window=None, sink=False, start=0, lo=0):
    """FoX's bias of queries start <= i < stop on keys lo <= j < stop, float32
    (B, nh, stop - start, stop - lo), c (B, nh, T) the cumulative sum of ln f over positions:

        b_ij = c_i - c_j = sum_{l=j+1..i} ln f_l  where i may attend to j (window_mask), else -inf

    Under a window that keeps the start token, key 0 gets c_i - c_{i-W+1}: the forgetting of the
    W - 1 tokens after it in the crop [start token, last W - 1 tokens], as ALiBi clamps its
    distance (alibi_bias). c is float32, as in the authors' kernel: at |c| ~ 5,000 (16L at
    f ~ 1/2) a difference is good to about 1e-3."""
    ci, cj = c[:, :, start:stop].unsqueeze(-1), c[:, :, lo:stop].unsqueeze(-2)
    decay = ci - cj                                                  # (B, nh, stop-start, stop-lo)
    if window is not None and sink and lo == 0:
        before = (torch.arange(start, stop, device=c.device) - window + 1).clamp(min=0)
        decay[..., 0] = c[:, :, start:stop] - c[:, :, before]
    visible = window_mask(stop, window, c.device, sink, start=start, lo=lo)
    return decay.masked_fill(~visible, float("-inf"))


def fox_attention(q, k, v, lam, log_f, window=None, sink=False, entropy=False, chunk=256,
                  dropout_p=0.0):
    """FoX's forgetting attention, log_f (B, nh, T) = ln f_t, float32:

        a_ij = softmax_j(lam_i q_i.k_j / sqrt(d) + c_i - c_j),  c_i = sum_{l <= i} ln f_l

    The bias depends on the data, so it is built a chunk of queries at a time (fox_bias): no
    tensor of it holds more than (B, nh, chunk, T) numbers. The fast path is SDPA with it as a
    float additive mask in q's dtype, 1,024 queries a chunk, as ALiBi's; entropy=True writes the
    softmax out (biased_softmax_attention). Returns y (B, nh, T, hs) and the entropy or None."""
    c = log_f.float().cumsum(-1)                                           # (B, nh, T)
    return biased_softmax_attention(
        q, k, v, lam, lambda a, b, lo: fox_bias(c, b, window, sink, start=a, lo=lo), window,
        sink, None, entropy, chunk, dropout_p)


def sink_attention(q, k, v, lam, sinks, window=None, sink=False, entropy=False, chunk=256,
                   dropout_p=0.0):
    """gpt-oss's learned sink, sinks (nh,) the logits s_h:

        a_ij = exp(z_ij) / (exp(s_h) + sum_j' exp(z_ij')),  z_ij = lam_i q_i.k_j / sqrt(d)

    over the keys i may see (window_mask; `sink` keeps the start token, the other sink); the
    row sums to 1 - p_sink, p_sink = exp(s_h) / (exp(s_h) + sum_j' exp(z_ij')). The fast path
    is SDPA over the keys and one more, a zero key and value whose mask is s_h, 1,024 queries a
    chunk; entropy=True writes it out (biased_softmax_attention: its entropy is that of the kept
    probabilities renormalised). Returns y (B, nh, T, hs) and the entropy or None."""
    def visible(a, b, lo):  # 0 where query i may look, -inf elsewhere: (1, 1, b - a, b - lo)
        ok = window_mask(b, window, q.device, sink, start=a, lo=lo)
        return torch.zeros(ok.shape, device=q.device).masked_fill(~ok, float("-inf"))[None, None]
    return biased_softmax_attention(q, k, v, lam, visible, window, sink, sinks, entropy, chunk,
                                    dropout_p)


def biased_softmax_attention(q, k, v, lam, bias, window=None, sink=False, null=None,
                             entropy=False, chunk=256, dropout_p=0.0):
    """The attention of FoX and of the learned sink, queries a chunk at a time:

        a_ij = softmax over the keys j query i sees, and a null column n_h when null is given,
               of lam_i q_i.k_j / sqrt(d) + bias_ij;  the null column's probability dropped

    bias(a, b, lo): float32 (B or 1, nh or 1, b - a, b - lo), the bias of queries a..b-1 on keys
    lo..b-1, -inf where a query may not look. null: (nh,) logits, or None. lam (query_scale's,
    (1, nh, T|1, 1)) scales q.k alone, in float32: neither the bias nor the null logit.
    entropy=False: SDPA, the bias as an additive mask in q's dtype (the null column a zero key
    and value whose mask is n_h), 1,024 queries a chunk. entropy=True: written out in float32,
    `chunk` queries at a time, with the entropy in bits of the kept probabilities renormalised
    to sum to 1: how the head spreads what it reads over the keys, comparable with every other
    row's and with log2 i; what it sends to the null column is its own number (the sink
    share's second). Returns y (B, nh, T, hs) and the entropy (B, nh, T), or None."""
    T, hs = q.size(2), q.size(3)
    step = chunk if entropy else 1024
    outs, spreads = [], []
    for a in range(0, T, step):  # queries a..b-1 on keys first..b-1
        b = min(a + step, T)
        first = 0 if window is None or sink else max(0, a - window + 1)
        add = bias(a, b, first)
        scale = lam if lam.size(2) == 1 else lam[:, :, a:b]
        lq = q[:, :, a:b].float() * scale                                  # lam_i q_i, float32
        keys, values = k[:, :, first:b], v[:, :, first:b]
        if null is not None:  # one more key, zero, its logit n_h; one more value, zero
            add = add.expand(add.size(0), q.size(1), -1, -1)
            add = torch.cat([add, null.float().view(1, -1, 1, 1).expand(add.size(0), -1, b - a, 1)],
                            dim=-1)
            keys, values = F.pad(keys, (0, 0, 0, 1)), F.pad(values, (0, 0, 0, 1))
        if not entropy:
            outs.append(F.scaled_dot_product_attention(
                lq.to(q.dtype), keys, values, attn_mask=add.to(q.dtype), dropout_p=dropout_p))
            continue
        with torch.autocast(device_type=q.device.type, enabled=False):
            logits = torch.matmul(lq, keys.float().transpose(2, 3)) / math.sqrt(hs) + add
        probs = spread = torch.softmax(logits, dim=3)
        if null is not None:  # drop the null column: each row now sums to 1 - p_null; the kept
            # probabilities renormalised are the softmax over the keys alone (no underflow)
            probs, values = probs[..., :-1], values[:, :, :-1]
            spread = torch.softmax(logits[..., :-1], dim=3)
        spreads.append(-torch.xlogy(spread, spread).sum(3) / math.log(2))  # bits
        outs.append(torch.matmul(probs.to(v.dtype), values))
    return torch.cat(outs, dim=2), (torch.cat(spreads, dim=2) if entropy else None)


register("fox", FoX)
register("nope_gated", OutputGated)
register("nope_sink", LearnedSink)


# ---------------------------------------------------------------------------------------------
# The sink share: the attention each query gives key 0 (the start token where there is one),
# measured through each layer's own attend, so that it holds for every family

@contextlib.contextmanager
def first_key_probe(model):
    """While open, each attention layer's written-out pass (entropy=True) also sends probe
    values through its own attend, on the fast path in float32: v_j = (1 if j = 0 else 0, 1,
    0, ...), whose output at query i is (a_i0, sum_j a_ij): the attention it gives key 0 (the
    start token where there is one; in evaluate.last_L_losses' recomputed reference, each
    sub-window's first key) and the mass it keeps (1 - the learned sink's share; 1 without).
    Both ride on the entropy tensor, after its heads, so that every path that carries the
    entropy (last_L_losses' sub-windows too) carries them by position: GPT.forward(entropy=True)
    returns (B, n_layer, 3 n_head, T) while the probe is open; split_probe() takes them apart.
    Nothing else changes: y is the layer's own."""
    layers = [block.attn for block in model.transformer.h]
    for attn in layers:
        attn.attend = functools.partial(_probed, attn.attend)
    try:
        yield
    finally:
        for attn in layers:
            del attn.attend  # the class's own again


def _probed(attend, q, k, v, lam, window, entropy, chunk, *more):
    y, ent = attend(q, k, v, lam, window, entropy, chunk, *more)
    if ent is None:
        return y, ent
    probe = torch.zeros(v.shape, device=v.device)
    probe[:, :, 0, 0] = 1.0  # key 0
    probe[..., 1] = 1.0      # every key
    with torch.autocast(device_type=q.device.type, enabled=False):
        read, _ = attend(q.float(), k.float(), probe, lam, window, False, chunk, *more)
    return y, torch.cat([ent.float(), read[..., 0], read[..., 1]], dim=1)  # (B, 3 nh, T)


def split_probe(ent, n_head):
    """A probed entropy (..., 3 n_head, T) -> the entropy (..., n_head, T), and the attention to
    key 0 and the mass kept, each averaged over heads (..., T)."""
    return (ent[..., :n_head, :], ent[..., n_head:2 * n_head, :].mean(-2),
            ent[..., 2 * n_head:, :].mean(-2))


def sink_facts(first_key, kept, L, model):
    """results.json's facts from the probe's curves (n_layer, n) at the longest length: for each
    n of L and 4L the pass reached, each layer's share averaged over query positions 1..n-1
    (0-based; position 0 sees only key 0), {str(n): [per layer]}: by causality the windows' first
    n positions are windows of n tokens. sink_column likewise, 1 - kept, where the model has a
    learned sink, else None. Both None without the probe's curves."""
    if first_key is None:
        return {"sink_share": None, "sink_column": None}
    at = [n for n in (L, 4 * L) if n <= first_key.shape[-1]]
    mean = lambda c: {str(n): [round(float(x), 4) for x in c[:, 1:n].mean(-1)] for n in at}  # noqa: E731
    null = any(isinstance(block.attn, LearnedSink) for block in model.transformer.h)
    return {"sink_share": mean(first_key), "sink_column": mean(1 - kept) if null else None}


def arch_of(config):
    """Where a model's position information comes from, as results.json names it: nope, rope,
    alibi, or a hybrid such as rope+nope/4+window32 (RoPE layers windowed to 32 keys, every 4th
    layer NoPE); +ssmax when its softmax is Scalable-Softmax; +forget_gate (FoX), +output_gate,
    +sink (a learned sink column)."""
    c = config
    return (c.pos_encoding + (f"+nope/{c.nope_every}" if getattr(c, "nope_every", 0) else "")
            + (f"+window{c.rope_window}" if getattr(c, "rope_window", 0) else "")
            + {"ssmax": "+ssmax", "fox": "+forget_gate", "nope_gated": "+output_gate",
               "nope_sink": "+sink"}.get(c.family, ""))


def with_defaults(args):
    """A model's settings as given (train.py's record), its family's defaults filled in: a
    setting left at its default and the same value given are one (train.py --resume)."""
    config = FAMILIES.get(args.get("family", ""), CausalSelfAttention).Config
    return {f.name: f.default for f in fields(config)} | args
