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

Adding a family: a subclass overriding the hook it changes (rope_tables, logit_scale or
attend), its Config with the settings it adds, a register() line, and its tests
(tests/test_beyond.py, tests/test_modern.py). model.py and the scripts stay as they are.
"""

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


def arch_of(config):
    """Where a model's position information comes from, as results.json names it: nope, rope,
    alibi, or a hybrid such as rope+nope/4+window32 (RoPE layers windowed to 32 keys, every 4th
    layer NoPE); +ssmax when its softmax is Scalable-Softmax."""
    c = config
    return (c.pos_encoding + (f"+nope/{c.nope_every}" if getattr(c, "nope_every", 0) else "")
            + (f"+window{c.rope_window}" if getattr(c, "rope_window", 0) else "")
            + ("+ssmax" if c.family == "ssmax" else ""))


def with_defaults(args):
    """A model's settings as given (train.py's record), its family's defaults filled in: a
    setting left at its default and the same value given are one (train.py --resume)."""
    config = FAMILIES.get(args.get("family", ""), CausalSelfAttention).Config
    return {f.name: f.default for f in fields(config)} | args
