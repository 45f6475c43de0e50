"""2025's answers (families.py): FoX's forget gate, the head-wise output gate, a learned sink, and
the sink share measured through each family's own attention; each against a reference written
independently of the code (numpy and loops, from the papers' equations)."""

import ast
import io
import math
import tokenize
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import families
import reproduce
from evaluate import measure
from families import (FoX, LearnedSink, OutputGated, arch_of, first_key_probe, fox_attention,
                      fox_bias, sink_attention, sink_facts, split_probe)
from model import GPT, load_checkpoint, make_config, save_checkpoint
from study import beyond, tables

V = 17
ROOT = Path(__file__).resolve().parents[1]
NEW = ("fox", "nope_gated", "nope_sink")


def make(family, seed=0, n_layer=2, n_head=4, bos=True):
    """A tiny model of a family ('' the paper's NoPE), attention far from uniform, and its own
    parameters away from their start (the gate's bias, the sink logits), so a wrong one shows."""
    torch.manual_seed(seed)
    model = GPT(make_config(block_size=8, vocab_size=V, n_layer=n_layer, n_head=n_head,
                            n_embd=32, family=family, bos=bos)).eval()
    with torch.no_grad():
        for b in model.transformer.h:
            b.attn.c_attn.weight[: 2 * 32].mul_(10)
            if family == "fox":  # f between about 0.5 and 0.98, by token
                b.attn.forget.weight.mul_(40)
                b.attn.forget.bias.copy_(torch.linspace(0.0, 3.0, n_head))
            if family == "nope_gated":
                b.attn.gate.weight.mul_(40)
            if family == "nope_sink":
                b.attn.sinks.copy_(torch.linspace(-1.0, 2.5, n_head))
    return model


def tokens(B=2, T=40, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def numpy_attention(q, k, v, score, null=None):
    """In float64, one query at a time: the softmax over keys j <= i of score(b, h, i, j, z) (z =
    q_i.k_j / sqrt(d); None: masked), with one more column null[h] when given, its probability
    dropped. Returns y (B, nh, T, hs), the entropy in bits of the kept probabilities renormalised
    (B, nh, T), and the kept probabilities (B, nh, T, T)."""
    q, k, v = (t.detach().double().numpy() for t in (q, k, v))
    B, nh, T, hs = q.shape
    y, ent, P = np.zeros_like(q), np.zeros((B, nh, T)), np.zeros((B, nh, T, T))
    for b in range(B):
        for h in range(nh):
            for i in range(T):
                z = [score(b, h, i, j, q[b, h, i] @ k[b, h, j] / math.sqrt(hs)) for j in range(i + 1)]
                keys = [j for j in range(i + 1) if z[j] is not None]
                s = np.array([z[j] for j in keys] + ([null[h]] if null is not None else []))
                p = np.exp(s - s.max())
                p = (p / p.sum())[:len(keys)]
                P[b, h, i, keys] = p
                y[b, h, i] = p @ v[b, h, keys]
                r = p / p.sum()
                ent[b, h, i] = -(r * np.log2(r)).sum()
    return y, ent, P


def heads(attn, x):
    """q, k, v (B, nh, T, hs) of an attention layer's input, as its c_attn makes them."""
    B, T, C = x.shape
    return (t.view(B, T, attn.n_head, -1).transpose(1, 2) for t in attn.c_attn(x).split(C, 2))


def first_layer_input(model, idx):
    return model.transformer.h[0].ln_1(model.transformer.wte(idx))


def in_window(i, j, window, sink):
    """Key j visible to query i under window_mask's rule, written out again."""
    if window is None:
        return j <= i
    return j <= i and (j > i - window + (1 if sink else 0) or (sink and j == 0))


# -----------------------------------------------------------------------------
# FoX

@pytest.mark.parametrize("window,sink", [(None, False), (5, False), (5, True)])
def test_fox_bias_is_the_loop_sum_of_ln_f_over_the_tokens_between(window, sink):
    torch.manual_seed(0)
    log_f = F.logsigmoid(torch.randn(2, 3, 13) * 2)
    c = log_f.cumsum(-1)
    got = fox_bias(c, 13, window, sink, start=4, lo=0)           # queries 4..12
    lf = log_f.double().numpy()
    for b in range(2):
        for h in range(3):
            for i in range(4, 13):
                for j in range(13):
                    if not in_window(i, j, window, sink):
                        assert got[b, h, i - 4, j] == float("-inf")
                        continue
                    first = j + 1 if not (window and sink and j == 0) else max(1, i - window + 2)
                    want = sum(lf[b, h, m] for m in range(first, i + 1))  # sum_{l=j+1..i} ln f_l
                    assert abs(got[b, h, i - 4, j].item() - want) < 1e-5, (b, h, i, j)


@pytest.mark.parametrize("window,sink", [(None, False), (5, False), (5, True)])
@pytest.mark.parametrize("explicit", [False, True])
def test_fox_attention_is_the_decayed_softmax_written_in_numpy(window, sink, explicit):
    # lam (1.3, 0.7, 1.0) multiplies q.k / sqrt(d) alone: the decay stays as trained
    torch.manual_seed(0)
    B, nh, T, hs = 2, 3, 13, 4
    q, k, v = (torch.randn(B, nh, T, hs) * 2 for _ in range(3))
    lam = torch.tensor([1.3, 0.7, 1.0]).view(1, nh, 1, 1)
    log_f = F.logsigmoid(torch.randn(B, nh, T) * 2)
    lf = log_f.double().numpy()

    def score(b, h, i, j, z):
        if not in_window(i, j, window, sink):
            return None
        first = j + 1 if not (window and sink and j == 0) else max(1, i - window + 2)
        return lam.view(-1)[h].item() * z + lf[b, h, first:i + 1].sum()
    y_ref, ent_ref, _ = numpy_attention(q, k, v, score)
    y, ent = fox_attention(q, k, v, lam, log_f, window, sink, explicit, chunk=4)
    assert np.allclose(y.double().numpy(), y_ref, atol=1e-5)
    assert (ent is None) == (not explicit)
    if explicit:
        assert np.allclose(ent.double().numpy(), ent_ref, atol=1e-4)


def test_fox_with_every_gate_open_is_plain_nope():
    # f = 1 (ln f = 0): no decay, the paper's NoPE with the same weights
    fox, nope, idx = make("fox"), make(""), tokens()
    nope.load_state_dict({k: v for k, v in fox.state_dict().items() if ".forget." not in k})
    with torch.no_grad():
        for b in fox.transformer.h:
            b.attn.forget.weight.zero_()
            b.attn.forget.bias.fill_(60.0)  # ln sigmoid(60) = -9e-27
        for explicit in (False, True):
            assert torch.allclose(fox(idx, idx, entropy=explicit)[0], nope(idx, idx)[0], atol=1e-5)
        closed = make("fox")  # and with its gates as made, it differs
        assert not torch.allclose(closed(idx, idx)[0], nope(idx, idx)[0], atol=1e-3)


@pytest.mark.parametrize("explicit", [False, True])
def test_fox_window_with_the_start_token_reads_as_the_crop_would(explicit):
    # one layer (each gate a function of its token alone): under a window of W the start token
    # decays by the W - 1 tokens after it in the crop [start token, last W - 1 tokens]
    model, idx, W = make("fox", n_layer=1), tokens(T=30), 6
    with torch.no_grad():
        windowed = model(idx, idx, window=W, entropy=explicit)[0]
        crop = torch.cat([idx[:, :1], idx[:, -(W - 1):]], 1)
        cropped = model(crop, crop, entropy=explicit)[0]
    assert torch.allclose(windowed[:, -1], cropped[:, -1], atol=1e-5)


def test_fox_gate_is_sigmoid_of_a_linear_map_of_the_layers_input():
    model, idx = make("fox", n_layer=1), tokens(B=1, T=9)
    attn = model.transformer.h[0].attn
    with torch.no_grad():
        x = first_layer_input(model, idx)
        (log_f,) = attn.gates(x)
        w, b = attn.forget.weight.double().numpy(), attn.forget.bias.double().numpy()
        f = 1 / (1 + np.exp(-(x[0].double().numpy() @ w.T + b)))  # (T, nh)
    assert log_f.shape == (1, 4, 9) and log_f.dtype == torch.float32
    assert np.allclose(log_f[0].double().numpy(), np.log(f).T, atol=1e-5)


def test_fox_bias_is_built_a_chunk_of_queries_at_a_time(monkeypatch):
    seen = []

    def spy(c, stop, window=None, sink=False, start=0, lo=0):
        out = fox_bias(c, stop, window, sink, start, lo)
        seen.append(tuple(out.shape))
        return out
    monkeypatch.setattr(families, "fox_bias", spy)
    q = k = v = torch.zeros(1, 2, 2100, 2)
    y, _ = fox_attention(q, k, v, torch.ones(1, 2, 1, 1), torch.zeros(1, 2, 2100))
    assert y.shape == q.shape and [s[2] for s in seen] == [1024, 1024, 52]  # (B, nh, chunk, T)
    seen.clear()
    fox_attention(q[:, :, :300], k[:, :, :300], v[:, :, :300], torch.ones(1, 2, 1, 1),
                  torch.zeros(1, 2, 300), entropy=True, chunk=128)
    assert max(s[2] for s in seen) == 128


# -----------------------------------------------------------------------------
# The head-wise output gate

def test_output_gate_multiplies_each_heads_output_by_sigmoid_of_x_wg():
    # one layer; lambda 1.3 scales the logits as on NoPE, the gate comes after the softmax
    model, idx = make("nope_gated", n_layer=1), tokens(B=1, T=12)
    model.set_head_scales(1.3)
    attn = model.transformer.h[0].attn
    with torch.no_grad():
        x = first_layer_input(model, idx)
        q, k, v = heads(attn, x)
        y_ref, _, _ = numpy_attention(q, k, v, lambda b, h, i, j, z: 1.3 * z)  # (1, nh, T, hs)
        g = 1 / (1 + np.exp(-(x[0].double().numpy() @ attn.gate.weight.double().numpy().T)))
        gated = y_ref * g.T[None, :, :, None]                                # (1, nh, T, hs)
        want = attn.c_proj(torch.tensor(gated, dtype=torch.float32).transpose(1, 2).reshape(1, 12, 32))
        for explicit in (False, True):
            assert torch.allclose(attn(x, entropy=explicit)[0], want, atol=1e-5)


def test_output_gates_of_one_give_the_ungated_block():
    gated, nope, idx = make("nope_gated"), make(""), tokens()
    nope.load_state_dict({k: v for k, v in gated.state_dict().items() if ".gate." not in k})
    with torch.no_grad():
        assert not torch.allclose(gated(idx, idx)[0], nope(idx, idx)[0], atol=1e-3)
        for b in gated.transformer.h:
            del b.attn.gate  # a gate that always reads 1: sigmoid(60)
            b.attn.gate = lambda x: torch.full((*x.shape[:-1], 4), 60.0)
        for explicit in (False, True):
            assert torch.allclose(gated(idx, idx, entropy=explicit)[0], nope(idx, idx)[0], atol=1e-6)


# -----------------------------------------------------------------------------
# The learned sink

@pytest.mark.parametrize("window,sink", [(None, False), (5, True)])
@pytest.mark.parametrize("explicit", [False, True])
def test_sink_rows_sum_to_one_minus_p_sink_as_numpy_computes(window, sink, explicit):
    torch.manual_seed(0)
    B, nh, T, hs = 2, 3, 11, 4
    q, k, v = (torch.randn(B, nh, T, hs) * 2 for _ in range(3))
    lam, s = torch.tensor([1.3, 0.7, 1.0]).view(1, nh, 1, 1), torch.tensor([-1.0, 0.5, 3.0])

    def score(b, h, i, j, z):  # lam scales q.k; the sink logit stays as trained
        return lam.view(-1)[h].item() * z if in_window(i, j, window, sink) else None
    y_ref, ent_ref, P = numpy_attention(q, k, v, score, null=s.double().numpy())
    ones = torch.ones(B, nh, T, hs)
    rows, _ = sink_attention(q, k, ones, lam, s, window, sink, explicit, chunk=4)
    assert np.allclose(rows[..., 0].double().numpy(), P.sum(-1), atol=1e-5)  # 1 - p_sink
    assert P.sum(-1).min() < 0.5  # the sink takes most of some rows
    y, ent = sink_attention(q, k, v, lam, s, window, sink, explicit, chunk=4)
    assert np.allclose(y.double().numpy(), y_ref, atol=1e-5)
    if explicit:  # the entropy of the kept probabilities renormalised: how the keys share them
        assert np.allclose(ent.double().numpy(), ent_ref, atol=1e-4)
        plain = -(P * np.log2(np.where(P > 0, P, 1))).sum(-1)  # not renormalised: another number
        assert not np.allclose(ent.double().numpy(), plain, atol=1e-2)


def test_the_sink_logit_is_learned_without_decay_and_a_model_without_it_is_nope():
    model, idx = make("nope_sink").train(), tokens()
    _, loss = model(idx, idx)
    loss.backward()
    s = model.transformer.h[0].attn.sinks
    assert s.grad is not None and s.grad.abs().sum() > 0
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    assert any(p is s for p in opt.param_groups[1]["params"])  # the no-decay group
    nope = make("")
    nope.load_state_dict({k: v for k, v in model.state_dict().items() if ".sinks" not in k})
    with torch.no_grad():
        for b in model.eval().transformer.h:
            b.attn.sinks.fill_(-1e4)  # exp(-1e4) = 0: the column takes nothing
        assert torch.allclose(model(idx, idx)[0], nope(idx, idx)[0], atol=1e-6)


# -----------------------------------------------------------------------------
# Every family: both paths, lambda, HeadScale, precision, length, checkpoints, DDP's rule

@pytest.mark.parametrize("family", NEW)
def test_sdpa_and_the_written_out_path_agree(family):
    model, idx = make(family), tokens()
    model.set_head_scales(torch.tensor([[1.0, 1.2, 0.8, 1.5], [1.1, 1.0, 1.3, 0.9]]))
    with torch.no_grad():
        for window in (None, 6):
            fast = model(idx, idx, window=window)[0]
            slow, _, ent = model(idx, idx, window=window, entropy=True, chunk=7)
            assert torch.allclose(fast, slow, atol=1e-4) and ent.shape == (2, 2, 4, 40)
            assert torch.isfinite(ent).all() and (ent >= 0).all()


@pytest.mark.parametrize("family", NEW)
def test_headscale_fits_lambda_alone_and_leaves_the_familys_own_parameters(family):
    from search_scales import fit_head_scales
    model, idx = make(family), tokens()
    own = {k: v.clone() for k, v in model.named_parameters()}
    lam, _ = fit_head_scales(model, iter([(idx, idx)] * 3), torch.full((2, 4), 1.2), steps=3,
                             warmup=1)
    assert all(torch.equal(p, own[k]) for k, p in model.named_parameters())
    assert not torch.equal(lam, torch.full((2, 4), 1.2))


@pytest.mark.parametrize("family", NEW)
def test_bfloat16_stays_close_and_any_length_runs(family):
    model, idx = make(family), tokens()
    with torch.no_grad():
        ref, _ = model(idx, idx)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low, _ = model(idx, idx)
        assert (low.float() - ref).abs().max() < 0.15 * ref.abs().max()
        long = tokens(B=1, T=8 * 16)  # 16 times the training length
        logits, loss = model(long, long)
    assert torch.isfinite(loss) and logits.shape == (1, 128, V)


@pytest.mark.parametrize("family", NEW)
def test_every_parameter_gets_a_gradient_as_ddp_requires(family):
    # DDP without find_unused_parameters needs every parameter in every step's graph
    model, idx = make(family).train(), tokens()
    model(idx, idx)[1].backward()
    missing = [k for k, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum()]
    assert not missing


@pytest.mark.parametrize("family", NEW)
def test_compiles_in_one_graph(family):
    # torch.compile's tracer (no C compiler needed: the eager backend) takes the whole forward
    model, idx = make(family), tokens(T=24)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        assert torch.allclose(compiled(idx, idx)[0], model(idx, idx)[0], atol=1e-6)


def test_checkpoints_keep_each_familys_parameters_and_settings(tmp_path):
    idx = tokens()
    for family, own in zip(NEW, ("forget", "gate", "sinks")):
        model = make(family)
        assert any(own in k for k in model.state_dict())
        save_checkpoint(tmp_path / "m.pt", model)
        again, _ = load_checkpoint(tmp_path / "m.pt")
        assert type(again.transformer.h[1].attn) is {"fox": FoX, "nope_gated": OutputGated,
                                                      "nope_sink": LearnedSink}[family]
        with torch.no_grad():
            assert torch.equal(model(idx, idx)[0], again.eval()(idx, idx)[0])
    assert [arch_of(make(f).config) for f in NEW] == ["nope+forget_gate", "nope+output_gate",
                                                      "nope+sink"]
    for family in NEW:  # NoPE families: RoPE is refused, saying what to set
        with pytest.raises(ValueError, match="pos_encoding must be nope, got 'rope'"):
            make_config(family=family, pos_encoding="rope")


# -----------------------------------------------------------------------------
# The written-out paths are not T2's

def test_no_new_written_out_path_shares_a_code_line_with_t2():
    """The student copy refuses a line of a blanked body only where the project holds it nowhere
    else; a copy in families.py would hide it from that check. So: no code line of T2's body (as
    the kit reads it: comments dropped, whitespace collapsed, 25 characters or more) inside any
    of the functions this file tests."""
    def code(text):
        lines = text.splitlines()
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                lines[tok.start[0] - 1] = lines[tok.start[0] - 1][:tok.start[1]]
        return [" ".join(line.split()) for line in lines]

    def body(path, name, skip_doc=True):
        text = (ROOT / path).read_text(encoding="utf-8")
        node = next(n for n in ast.walk(ast.parse(text)) if getattr(n, "name", None) == name)
        start = node.body[1].lineno if skip_doc else node.lineno
        return code(text)[start - 1:node.end_lineno]
    t2 = {line for line in body("model.py", "written_out_attention") if len(line) >= 25}
    assert len(t2) > 8  # the reader found T2's body
    ours = [line for name in ("biased_softmax_attention", "fox_attention", "fox_bias",
                              "sink_attention", "first_key_probe", "_probed", "ReadsInput")
            for line in body("families.py", name, skip_doc=False)]
    shared = sorted({a for a in t2 for line in ours if a in line})
    assert not shared, f"lines of T2 in families.py: {shared}"


# -----------------------------------------------------------------------------
# The sink share

@pytest.mark.parametrize("family", ["", "alibi", *NEW])
def test_the_probe_reads_each_familys_attention_to_key_0_and_the_mass_it_keeps(family):
    model = make(family, n_layer=1) if family != "alibi" else GPT(make_config(
        block_size=8, vocab_size=V, n_layer=1, n_head=4, n_embd=32, family="alibi",
        pos_encoding="alibi")).eval()
    idx = tokens(B=2, T=14)
    attn = model.transformer.h[0].attn
    with torch.no_grad():
        plain = model(idx, idx, entropy=True)
        with first_key_probe(model):
            probed = model(idx, idx, entropy=True)
        assert "attend" not in vars(attn)  # the class's own attend again
        assert torch.equal(plain[0], probed[0])  # the output untouched
        ent, key0, kept = split_probe(probed[2], 4)
        assert torch.equal(ent, plain[2]) and key0.shape == kept.shape == (2, 1, 14)
        x = first_layer_input(model, idx)
        q, k, v = heads(attn, x)
        null = attn.sinks.double().numpy() if family == "nope_sink" else None
        m = families.alibi_slopes(4).double().numpy()
        lf = attn.gates(x)[0].double().numpy() if family == "fox" else None

        def score(b, h, i, j, z):
            if family == "alibi":
                return z - m[h] * (i - j)
            return z + (lf[b, h, j + 1:i + 1].sum() if family == "fox" else 0.0)
        _, _, P = numpy_attention(q, k, v, score, null)
    assert np.allclose(key0[:, 0].numpy(), P[..., 0].mean(1), atol=1e-5)
    assert np.allclose(kept[:, 0].numpy(), P.sum(-1).mean(1), atol=1e-5)
    assert (family == "nope_sink") == bool((kept < 0.99).any())


def test_a_last_L_reference_reads_each_sub_windows_start_token():
    # the reference's last position reads the crop [start token, last W - 1 tokens]: its share
    # of key 0 there is that of a fresh pass over the crop
    model, W = make("nope_sink"), 8
    windows = tokens(B=2, T=33)
    got = measure(model, windows, 2, context=W, entropy=True, sink_share=True)
    x = windows[:, :-1]
    crop = torch.cat([x[:, :1], x[:, -(W - 1):]], 1)
    with torch.no_grad(), first_key_probe(model):
        _, key0, kept = split_probe(model(crop, crop, entropy=True)[2], 4)
    assert np.allclose(got["first_key"][:, -1], key0[:, :, -1].mean(0).numpy(), atol=1e-5)
    assert np.allclose(got["kept"][:, -1], kept[:, :, -1].mean(0).numpy(), atol=1e-5)
    plain = measure(model, windows, 2, context=W, entropy=True)  # the default: no probe
    assert plain["first_key"] is None and np.array_equal(plain["entropy"], got["entropy"])
    assert np.array_equal(plain["loss"], got["loss"])


def test_sink_facts_average_query_positions_1_to_n_minus_1_per_layer():
    L = 4
    first_key = np.arange(2 * 16, dtype=float).reshape(2, 16) / 100   # (n_layer, n) = 4L
    kept = 1 - first_key / 2
    facts = sink_facts(first_key, kept, L, make("nope_sink"))
    assert facts["sink_share"] == {"4": [0.02, 0.18], "16": [0.08, 0.24]}  # means of 1..n-1
    assert facts["sink_column"] == {"4": [0.01, 0.09], "16": [0.04, 0.12]}
    assert sink_facts(first_key[:, :8], kept[:, :8], L, make(""))["sink_column"] is None
    assert list(sink_facts(first_key[:, :8], kept[:, :8], L, make(""))["sink_share"]) == ["4"]
    assert sink_facts(None, None, L, make("")) == {"sink_share": None, "sink_column": None}


def test_the_tables_print_the_sink_share_and_a_sinks_column():
    row = {"lengths": [4], "loss": [1.0], "tail_loss": [1.0], "tokens": [4], "tail_tokens": [1],
           "sink_share": {"4": [0.25, 0.75], "16": [0.125, 0.375]}}
    results = {"train_len": 4, "methods": {"nope": {**row, "sink_column": None},
                                           "nope_sink": {**row, "sink_column": {"4": [0.5, 0.1]}},
                                           "rope": {**row, "sink_share": None}}}
    lines = tables.sink_share_table(results)
    assert "| nope | 1L | 0.500 | 0.250 / 0.750 |  |  |" in lines
    assert "| nope_sink | 1L | 0.500 | 0.250 / 0.750 | 0.300 | 0.500 / 0.100 |" in lines
    assert not any("| rope |" in line for line in lines)
    two = beyond.sink_table({"a": results, "b": results}, ("nope", "nope_sink", "fox"))
    assert "| `nope` | 0.500; 0.500 | 0.250; 0.250 | 0.12/0.38; 0.12/0.38 |" in two
    assert "| `nope_sink` sink column | 0.300; 0.300 | –; – | –; – |" in two
    assert "| `fox` | –; – | –; – | –; – |" in two
    assert tables.sink_share_table({"train_len": 4, "methods": {"rope": row | {"sink_share": None}}}) == []


# -----------------------------------------------------------------------------
# The study's rows

def test_beyond2025_trains_each_family_as_nope_and_measures_every_row(tmp_path):
    calls = []
    cfg = reproduce.StudyConfig(out_dir=str(tmp_path), passkey=False)
    study = SimpleNamespace(
        cfg=cfg, ab="4L", L=32, ev=str(tmp_path / "eval"), evaluate=["--out_dir=E"],
        overrides=["--seed=7"], path=lambda *p: str(tmp_path.joinpath(*p)),
        ckpt=lambda run: str(tmp_path / run / "ckpt.pt"),
        train=lambda stage, args, outputs, resume_dir=None: calls.append((stage, args)),
        stages=SimpleNamespace(run=lambda stage, cmd, outputs, *a: calls.append((stage, cmd))))
    reproduce.beyond2025_rows(study)
    trained = {stage: args for stage, args in calls if stage.startswith("train_")}
    assert set(trained) == {f"train_{f}" for f in NEW}
    for family in NEW:  # NoPE's arguments, the family alone added
        assert trained[f"train_{family}"] == ["--bos=true", f"--family={family}",
                                              f"--out_dir={tmp_path / family}", "--seed=7"]
    cmds = dict(calls)
    rows = next(a for a in cmds["evaluate_beyond2025"] if a.startswith("--ckpts="))
    assert [r.split("=")[0] for r in rows[len("--ckpts="):].split(",")] == [
        f"{f}{r}" for f in NEW for r in ("", "_uniform_4L", "_headscale_4L")]
    refs = cmds["evaluate_beyond2025_window"]
    assert "--context=32" in refs and not any(a.startswith("--entropy") for a in refs)
    assert not any(a.startswith("--entropy") for a in cmds["evaluate_beyond2025"])
    assert all(f"--fit_lengths={cfg.ablation_length:g}" in cmds[f"search_{f}"] for f in NEW)
