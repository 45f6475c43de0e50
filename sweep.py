"""
The laptop recipe: run the study for several recipes and seeds, and tabulate which of the
paper's findings hold (findings.py) with the numbers, the seeds and the wall time.

    python sweep.py --recipes=cpu,lr3e-3 --seeds=1337,1338
    python sweep.py --recipes=cpu,cpu_long --table_only      # rebuild sweep.md from the runs

Each (recipe, seed) is one `python reproduce.py` into out_dir/RECIPE_sSEED (resumable, like the
study itself; the RoPE extension baselines, which no finding reads, are left out, and the
passkey stage too unless --passkey). Two seeds for every claim: differences smaller than the
spread between seeds are noise.
"""

import os
import subprocess
import sys
from dataclasses import dataclass, field

from common import ROOT, UserError, format_seconds, parse_config, read_json, run_main, atomic_write_text

# recipe -> (preset, overrides of reproduce.py)
RECIPES = {
    "cpu": ("cpu", []),                                     # the CPU preset: 4x4x128, L=128, 800 x 32 x 128 tokens
    "cpu_long": ("cpu_long", []),                           # twice the tokens (batch 64), evaluation to 16L
    "lr1e-3": ("cpu", ["--learning_rate=1e-3"]),            # the first measurement's NoPE learning rate
    "lr3e-3": ("cpu", ["--learning_rate=3e-3"]),
    "L64": ("cpu", ["--block_size=64", "--batch_size=64"]),  # same tokens per step, shorter L
    "L256": ("cpu", ["--block_size=256", "--batch_size=16"]),
    "deep6": ("cpu", ["--n_layer=6"]),
    "wide192": ("cpu", ["--n_embd=192", "--n_head=6"]),
    "shakespeare": ("cpu", ["--dataset=shakespeare_char"]),  # needs data/shakespeare_char prepared
}


@dataclass
class SweepConfig:
    recipes: list[str] = field(default_factory=lambda: ["cpu"])    # names from RECIPES in sweep.py
    seeds: list[int] = field(default_factory=lambda: [1337, 1338])  # training seeds, each a full study
    passkey: bool = False               # also run the passkey stage (finding 8; about 12 more minutes a study)
    out_dir: str = "out/sweep"          # one folder per (recipe, seed), plus sweep.md
    table_only: bool = False            # only rebuild the table from finished runs


def core_seconds(run):
    """Wall time of the stages findings 1-7 read: training (train.py's own clock, which counts
    across a resume), the lambda search and its ablations, the evaluations; not the RoPE
    extension baselines or the passkey stage."""
    stages = os.path.join(run, "stages")
    train = sum(read_json(os.path.join(run, pe, "summary.json"))["wall_seconds"] for pe in ("nope", "rope", "nope_notoken")
                if os.path.exists(os.path.join(run, pe, "summary.json")))
    rest = sum(read_json(os.path.join(stages, f))["seconds"] for f in os.listdir(stages)
               if f in ("search.json", "evaluate.json", "evaluate_window.json") or f.startswith("ablation"))
    return train + rest


def main():
    cfg = parse_config(SweepConfig, description=__doc__)
    unknown = [r for r in cfg.recipes if r not in RECIPES]
    if unknown:
        raise UserError(f"unknown recipe(s) {unknown}; known: {', '.join(RECIPES)}")
    rows = []
    for recipe in cfg.recipes:
        runs = [os.path.join(cfg.out_dir, f"{recipe}_s{seed}") for seed in cfg.seeds]
        if not cfg.table_only:
            for seed, run in zip(cfg.seeds, runs):
                preset, overrides = RECIPES[recipe]
                cmd = [sys.executable, "reproduce.py", f"--preset={preset}", f"--out_dir={run}", f"--seed={seed}",
                       *overrides, "--rope_baselines=false", f"--passkey={str(cfg.passkey).lower()}"]
                print(f"[sweep] {' '.join(cmd[1:])}", flush=True)
                if subprocess.run(cmd, cwd=ROOT).returncode != 0:
                    raise UserError(f"the study for {recipe} seed {seed} failed; rerun to continue where it stopped")
        done = [r for r in runs if os.path.exists(os.path.join(r, "eval", "results.json"))]
        if not done:
            continue
        out_json = os.path.join(cfg.out_dir, f"{recipe}.json")
        subprocess.run([sys.executable, "findings.py", *done, f"--name={recipe}", f"--out={out_json}"], cwd=ROOT,
                       check=True)
        f = read_json(out_json)
        rows.append((recipe, [int(r.rsplit("_s", 1)[1]) for r in done], [core_seconds(r) for r in done], f))
    keys = sorted({k for *_, f in rows for k in f["findings"]}, key=int)
    lines = ["| recipe | seeds | core wall time per seed | " + " | ".join(f"({k})" for k in keys)
             + " | rise at 4L (nope - nope_window_L) | recovered at 4L: uniform / HeadScale |",
             "|---|---|---|" + "---|" * (len(keys) + 2)]
    for recipe, seeds, secs, f in rows:
        cells = []
        for k in keys:
            x = f["findings"].get(k)
            cells.append("" if x is None else ("**yes**" if x["holds"] else "no") + ": " + " / ".join(x["evidence"]))
        m = f.get("measures", {})
        rise = " / ".join(f"{v:+.3f}" for v in m.get("rise_4L", []))
        rec = " / ".join(f"{u:.0%}, {h:.0%}" for u, h in zip(m.get("recovered_nope_uniform_4L", []),
                                                             m.get("recovered_nope_headscale_4L", [])))
        lines.append(f"| {recipe} | {', '.join(map(str, seeds))} | {', '.join(format_seconds(s) for s in secs)} | "
                     + " | ".join(cells) + f" | {rise} | {rec} |")
    table = "\n".join(lines) + "\n"
    atomic_write_text(os.path.join(cfg.out_dir, "sweep.md"), table)
    print(table)


if __name__ == "__main__":
    run_main(main)
