"""The maths of model.py, pinned on tiny fp32 models."""

import math

import pytest
import torch
from torch.nn import functional as F

from families import RopeScaled, scaled_rope_cos_sin
from model import (GPT, CausalSelfAttention, CheckpointError, GPTConfig, apply_rope, load_checkpoint,
                   make_config, rope_cos_sin, save_checkpoint, window_mask, written_out_attention)

V = 17


def make(pos="nope", seed=0, sharpen=True, **kw):
    """A tiny GPT, without the start token unless bos=True. sharpen=True scales q,k weights up so
    attention is far from uniform (at GPT-2 init it is almost uniform, which would make several
    tests pass trivially)."""
    torch.manual_seed(seed)
    cfg = make_config(**{"block_size": 8, "vocab_size": V, "n_layer": 2, "n_head": 4, "n_embd": 32,
                         "pos_encoding": pos, "bos": False, **kw})
    model = GPT(cfg).eval()
    if sharpen:
        with torch.no_grad():
            for b in model.transformer.h:
                b.attn.c_attn.weight[: 2 * cfg.n_embd].mul_(15)
    return model


def tokens(B=2, T=24, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def reference_attention(attn, x, lam=None, window=None):
    """Plain causal attention written out independently of model.py:
    softmax(lam_h * q.k / sqrt(d) + mask) v, then the output projection. lam: (nh,) one per
    head, or (nh, T) one per head and query position."""
    B, T, C = x.shape
    nh, hs = attn.n_head, C // attn.n_head
    q, k, v = attn.c_attn(x).split(C, dim=2)
    q, k, v = (t.view(B, T, nh, hs).transpose(1, 2) for t in (q, k, v))
    lam = torch.ones(nh) if lam is None else lam
    att = lam.view(1, nh, -1, 1) * (q @ k.transpose(-2, -1)) / math.sqrt(hs)
    i, j = torch.arange(T).view(-1, 1), torch.arange(T).view(1, -1)
    allowed = (j <= i) if window is None else (j <= i) & (j > i - window)
    att = att.masked_fill(~allowed, float("-inf")).softmax(-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)
    return attn.c_proj(y)


@pytest.mark.parametrize("pos", ["nope", "rope"])
@pytest.mark.parametrize("explicit", [False, True])
def test_no_future_leak(pos, explicit):
    model = make(pos)
    idx = tokens()
    t = 11
    changed = idx.clone()
    changed[:, t:] = (changed[:, t:] + 1) % V
    with torch.no_grad():
        a = model(idx, idx, entropy=explicit)[0]
        b = model(changed, changed, entropy=explicit)[0]
    assert torch.allclose(a[:, :t], b[:, :t], atol=1e-5)
    assert not torch.allclose(a[:, t:], b[:, t:], atol=1e-3)  # the perturbation does reach later positions


def test_nope_has_no_position_parameters():
    model = make("nope")
    names = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    assert not any("wpe" in n or "pos" in n or "rope" in n for n in names)
    # a run of one repeated token: with nothing added per position, every position sees the
    # same values and gives the same logits (a position embedding would break this)
    idx = torch.full((1, 40), 5)
    with torch.no_grad():
        logits, _ = model(idx, idx)
    assert torch.allclose(logits[0], logits[0, :1].expand(40, -1), atol=1e-5)


@pytest.mark.parametrize("window", [None, 5])
def test_head_scale_ones_equals_plain_attention(window):
    model = make("nope")
    attn = model.transformer.h[0].attn
    assert torch.equal(attn.head_scale, torch.ones(4))
    x = torch.randn(2, 20, 32)
    with torch.no_grad():
        ref = reference_attention(attn, x, window=window)
        assert torch.allclose(attn(x, window=window)[0], ref, atol=1e-5)
        assert torch.allclose(attn(x, window=window, entropy=True)[0], ref, atol=1e-5)


def test_random_per_head_scales_match_reference():
    model = make("nope")
    attn = model.transformer.h[1].attn
    lam = torch.tensor([0.5, 1.0, 1.5, 3.0])
    attn.head_scale = lam.clone()
    x = torch.randn(2, 20, 32)
    with torch.no_grad():
        assert torch.allclose(attn(x)[0], reference_attention(attn, x, lam), atol=1e-5)


def test_one_head_scale_changes_only_that_head():
    model = make("nope")
    attn = model.transformer.h[0].attn
    seen = []
    attn.c_proj.register_forward_pre_hook(lambda mod, inp: seen.append(inp[0].detach().clone()))
    x = torch.randn(2, 20, 32)
    with torch.no_grad():
        attn(x)
        attn.head_scale[2] = 2.0
        attn(x)
    before, after = (t.view(2, 20, 4, 8) for t in seen)  # (B, T, nh, hs)
    for h in range(4):
        same = torch.allclose(before[:, :, h], after[:, :, h], atol=1e-6)
        assert same == (h != 2)


def test_gradient_reaches_head_scale_and_not_frozen_weights():
    model = make("nope")
    model.requires_grad_(False)
    lam = torch.full((2, 4), 1.2, requires_grad=True)
    model.set_head_scales(lam)
    idx = tokens()
    _, loss = model(idx, idx)
    loss.backward()
    assert lam.grad is not None and lam.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.parameters())


def test_window_hides_tokens_further_back():
    model = make("nope")
    idx = tokens(T=30)
    changed = idx.clone()
    changed[:, 5] = (changed[:, 5] + 1) % V
    W = 4  # two layers: token 5 can reach at most position 5 + 2 * (W - 1) = 11
    with torch.no_grad():
        a, _ = model(idx, idx, window=W)
        b, _ = model(changed, changed, window=W)
        c, _ = model(idx, idx, window=100)
        d, _ = model(idx, idx)
    assert torch.allclose(a[:, 12:], b[:, 12:], atol=1e-5)
    assert not torch.allclose(a[:, 5:12], b[:, 5:12], atol=1e-4)
    assert torch.allclose(c, d, atol=1e-5)  # a window longer than the input changes nothing


@pytest.mark.parametrize("pos", ["nope", "rope"])
def test_runs_at_16x_training_length(pos):
    model = make(pos)
    L = model.config.block_size
    idx = tokens(B=1, T=16 * L)
    with torch.no_grad():
        a, la = model(idx, idx)
        b, lb, _ = model(idx, idx, entropy=True, chunk=32)
    assert a.shape == (1, 16 * L, V) and torch.isfinite(la)
    assert torch.allclose(la, lb, atol=1e-5)


def test_checkpoint_round_trip(tmp_path):
    model = make("rope")
    model.set_head_scales(torch.rand(2, 4) + 1)
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model, iter_num=3, note="hello")
    raw = torch.load(path, weights_only=True)  # tensors and plain values only
    assert raw["iter_num"] == 3 and raw["model_args"]["pos_encoding"] == "rope"
    loaded, ckpt = load_checkpoint(path)
    assert torch.equal(loaded.get_head_scales(), model.get_head_scales())
    idx = tokens()
    with torch.no_grad():
        assert torch.equal(model(idx, idx)[0], loaded.eval()(idx, idx)[0])
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # no temporary file left behind


def test_bad_checkpoints_give_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a readable"):
        load_checkpoint(tmp_path / "junk.pt")
    torch.save({"weights": torch.zeros(3)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a nanoNoPE checkpoint"):
        load_checkpoint(tmp_path / "other.pt")
    model = make("nope")
    save_checkpoint(tmp_path / "ok.pt", model)
    ckpt = torch.load(tmp_path / "ok.pt", weights_only=True)
    ckpt["model_args"]["n_embd"] = 64  # claims another shape than its weights
    torch.save(ckpt, tmp_path / "shape.pt")
    with pytest.raises(CheckpointError, match="does not fit"):
        load_checkpoint(tmp_path / "shape.pt")


def test_overfits_one_batch():
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=16, vocab_size=V, n_layer=2, n_head=2, n_embd=48)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    idx = tokens(B=4, T=17)
    x, y = idx[:, :-1], idx[:, 1:]
    first = None
    for _ in range(300):
        _, loss = model(x, y)
        first = first or loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first > 2.5 and loss.item() < 0.1


# --- RoPE and its extension variants --------------------------------------------------

def test_rope_dot_products_depend_only_on_relative_position():
    cos, sin = rope_cos_sin(16, 40, "cpu")
    q, k = torch.randn(16), torch.randn(16)

    def dot(m, n):
        return (apply_rope(q, cos[m], sin[m]) * apply_rope(k, cos[n], sin[n])).sum()
    assert torch.allclose(dot(10, 3), dot(30, 23), atol=1e-4)
    assert not torch.allclose(dot(10, 3), dot(10, 5), atol=1e-3)


@pytest.mark.parametrize("scaling", ["pi", "ntk", "yarn"])
def test_rope_variants_with_factor_one_equal_plain_rope(scaling):
    variant = RopeScaled.Config(n_embd=32, n_head=2, rope_scaling=scaling, rope_factor=1.0)
    for a, b in zip(rope_cos_sin(16, 50, "cpu"), scaled_rope_cos_sin(variant, 50, "cpu")):
        assert torch.allclose(a, b, atol=1e-6)


def test_position_interpolation_at_s_times_p_equals_plain_at_p():
    s = 4.0
    pi = RopeScaled.Config(n_embd=32, n_head=2, rope_scaling="pi", rope_factor=s)
    cp, sp = rope_cos_sin(16, 20, "cpu")
    ci, si = scaled_rope_cos_sin(pi, 80, "cpu")
    assert torch.allclose(ci[::4], cp, atol=1e-5) and torch.allclose(si[::4], sp, atol=1e-5)


def test_yarn_temperature_and_frequencies():
    s, L = 8.0, 128
    cfg = RopeScaled.Config(n_embd=64, n_head=2, block_size=L, rope_scaling="yarn", rope_factor=s)
    cos, sin = scaled_rope_cos_sin(cfg, 3, "cpu")
    # position 0: no rotation, so cos = (0.1 ln s + 1) on every dimension (logits get its square)
    assert torch.allclose(cos[0], torch.full((32,), 0.1 * math.log(s) + 1.0), atol=1e-6)
    # position 1 turns each pair by its frequency: dimensions with fewer than alpha = 1 rotation
    # in L are interpolated like PI (theta / s), every one follows the NTK-by-parts blend
    pc, ps = rope_cos_sin(32, 3, "cpu")
    angle_plain = torch.atan2(ps[1], pc[1])
    angle_yarn = torch.atan2(sin[1], cos[1])
    theta = 10000.0 ** (-torch.arange(0, 32) * 2 / 32)
    rotations = L * theta / (2 * math.pi)
    slow = rotations < 1.0
    assert torch.allclose(angle_yarn[:16][slow[:16]], angle_plain[:16][slow[:16]] / s, atol=1e-6)
    gamma = ((rotations - 1) / 31).clamp(0, 1)
    expected = (1 - gamma) * theta / s + gamma * theta
    assert torch.allclose(angle_yarn[:16], expected[:16], atol=1e-6)


def test_ntk_enlarges_the_base():
    s, hs = 4.0, 16
    ntk = RopeScaled.Config(n_embd=32, n_head=2, rope_scaling="ntk", rope_factor=s)
    base = 10000.0 * s ** (hs / (hs - 2))
    cos, sin = scaled_rope_cos_sin(ntk, 2, "cpu")
    theta = base ** (-torch.arange(0, hs, 2) / hs)
    assert torch.allclose(torch.atan2(sin[1], cos[1])[: hs // 2], theta, atol=1e-6)
    # the slowest frequency is interpolated by exactly s
    assert math.isclose(theta[-1].item(), (10000.0 ** (-(hs - 2) / hs)) / s, rel_tol=1e-5)


# -----------------------------------------------------------------------------
# The start token, the head-scale shapes, measuring without float64

def test_a_sliding_window_keeps_the_start_token_visible():
    """With bos, window W = the start token and the last W - 1 positions, on both paths."""
    model = make("nope", bos=True)
    idx = tokens(T=30)
    idx[:, 0] = V - 1  # stands for the start token
    changed = idx.clone()
    changed[:, 0] = 0
    W = 4
    with torch.no_grad():
        a, _ = model(idx, idx, window=W)
        b, _ = model(changed, changed, window=W)
        c = model(idx, idx, window=W, entropy=True, chunk=7)[0]
    assert not torch.allclose(a[:, 20:], b[:, 20:], atol=1e-4)  # position 0 still reaches every query
    assert torch.allclose(a, c, atol=1e-5)
    from model import window_mask
    m = window_mask(12, W, "cpu", sink=True)
    assert m[:, 0].all() and m.sum(1)[W:].eq(W).all()  # W keys each: the token and the last W - 1
    i, j = torch.arange(12).view(-1, 1), torch.arange(12).view(1, -1)
    assert torch.equal(window_mask(12, W, "cpu"), (j <= i) & (j > i - W))  # without a sink: the plain window
    assert torch.equal(m, (j <= i) & ((j > i - W + 1) | (j == 0)))


def test_checkpoints_from_before_families_are_one_clear_error(tmp_path):
    model = make("nope")
    save_checkpoint(tmp_path / "old.pt", model)
    ckpt = torch.load(tmp_path / "old.pt", weights_only=True)
    del ckpt["model_args"]["family"]  # written before the field existed
    torch.save(ckpt, tmp_path / "old.pt")
    with pytest.raises(CheckpointError, match="older nanoNoPE .before families.py.*retrain it") as e:
        load_checkpoint(tmp_path / "old.pt")
    assert len(str(e.value).splitlines()) == 1
    save_checkpoint(tmp_path / "new.pt", make("nope", bos=True))
    assert load_checkpoint(tmp_path / "new.pt")[0].config.bos is True


@pytest.mark.parametrize("kind", ["scales", "slopes"])
def test_head_scale_and_slope_shapes_are_explicit(kind):
    model = make("nope", n_layer=4)  # as many layers as heads: a flat list of 4 could mean either
    set_, get = getattr(model, f"set_head_{kind}"), getattr(model, f"get_head_{kind}")
    set_(1.5)
    assert torch.equal(get(), torch.full((4, 4), 1.5))
    per_layer = torch.tensor([[1.0], [1.1], [1.2], [1.3]])
    set_(per_layer)
    assert torch.equal(get(), per_layer.expand(4, 4))
    with pytest.raises(ValueError, match="ambiguous"):
        set_([1.0, 1.1, 1.2, 1.3])
    with pytest.raises(ValueError, match="do not fit"):
        set_(torch.ones(4, 3))
    set_([2.0])  # one number in a list is one number
    assert torch.equal(get(), torch.full((4, 4), 2.0))
    other = model.get_head_slopes() if kind == "scales" else model.get_head_scales()
    assert torch.equal(other, torch.full((4, 4), 0.0 if kind == "scales" else 1.0))  # the other buffer untouched


def test_measure_creates_no_float64_tensor():
    """Apple's MPS has no float64: measure() must keep its sums in float32 on the device."""
    from torch.overrides import TorchFunctionMode
    from evaluate import measure

    class NoFloat64(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
                    raise AssertionError(f"{func} made a float64 tensor")
            return out

    model = make("nope", bos=True)
    windows = torch.randint(0, V, (3, 41))
    with NoFloat64():
        a = measure(model, windows, batch_size=2, entropy=True)
        b = measure(model, windows, batch_size=2, context=16)
    assert a["loss"].shape == (40,) and a["entropy"].shape == (2, 4, 40) and b["windows"] == 3


@pytest.mark.parametrize("window", [1, 3])
def test_generate_with_a_window_keeps_the_start_token(window, monkeypatch):
    model = make("nope", bos=True)
    seen = []
    forward = GPT.forward
    monkeypatch.setattr(GPT, "forward", lambda self, idx, *a, **k: seen.append(idx.clone()) or forward(self, idx, *a, **k))
    idx = tokens(B=1, T=10)
    out = model.generate(idx, 3, temperature=0, window=window)
    for x in seen:
        assert x.size(1) == window and x[0, 0] == idx[0, 0]  # the start token, then the last window - 1
    assert torch.equal(seen[-1][0, 1:], out[0, out.size(1) - window:-1])


# -----------------------------------------------------------------------------
# Lambda that follows the position: lam_h(i) = head_scale_h * (1 + a_h ln(max(i, L) / L))

def todays_attention(self, x, window=None, entropy=False, chunk=256):
    """CausalSelfAttention.forward as it was before the slopes: one lam per head, folded into q."""
    B, T, C = x.size()
    nh, hs = self.n_head, C // self.n_head
    q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
    q, k, v = (t.view(B, T, nh, hs).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
    if self.rotary:
        rope = rope_cos_sin(hs, T, x.device)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
    lam, ent = self.head_scale.view(1, nh, 1, 1), None
    if not entropy:
        q = (q.float() * lam).to(q.dtype)
        mask = None if window is None else window_mask(T, window, x.device, self.sink)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=window is None)
    else:
        y, ent = written_out_attention(q, k, v, lam, window, self.sink, chunk)
    return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)), ent


@pytest.mark.parametrize("pos", ["nope", "rope"])
@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("window", [None, 5])
def test_zero_slopes_are_bit_identical_to_todays_model(pos, explicit, window, monkeypatch):
    model = make(pos, bos=True)
    model.set_head_scales(torch.rand(2, 4) + 0.5)
    assert torch.equal(model.get_head_slopes(), torch.zeros(2, 4))  # off by default
    idx = tokens(T=3 * model.config.block_size)  # past L, where a slope would act
    with torch.no_grad():
        now = model(idx, idx, window=window, entropy=explicit, chunk=7)[0]
        monkeypatch.setattr(CausalSelfAttention, "forward", todays_attention)
        before = model(idx, idx, window=window, entropy=explicit, chunk=7)[0]
    assert torch.equal(now, before)


@pytest.mark.parametrize("pos", ["nope", "rope"])
@pytest.mark.parametrize("window", [None, 6])
def test_explicit_path_equals_sdpa_path_with_slopes(pos, window):
    model = make(pos)
    model.set_head_scales(torch.rand(2, 4) + 0.5)
    model.set_head_slopes(torch.rand(2, 4))
    idx = tokens(T=40)
    with torch.no_grad():
        a, la = model(idx, idx, window=window)
        b, lb, _ = model(idx, idx, window=window, entropy=True, chunk=7)
    assert torch.allclose(a, b, atol=1e-4) and torch.allclose(la, lb, atol=1e-5)


def test_positions_up_to_L_see_exactly_head_scale():
    lam = torch.rand(2, 4) + 0.5
    plain, sloped = make("nope", bos=True), make("nope", bos=True)  # the same weights
    for m in (plain, sloped):
        m.set_head_scales(lam)
    sloped.set_head_slopes(torch.rand(2, 4) + 0.2)
    L = plain.config.block_size
    with torch.no_grad():
        short = tokens(T=L)  # every position <= L: the whole model is unchanged
        assert torch.equal(plain(short, short)[0], sloped(short, short)[0])
        # a longer sequence: layer 0's attention at positions <= L (later layers mix positions)
        x = torch.randn(2, 3 * L, 32)
        a0, b0 = plain.transformer.h[0].attn, sloped.transformer.h[0].attn
        for explicit in (False, True):
            ya, yb = a0(x, entropy=explicit)[0], b0(x, entropy=explicit)[0]
            assert torch.allclose(ya[:, :L], yb[:, :L], atol=1e-6, rtol=0)
            assert not torch.allclose(ya[:, L:], yb[:, L:], atol=1e-3)  # and past L they differ
    # a one-layer model: its first L logits of a longer sequence are unchanged
    one = [make("nope", n_layer=1) for _ in range(2)]
    one[1].set_head_slopes(0.8)
    idx = tokens(T=3 * L)
    with torch.no_grad():
        la, lb = (m(idx, idx)[0] for m in one)
    assert torch.allclose(la[:, :L], lb[:, :L], atol=1e-6, rtol=0)
    assert not torch.allclose(la[:, L:], lb[:, L:], atol=1e-3)


def test_qwen_logn_is_the_log_law_with_slope_one_over_ln_L():
    """Qwen's logn attention multiplies q by log_L(i) = ln i / ln L for i > L (1 before):
    that is 1 + (1 / ln L) ln(i / L), the law with head_scale 1 and a = 1 / ln L."""
    for L in (8, 128, 2048):
        for i in (L + 1, 2 * L, 16 * L, 1000 * L):
            assert math.isclose(math.log(i) / math.log(L), 1 + math.log(i / L) / math.log(L), rel_tol=1e-12)
    model = make("nope")
    L, T = model.config.block_size, 16 * 8
    model.set_head_slopes(1 / math.log(L))
    attn = model.transformer.h[0].attn
    qwen = torch.tensor([max(1.0, math.log(i) / math.log(L)) for i in range(1, T + 1)]).expand(4, T)
    x = torch.randn(1, T, 32)
    with torch.no_grad():
        assert torch.allclose(attn(x)[0], reference_attention(attn, x, qwen), atol=1e-5)


def test_a_slope_tensor_that_requires_grad_is_kept():
    model = make("nope", n_layer=4)
    model.requires_grad_(False)
    a = torch.full((4, 4), 0.2, requires_grad=True)
    model.set_head_slopes(a)
    idx = tokens(T=3 * model.config.block_size)
    _, loss = model(idx, idx)
    loss.backward()
    assert a.grad is not None and a.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.parameters())


def test_checkpoints_keep_the_slopes_and_old_ones_are_one_clear_error(tmp_path):
    model = make("nope", bos=True)
    model.set_head_scales(torch.rand(2, 4) + 1)
    model.set_head_slopes(torch.rand(2, 4))
    save_checkpoint(tmp_path / "new.pt", model)
    loaded = load_checkpoint(tmp_path / "new.pt")[0]
    assert torch.equal(loaded.get_head_slopes(), model.get_head_slopes())
    assert torch.equal(loaded.get_head_scales(), model.get_head_scales())
    idx = tokens(T=3 * model.config.block_size)
    with torch.no_grad():
        assert torch.equal(model(idx, idx)[0], loaded(idx, idx)[0])
    # without the slopes' buffer (no head_slope), or with it called head_scale_log: refused in
    # one line, never migrated
    new = torch.load(tmp_path / "new.pt", weights_only=True)
    noslope = {k: v for k, v in new["model"].items() if not k.endswith(".head_slope")}
    renamed = {k.replace(".head_slope", ".head_scale_log"): v for k, v in new["model"].items()}
    for name, state in (("noslope", noslope), ("renamed", renamed)):
        torch.save(new | {"model": state}, tmp_path / f"{name}.pt")
        with pytest.raises(CheckpointError, match="does not fit its own config") as e:
            load_checkpoint(tmp_path / f"{name}.pt")
        assert len(str(e.value).splitlines()) == 1


@pytest.mark.parametrize("pos", ["nope", "rope"])
def test_a_model_with_slopes_runs_at_16x_training_length(pos):
    model = make(pos, bos=True)
    model.set_head_slopes(torch.rand(2, 4) * 0.5)
    L = model.config.block_size
    idx = tokens(B=1, T=16 * L)
    with torch.no_grad():
        a, la = model(idx, idx)
        b, lb, _ = model(idx, idx, entropy=True, chunk=32)
        plain = make(pos, bos=True)(idx, idx)[1]
    assert a.shape == (1, 16 * L, V) and torch.isfinite(la) and torch.allclose(la, lb, atol=1e-5)
    assert not torch.isclose(la, plain)  # the slopes act past L




def test_entropy_asked_of_a_model_training_with_dropout_is_one_clear_error():
    """The written-out softmax (T2) has no dropout: measuring a model in train mode would
    measure another model than the one trained, so it says to call eval() first."""
    model = make(dropout=0.1).train()
    idx = torch.randint(0, V, (2, 8))
    with pytest.raises(ValueError, match=r"call model.eval\(\) first"):
        model(idx, entropy=True)
    assert model.eval()(idx, entropy=True)[2].shape == (2, 2, 4, 8)
    model.train()(idx)  # training itself goes on the fast path, dropout and all
