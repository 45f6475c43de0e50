"""The paper's six pieces, each one function, each against a reference written independently of
the project's code, on random inputs (sizes and seeds vary, so no constant passes):

  T1 model.py:query_scale              lambda_h(i) = head_scale_h (1 + a_h ln(max(i, L) / L))
  T2 model.py:written_out_attention    the softmax written out; attention entropy in bits
  T3 search_scales.py:uniform_scale    UniformScale: the best lambda per length and per bin
  T4 search_scales.py:fit_log_law      lambda(i) = 1 + a ln(i / L), positions >= L, no intercept
  T5 search_scales.py:fit_head_scales  HeadScale: lambda alone fitted, clamp after every step
  T6 evaluate.py:last_L_losses, evaluate.py:excess   the last-L reference and a row's excess

Test names begin with their piece (test_T1_...), so `pytest -k T3` runs one piece."""

import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from evaluate import excess, last_L_losses, measure
from model import Explicit, query_scale, written_out_attention
from search_scales import fit_head_scales, fit_log_law, uniform_scale
from test_model import V, make, reference_attention, tokens
from train import cosine_lr

SEEDS = range(5)


def rng(seed):
    return torch.Generator().manual_seed(seed)


# -----------------------------------------------------------------------------
# T1: lambda into q, per head and per position

def by_hand(scales, slopes, T, L):
    """(nh, T) lam_h(i) = s_h * (1 + a_h ln(max(i, L) / L)) for i = 1..T, with math.log."""
    return torch.tensor([[s * (1 + a * math.log(max(i, L) / L)) for i in range(1, T + 1)]
                         for s, a in zip(scales, slopes)])


@pytest.mark.parametrize("seed", SEEDS)
def test_T1_query_scale_is_the_law_by_hand(seed):
    g = rng(seed)
    nh, L = int(torch.randint(1, 7, (1,), generator=g)), int(torch.randint(2, 40, (1,), generator=g))
    T = L + int(torch.randint(1, 5 * L, (1,), generator=g))
    s, a = torch.rand(nh, generator=g) * 2 + 0.5, torch.rand(nh, generator=g) * 1.5
    lam = query_scale(s, a, T, L)
    assert lam.shape == (1, nh, T, 1)
    assert torch.allclose(lam[0, :, :, 0], by_hand(s.tolist(), a.tolist(), T, L), rtol=1e-5, atol=1e-6)
    assert torch.equal(lam[0, :, :L, 0], s.view(nh, 1).expand(nh, L))  # i <= L: exactly head_scale
    short = query_scale(s, a, L, L)  # no position past L: one value per head
    assert short.shape == (1, nh, 1, 1) and torch.equal(short.view(-1), s)


def test_T1_uniform_head_scale_equals_sdpa_scale():
    """head_scale = s for every head is SDPA with scale = s / sqrt(d) (not s^2: lambda goes into
    q alone, not into q and k)."""
    for seed in SEEDS:
        model = make("nope", seed=seed)
        attn = model.transformer.h[0].attn
        x = torch.randn(2, 20, 32, generator=rng(seed))
        s, hs = 1.2 + seed * 0.2, 8
        model.set_head_scales(s)
        with torch.no_grad():
            q, k, v = attn.c_attn(x).split(32, dim=2)
            q, k, v = (t.view(2, 20, 4, hs).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=s / math.sqrt(hs))
            ref = attn.c_proj(y.transpose(1, 2).reshape(2, 20, 32))
            assert torch.allclose(attn(x), ref, atol=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
def test_T1_the_law_per_position_in_attention(seed):
    """Per-position lambda needs the written-out reference (SDPA's scale is one constant)."""
    model = make("nope", seed=seed)
    attn = model.transformer.h[1].attn
    L, T = model.config.block_size, 40
    s, a = (torch.rand(4, generator=rng(seed)) * 1.5 + 0.5).tolist(), (torch.rand(4, generator=rng(seed + 9))).tolist()
    attn.head_scale, attn.head_slope = torch.tensor(s), torch.tensor(a)
    x = torch.randn(2, T, 32, generator=rng(seed))
    lam = by_hand(s, a, T, L)  # (nh, T)
    with torch.no_grad():
        assert torch.allclose(attn(x), reference_attention(attn, x, lam), atol=1e-5)
        assert torch.allclose(attn(x, explicit=Explicit()), reference_attention(attn, x, lam), atol=1e-5)


# -----------------------------------------------------------------------------
# T2: the written-out softmax and attention entropy in bits

def dense_reference(q, k, v, window, sink):
    """Attention and entropy in float64 with a full (T, T) mask, by definition."""
    B, nh, T, hs = q.shape
    att = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(hs)
    i, j = torch.arange(T).view(-1, 1), torch.arange(T).view(1, -1)
    allowed = j <= i
    if window is not None:
        allowed = allowed & ((j > i - window) if not sink else ((j > i - window + 1) | (j == 0)))
    p = att.masked_fill(~allowed, float("-inf")).softmax(-1)
    logp = torch.where(p > 0, p.log2(), torch.zeros_like(p))
    return (p @ v.double()), -(p * logp).sum(-1)


@pytest.mark.parametrize("seed", SEEDS)
def test_T2_written_out_attention_against_a_dense_reference(seed):
    g = rng(seed)
    B, nh, hs = 2, int(torch.randint(1, 5, (1,), generator=g)), 8
    T = int(torch.randint(5, 60, (1,), generator=g))
    q, k, v = (torch.randn(B, nh, T, hs, generator=g) * 2 for _ in range(3))
    for window, sink in ((None, False), (4, False), (4, True)):
        for chunk in (3, 256):
            y, ent = written_out_attention(q, k, v, window, sink, chunk)
            ref_y, ref_ent = dense_reference(q, k, v, window, sink)
            assert y.shape == (B, nh, T, hs) and ent.shape == (B, nh, T) and ent.dtype == torch.float32
            assert torch.allclose(y.double(), ref_y, atol=1e-5)
            assert torch.allclose(ent.double(), ref_ent, atol=1e-4)  # bits, not nats


def test_T2_written_out_attention_never_calls_sdpa(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the written-out path must not call scaled_dot_product_attention")
    monkeypatch.setattr(F, "scaled_dot_product_attention", refuse)
    q, k, v = (torch.randn(1, 2, 9, 4, generator=rng(i)) for i in range(3))
    written_out_attention(q, k, v)


@pytest.mark.parametrize("pos", ["nope", "rope"])
@pytest.mark.parametrize("window", [None, 6])
def test_T2_explicit_path_equals_sdpa_path(pos, window):
    model = make(pos)
    model.set_head_scales(torch.rand(2, 4, generator=rng(0)) * 2 + 0.5)
    idx = tokens(T=30)
    with torch.no_grad():
        a, la = model(idx, idx, window=window)
        b, lb = model(idx, idx, window=window, explicit=True, chunk=7)  # chunking over queries too
    assert torch.allclose(a, b, atol=1e-4)
    assert torch.allclose(la, lb, atol=1e-5)


def test_T2_entropy_is_bits_and_uniform_attention_meets_the_bound():
    """lambda = 0 makes every logit 0: uniform attention over i keys, entropy log2(i)."""
    model = make("nope")
    model.set_head_scales(0.0)
    idx = tokens(B=1, T=50)
    ent = []
    with torch.no_grad():
        model(idx, idx, explicit=True, entropy=ent, chunk=16)
    assert len(ent) == 2 and ent[0].shape == (1, 4, 50)
    bound = torch.log2(torch.arange(1, 51, dtype=torch.float32))
    for e in ent:
        assert torch.allclose(e[0], bound.expand(4, -1), atol=1e-4)
    # with real scales the entropy is below the bound, and chunking does not change it
    model.set_head_scales(1.0)
    e1, e2 = [], []
    with torch.no_grad():
        model(idx, idx, explicit=True, entropy=e1, chunk=7)
        model(idx, idx, explicit=True, entropy=e2, chunk=1000)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(e1, e2))
    assert (e1[0] <= bound + 1e-4).all() and (e1[0][..., 10:] < bound[10:] - 0.01).any()


def test_T2_scores_stay_in_float32_under_bf16_autocast():
    """Entropy is measured on the written-out path: under bf16 autocast its q.k scores must not be
    rounded to bf16 (flash attention keeps them in fp32), so they equal the fp32 product of the
    same bf16 q and k."""
    q, k, v = [(3 * torch.randn(1, 2, 40, 16, generator=rng(i))).to(torch.bfloat16) for i in range(3)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = written_out_attention(q, k, v, chunk=16)[1]
    exact = written_out_attention(q.float(), k.float(), v.float(), chunk=16)[1]
    assert torch.allclose(low, exact, atol=1e-5)


# -----------------------------------------------------------------------------
# T3: UniformScale, the best lambda per length and per position bin

def test_T3_a_hand_built_loss_table():
    lams = np.array([1.0, 1.2, 1.4])
    # 8 positions, bins of 4: lambda 1.0 is best early, 1.4 late; 1.2 on the mean, 1.4 on the tail
    loss = np.array([[1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0, 3.0],
                     [1.5, 1.5, 1.5, 1.5, 1.6, 1.6, 1.6, 1.6],
                     [3.0, 3.0, 3.0, 3.0, 1.1, 1.1, 1.1, 1.7]])
    best = uniform_scale(lams, loss, tail=2, width=4)
    assert best["best_lam"] == 1.2 and best["best_loss"] == pytest.approx(1.55)
    assert best["best_lam_tail"] == 1.4 and best["best_tail_loss"] == pytest.approx(1.4)  # the tail differs
    assert list(best["positions"]) == [2.5, 6.5]  # bin centres, positions counted from 1
    assert list(best["best_lam_per_position"]) == [1.0, 1.4]
    # the last position alone prefers 1.2
    assert uniform_scale(lams, loss, tail=1, width=4)["best_lam_tail"] == 1.2
    # a last partial bin is dropped; ties go to the smaller lambda
    tie = uniform_scale(lams, np.ones((3, 7)), tail=1, width=3)
    assert list(tie["positions"]) == [2.0, 5.0] and list(tie["best_lam_per_position"]) == [1.0, 1.0]
    assert tie["best_lam"] == 1.0 and tie["best_lam_tail"] == 1.0


@pytest.mark.parametrize("seed", SEEDS)
def test_T3_random_tables_against_loops(seed):
    r = np.random.default_rng(seed)
    n_lam, n, width, tail = r.integers(2, 9), r.integers(8, 80), r.integers(1, 9), r.integers(1, 8)
    lams = np.round(1 + 0.05 * np.arange(n_lam), 6)
    loss = r.random((n_lam, n)) + 2
    best = uniform_scale(lams, loss, tail, width)
    means = [sum(row) / n for row in loss.tolist()]
    tails = [sum(row[n - tail:]) / tail for row in loss.tolist()]
    assert best["best_lam"] == lams[means.index(min(means))] and best["best_loss"] == pytest.approx(min(means))
    assert best["best_lam_tail"] == lams[tails.index(min(tails))]
    assert best["best_tail_loss"] == pytest.approx(min(tails))
    nb = n // width
    for b in range(nb):
        per = [sum(row[b * width:(b + 1) * width]) / width for row in loss.tolist()]
        assert best["best_lam_per_position"][b] == lams[per.index(min(per))]
        assert best["positions"][b] == pytest.approx(b * width + (width + 1) / 2)  # mean of 1-based positions
    assert len(best["positions"]) == nb


# -----------------------------------------------------------------------------
# T4: lambda(i) = 1 + a ln(i / L), positions >= L only, no intercept

@pytest.mark.parametrize("seed", SEEDS)
def test_T4_the_law_against_lstsq(seed):
    r = np.random.default_rng(seed)
    L = int(r.integers(16, 512))
    a_true = r.uniform(0.1, 0.6)
    positions = np.linspace(L / 4, 8 * L, 40)
    x = np.log(positions / L)
    lam = 1 + a_true * x + r.normal(0, 0.02, 40) + 0.05  # an offset: the law's lam(L) = 1 is not met
    lam[positions < L] = r.uniform(2, 3, (positions < L).sum())  # below L: nothing to do with the law
    a, r2 = fit_log_law(positions, lam, L)
    keep = positions >= L
    ref = np.linalg.lstsq(x[keep, None], lam[keep] - 1, rcond=None)[0][0]
    assert a == pytest.approx(ref, rel=1e-9)
    y = lam[keep] - 1
    assert r2 == pytest.approx(1 - ((y - ref * x[keep]) ** 2).sum() / ((y - y.mean()) ** 2).sum(), rel=1e-9)
    # the mistakes this data tells apart: a free intercept, or every position kept
    with_intercept = np.linalg.lstsq(np.stack([x[keep], np.ones(keep.sum())], 1), y, rcond=None)[0][0]
    every = np.linalg.lstsq(x[:, None], lam - 1, rcond=None)[0][0]
    assert abs(a - with_intercept) > 1e-3 and abs(a - every) > 1e-3


def test_T4_too_few_positions_give_nan():
    assert all(math.isnan(v) for v in fit_log_law([10, 50], [1.0, 1.3], 64))  # none >= L
    assert all(math.isnan(v) for v in fit_log_law([64, 64], [1.0, 1.0], 64))  # all at L: x = 0


# -----------------------------------------------------------------------------
# T5: HeadScale

def planted(seed, lam, n_rows=256, T=24):
    """A one-layer, two-head model and rows (x, y) from a teacher with the same weights and
    head_scale = lam: x uniform tokens, each y_t drawn from the teacher's prediction at t, so the
    expected loss is lowest at the teacher's lambda. At GPT-2's initialisation attention barely
    reaches the logits (a small residual branch, near-uniform predictions): q and k are scaled
    up (8x), the output projection (100x) and the tied embedding (10x), so lambda matters."""
    def build():
        m = make("nope", seed=seed, n_layer=1, n_head=2, block_size=8, sharpen=False)
        with torch.no_grad():
            m.transformer.h[0].attn.c_attn.weight[:2 * m.config.n_embd].mul_(8)
            m.transformer.h[0].attn.c_proj.weight.mul_(100)
            m.lm_head.weight.mul_(10)
        return m
    teacher = build()
    teacher.set_head_scales(torch.tensor([lam]))
    g = rng(seed + 100)
    x = torch.randint(0, V, (n_rows, T), generator=g)
    with torch.no_grad():
        logits, _ = teacher(x, x)
    y = torch.multinomial(logits.softmax(-1).view(-1, V), 1, generator=g).view(n_rows, T)
    return build(), x, y


def batches(x, y, size, seed):
    g = rng(seed)
    while True:
        i = torch.randint(0, x.size(0), (size,), generator=g)
        yield x[i], y[i]


@pytest.mark.parametrize("seed", range(3))
def test_T5_headscale_recovers_planted_lambdas(seed):
    """Calibrated over seeds 0-29 (256 rows, batches of 32, from 1): the largest error was 0.12,
    the mean 0.057; the tolerance is 0.2, against 0.8 at the start."""
    target = [1.8, 1.3]
    model, x, y = planted(seed, target)
    lam, log = fit_head_scales(model, batches(x, y, 32, seed), torch.full((1, 2), 1.0), steps=150, lr=0.05,
                               warmup=15, final_lr=0.005)
    assert lam.shape == (1, 2) and len(log) == 150
    assert torch.allclose(lam, torch.tensor([target]), atol=0.2), lam
    with torch.no_grad():  # on every row: lower than at the start
        model.set_head_scales(lam)
        fitted = model(x, y)[1]
        model.set_head_scales(1.0)
        assert fitted < model(x, y)[1]


def test_T5_only_lambda_moves_and_the_model_is_left_as_found():
    model, x, y = planted(0, [1.6, 1.2])
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    seen = []

    def on_step(row):  # during the fit: every weight frozen
        seen.append([p.requires_grad for p in model.parameters()])

    fit_head_scales(model, batches(x, y, 16, 0), torch.ones(1, 2) * 1.4, steps=5, on_step=on_step)
    assert all(not any(flags) for flags in seen)
    assert all(p.grad is None for p in model.parameters())  # no weight got a gradient
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # scales and slopes too: as found
    assert model.training and all(p.requires_grad for p in model.parameters())


def test_T5_clamp_after_every_step_and_warmup_then_cosine():
    # the teacher's first head wants lambda < 1: the clamp holds it at 1 at every step
    model, x, y = planted(1, [0.6, 1.5])
    steps, lr, warmup, final = 40, 0.1, 6, 0.01
    lam, log = fit_head_scales(model, batches(x, y, 16, 1), torch.full((1, 2), 1.0), steps=steps, lr=lr,
                               warmup=warmup, final_lr=final, min_scale=1.0)
    assert all(row["lam_min"] >= 1.0 for row in log) and lam.min() >= 1.0
    for step, row in enumerate(log):  # the schedule, written out independently
        want = (lr * (step + 1) / (warmup + 1) if step < warmup else
                final + 0.5 * (1 + math.cos(math.pi * (step - warmup) / (steps - warmup))) * (lr - final))
        assert row["lr"] == pytest.approx(want) and row["step"] == step + 1
    # no clamp: the same fit goes below 1
    model, x, y = planted(1, [0.6, 1.5])
    lam, log = fit_head_scales(model, batches(x, y, 16, 1), torch.full((1, 2), 1.0), steps=steps, lr=lr,
                               warmup=warmup, final_lr=final, min_scale=1e-3)
    assert lam.min() < 0.95


def test_T5_starts_at_init_and_takes_one_lambda_per_layer_or_one_for_all():
    model, x, y = planted(2, [1.5, 1.5])
    lam, log = fit_head_scales(model, batches(x, y, 16, 2), torch.full((1, 1), 1.7), steps=1, lr=1e-6)
    assert lam.shape == (1, 1) and abs(log[0]["lam_mean"] - 1.7) < 1e-3


# -----------------------------------------------------------------------------
# T6: the last-L reference and a row's excess

def test_T6_last_L_losses_against_fresh_passes():
    """Each position i's loss equals a fresh pass over the sub-window the stride rule assigns it:
    the first W positions from the window's start, later ones from W positions ending at the end
    of their stride (with the start token: it, then the last W - 1 of them)."""
    for bos in (False, True):
        model = make("nope", bos=bos, seed=3)
        torch.manual_seed(4)
        x = torch.randint(0, V - 1, (2, 45))
        x[:, 0] = V - 1
        y = torch.roll(x, -1, 1)
        W, s = 16, 2
        got = last_L_losses(model, x, y, W, batch_size=3)[0]
        assert got.shape == (2, 45)
        with torch.no_grad():
            assert torch.allclose(got[:, :W], model(x[:, :W], y[:, :W], reduction="none")[1], atol=1e-5)
            for i in range(W, 45):
                end = min(W + ((i - W) // s + 1) * s, 45)  # exclusive end of the stride holding i
                xs = torch.cat([x[:, :1], x[:, end - W + 1:end]], 1) if bos else x[:, end - W:end]
                ref = model(xs, y[:, end - W:end], reduction="none")[1]
                assert torch.allclose(got[:, i], ref[:, W - (end - i)], atol=1e-5)


def test_T6_context_limit_by_recomputation_reads_only_the_last_tokens():
    model = make("nope")
    torch.manual_seed(3)
    windows = torch.randint(0, V, (3, 41))
    W = 16
    got = measure(model, windows, batch_size=2, context=W, entropy=True)
    plain = measure(model, windows[:, :W + 1], batch_size=3, entropy=True)
    assert torch.allclose(torch.tensor(got["loss"][:W]), torch.tensor(plain["loss"]), atol=1e-5)
    changed = windows.clone()  # a token far back cannot change the last position's loss
    changed[:, 5] = (changed[:, 5] + 1) % V
    assert abs(measure(model, changed, 3, context=W)["loss"][39] - got["loss"][39]) < 1e-6


def test_T6_recomputed_sub_windows_begin_with_the_start_token():
    """A bos model limited to W positions reads [start token, last W - 1 tokens] at every query."""
    model = make("nope", bos=True)
    torch.manual_seed(4)
    windows = torch.randint(0, V - 1, (2, 41))
    windows[:, 0] = V - 1
    W = 16
    got = measure(model, windows, batch_size=2, context=W)["loss"]
    s = W // 8
    for pos in (20, 33, 39):  # 0-based positions past W
        end = W + ((pos - W) // s + 1) * s                       # exclusive end of its sub-window
        sub = torch.cat([windows[:, :1], windows[:, end - W + 1:end + 1]], 1)  # (2, W + 1)
        ref = measure(model, sub, batch_size=2)["loss"]
        assert abs(got[pos] - ref[W - (end - pos)]) < 1e-5


def test_T6_excess_is_the_row_minus_its_own_reference_at_shared_lengths():
    r = np.random.default_rng(0)

    def row(pe, context=None, lengths=(8, 16, 32)):
        return {"pos_encoding": pe, "arch": pe, "bos": True, "context": context, "scales": None, "slopes": None,
                "lengths": list(lengths), "loss": r.random(len(lengths)).round(4).tolist()}
    res = {"train_len": 8, "methods": {"nope": row("nope"), "nope_window_L": row("nope", 8, (8, 16)),
                                       "rope": row("rope"), "rope_window_L": row("rope", 8)}}
    m = res["methods"]
    assert excess(res, "nope") == {n: m["nope"]["loss"][i] - m["nope_window_L"]["loss"][i] for i, n in enumerate((8, 16))}
    assert excess(res, "rope") == {n: a - b for n, a, b in zip((8, 16, 32), m["rope"]["loss"], m["rope_window_L"]["loss"])}
    assert excess(res, "nope_window_L") == {}  # a reference has no excess of its own
