"""
The lab's numbers (classroom/lab.md) read from finished studies, one per seed, and their
range over the seeds: the expected ranges a teacher checks the lab against
(python -m classroom ranges).
"""

from pathlib import Path

import numpy as np

from classroom.report import csv_cell, plain
from common import UserError, read_json, write_csv, write_json
from evaluate import excess, taken_back
from study.findings import entropy_onset, loss_at, measures, onset
from study.plot import head_entropy_near, read_head_table


def lab_numbers(run):
    """The numbers the lab asks for (classroom/lab.md), from one study folder."""


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
        out["one lambda per layer takes back (%)"] = 100 * taken_back(
            res, "nope_layerscale_4L", "nope", 4 * L)
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


EXPECTED = Path(__file__).resolve().parents[1] / "classroom" / "lab_ranges.json"


KEY_SEEDS = range(1337, 1342)  # the seeds the expected ranges were measured on: never a student's


def assign_seeds(students_csv, out, first=2001):
    """ranges --assign: a roster with one seed a student (from `first`, none of the key's), from
    a CSV with a `folder` column (the names the hand-ins carry)."""
    from classroom.gradebook import read_roster  # the teacher's: not in a student copy, as lab is

    roster, columns = read_roster(students_csv)
    if not out:
        raise UserError(
            "ranges --assign writes a roster with one seed a student: give --roster=FILE"
        )
    seeds = (s for s in range(first, first + 10 * len(roster) + 10) if s not in KEY_SEEDS)
    kept = [c for c in columns if c != "seed"]
    write_csv(out, [[name, *[info[c] for c in kept], next(seeds)]
                    for name, info in sorted(roster.items())],
              ["folder", *kept, "seed"])
    print(f"wrote {out}: one seed a student for {len(roster)} students "
          "(none of the key's, 1337-1341)")


def read_handin(f):
    """(seed, {name: value}) of one hand-in; ValueError (why, in words) when it is not one."""

    try:
        got = read_json(f)
    except (ValueError, UnicodeDecodeError):
        got = None
    if not isinstance(got, dict) or not isinstance(got.get("numbers"), dict):
        raise ValueError("not a hand-in of `ranges --json` (python -m classroom ranges "
                         "out/lab_S --json=FILE)")
    seeds = got.get("seeds")
    if not isinstance(seeds, list) or not seeds:
        raise ValueError("no seed in the hand-in: run the study with your assigned seed")
    if len(seeds) != 1:
        raise ValueError(f"{len(seeds)} seeds in one hand-in: one study, your seed")
    numbers = {}
    for k, v in got["numbers"].items():
        v = v[0] if isinstance(v, list) and len(v) == 1 else v
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"the number {plain(k, 60)!r} is not one number")
        numbers[k] = float(v)
    return seeds[0], numbers


def check_handins(folder, cfg):
    """Each student's hand-in (the JSON of `ranges out/lab_S --json=FILE`) against the expected
    ranges (classroom/lab_ranges.json): one row a student, the numbers outside and by how much.
    A number counts as inside when, rounded as it is printed, it lies in the range. With
    --roster (a `folder` and a `seed` column: ranges --assign makes one), the hand-in's seed
    must be the student's own; numbers equal to the key's or to another student's are flagged.
    A malformed hand-in is a row with its reason, never a stop."""

    if not EXPECTED.exists():
        raise UserError(
            f"{EXPECTED} is missing: the expected ranges are the teacher's (not in a student copy)"
        )
    folder = Path(folder)
    files = sorted(f for f in folder.iterdir() if f.is_file() and f.suffix.lower() == ".json") \
        if folder.is_dir() else []
    if not files:
        raise UserError(
            f"{folder} holds no .json hand-in: each student runs "
            "python -m classroom ranges out/lab_S --json=NAME.json"
        )
    from classroom.gradebook import read_roster  # the teacher's: not in a student copy, as lab is

    roster, columns = read_roster(cfg.roster)
    if roster and "seed" not in columns:
        raise UserError(f"--roster={cfg.roster} has no `seed` column: ranges --assign makes one")
    key = read_json(EXPECTED)
    expected = key["numbers"]
    key_rows = [{k: v[i] for k, v in expected.items() if i < len(v)}
                for i in range(len(key.get("seeds", [])))]
    rows, seen = [], {}
    for f in files:
        row = {"student": plain(f.stem, 80), "seed": "", "outside": "", "numbers": 0, "details": ""}
        try:
            seed, numbers = read_handin(f)
        except (UserError, OSError, ValueError, TypeError) as e:
            rows.append(row | {"details": plain(e, 300)})
            continue
        row |= {"seed": plain(seed, 20), "numbers": len(numbers)}
        problems = []
        mine = roster.get(f.stem, {}).get("seed") if roster else None
        if roster and mine is None:
            problems.append("not in the roster")
        elif roster and str(seed) != str(mine):
            problems.append(f"seed {plain(seed, 20)}, not the student's own {mine}")
        if str(seed) in {str(s) for s in KEY_SEEDS}:
            problems.append(f"seed {seed} is one of the key's")
        for i, k_row in enumerate(key_rows):
            if k_row and all(abs(numbers.get(k, float("nan")) - v) < 1e-9
                             for k, v in k_row.items()):
                problems.append(f"the numbers are the key's (seed {key['seeds'][i]})")
        same = next((n for n, other in seen.items() if other == numbers), None)
        if same:
            problems.append(f"the same numbers as {same}")
        seen[row["student"]] = numbers
        outside, missing = [], [k for k in expected if k not in numbers]
        for k, values in expected.items():
            if k not in numbers:
                continue
            d = digits_of(k)
            v = round(numbers[k], d)
            lo, hi = round(min(values), d), round(max(values), d)
            if v < lo or v > hi:
                by = lo - v if v < lo else v - hi
                outside.append(
                    f"{k}: {v:.{d}f}, {'below' if v < lo else 'above'} "
                    f"{lo:.{d}f} – {hi:.{d}f} by {by:.{d}f}"
                )
        details = "; ".join(problems + outside
                            + ([f"missing: {', '.join(missing)}"] if missing else []))
        rows.append(row | {"outside": len(outside),
                           "details": details or "every number inside its range"})
    print("| student | seed | numbers | outside | which, and by how much |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['student']} | {r['seed']} | {r['numbers']} | {r['outside']} | {r['details']} |"
        )
    if cfg.csv:
        header = ["student", "seed", "numbers", "outside", "details"]
        write_csv(cfg.csv, [[csv_cell(v) if isinstance(v, str) else v for v in map(r.get, header)]
                            for r in rows], header)
    return rows
