"""plot.py: every figure is drawn from saved files alone (no checkpoint exists here), each is a
real PNG, and a results file with only some rows draws what it can and says what is missing."""

import csv
import json

import numpy as np
import pytest

from conftest import run_script
from study import plot
from study.add_facts import facts_from_name

L = 32
LENGTHS = [L, 2 * L, 4 * L, 8 * L]
PNG = b"\x89PNG\r\n\x1a\n"


def curve(n, rise, seed):
    """A per-position loss: flat up to L, then rising by `rise` nats at 8L, plus noise."""
    i = np.arange(1, n + 1)
    return (2.0 + rise * np.clip(np.log2(i / L), 0, None) / 3 + np.random.default_rng(seed).normal(0, 0.1, n)).tolist()


def write_eval(folder, names):
    """results.json, positions.json and entropy.json as evaluate.py writes them, for `names`."""
    folder.mkdir(parents=True, exist_ok=True)
    rise = {"nope": 0.6, "rope": 0.7, "nope_notoken": 0.2, "nope_uniform_4L": 0.4, "nope_headscale_4L": 0.3,
            "rope_yarn_ft_4L": 0.1, "rope_ntk_zeroshot": 0.3, "nope_headslope_4L": 0.3}
    methods, positions, entropy = {}, {}, {}
    n = LENGTHS[-1]
    for k, name in enumerate(names):
        window = name.endswith("window_L")
        base = name[:-len("_window_L")] if window else name
        r = 0.0 if window else rise.get(name, 0.5)
        loss = [2.0 + r * np.log2(m / L) / 3 for m in LENGTHS]
        methods[name] = {"lengths": LENGTHS, "loss": loss, "tail_loss": loss, "bpb": loss, "context": L if window else None,
                         "scales": None if name in ("nope", "rope", "nope_notoken") or window else 1.3,
                         "slopes": 0.3 if "log" in name else None, "bos": base != "nope_notoken",
                         "pos_encoding": "rope" if base.startswith("rope") else "nope",
                         **facts_from_name(name, L)}  # the facts evaluate.py records
        positions[name] = {"length": n, "bin": 2, "loss_per_position": curve(n, r, k)}
        if not window and base.startswith("nope"):
            i = np.arange(1, n + 1)
            per_layer = np.stack([np.log2(i) * 0.6 + 0.3 * l + r * np.clip(np.log2(i / L), 0, None) for l in range(2)])
            bins = (np.arange(n // 2) + 0.5) * 2 + 0.5
            entropy[name] = {"length": n, "bin": 2, "positions": bins.tolist(),
                             "entropy_bits": np.repeat(per_layer.reshape(2, 1, n // 2, 2).mean(-1), 2, 1).tolist(),
                             "layer_bits_per_position": per_layer.tolist()}
    (folder / "results.json").write_text(json.dumps({"train_len": L, "methods": methods}))
    (folder / "positions.json").write_text(json.dumps(positions))
    (folder / "entropy.json").write_text(json.dumps(entropy))


def write_search(folder):
    folder.mkdir(parents=True, exist_ok=True)
    lengths = {}
    with open(folder / "grid.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["length", "lam", "loss", "tail_loss"])
        for k, best in ((2, 1.1), (4, 1.3), (8, 1.4)):
            for lam in np.arange(1, 2.55, 0.05):
                w.writerow([k * L, round(lam, 2), 2 + (lam - best) ** 2, 2 + (lam - best) ** 2])
            pos = ((np.arange(k * 4) + 0.5) * 8 + 0.5).tolist()
            lengths[f"{k}L"] = {"length": k * L, "best_lam": best, "positions": pos,
                                "best_lam_per_position": [1 + 0.3 * max(np.log(p / L), 0) for p in pos]}
    (folder / "uniform.json").write_text(json.dumps({"train_len": L, "lengths": lengths,
                                                     "fit": {"length": 8 * L, "a": 0.3, "r2": 0.98}}))
    for stem, col in (("head_4L", "scale"), ("headslope_4L", "slope")):
        with open(folder / f"{stem}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["layer", "head", col])
            w.writerows([[l, h, 1 + 0.1 * (l + h)] for l in range(2) for h in range(2)])
        (folder / f"{stem}.json").write_text(json.dumps({"length": 4 * L}))


ALL = ["nope", "rope", "nope_notoken", "nope_uniform_4L", "nope_headscale_4L", "nope_headslope_4L",
       "rope_yarn_ft_4L", "rope_ntk_zeroshot", "nope_window_L", "rope_window_L", "nope_notoken_window_L"]


def is_png(path):
    return path.exists() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG


def test_a_study_draws_every_figure_from_its_files(tmp_path):
    study = tmp_path / "study"
    write_eval(study / "eval", ALL)
    write_search(study / "scales")
    proc = run_script("study/plot.py", f"--study={study}")  # no checkpoint exists: files alone
    for fn in ("hero.png", "loss_nope_remedies.png", "loss_rope_extensions.png", "loss_length_following.png",
               "loss_start_token.png", "position_loss.png", "entropy.png", "lambda_grid.png", "scales_head_4L.png",
               "scales_headslope_4L.png", "entropy_vs_scale_4L.png"):
        assert is_png(study / "eval" / fn), fn
    assert "drew" in proc.stdout and "skipped" not in proc.stdout


def test_some_rows_draw_what_they_can_and_say_what_is_missing(tmp_path):
    write_eval(tmp_path, ["nope", "nope_uniform_4L"])
    drawn, skipped = plot.draw_eval(str(tmp_path))
    assert "position_loss.png" in drawn and "entropy.png" in drawn and "loss_nope_remedies.png" in drawn
    assert "hero.png" not in drawn and any("hero.png (no rope, nope_window_L)" in s for s in skipped)
    proc = run_script("study/plot.py", f"--eval_dir={tmp_path}")
    assert len([ln for ln in proc.stdout.splitlines() if ln.startswith("skipped")]) == 1


def test_a_method_looks_the_same_in_every_figure():
    """A row's style comes from its facts (evaluate.py's), never from its name."""
    def style(name):
        return plot.style(facts_from_name(name, L) | {"context": L if name.endswith("window_L") else None}, L)
    colours = {style(n)["color"] for n in ("nope", "rope", "nope_uniform_4L", "nope_headscale_4L",
                                           "rope_yarn_ft_4L", "nope_headslope_4L")}
    assert len(colours) == 6  # the hero's rows are told apart by colour alone
    assert style("nope_window_L")["color"] == style("nope")["color"]
    assert style("nope_window_L")["ls"] == ":"
    assert style("nope_uniform_2L")["color"] != style("nope_uniform_4L")["color"]  # a shade per member


def test_the_family_figures_read_facts_not_names(tmp_path):
    """The same rows under other names (row0, row1, ...) draw the same family figures, pixel for
    pixel: which rows a figure holds, their order, styles and labels come from their facts."""
    names = ["nope", "rope", "nope_uniform_2L", "nope_uniform_4L", "nope_headscale_4L",
             "nope_headslope_4L", "rope_yarn_ft_4L", "rope_ntk_zeroshot", "nope_window_L",
             "rope_window_L"]
    write_eval(tmp_path / "a", names)
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    alias = {n: f"row{i}" for i, n in enumerate(names)}
    renamed = results | {"methods": {alias[n]: m | {"reference": alias.get(m.get("reference"))}
                                     for n, m in results["methods"].items()}}
    drawn = []
    for folder, res in (("a", results), ("b", renamed)):
        (tmp_path / folder).mkdir(exist_ok=True)
        F = plot.Figures(str(tmp_path / folder))
        plot.families(F, res)
        drawn.append(F.drawn)
    assert drawn[0] == drawn[1] and len(drawn[0]) >= 3, drawn
    for fn in drawn[0]:
        assert (tmp_path / "a" / fn).read_bytes() == (tmp_path / "b" / fn).read_bytes(), fn


def test_moving_average_keeps_the_length_and_the_mean_of_a_line():
    y = np.arange(10.0)
    m = plot.moving_average(y, 4)
    assert len(m) == 10 and np.allclose(m[2:-2], y[2:-2] - 0.5)  # the window [i-2, i+2)
    assert plot.moving_average([3.0] * 5, 3).tolist() == [3.0] * 5


def test_passkey_and_screen_figures(tmp_path):
    pk = tmp_path / "pk"
    pk.mkdir()
    rows = [(m, n, d / 10, float(d < 5), 5) for m in ("nope", "rope") for n in (104, 208) for d in range(10)]
    drawn = plot.draw_passkey(str(pk), rows, {"nope": 0.5, "rope": 0.5}, 104,
                              {"nope": {"model": "nope"}, "rope": {"model": "rope"}})
    assert "passkey_all.png" in drawn and is_png(pk / "passkey_all.png")
    screen = tmp_path / "screen.json"
    rows = [{"recipe": r, "seed": s, "pos_encoding": pe, "tokens": t, "final_val_loss": v * (1.2 if pe == "nope" else 1),
             "final_val_bpb": v} for r, t in (("bpe", 1e6), ("bpe_x2", 2e6)) for s in (1, 2)
            for pe, v in (("nope", 2.0), ("rope", 1.8))]
    screen.write_text(json.dumps({"rows": rows}))
    run_script("study/plot.py", f"--screen={screen}")
    assert is_png(tmp_path / "gap_vs_tokens.png")


@pytest.mark.parametrize("args, message", [(["--eval_dir=/nonexistent"], "evaluate first"),
                                           ([], "nothing to draw"), (["--screen=/nonexistent.json"], "sweep.py --screen")])
def test_plot_bad_input(args, message):
    proc = run_script("study/plot.py", *args, check=False)
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
