"""
The lab's numbers (classroom/lab.md) read from finished studies, one per seed, and their
range over the seeds: the expected ranges a teacher checks the lab against
(python tools/classroom.py ranges).
"""

from pathlib import Path

from tools.cli import UserError


def lab_numbers(run):
    """The numbers the lab asks for (classroom/lab.md), from one study folder."""
    import numpy as np

    from evaluate import excess
    from tools.findings import entropy_onset, loss_at, measures, onset
    from tools.plot import head_entropy_near, read_head_table
    from tools.cli import read_json

    ev = Path(run) / "eval"
    res, pos = read_json(ev / "results.json"), read_json(ev / "positions.json")
    uni, ent = read_json(Path(run) / "scales" / "uniform.json"), read_json(ev / "entropy.json")
    L, rows = res["train_len"], res["methods"]
    out = {
        "NoPE against RoPE at L (%)": 100 * (loss_at(res, "nope", L) / loss_at(res, "rope", L) - 1)
    }
    for m in ("nope", "rope"):
        out[f"loss onset, {m} (L)"] = onset(pos[m]["positions"], pos[m]["loss"], L, 0.1) / L
    out["entropy onset, nope (L)"] = entropy_onset(ent["nope"], L) / L
    for k, v in excess(res, "nope").items():
        if k > L:
            out[f"NoPE's excess at {k // L}L (nats)"] = v
    for k, v in uni["lengths"].items():
        out[f"best uniform lambda at {k}"] = v["best_lam"]
    out["a of lambda(i) = 1 + a ln(i/L)"], out["R^2 of that fit"] = (
        uni["fit"]["a"],
        uni["fit"]["r2"],
    )
    took = measures(res)
    out["HeadScale at 4L takes back (%)"] = 100 * took["recovered_nope_headscale_4L"]
    out["one lambda for all takes back (%)"] = 100 * took["recovered_nope_uniform_4L"]
    out["HeadScale's cost at L (nats)"] = loss_at(res, "nope_headscale_4L", L) - loss_at(
        res, "nope", L
    )
    if "nope_layerscale_4L" in rows:  # lab question 5: one lambda per layer
        layer = excess(res, "nope_layerscale_4L")[4 * L]
        out["one lambda per layer takes back (%)"] = 100 * (1 - layer / took["rise_4L"])
    head = Path(run) / "scales" / "head_4L.csv"
    h = head_entropy_near(ent["nope"], 4 * L)
    if (
        head.exists() and h is not None
    ):  # lab question 6: lower-entropy heads, larger lambda? (plot.py's Fig. 5)
        x, y = h.ravel(), read_head_table(head).ravel()
        rank = lambda v: np.argsort(np.argsort(v))  # noqa: E731  (no ties in real numbers)
        out["rank correlation, head entropy vs lambda"] = float(np.corrcoef(rank(x), rank(y))[0, 1])
    if {"nope_mask", "rope_mask"} <= set(
        rows
    ):  # lab question 8: a sliding-window mask against recomputing
        for m in ("nope", "rope"):
            out[f"{m}: mask minus recomputed, at 4L (nats)"] = loss_at(
                res, f"{m}_mask", 4 * L
            ) - loss_at(res, f"{m}_window_L", 4 * L)
    return {k: float(v) for k, v in out.items()}


def ranges(runs, cfg):
    """Print the lab's numbers of each study and their range; with cfg.json, write them."""
    from tools.cli import read_json, write_json

    for r in runs:
        if not (Path(r) / "eval" / "results.json").exists():
            raise UserError(
                f"{r} is not a finished study: python reproduce.py --seed=N --out_dir={r}"
            )
    seeds = [read_json(Path(r) / "nope" / "summary.json").get("seed", "?") for r in runs]
    numbers = [lab_numbers(r) for r in runs]
    keys = [k for k in numbers[0] if all(k in n for n in numbers)]
    print("| quantity | " + " | ".join(f"seed {s}" for s in seeds) + " | range |")
    print("|---|" + "---|" * (len(runs) + 1))
    for k in keys:
        v = [n[k] for n in numbers]
        digits = digits_of(k)
        cells = " | ".join(f"{x:.{digits}f}" for x in v)
        print(f"| {k} | {cells} | {min(v):.{digits}f} – {max(v):.{digits}f} |")
    if cfg.json:
        write_json(
            cfg.json,
            {
                "runs": [str(r) for r in runs],
                "seeds": seeds,
                "numbers": {k: [n[k] for n in numbers] for k in keys},
            },
        )


def digits_of(quantity):
    """Decimals a number of the lab is printed with (and checked at)."""
    return 1 if "%" in quantity else 2 if "(L)" in quantity or "lambda at" in quantity else 3


EXPECTED = Path(__file__).resolve().parents[2] / "classroom" / "lab_ranges.json"


def check_handins(folder, cfg):
    """Each student's hand-in (the JSON of `ranges out/lab_S --json=FILE`) against the expected
    ranges (classroom/lab_ranges.json): one row a student, the numbers outside and by how much.
    A number counts as inside when, rounded as it is printed, it lies in the range."""
    from tools.cli import atomic_write_text, read_json

    if not EXPECTED.exists():
        raise UserError(
            f"{EXPECTED} is missing: the expected ranges are the teacher's (not in a student copy)"
        )
    folder = Path(folder)
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        raise UserError(
            f"{folder} holds no .json hand-in: each student runs "
            "python tools/classroom.py ranges out/lab_S --json=NAME.json"
        )
    expected = read_json(EXPECTED)["numbers"]
    rows = []
    for f in files:
        try:
            got = read_json(f)
            numbers, seed = got["numbers"], got.get("seeds", ["?"])[0]
        except (UserError, OSError, KeyError, TypeError, ValueError):
            rows.append(
                {
                    "student": f.stem,
                    "seed": "",
                    "outside": "",
                    "numbers": 0,
                    "details": "not a hand-in of `ranges --json` (python tools/classroom.py ranges out/lab_S "
                    "--json=FILE)",
                }
            )
            continue
        outside, missing = [], [k for k in expected if k not in numbers]
        for k, values in expected.items():
            if k not in numbers:
                continue
            d = digits_of(k)
            v = round(float(numbers[k][0]), d)
            lo, hi = round(min(values), d), round(max(values), d)
            if v < lo or v > hi:
                by = lo - v if v < lo else v - hi
                outside.append(
                    f"{k}: {v:.{d}f}, {'below' if v < lo else 'above'} {lo:.{d}f} – {hi:.{d}f} by {by:.{d}f}"
                )
        details = "; ".join(outside + ([f"missing: {', '.join(missing)}"] if missing else []))
        rows.append(
            {
                "student": f.stem,
                "seed": seed,
                "outside": len(outside),
                "numbers": len(numbers),
                "details": details or "every number inside its range",
            }
        )
    print("| student | seed | numbers | outside | which, and by how much |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['student']} | {r['seed']} | {r['numbers']} | {r['outside']} | {r['details']} |"
        )
    if cfg.csv:
        import csv
        import io

        text = io.StringIO()
        w = csv.DictWriter(
            text, ["student", "seed", "numbers", "outside", "details"], lineterminator="\n"
        )
        w.writeheader()
        w.writerows(rows)
        atomic_write_text(cfg.csv, text.getvalue())
    return rows
