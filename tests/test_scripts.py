"""search_scales.py, evaluate.py and reproduce.py end to end on a tiny trained model."""

import csv
import json
import re
import shutil

import numpy as np
import pytest
import torch

from conftest import ROOT, TINY_TRAIN, run_script
from model import load_checkpoint

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")  # built once a worker, not again each time -n interleaves modules
def trained(tiny_dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    run_script("train.py", f"--dataset={tiny_dataset}", f"--out_dir={out}", *TINY_TRAIN, "--max_iters=60",
               "--eval_interval=60", "--learning_rate=5e-3")
    return out / "ckpt.pt"


def test_search_scales_grid_and_fit(trained, tmp_path):
    out = tmp_path / "scales"
    proc = run_script("search_scales.py", f"--ckpt={trained}", f"--out_dir={out}", "--lengths=2,4",
                      "--fit_lengths=2", "--windows=4", "--lam_step=0.5", "--steps=12", "--log_interval=4")
    assert "lam_mean" in proc.stdout and "tok/s" in proc.stdout
    with open(out / "grid.csv") as f:
        grid = list(csv.DictReader(f))
    assert sorted({float(r["lam"]) for r in grid}) == [1.0, 1.5, 2.0] and len(grid) == 6  # lam_max 2.0
    uni = json.loads((out / "uniform.json").read_text())
    best = uni["lengths"]["2L"]["best_lam"]
    losses = {float(r["lam"]): float(r["loss"]) for r in grid if r["length"] == "64"}
    assert losses[best] == min(losses.values())
    assert np.isfinite(uni["fit"]["a"])
    model, ckpt = load_checkpoint(out / "uniform_grid_4L.pt")
    assert torch.allclose(model.get_head_scales(), torch.full((2, 2), uni["lengths"]["4L"]["best_lam"]))
    fitted, info = load_checkpoint(out / "head_2L.pt")
    lam = fitted.get_head_scales()
    assert (lam >= 1.0).all() and not torch.allclose(lam, torch.full((2, 2), best))  # it moved, clamped
    assert info["scales"]["init"] == best
    plain, _ = load_checkpoint(trained)
    for k, v in plain.state_dict().items():  # only head_scale differs from the trained model
        if not k.endswith("head_scale"):
            assert torch.equal(v, fitted.state_dict()[k])
    with open(out / "head_2L.csv") as f:
        assert len(list(csv.DictReader(f))) == 4


def test_search_scales_ablations_and_layer_granularity(trained, tmp_path):
    out = tmp_path / "scales"
    common = [f"--ckpt={trained}", f"--out_dir={out}", "--grid=false", "--fit_lengths=2", "--steps=8",
              "--lr=0.5"]
    run_script("search_scales.py", *common, "--init=1", "--min_scale=0", "--tag=_free")
    lam = load_checkpoint(out / "head_2L_free.pt")[0].get_head_scales()
    assert not torch.allclose(lam, torch.ones(2, 2))
    run_script("search_scales.py", *common, "--init=1.3", "--granularity=layer")
    lam = load_checkpoint(out / "layer_2L.pt")[0].get_head_scales()
    assert torch.equal(lam[:, 0], lam[:, 1])  # one lambda per layer
    proc = run_script("search_scales.py", *common, check=False)  # no grid was run: no init to take
    assert proc.returncode == 2 and "--init=VALUE" in proc.stderr


def test_search_scales_log_fit_moves_only_the_slopes(trained, tmp_path):
    import math
    out = tmp_path / "scales"
    run_script("search_scales.py", f"--ckpt={trained}", f"--out_dir={out}", "--lengths=2", "--fit_lengths=",
               "--windows=4", "--lam_step=0.5")
    uni = json.loads((out / "uniform.json").read_text())
    common = [f"--ckpt={trained}", f"--out_dir={out}", "--grid=false", "--fit=slope", "--fit_lengths=2", "--steps=8"]
    proc = run_script("search_scales.py", *common, "--lr=0.5", "--log_interval=4")
    assert "a_mean" in proc.stdout
    run_script("study/set_slope.py", f"--ckpt={trained}", f"--out_dir={out}", "--values=logn,grid")
    fitted, info = load_checkpoint(out / "headslope_2L.pt")
    assert info["scales"]["init"] == max(uni["lengths"]["2L"]["fit_a"], 0.0)  # from the grid's lambda(i) fit there
    assert (fitted.get_head_slopes() >= 0).all() and torch.equal(fitted.get_head_scales(), torch.ones(2, 2))
    plain, _ = load_checkpoint(trained)
    for k, v in plain.state_dict().items():  # only head_slope differs from the trained model
        if not k.endswith("head_slope"):
            assert torch.equal(v, fitted.state_dict()[k])
    with open(out / "headslope_2L.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and all(float(r["slope"]) >= 0 for r in rows)
    assert json.loads((out / "headslope_2L.json").read_text())["a"] == fitted.get_head_slopes().tolist()
    logn = load_checkpoint(out / "slope_logn.pt")[0]
    assert torch.allclose(logn.get_head_slopes(), torch.full((2, 2), 1 / math.log(32)))  # Qwen's a = 1/ln L
    grid = load_checkpoint(out / "slope_grid.pt")[0]  # one a for every head: the grid's lambda(i) fit
    assert torch.allclose(grid.get_head_slopes(), torch.full((2, 2), uni["fit"]["a"]))
    # from a given start it moves (Adam's first step is about lr), and stays >= 0; per layer: one a per layer
    run_script("search_scales.py", *common, "--init=0.3", "--lr=0.5", "--granularity=layer")
    a = load_checkpoint(out / "layerslope_2L.pt")[0].get_head_slopes()
    assert (a >= 0).all() and not torch.allclose(a, torch.full((2, 2), 0.3)) and torch.equal(a[:, 0], a[:, 1])
    proc = run_script("search_scales.py", *common[:-2], "--fit_lengths=4", "--steps=2", check=False)  # no grid at 4L
    assert proc.returncode == 2 and "--init=VALUE" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, message", [
    (["--lam_step=0"], "empty lambda grid"),
    (["--lam_min=0"], "lambda must be > 0"),
    (["--lengths=-2"], "must be > 0"),
    (["--log_interval=0"], "--log_interval must be > 0"),
    (["--lr=0"], "--lr must be > 0"),
    (["--tail=-1"], "--tail and --position_bins must be >= 0"),
    (["--fit=slope", "--fit_lengths=1"], "every --fit_lengths must be > 1"),
])
def test_search_scales_bad_input(trained, tmp_path, args, message):
    proc = run_script("search_scales.py", f"--ckpt={trained}", f"--out_dir={tmp_path}", *args, check=False)
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_search_scales_rejects_a_foreign_checkpoint(tmp_path):
    torch.save({"state": 1}, tmp_path / "x.pt")
    proc = run_script("search_scales.py", f"--ckpt={tmp_path / 'x.pt'}", check=False)
    assert proc.returncode == 2 and "not a nanoNoPE checkpoint" in proc.stderr


def test_evaluate_tables_plots_and_merging(trained, tmp_path):
    out = tmp_path / "eval"
    common = [f"--out_dir={out}", "--lengths=1,2,4", "--windows=4", "--sample_tokens=10"]
    proc = run_script("evaluate.py", f"--ckpts=nope={trained}", *common)
    assert "nope n=  128: loss" in proc.stdout and "python study/tables.py" in proc.stdout
    run_script("evaluate.py", f"--ckpts=nope_window_L={trained}", "--context=32", "--samples=false", *common)
    res = json.loads((out / "results.json").read_text())
    assert set(res["methods"]) == {"nope", "nope_window_L"} and res["train_len"] == 32
    m = res["methods"]["nope"]
    assert m["lengths"] == [32, 64, 128] and m["scales"] is None and m["tokens"] == [128, 256, 512]
    assert res["methods"]["nope_window_L"]["loss"][0] == m["loss"][0]  # a window of L changes nothing at L
    ent = json.loads((out / "entropy.json").read_text())["nope"]
    e = np.array(ent["entropy_bits"])
    assert e.shape[:2] == (2, 2) and (e <= np.array(ent["bound_bits"]) + 1e-3).all()
    proc = run_script("study/tables.py", str(out))  # the tables from the files alone
    assert "| nope |" in proc.stdout and (out / "table.md").exists() and (out / "samples.md").exists()
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 2 * 3 and {r["protocol"] for r in rows} == {"mean", "tail"}
    assert not list(out.glob("*.png"))  # evaluate.py measures; study/plot.py draws
    proc = run_script("study/plot.py", f"--eval_dir={out}")  # plots come from the files alone
    assert (out / "position_loss.png").stat().st_size > 10_000 and (out / "entropy.png").exists()
    assert "skipped hero.png (no rope)" in proc.stdout
    # a different protocol cannot be merged into the same table
    proc = run_script("evaluate.py", f"--ckpts=x={trained}", f"--out_dir={out}", "--windows=5", check=False)
    assert proc.returncode == 2 and "other settings" in proc.stderr
    # rows written before they recorded their facts are not merged into (study/add_facts.py first)
    res = json.loads((out / "results.json").read_text())
    (out / "results.json").write_text(json.dumps(
        res | {"methods": {k: {f: v for f, v in m.items() if f != "model"}
                           for k, m in res["methods"].items()}}))
    proc = run_script("evaluate.py", f"--ckpts=x={trained}", *common, check=False)
    assert proc.returncode == 2 and "study/add_facts.py" in proc.stderr, proc.stderr
    (out / "results.json").write_text(json.dumps(res))
    # the same row measured again without entropy keeps none of its earlier measurement's; lengths
    # given out of order are measured shortest first, the curve from the longest
    run_script("evaluate.py", f"--ckpts=nope={trained}", f"--out_dir={out}", "--lengths=4,1,2", "--windows=4",
               "--entropy=false", "--samples=false")
    assert "nope" not in json.loads((out / "entropy.json").read_text())
    assert "nope" not in json.loads((out / "samples.json").read_text())
    assert json.loads((out / "results.json").read_text())["methods"]["nope"]["lengths"] == [32, 64, 128]
    assert json.loads((out / "positions.json").read_text())["nope"]["length"] == 128


def test_evaluate_bad_input(trained, tmp_path):
    proc = run_script("evaluate.py", f"--ckpts=a={tmp_path / 'missing.pt'}", f"--out_dir={tmp_path}", check=False)
    assert proc.returncode == 2 and "no checkpoint" in proc.stderr
    proc = run_script("evaluate.py", f"--ckpts=a={trained}", f"--out_dir={tmp_path}", "--lengths=1000",
                      check=False)
    assert proc.returncode == 2 and "longest length available" in proc.stderr


def test_reproduce_runs_every_stage_then_skips_them(tmp_path, builtin_corpus):
    out = tmp_path / "study"
    # L = 104: just long enough for a passkey example, so the passkey stage runs too
    fast = ["--lengths=1,2,4", "--grid_lengths=2,4,8", "--block_size=104", "--passkey_steps=6",
            "--passkey_keys=1", "--passkey_lengths=1", f"--dataset={builtin_corpus}"]
    proc = run_script("reproduce.py", "--preset=tiny", f"--out_dir={out}", *fast, timeout=600)
    assert (out / "report.md").exists()
    res = json.loads((out / "eval" / "results.json").read_text())
    expected = {"nope", "rope", "nope_uniform_2L", "nope_uniform_4L", "nope_uniform_8L", "nope_headscale_2L",
                "nope_headscale_4L", "nope_headscale_4L_noclamp", "nope_headscale_4L_noinit", "nope_window_L",
                "rope_window_L", "nope_notoken", "nope_notoken_window_L", "rope_pi_zeroshot", "rope_ntk_zeroshot", "rope_yarn_zeroshot", "rope_pi_ft_4L",
                "rope_yarn_ft_4L"}
    assert set(res["methods"]) == expected
    for m in res["methods"].values():
        assert set(m) >= {"lengths", "loss", "tail_loss", "scales"} and len(m["loss"]) == 3
    factors = res["methods"]["rope_yarn_zeroshot"]["scales"]
    assert len(factors) == 3 and factors[0] == 1.0  # the best factor per length (1 at L)
    with open(out / "passkey" / "passkey.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["method"] for r in rows} == {"nope", "rope", "nope_uniform_4L", "nope_headscale_4L",
                                           "nope_headscale_4L_noclamp", "nope_headscale_4L_noinit"}
    assert len(rows) == 6 * 10 and {int(r["length"]) for r in rows} == {104}
    assert "Passkey retrieval" in (out / "report.md").read_text()
    # --slopes, --modern and --beyond add their rows to the finished study: only their own stages
    # run, the 20 done are skipped
    proc = run_script("reproduce.py", "--preset=tiny", f"--out_dir={out}", *fast, "--slopes", "--modern",
                      "--nope_every=2", "--drope_steps=4", "--beyond")
    assert proc.stdout.count("done before, skipped") == 20
    rows = json.loads((out / "eval" / "results.json").read_text())["methods"]
    beyond = {"alibi", "alibi_uniform_4L", "alibi_window_L", "nope_ssmax", "nope_ssmax_uniform_4L",
              "nope_ssmax_headscale_4L", "nope_ssmax_window_L"}
    for name in beyond:  # each new row with finite numbers at 4L
        assert np.isfinite(rows[name]["loss"][-1]) and np.isfinite(rows[name]["tail_loss"][-1])
    assert rows["alibi"]["arch"] == "alibi" and rows["nope_ssmax"]["arch"] == "nope+ssmax"
    assert rows["nope_ssmax_headscale_4L"]["scales"] is not None  # lambda fitted; s as trained
    assert (out / "eval" / "loss_beyond.png").exists() and (out / "eval" / "entropy_beyond.png").exists()
    report = (out / "report.md").read_text()
    assert "ALiBi and Scalable-Softmax beside NoPE" in report and "| `nope_ssmax_headscale_4L` |" in report
    prompt = tmp_path / "prompt.txt"  # past 8L from the checkpoint alone: a prompt longer than 8L
    prompt.write_text((ROOT / "model.py").read_text(encoding="utf-8")[:1000], encoding="utf-8")
    for ckpt in ("alibi", "nope_ssmax"):
        proc = run_script("sample.py", f"--ckpt={out / ckpt / 'ckpt.pt'}", "--num_samples=1",
                          f"--start=FILE:{prompt}", "--max_new_tokens=8", "--top_k=5")
        n = int(re.search(r"prompt (\d+) tokens", proc.stdout).group(1))
        assert n > 8 * 104 and len(proc.stdout.splitlines()) > 2
    new = {"nope_logn", "nope_slope_grid", "nope_headslope_4L", "nope_headscale_8L"}
    modern = {"hybrid", "hybrid_swa", "hybrid_llama4", "hybrid_swa_llama4", "drope", "drope_short", "drope_zeroshot"}
    modern |= {f"{m}_{k}_4L" for m in ("hybrid", "hybrid_swa", "drope") for k in ("uniform", "headscale")}
    modern |= {f"{m}_window_L" for m in ("hybrid", "hybrid_swa", "drope", "drope_short", "drope_zeroshot")}
    assert set(rows) == expected | new | modern | beyond
    assert rows["nope_logn"]["slopes"] == round(1 / np.log(104), 4) and rows["nope_logn"]["scales"] is None
    assert rows["nope_headscale_8L"]["slopes"] is None and rows["nope_headscale_8L"]["scales"] is not None
    for name in new - {"nope_headscale_8L"}:  # positions <= L are unchanged: no cost at L, by construction
        assert rows[name]["loss"][0] == rows["nope"]["loss"][0] and rows[name]["lengths"] == rows["nope"]["lengths"]
    assert "Lambda that follows the position" in (out / "report.md").read_text()
    assert rows["hybrid_swa"]["arch"] == "rope+nope/2+window26" and rows["drope"]["pos_encoding"] == "nope"
    assert rows["hybrid_llama4"]["temp"] == 0.1 and rows["hybrid_llama4"]["loss"][0] == rows["hybrid"]["loss"][0]
    assert (out / "eval" / "loss_modern.png").exists() and (out / "eval" / "entropy_modern.png").exists()
    with open(out / "passkey" / "passkey.csv") as f:  # retrieval too: loss alone flatters a short reach
        assert {r["method"] for r in csv.DictReader(f)} >= {"hybrid", "hybrid_swa", "drope", "alibi",
                                                            "nope_ssmax", "nope_ssmax_headscale_4L"}
    proc = run_script("reproduce.py", "--preset=tiny", f"--out_dir={out}", "--grid_lengths=2,4", "--slopes",
                      f"--dataset={builtin_corpus}", check=False)
    assert proc.returncode == 2 and "--grid_lengths" in proc.stderr
    # the findings check reads the study's files; the sweep tabulates it
    proc = run_script("study/findings.py", str(out))
    assert all(f"({k}) " in proc.stdout for k in range(1, 9))  # (8): the passkey stage ran
    sweep = tmp_path / "sweep"
    shutil.copytree(out, sweep / "cpu_s1")
    proc = run_script("study/beyond.py", str(out), str(sweep / "cpu_s1"))  # a column a study
    loss = next(line for line in proc.stdout.splitlines() if line.startswith("| `alibi` |"))
    cells = loss.split("|")[2:5]  # loss at L, excess at 2L and 4L (8L not measured here)
    assert all("–" not in c and c.count(";") == 1 for c in cells), loss
    run_script("study/sweep.py", f"--out_dir={sweep}", "--recipes=cpu", "--seeds=1", "--table_only")
    assert "| cpu | 1 |" in (sweep / "sweep.md").read_text()
    proc = run_script("study/findings.py", str(tmp_path / "nothing"), check=False)
    assert proc.returncode == 2 and "no finished study" in proc.stderr


def test_search_scales_fitted_uniform_does_not_overwrite_the_grid(trained, tmp_path):
    out = tmp_path / "scales"
    run_script("search_scales.py", f"--ckpt={trained}", f"--out_dir={out}", "--lengths=2", "--fit_lengths=",
               "--windows=4", "--lam_step=0.5")
    grid = load_checkpoint(out / "uniform_grid_2L.pt")[0].get_head_scales()
    run_script("search_scales.py", f"--ckpt={trained}", f"--out_dir={out}", "--grid=false", "--fit_lengths=2",
               "--granularity=uniform", "--init=1.7", "--steps=3", "--lr=0.3")
    assert torch.equal(load_checkpoint(out / "uniform_grid_2L.pt")[0].get_head_scales(), grid)
    fitted = load_checkpoint(out / "uniform_2L.pt")[0].get_head_scales()
    assert not torch.equal(fitted, grid) and torch.all(fitted == fitted[0, 0])


def test_methods_compared_at_one_length_score_identical_windows(trained, tiny_dataset, tmp_path, monkeypatch):
    """Every row of evaluate.py's table, with or without the start token, is scored on the same
    target tokens at each length."""
    import sys
    import data
    import evaluate
    notoken = tmp_path / "notoken"
    run_script("train.py", f"--dataset={tiny_dataset}", f"--out_dir={notoken}", *TINY_TRAIN, "--max_iters=2",
               "--eval_interval=2", "--bos=false")
    seen = []
    windows = data.Dataset.windows

    def spy(self, length, *args, **kwargs):
        w = windows(self, length, *args, **kwargs)
        seen.append((self.bos, length, kwargs.get("subset"), w))
        return w
    monkeypatch.setattr(data.Dataset, "windows", spy)
    monkeypatch.setattr(sys, "argv", ["evaluate.py", f"--ckpts=a={trained},b={notoken / 'ckpt.pt'}",
                                      f"--out_dir={tmp_path / 'eval'}", "--lengths=1,2", "--windows=4",
                                      "--samples=false"])
    evaluate.main()
    by = {}
    for bos, n, subset, w in seen:
        assert subset == "eval"
        by.setdefault(n, []).append((bos, w))
    for n, rows in by.items():
        (bos_a, a), (bos_b, b) = rows
        assert bos_a and not bos_b and (a[:, 0] != b[:, 0]).all()  # only position 0 differs...
        assert torch.equal(a[:, 1:], b[:, 1:])                      # ...the targets are the same text
    res = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert res["methods"]["a"]["bos"] and not res["methods"]["b"]["bos"] and res["methods"]["a"]["windows"] == [4, 4]


def test_sample_starts_with_the_token_and_takes_scales(trained, tmp_path, monkeypatch, capsys):
    import sys
    import model
    import sample
    seen = []
    generate = model.GPT.generate
    monkeypatch.setattr(model.GPT, "generate", lambda self, x, *a, **k: seen.append(x) or generate(self, x, *a, **k))
    monkeypatch.setattr(sys, "argv", ["sample.py", f"--ckpt={trained}", "--start=def x", "--num_samples=2",
                                      "--max_new_tokens=40", "--top_k=5", "--device=cpu"])
    sample.main()
    out = capsys.readouterr().out.split("\n", 1)[1]
    assert out.count("---------------") == 2 and out.startswith("def x")
    (x,) = seen
    bos = load_checkpoint(trained)[0].config.vocab_size - 1  # the start token: the id after the last character
    assert x.shape == (2, 6) and (x[:, 0] == bos).all()  # the start token, then "def x"
    prompt = tmp_path / "p.txt"
    prompt.write_text("for x in")
    run_script("search_scales.py", f"--ckpt={trained}", f"--out_dir={tmp_path / 's'}", "--lengths=2",
               "--fit_lengths=", "--windows=4", "--lam_step=0.5")
    again = run_script("sample.py", f"--ckpt={trained}", f"--start=FILE:{prompt}", "--temperature=0",
                       f"--scales={tmp_path / 's' / 'uniform_grid_2L.pt'}", "--max_new_tokens=20", "--num_samples=1")
    assert again.stdout.split("\n", 1)[1].startswith("for x in")
    bad = run_script("sample.py", f"--ckpt={trained}", f"--scales={tmp_path / 'nope.pt'}", check=False)
    assert bad.returncode == 2 and "does not exist" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_search_scales_checks_its_inputs_before_the_grid(trained, tmp_path):
    proc = run_script("search_scales.py", f"--ckpt={trained}", f"--out_dir={tmp_path}", "--lengths=2",
                      "--fit_lengths=4", check=False)
    assert proc.returncode == 2 and "the fit at 4L starts from the grid there" in proc.stderr
    assert not (tmp_path / "grid.csv").exists()  # nothing measured
    # a length the validation split cannot hold: said before the grid measures the lengths before it
    proc = run_script("search_scales.py", f"--ckpt={trained}", f"--out_dir={tmp_path}", "--lengths=2,100000",
                      "--fit_lengths=", check=False)
    assert proc.returncode == 2 and "no val document holds" in proc.stderr and "(n=" not in proc.stdout
    # a grid run before whose lambda(i) fit is not a number: refused before anything is fitted
    (tmp_path / "uniform.json").write_text(json.dumps({"lengths": {"2L": {"fit_a": float("nan")}},
                                                       "fit": {"a": float("nan"), "length": 64, "r2": 1.0}}))
    proc = run_script("search_scales.py", f"--ckpt={trained}", f"--out_dir={tmp_path}", "--grid=false",
                      "--fit=slope", "--fit_lengths=2", check=False)
    assert proc.returncode == 2 and "give --init=VALUE" in proc.stderr
    # and study/set_slope.py refuses each bad value before writing any
    proc = run_script("study/set_slope.py", f"--ckpt={trained}", f"--out_dir={tmp_path}", "--values=0.5,grid",
                      check=False)
    assert proc.returncode == 2 and "has a = nan" in proc.stderr and not (tmp_path / "slope_0.5.pt").exists()
    proc = run_script("study/set_slope.py", f"--ckpt={trained}", f"--out_dir={tmp_path}", "--values=-1", check=False)
    assert proc.returncode == 2 and "a number >= 0" in proc.stderr


def test_rope_factor_grid_measures_plain_rope_when_its_grid_lacks_factor_1(trained, tmp_path):
    from model import save_checkpoint
    model, ckpt = load_checkpoint(trained, pos_encoding="rope")  # a RoPE model on the same data, untrained as such
    save_checkpoint(tmp_path / "rope.pt", model, **{k: ckpt[k] for k in ("config", "dataset", "iter_num")})
    losses = []
    for factors in ("2,4", "1,2"):
        out = tmp_path / factors.replace(",", "_")
        run_script("study/rope_grid.py", f"--ckpt={tmp_path / 'rope.pt'}", f"--out_dir={out}", "--lengths=2",
                   f"--factors={factors}", "--windows=2")
        best = json.loads((out / "rope_factors.json").read_text())["methods"]
        losses.append({m: best[m]["2L"]["loss_at_1"] for m in best})
    assert losses[0] == losses[1] and None not in losses[0].values()


def test_a_stage_stamped_with_another_protocol_runs_again(tmp_path):
    from evaluate import PROTOCOL
    from study.stages import Stages
    stages = Stages(str(tmp_path), force=False)
    marker = tmp_path / "ran"
    cmd = ["-c", f"open({str(marker)!r}, 'a').write('x')"]
    stages.run("s", cmd, [str(marker)])
    Stages(str(tmp_path), force=False).run("s", cmd, [str(marker)])
    assert marker.read_text() == "x"  # the same command and protocol: skipped
    stamp = tmp_path / "stages" / "s.json"
    stamp.write_text(json.dumps(json.loads(stamp.read_text()) | {"protocol": PROTOCOL - 1}))
    Stages(str(tmp_path), force=False).run("s", cmd, [str(marker)])
    assert marker.read_text() == "xx"  # measured under another protocol: run again


def test_evaluate_and_passkey_on_another_dataset_say_so_in_one_line(trained, tmp_path):
    from conftest import make_docs
    from data import CharTokenizer, write_dataset
    other = tmp_path / "other"
    docs = make_docs(6, seed=9)
    write_dataset(other, docs[:5], docs[5:], CharTokenizer.from_texts(["xyz\n"] + [t for _, t in docs]), {"corpus": "x"})
    for script, extra in (("evaluate.py", ["--lengths=1"]), ("study/passkey.py", ["--lengths=1"])):
        proc = run_script(script, f"--ckpts=a={trained}", f"--out_dir={tmp_path / script}", f"--dataset={other}",
                          *extra, check=False)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "token ids, the checkpoint" in proc.stderr or "other text" in proc.stderr


def test_sweep_screen_trains_both_models_per_seed_and_tabulates_them(tmp_path, builtin_corpus):
    out = tmp_path / "sweep"  # the tiny recipe on the built-in corpus, prepared in the temp folder
    run_script("study/sweep.py", "--screen", "--recipes=tiny", "--seeds=1,2", f"--out_dir={out}",
               f"--dataset={builtin_corpus}")
    rows = json.loads((out / "screen.json").read_text())["rows"]
    assert {(r["seed"], r["pos_encoding"]) for r in rows} == {(1, "nope"), (1, "rope"), (2, "nope"), (2, "rope")}
    assert all(r["final_val_bpb"] > 0 for r in rows)
    assert f"| tiny | {builtin_corpus} |" in (out / "screen.md").read_text()
    again = run_script("study/sweep.py", "--screen", "--recipes=tiny", "--seeds=1,2", f"--out_dir={out}",
                       f"--dataset={builtin_corpus}")
    assert again.stdout.count("done before, skipped") == 4
