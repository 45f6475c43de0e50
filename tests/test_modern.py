"""NoPE as used since the paper: hybrid RoPE/NoPE layers, Llama 4's temperature, DroPE."""

import json
import math

import pytest
import torch

from conftest import TINY_TRAIN, run_script
from evaluate import reference_of
from families import Hybrid, llama4_temperature
from model import load_checkpoint
from test_model import V, make, tokens


def test_a_hybrid_of_all_rope_layers_is_rope_and_of_none_is_nope_bit_for_bit():
    x = tokens(T=40)
    rope = make("rope")(x, x)[0]
    assert torch.equal(make("rope", family="hybrid", nope_every=3)(x, x)[0], rope)  # 2 layers, every 3rd NoPE: none is
    nope = make("nope")(x, x)[0]
    assert torch.equal(make("rope", family="hybrid", nope_every=1)(x, x)[0], nope)  # every layer NoPE
    mixed = make("rope", family="hybrid", nope_every=2)(x, x)[0]  # layer 1 NoPE: neither
    assert not torch.equal(mixed, rope) and not torch.equal(mixed, nope)
    assert Hybrid.Config(pos_encoding="rope", n_layer=8, nope_every=4).nope_layers() == [3, 7]  # Llama 4's rule


@pytest.mark.parametrize("explicit", [False, True])
def test_a_windowed_rope_layer_never_reads_past_its_window_not_even_the_start_token(explicit):
    """Cohere's windowed RoPE layers have no sink: with the start token, key 0 would sit at a
    query-key distance never seen in training. The same W visible keys then give the same output
    at a short and at a long position (RoPE sees only distances < W)."""
    W, T = 5, 30
    model = make("rope", family="hybrid", n_layer=1, nope_every=2, rope_window=W, bos=True)  # its one layer is RoPE, windowed
    x = tokens(B=1, T=T)
    out = model(x, x, entropy=explicit)[0]
    far = x.clone()
    far[0, :T - W] = (far[0, :T - W] + 1) % V  # every key outside the last query's window, the first too
    assert torch.allclose(model(far, far, entropy=explicit)[0][0, -1], out[0, -1], atol=1e-6)
    short = torch.cat([x[:, :1], x[:, T - W:]], 1)  # the same last W tokens at positions 1..W
    assert torch.allclose(model(short, short, entropy=explicit)[0][0, -1], out[0, -1], atol=1e-5)
    # a hybrid's NoPE layer is global and keeps the start token
    hybrid = make("rope", family="hybrid", n_layer=2, nope_every=2, rope_window=W, bos=True)
    first = x.clone()
    first[0, 0] = (first[0, 0] + 1) % V
    assert not torch.allclose(hybrid(first, first, entropy=explicit)[0][0, -1], hybrid(x, x, entropy=explicit)[0][0, -1])


def test_llama4_temperature_by_hand_at_L_minus_1_L_and_2L():
    L, s = 8, 0.1
    cfg = Hybrid.Config(block_size=L, pos_encoding="nope", nope_temp=s)
    t = llama4_temperature(3 * L, cfg, "cpu").view(-1)  # 0-based positions i0
    assert t[L - 1] == 1.0  # every position of a training window unscaled
    assert math.isclose(t[L], 1 + s * math.log(2), rel_tol=1e-6)
    assert math.isclose(t[2 * L], 1 + s * math.log(3), rel_tol=1e-6)
    assert math.isclose(t[2 * L - 1], 1 + s * math.log(2), rel_tol=1e-6)  # steps at multiples of F
    cfg2 = Hybrid.Config(block_size=L, pos_encoding="nope", nope_temp=s, nope_temp_floor=2)
    assert llama4_temperature(2 * L, cfg2, "cpu") is None  # never past F = 2L: no scaling at all


def test_the_temperature_leaves_rope_layers_unchanged_and_sharpens_nope_layers():
    model = make("rope", family="hybrid", n_layer=2, nope_every=2, nope_temp=0.5)  # layer 0 RoPE, layer 1 NoPE
    T = 24
    h = torch.randn(2, T, 32, generator=torch.Generator().manual_seed(0))
    assert llama4_temperature(T, model.config, "cpu") is not None
    plain = make("rope", family="hybrid", n_layer=2, nope_every=2)  # the same weights, no temperature
    for layer, same in ((0, True), (1, False)):
        with torch.no_grad():
            a, b = model.transformer.h[layer].attn(h)[0], plain.transformer.h[layer].attn(h)[0]
        assert torch.equal(a, b) == same
        assert torch.equal(a[:, :8], b[:, :8])  # positions i0 < L: unchanged in every layer


def test_bad_hybrid_settings_say_what_to_set():
    with pytest.raises(ValueError, match="pos_encoding=rope and nope_every"):
        Hybrid.Config(pos_encoding="nope", nope_every=4, rope_window=8)
    with pytest.raises(ValueError, match="pos_encoding=rope and nope_every"):
        Hybrid.Config(pos_encoding="rope", nope_every=0, rope_window=8)
    with pytest.raises(ValueError, match="has none"):
        Hybrid.Config(pos_encoding="rope", nope_every=0, nope_temp=0.1)


def test_the_reference_of_a_row_is_its_own_model_reading_its_last_L():
    """reference_of reads a row's facts, never its name: the rows here are named at random."""
    def row(model, context=None, scales=None, temp=None):
        return {"model": model, "bos": True, "context": context, "scales": scales, "slopes": None,
                "temp": temp, "lengths": [8], "loss": [1.0]}
    facts = {"nope": row("nope"), "nope_window_L": row("nope", context=8),
             "rope_window_L": row("rope", context=8), "drope": row("drope"),
             "drope_headscale_4L": row("drope", scales=[[1.2]]), "drope_window_L": row("drope", context=8),
             "drope_short": row("drope_short"), "drope_short_window_L": row("drope_short", context=8),
             "hybrid": row("hybrid"), "hybrid_llama4": row("hybrid", temp=0.1),
             "hybrid_window_L": row("hybrid", context=8), "rope": row("rope")}
    alias = {name: f"row{i}" for i, name in enumerate(facts)}  # names that say nothing
    res = {"train_len": 8, "methods": {alias[n]: m for n, m in facts.items()}}
    for name, ref in (("nope", "nope_window_L"), ("rope", "rope_window_L"), ("drope_headscale_4L", "drope_window_L"),
                      ("drope_short", "drope_short_window_L"), ("hybrid_llama4", "hybrid_window_L")):
        assert reference_of(res, alias[name]) == alias[ref], name
    assert reference_of(res, alias["nope_window_L"]) is None  # a reference has none
    # the reference recomputes each window (a masked row is not one), at the row's own precision
    window = res["methods"][alias["hybrid_window_L"]]
    window["context_mode"] = "mask"
    assert reference_of(res, alias["hybrid"]) is None
    window |= {"context_mode": "recompute", "dtype": "bfloat16"}
    res["methods"][alias["hybrid"]]["dtype"] = "float32"
    assert reference_of(res, alias["hybrid"]) is None
    res["methods"][alias["hybrid"]]["dtype"] = "bfloat16"
    assert reference_of(res, alias["hybrid"]) == alias["hybrid_window_L"]
    del res["methods"][alias["hybrid_window_L"]]
    assert reference_of(res, alias["hybrid"]) is None


@pytest.mark.slow
def test_drope_hybrids_and_their_scales_end_to_end(tiny_dataset, tmp_path):
    train = [f"--dataset={tiny_dataset}", *TINY_TRAIN, "--max_iters=10", "--eval_interval=10"]
    run_script("train.py", *train, f"--out_dir={tmp_path / 'rope'}", "--pos_encoding=rope")
    twin, _ = load_checkpoint(tmp_path / "rope" / "ckpt.pt")
    # DroPE, zero-shot: the twin's weights without RoPE, recorded as NoPE, no step taken
    proc = run_script("train.py", *train, f"--out_dir={tmp_path / 'drope'}", f"--init_from={tmp_path / 'rope' / 'ckpt.pt'}",
                      "--pos_encoding=nope", "--max_iters=0")
    assert "pos_encoding='nope'" in proc.stdout and "no training step" in proc.stdout
    drope, ckpt = load_checkpoint(tmp_path / "drope" / "ckpt.pt")
    assert ckpt["model_args"]["pos_encoding"] == "nope" and ckpt["config"]["model"]["pos_encoding"] == "nope"
    as_nope, _ = load_checkpoint(tmp_path / "rope" / "ckpt.pt", pos_encoding="nope")
    x = tokens(T=40) % twin.config.vocab_size
    with torch.no_grad():
        assert torch.equal(drope(x, x)[0], as_nope(x, x)[0]) and not torch.equal(drope(x, x)[0], twin(x, x)[0])
    # a shape cannot change when fine-tuning: one line, nothing written
    bad = run_script("train.py", *train, f"--out_dir={tmp_path / 'bad'}", f"--init_from={tmp_path / 'rope' / 'ckpt.pt'}",
                     "--n_layer=3", check=False)
    assert bad.returncode == 2 and "keeps a checkpoint's shape" in bad.stderr and not (tmp_path / "bad").exists()
    # a hybrid: HeadScale moves its NoPE layer alone
    run_script("train.py", *train, f"--out_dir={tmp_path / 'hybrid'}", "--family=hybrid", "--pos_encoding=rope",
               "--nope_every=2", "--rope_window=8")
    run_script("search_scales.py", f"--ckpt={tmp_path / 'hybrid' / 'ckpt.pt'}", f"--out_dir={tmp_path / 'sc'}",
               "--lengths=2", "--fit_lengths=2", "--windows=4", "--lam_step=0.5", "--steps=4", "--lr=0.3")
    fitted = json.loads((tmp_path / "sc" / "head_2L.json").read_text())["lam"]
    assert fitted[0] == [1.0, 1.0] and fitted[1] != [1.0, 1.0]  # layer 0 RoPE, layer 1 NoPE
    grid, _ = load_checkpoint(tmp_path / "sc" / "uniform_grid_2L.pt")
    assert grid.get_head_scales()[0].eq(1).all()
