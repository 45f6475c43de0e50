"""
Give a results.json written before evaluate.py recorded each row's facts (before 2026-12-07) those
facts, once: model, remedy, variant, fit_length and reference (evaluate.facts, reference_of).
Such a file says what a row is only in the row's name, so this script, and no other code, reads
facts from names: by reproduce.py's naming rules. Every reference it derives is checked against
the rule the file was written under (the name-based reference_of of before, below); if one
differs, nothing is written.

    python study/add_facts.py docs/gpu/study/eval/results.json [more results.json ...]
"""

import re
import sys
from pathlib import Path

if not __package__:  # run as a script, not imported: the repository's modules first
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import UserError, read_json, run_main, write_json  # noqa: E402
from evaluate import reference_of  # noqa: E402

REMEDY = {"uniform": "uniform", "headscale": "headscale", "layer": "layerscale",
          "headslope": "headslope", "layerslope": "layerslope", "uniformslope": "uniformslope"}


def facts_from_name(name, L):
    """reproduce.py's row names, read back: {model, remedy, variant, fit_length}."""
    out = {"model": name, "remedy": None, "variant": None, "fit_length": None}
    if name.endswith("_window_L"):
        return out | {"model": name.removesuffix("_window_L")}
    if m := re.fullmatch(r"rope_(pi|ntk|yarn)_zeroshot", name):
        return out | {"model": "rope", "remedy": f"{m[1]}_zeroshot"}
    if m := re.fullmatch(r"rope_(pi|ntk|yarn)_ft_([\d.]+)L", name):
        return out | {"model": "rope", "remedy": f"{m[1]}_ft", "fit_length": round(float(m[2]) * L)}
    if m := re.fullmatch(r"(.+)_llama4", name):
        return out | {"model": m[1], "remedy": "llama4"}
    if m := re.fullmatch(r"(.+?)_(uniform|headscale|layer|headslope|layerslope|uniformslope)_"
                         r"([\d.]+)L(?:_(noclamp|noinit))?", name):
        return out | {"model": m[1], "remedy": REMEDY[m[2]], "fit_length": round(float(m[3]) * L),
                      "variant": m[4]}
    if name in ("nope_logn", "nope_slope_grid"):
        return out | {"model": "nope", "remedy": name.removeprefix("nope_")}
    return out


def name_reference_of(results, name):
    """The reference rule of the files before facts (evaluate.py until 2026-12-07): the same kind
    of model (position encoding and layout, start-token mode, precision) reading only its last L
    at lambda = 1, the one named NAME_window_L with the longest NAME that begins the row's name."""
    m, L = results["methods"][name], results["train_len"]
    if m.get("context"):
        return None
    arch = lambda x: x.get("arch", x.get("pos_encoding"))  # noqa: E731
    refs = [r for r, x in results["methods"].items()
            if x.get("context") == L and x.get("context_mode", "recompute") == "recompute"
            and x.get("scales") is None and x.get("slopes") is None and not x.get("temp")
            and arch(x) == arch(m) and x.get("bos") == m.get("bos")
            and (None in (x.get("dtype"), m.get("dtype")) or x.get("dtype") == m.get("dtype"))]

    def rank(r):
        stem = r.removesuffix("_window_L")
        prefix = name == stem or name.startswith(stem + "_")
        return (not r.endswith("window_L"), not prefix, -len(stem), r)
    return min(refs, key=rank) if refs else None


def add_facts(path):
    """The facts of every row of one results.json, checked; returns the rows' references."""
    results = read_json(path)
    L, methods = results["train_len"], results["methods"]
    before = {name: name_reference_of(results, name) for name in methods}
    for name, row in methods.items():
        row.update({k: v for k, v in facts_from_name(name, L).items() if k not in row})
    after = {name: reference_of(results, name) for name in methods}
    wrong = [f"{n}: {after[n]} (the file's rule: {before[n]})" for n in methods
             if after[n] != before[n]]
    if wrong:
        raise UserError(f"{path}: references differ from the file's own rule, nothing written: "
                        + "; ".join(wrong))
    for name, row in methods.items():
        row["reference"] = after[name]
    write_json(path, results)
    return after


def main():
    paths = sys.argv[1:]
    if not paths or any(p.startswith("-") for p in paths):
        raise UserError("give the results.json files: python study/add_facts.py PATH [PATH ...]")
    for path in paths:
        refs = add_facts(path)
        print(f"{path}: {len(refs)} rows, every reference as before "
              f"({sum(r is not None for r in refs.values())} with one)")


if __name__ == "__main__":
    run_main(main)
