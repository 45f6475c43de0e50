"""
Choosing a laptop recipe, in two steps.

1. The screen (--screen): training alone. For each recipe and seed, a NoPE model and its RoPE
   twin trained identically (train.py), then their validation loss at L on train.py's fixed
   monitor windows (256 windows of L positions, seed 1234: the same text whatever the training
   seed or batch size), NoPE/RoPE, bits per byte (to compare tokenizers) and wall time.
   About 10 minutes a recipe and seed at the cpu preset's budget (two models of ~5 minutes).

    python study/sweep.py --screen --recipes=char,bpe1024,bpe2048 --seeds=1337,1338
    # -> out/sweep/screen.md

2. The study (the default): one `python reproduce.py` per recipe and seed, and which of the
   paper's findings hold in every seed (findings.py), with the numbers and the wall time.

    python study/sweep.py --recipes=cpu,lr3e-3 --seeds=1337,1338    # -> out/sweep/sweep.md
    python study/sweep.py --recipes=cpu,cpu_long --table_only       # rebuild the table only

Each run is resumable and skipped when done with the same command (like reproduce.py's stages).
A study leaves out the RoPE extension baselines, which no finding reads, and the passkey stage
unless --passkey. Two seeds for every claim: differences smaller than the spread between seeds
are noise.
"""

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

if not __package__:  # run as a script, not imported: the repository's modules first
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (ROOT, UserError, atomic_write_text, format_seconds, parse_config, read_json,
                       run_main, write_json)
from study.stages import Stages, resume_or_restart
from study import plot
import subprocess

CHAR, BPE = "pystdlib", "pystdlib_bpe{}"


def bpe(n, **kw):
    return {"dataset": BPE.format(n), **kw}


# recipe -> (preset, train.py settings on top of it). The screen passes them to train.py; a
# study passes the dataset to reproduce.py as --dataset and the rest as --train_args.
RECIPES = {
    "cpu": ("cpu", {}),                        # the CPU preset as it is (BPE, 2048 ids)
    "cpu_long": ("cpu_long", {}),              # its long version
    "cpu_char": ("cpu_char", {}),              # the character-level preset
    "tiny": ("tiny", {}),                      # seconds: for trying the sweep out
    # the tokenizer, at the cpu preset's budget (800 x 32 x 128 tokens)
    "char": ("cpu", {"dataset": CHAR}),        # character level (97 symbols and the start token)
    "bpe512": ("cpu", bpe(512)),               # a BPE vocabulary learned on the corpus, N ids
    "bpe1024": ("cpu", bpe(1024)),
    "bpe2048": ("cpu", bpe(2048)),             # = the cpu preset
    "bpe4096": ("cpu", bpe(4096)),
    # levers on the 2048-token vocabulary
    "bpe2048_x0.25": ("cpu", bpe(2048, batch_size=8)),   # a quarter of the tokens: the same
    "bpe2048_x0.5": ("cpu", bpe(2048, batch_size=16)),   # steps and schedule, a smaller batch
    "bpe2048_x2": ("cpu", bpe(2048, batch_size=64)),     # twice the tokens, and so on
    "bpe2048_x4": ("cpu", bpe(2048, batch_size=64, max_iters=1600)),
    "bpe2048_x8": ("cpu", bpe(2048, batch_size=64, max_iters=3200)),
    "bpe2048_b95": ("cpu", bpe(2048, beta2=0.95)),                      # AdamW beta2 0.95 (0.99)
    "bpe2048_lr3e-3": ("cpu", bpe(2048, learning_rate=3e-3, min_lr=3e-4)),
    "bpe2048_lr1e-3": ("cpu", bpe(2048, learning_rate=1e-3, min_lr=1e-4)),
    "bpe2048_wd0": ("cpu", bpe(2048, weight_decay=0.0)),
    "bpe2048_warm20": ("cpu", bpe(2048, warmup_iters=20)),
    "bpe2048_8x96": ("cpu", bpe(2048, n_layer=8, n_embd=96)),           # deeper and narrower
    "bpe2048_2x192": ("cpu", bpe(2048, n_layer=2, n_embd=192)),         # shallower and wider
    "bpe2048_h2": ("cpu", bpe(2048, n_head=2)),                         # head size 64 (32)
    "bpe2048_h8": ("cpu", bpe(2048, n_head=8)),                         # head size 16
    "bpe2048_L64": ("cpu", bpe(2048, block_size=64, batch_size=64)),    # the same tokens, shorter L
    "bpe2048_L256": ("cpu", bpe(2048, block_size=256, batch_size=16)),
    # levers at character level (the cpu_char preset)
    "char_x2": ("cpu_char", {"batch_size": 64}),
    "lr1e-3": ("cpu_char", {"learning_rate": 1e-3, "min_lr": 1e-4}),
    "lr3e-3": ("cpu_char", {"learning_rate": 3e-3, "min_lr": 3e-4}),
    "L64": ("cpu_char", {"block_size": 64, "batch_size": 64}),  # same tokens per step, shorter L
    "L256": ("cpu_char", {"block_size": 256, "batch_size": 16}),
    "deep6": ("cpu_char", {"n_layer": 6}),
    "wide192": ("cpu_char", {"n_embd": 192, "n_head": 6}),
    # needs data/shakespeare_char prepared
    "shakespeare": ("cpu_char", {"dataset": "shakespeare_char"}),
}


@dataclass
class SweepConfig:
    recipes: list[str] = field(default_factory=lambda: ["cpu"])    # names from RECIPES in sweep.py
    seeds: list[int] = field(default_factory=lambda: [1337, 1338])  # training seeds
    screen: bool = False                # train NoPE and RoPE only, compare them at L (step 1 above)
    passkey: bool = False               # a study also runs the passkey stage (finding 8)
    out_dir: str = "out/sweep"          # one folder per (recipe, seed), plus sweep.md or screen.md
    table_only: bool = False            # only rebuild the table from finished runs
    dataset: str = ""                   # every recipe on this prepared dataset ('' = its own)


def recipe_of(recipe, dataset=""):
    """(preset, train.py settings) of a recipe, on `dataset` when one is given."""
    preset, train = RECIPES[recipe]
    return preset, train | ({"dataset": dataset} if dataset else {})


def settings(recipe, dataset=""):
    preset, train = recipe_of(recipe, dataset)
    return preset, [f"--{k}={v}" for k, v in train.items()]


# -----------------------------------------------------------------------------
# 1. The screen

def screen(cfg):
    for recipe in ([] if cfg.table_only else cfg.recipes):
        preset, train = settings(recipe, cfg.dataset)
        for seed in cfg.seeds:
            for pe in ("nope", "rope"):
                run_dir = os.path.join(cfg.out_dir, "screen", f"{recipe}_s{seed}", pe)
                cmd = ["train.py", f"--preset={preset}", f"--pos_encoding={pe}", f"--seed={seed}",
                       f"--out_dir={run_dir}", *train]
                Stages(run_dir, force=False).run("train", cmd,
                                                 [os.path.join(run_dir, "summary.json")],
                                                 resume_or_restart(run_dir))
    # the table holds every finished screen run in out_dir, in the order of RECIPES
    rows = []
    for recipe in RECIPES:
        for seed in cfg.seeds:
            for pe in ("nope", "rope"):
                summary = os.path.join(cfg.out_dir, "screen", f"{recipe}_s{seed}", pe,
                                       "summary.json")
                if os.path.exists(summary):
                    rows.append({"recipe": recipe, "seed": seed, **read_json(summary)})
    write_json(os.path.join(cfg.out_dir, "screen.json"), {"rows": rows})
    table = screen_table(rows)
    atomic_write_text(os.path.join(cfg.out_dir, "screen.md"), table)
    print(table)
    plot.report(cfg.out_dir, *plot.draw_screen(os.path.join(cfg.out_dir, "screen.json")))


def screen_table(rows):
    """One line per recipe: NoPE and RoPE at L in each seed, their ratio, bits per byte, time."""
    by = {}
    for r in rows:
        by.setdefault(r["recipe"], {}).setdefault(r["seed"], {})[r["pos_encoding"]] = r
    lines = ["| recipe | dataset | tokens | params | NoPE at L | RoPE at L | NoPE / RoPE | "
             "NoPE bits/byte | RoPE bits/byte | time per model |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for recipe, seeds in by.items():
        pairs = [s for s in seeds.values() if {"nope", "rope"} <= set(s)]
        if not pairs:
            continue
        cell = lambda f: "; ".join(f(p) for p in pairs)  # noqa: E731  one value per seed
        n = pairs[0]["nope"]
        lines.append(
            f"| {recipe} | {n['dataset']} | {n['tokens'] / 1e6:.1f} M | "
            f"{n['params'] / 1e6:.2f} M | "
            + cell(lambda p: f"{p['nope']['final_val_loss']:.3f}") + " | "
            + cell(lambda p: f"{p['rope']['final_val_loss']:.3f}") + " | "
            + cell(lambda p: f"{p['nope']['final_val_loss'] / p['rope']['final_val_loss']:.3f}")
            + " | "
            + cell(lambda p: f"{p['nope']['final_val_bpb']:.3f}") + " | "
            + cell(lambda p: f"{p['rope']['final_val_bpb']:.3f}") + " | "
            + cell(lambda p: format_seconds((p['nope']['wall_seconds']
                                             + p['rope']['wall_seconds']) / 2))
            + " |")
    seeds = sorted({r["seed"] for r in rows})
    return ("Validation loss at L on train.py's monitor windows (nats per token; each cell: seed "
            + "; ".join(map(str, seeds)) + ")\n\n" + "\n".join(lines) + "\n")


# -----------------------------------------------------------------------------
# 2. The studies

def core_seconds(run):
    """Wall time of the stages findings 1-7 read: training (train.py's own clock, which counts
    across a resume), the lambda search and its ablations, the evaluations; not the RoPE
    extension baselines or the passkey stage."""
    stages = os.path.join(run, "stages")
    train = sum(read_json(os.path.join(run, pe, "summary.json"))["wall_seconds"]
                for pe in ("nope", "rope", "nope_notoken")
                if os.path.exists(os.path.join(run, pe, "summary.json")))
    rest = sum(read_json(os.path.join(stages, f))["seconds"] for f in os.listdir(stages)
               if f in ("search.json", "evaluate.json", "evaluate_window.json")
               or f.startswith("ablation"))
    return train + rest


def studies(cfg):
    rows = []
    for recipe in cfg.recipes:
        runs = [os.path.join(cfg.out_dir, f"{recipe}_s{seed}") for seed in cfg.seeds]
        if not cfg.table_only:
            preset, train = recipe_of(recipe, cfg.dataset)
            args = [f"--dataset={train['dataset']}"] if "dataset" in train else []
            rest = [f"{k}={v}" for k, v in train.items() if k != "dataset"]
            if rest:
                args.append(f"--train_args={','.join(rest)}")
            for seed, run in zip(cfg.seeds, runs):
                cmd = [sys.executable, "reproduce.py", f"--preset={preset}", f"--out_dir={run}",
                       f"--seed={seed}", *args, "--rope_baselines=false",
                       f"--passkey={str(cfg.passkey).lower()}"]
                print(f"[sweep] {' '.join(cmd[1:])}", flush=True)
                if subprocess.run(cmd, cwd=ROOT).returncode != 0:
                    raise UserError(f"the study for {recipe} seed {seed} failed; "
                                    "rerun to continue where it stopped")
        done = [r for r in runs if os.path.exists(os.path.join(r, "eval", "results.json"))]
        if not done:
            continue
        out_json = os.path.join(cfg.out_dir, f"{recipe}.json")
        subprocess.run([sys.executable, "study/findings.py", *done, f"--name={recipe}",
                        f"--out={out_json}"], cwd=ROOT, check=True)
        f = read_json(out_json)
        rows.append((recipe, [int(r.rsplit("_s", 1)[1]) for r in done],
                     [core_seconds(r) for r in done], f))
    keys = sorted({k for *_, f in rows for k in f["findings"]}, key=int)
    lines = ["| recipe | seeds | core wall time per seed | " + " | ".join(f"({k})" for k in keys)
             + " | rise at 4L (nope - nope_window_L) | recovered at 4L: uniform / HeadScale |",
             "|---|---|---|" + "---|" * (len(keys) + 2)]
    for recipe, seeds, secs, f in rows:
        cells = []
        for k in keys:
            x = f["findings"].get(k)
            cells.append("" if x is None else ("**yes**" if x["holds"] else "no") + ": "
                         + " / ".join(x["evidence"]))
        m = f.get("measures", {})
        rise = " / ".join(f"{v:+.3f}" for v in m.get("rise_4L", []))
        rec = " / ".join(f"{u:.0%}, {h:.0%}"
                         for u, h in zip(m.get("recovered_nope_uniform_4L", []),
                                         m.get("recovered_nope_headscale_4L", [])))
        lines.append(f"| {recipe} | {', '.join(map(str, seeds))} | "
                     f"{', '.join(format_seconds(s) for s in secs)} | "
                     + " | ".join(cells) + f" | {rise} | {rec} |")
    table = "\n".join(lines) + "\n"
    atomic_write_text(os.path.join(cfg.out_dir, "sweep.md"), table)
    print(table)


def main():
    cfg = parse_config(SweepConfig, description=__doc__)
    unknown = [r for r in cfg.recipes if r not in RECIPES]
    if unknown:
        raise UserError(f"unknown recipe(s) {unknown}; known: {', '.join(RECIPES)}")
    # absolute: the stages run in the repository, and their stamps name paths inside a run's folder
    # relative to it (a moved sweep is the same sweep)
    cfg.out_dir = os.path.abspath(cfg.out_dir)
    screen(cfg) if cfg.screen else studies(cfg)


if __name__ == "__main__":
    run_main(main)
