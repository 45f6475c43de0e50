"""ALiBi and Scalable-Softmax (families.py), each against a reference written independently of
the code: numpy, loops, and the papers' own formulas."""

import math

import numpy as np
import pytest
import torch

import families
import model as model_module
from families import alibi_attention, alibi_bias, alibi_slopes, ssmax_scale
from model import GPT, GPTConfig, load_checkpoint, make_config, save_checkpoint

V = 17


def make(pos="alibi", ssmax=False, seed=0, n_layer=2, n_head=4, bos=True):
    """ALiBi (pos="alibi"), or NoPE or RoPE with Scalable-Softmax (ssmax=True)."""
    torch.manual_seed(seed)
    family = "ssmax" if ssmax else "alibi" if pos == "alibi" else ""
    model = GPT(make_config(block_size=8, vocab_size=V, n_layer=n_layer, n_head=n_head, n_embd=32,
                            pos_encoding=pos, family=family, bos=bos)).eval()
    with torch.no_grad():  # attention far from uniform, so that a wrong bias shows
        for b in model.transformer.h:
            b.attn.c_attn.weight[: 2 * 32].mul_(10)
            if ssmax:
                b.attn.ssmax.copy_(torch.linspace(0.2, 0.9, n_head))
    return model


def tokens(B=2, T=40, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def press_slopes(n):
    """ALiBi's slopes as Press et al.'s code computes them: start = 2^(-2^-(log2(n) - 3)),
    ratio = start, for a power of two; otherwise the closest power of two's, then every other
    slope of twice that many heads."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    c = 2 ** math.floor(math.log2(n))
    return power_of_2(c) + press_slopes(2 * c)[0::2][:n - c]


def numpy_attention(q, k, v, score):
    """softmax over keys j <= i of score(h, i, j, q_i.k_j / sqrt(d)) (None: masked), in float64,
    one query at a time. Returns y (B, nh, T, hs) and the entropy in bits (B, nh, T)."""
    q, k, v = (t.detach().double().numpy() for t in (q, k, v))
    B, nh, T, hs = q.shape
    y, ent = np.zeros_like(q), np.zeros((B, nh, T))
    for b in range(B):
        for h in range(nh):
            for i in range(T):
                z = [score(h, i, j, q[b, h, i] @ k[b, h, j] / math.sqrt(hs)) for j in range(i + 1)]
                keys = [j for j, s in enumerate(z) if s is not None]
                s = np.array([z[j] for j in keys])
                p = np.exp(s - s.max())
                p /= p.sum()
                y[b, h, i] = p @ v[b, h, keys]
                ent[b, h, i] = -(p * np.log2(p)).sum()
    return y, ent


@pytest.mark.parametrize("n", [1, 2, 4, 6, 8, 12, 16])
def test_alibi_slopes_are_press_et_als(n):
    assert torch.allclose(alibi_slopes(n).double(), torch.tensor(press_slopes(n), dtype=torch.float64), rtol=1e-6)
    if n == 8:  # the paper's example: 1/2, 1/4, ..., 1/256
        assert alibi_slopes(8).tolist() == [2.0 ** -h for h in range(1, 9)]


@pytest.mark.parametrize("window,sink", [(None, False), (5, False), (5, True)])
@pytest.mark.parametrize("explicit", [False, True])
def test_alibi_attention_equals_the_biased_softmax_written_in_numpy(window, sink, explicit):
    torch.manual_seed(0)
    B, nh, T, hs = 2, 3, 13, 4
    q, k, v = (torch.randn(B, nh, T, hs) * 2 for _ in range(3))
    lam = torch.tensor([1.0, 1.3, 0.7]).view(1, nh, 1, 1)
    m = alibi_slopes(nh).double().numpy()

    def score(h, i, j, z):  # the bias -m (i - j); the sink's distance at most window - 1
        if window is not None:  # the last W keys; with a sink, the start token and W - 1 keys
            if not (j >= i - window + 1 + sink or (sink and j == 0)):
                return None
        dist = min(i, window - 1) if (window is not None and sink and j == 0) else i - j
        return lam.view(-1)[h].item() * z - m[h] * dist
    y_ref, ent_ref = numpy_attention(q, k, v, score)
    y, ent = alibi_attention(q, k, v, lam, alibi_slopes(nh), window, sink, explicit, 4)
    assert np.allclose(y.double().numpy(), y_ref, atol=1e-5)
    assert (ent is None) == (not explicit)
    if explicit:
        assert np.allclose(ent.double().numpy(), ent_ref, atol=1e-4)


def test_alibi_model_explicit_path_equals_sdpa_and_its_entropy_is_measured():
    model, idx = make(), tokens()
    with torch.no_grad():
        for window in (None, 6):
            fast, _ = model(idx, idx, window=window)
            slow, _, entropy = model(idx, idx, window=window, entropy=True, chunk=7)
            assert torch.allclose(fast, slow, atol=1e-4)
            assert entropy.shape == (2, 2, 4, 40)  # (B, n_layer, n_head, T)


def test_alibi_window_with_the_start_token_reads_as_the_crop_would():
    # one layer: a query's output under a window of W (start token kept) equals that of the
    # model reading the crop [start token, last W - 1 tokens], where the start token sits at
    # distance W - 1 from the last query; the clamp in alibi_bias makes them equal
    model, idx, W = make(n_layer=1), tokens(T=30), 6
    with torch.no_grad():
        windowed, _ = model(idx, idx, window=W)
        crop = torch.cat([idx[:, :1], idx[:, -(W - 1):]], 1)
        cropped, _ = model(crop, crop)
    assert torch.allclose(windowed[:, -1], cropped[:, -1], atol=1e-5)


def test_alibi_bias_is_built_a_chunk_of_queries_at_a_time(monkeypatch):
    seen = []

    def spy(slopes, T, window=None, sink=False, start=0, lo=0):
        seen.append((T - start, T - lo))
        return alibi_bias(slopes, T, window, sink, start, lo)
    monkeypatch.setattr(families, "alibi_bias", spy)
    q = k = v = torch.zeros(1, 2, 2500, 2)
    y, _ = alibi_attention(q, k, v, torch.ones(1, 2, 1, 1), alibi_slopes(2))
    assert y.shape == q.shape and max(rows for rows, _ in seen) <= 1024 and len(seen) == 3


def test_alibi_has_no_position_parameters_and_its_slopes_are_not_saved(tmp_path):
    idx = tokens()
    for model in (make(), make("nope", ssmax=True)):  # ALiBi; SSMax's s saved
        assert not any("alibi" in k for k in model.state_dict())
        save_checkpoint(tmp_path / "a.pt", model)
        again, _ = load_checkpoint(tmp_path / "a.pt")
        assert type(again.transformer.h[1].attn) is type(model.transformer.h[1].attn)
        with torch.no_grad():
            assert torch.equal(model(idx, idx)[0], again.eval()(idx, idx)[0])
    assert torch.equal(again.transformer.h[1].attn.ssmax, model.transformer.h[1].attn.ssmax)


def test_ssmax_scale_is_s_ln_n_with_n_the_keys_seen():
    s = torch.tensor([0.5, 2.0])
    got = ssmax_scale(s, 10, window=4)
    n = np.minimum(np.arange(1, 11), 4)
    assert got.shape == (1, 2, 10, 1)
    assert np.allclose(got[0, :, :, 0].numpy(), np.outer([0.5, 2.0], np.log(n)), atol=1e-6)
    assert torch.allclose(ssmax_scale(s, 10)[0, 1, :, 0], 2 * torch.log(torch.arange(1., 11)))


@pytest.mark.parametrize("pos", ["nope", "rope"])
def test_ssmax_attention_is_the_papers_power_form(pos):
    # Nakanishi's SSMax: a_ij = n^(s z_ij) / sum_j n^(s z_ij), n = i + 1 keys (0-based i);
    # one layer, so the attention module sees the embeddings; lam = 1.2 composes as lam s ln n
    model = make(pos, ssmax=True, n_layer=1)
    model.set_head_scales(1.2)
    attn, idx = model.transformer.h[0].attn, tokens(B=1, T=12)
    with torch.no_grad():
        block = model.transformer.h[0]
        x = block.ln_1(model.transformer.wte(idx))
        B, T, C = x.shape
        q, k, v = (t.view(B, T, 4, 8).transpose(1, 2) for t in attn.c_attn(x).split(C, 2))
        if pos == "rope":
            rope = model_module.rope_cos_sin(8, T, x.device)
            q, k = model_module.apply_rope(q, *rope), model_module.apply_rope(k, *rope)
        s = attn.ssmax.double().numpy()

        def score(h, i, j, z):  # ln of n^(lam s z)
            return math.log(i + 1) * 1.2 * s[h] * z
        y_ref, _ = numpy_attention(q, k, v, score)
        out, _ = attn(x)
        ref = attn.c_proj(torch.tensor(y_ref, dtype=torch.float32).transpose(1, 2).reshape(B, T, C))
    assert torch.allclose(out, ref, atol=1e-4)


def test_ssmax_s_is_learned_without_weight_decay_and_frozen_in_a_headscale_fit():
    model = make("nope", ssmax=True).train()
    idx = tokens()
    _, loss = model(idx, idx)
    loss.backward()
    s = model.transformer.h[0].attn.ssmax
    assert s.grad is not None and s.grad.abs().sum() > 0
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    assert any(p is s for p in opt.param_groups[1]["params"])  # the no-decay group
    from search_scales import fit_head_scales
    before = s.detach().clone()
    lam, _ = fit_head_scales(model, iter([(idx, idx)] * 3), torch.full((2, 4), 1.2), steps=3,
                             warmup=1)
    assert torch.equal(s, before) and s.grad.abs().sum() > 0  # s as trained; only lam moved
    assert not torch.equal(lam, torch.full((2, 4), 1.2))


def test_alibi_and_ssmax_in_bfloat16_keep_lambda_and_the_bias_close():
    idx = tokens()
    for model in (make(), make("nope", ssmax=True)):
        with torch.no_grad():
            ref, _ = model(idx, idx)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                low, _ = model(idx, idx)
        assert (low.float() - ref).abs().max() < 0.15 * ref.abs().max()


@pytest.mark.parametrize("pos,ssmax", [("alibi", False), ("nope", True)])
def test_runs_at_16x_training_length(pos, ssmax):
    model = make(pos, ssmax=ssmax)
    idx = tokens(B=1, T=8 * 16)
    with torch.no_grad():
        logits, loss = model(idx, idx)
    assert torch.isfinite(loss) and logits.shape == (1, 128, V)


def test_bad_settings_say_what_to_set():
    with pytest.raises(ValueError, match="pos_encoding must be nope or rope, got .alibi."):
        GPTConfig(pos_encoding="alibi")
    with pytest.raises(ValueError, match="nope_every is not a setting of the alibi family: it is "
                       r"the hybrid family's \(family=hybrid\)"):
        make_config(family="alibi", pos_encoding="alibi", nope_every=2)
    with pytest.raises(ValueError, match="unknown family 'alibi2'"):
        make_config(family="alibi2")
