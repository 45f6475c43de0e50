"""
The RoPE baselines' zero-shot factors, the paper's "best of grid" rows: for each extension (PI,
NTK-aware, YaRN: families.RopeScaled) and each target length, the validation loss of every
factor on the same windows as search_scales.py's grid; the best factor is kept per length, and
evaluate.py --rope_scaling=M --rope_factors=FILE reads it.

    python study/rope_grid.py --ckpt=out/rope/ckpt.pt --lengths=2,4,8

Writes into out_dir (default: the checkpoint's folder + /scales_rope): rope_grid.csv (method,
length, factor, loss, tail_loss) and rope_factors.json (the best factor per method and length).
"""

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

if not __package__:  # run as a script, not imported: the repository's modules first
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import families  # noqa: E402,F401  (registers rope_scaled)
from common import (UserError, autocast, default_tail, length_list, length_name,  # noqa: E402
                    parse_config, pick_device, pick_dtype, run_main, write_csv, write_json)
from data import Dataset  # noqa: E402
from evaluate import measure  # noqa: E402
from model import load_checkpoint  # noqa: E402
from search_scales import SearchConfig  # noqa: E402


@dataclass
class RopeGridConfig:
    ckpt: str = "out/rope/ckpt.pt"      # a RoPE checkpoint written by train.py
    out_dir: str = ""                   # results folder ('' = <checkpoint folder>/scales_rope)
    dataset: str = ""                   # '' = the dataset the checkpoint was trained on
    lengths: list[float] = field(  # target lengths, in units of L
        default_factory=lambda: [2.0, 4.0, 8.0])
    methods: list[str] = field(  # PI, NTK-aware, YaRN
        default_factory=lambda: ["pi", "ntk", "yarn"])
    factors: list[float] = field(  # the grid of factors (1 = plain RoPE)
        default_factory=lambda: [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0])
    windows: int = SearchConfig.windows  # windows per length (search_scales.py's: the same ones)
    tail: int = 0                       # tail metric's tokens (0 = L/8, the paper's 256/2048)
    select: str = "loss"                # the best factor by: loss (mean over positions) | tail
    batch_size: int = 8                 # evaluation batch size
    seed: int = SearchConfig.seed       # the windows' seed (search_scales.py's: the same windows)
    device: str = "auto"                # auto | cpu | cuda | mps
    dtype: str = "auto"                 # auto | float32 | bfloat16 | float16
    preset: str = ""                    # the preset used (set by --preset=NAME)


def rope_factor_grid(model, windows_at, cfg, L, ctx):
    """For each method and target length, the loss of every factor; the best kept per length.
    Returns (rows of rope_grid.csv, {method: {length name: best}}, the tail's tokens)."""
    tail = cfg.tail or default_tail(L)
    rows, best = [], {m: {} for m in cfg.methods}
    for n, windows in windows_at.items():
        plain = None  # plain RoPE's loss (factor 1), measured once a length if the grid lacks it
        for method in cfg.methods:
            model.config.rope_scaling = method
            loss, tail_loss = [], []
            for s in cfg.factors:
                # the cos/sin tables are computed from the config on every call
                model.config.rope_factor = s
                per_pos = measure(model, windows, cfg.batch_size, ctx)["loss"]
                loss.append(float(per_pos.mean()))
                tail_loss.append(float(per_pos[-tail:].mean()))
                rows.append([method, n, s, round(loss[-1], 5), round(tail_loss[-1], 5)])
            i = int(np.argmin(loss if cfg.select == "loss" else tail_loss))
            if 1.0 in cfg.factors:
                at1 = loss[cfg.factors.index(1.0)]
            elif plain is None:
                model.config.rope_factor = 1.0  # every method at factor 1 is plain RoPE
                plain = at1 = float(measure(model, windows, cfg.batch_size, ctx)["loss"].mean())
            else:
                at1 = plain
            best[method][length_name(n / L)] = {"length": n, "best_factor": cfg.factors[i],
                                               "loss": loss[i], "tail_loss": tail_loss[i],
                                               "loss_at_1": at1}
            print(f"{length_name(n / L):>4} {method:>4}: best factor {cfg.factors[i]:g}, "
                  f"loss {loss[i]:.4f} tail {tail_loss[i]:.4f}", flush=True)
    return rows, best, tail


def check(cfg):
    if any(f < 1 for f in cfg.factors) or not cfg.factors:
        raise UserError(f"--factors must be >= 1 (1 = plain RoPE), got {cfg.factors}")
    for m in cfg.methods:
        if m not in ("pi", "ntk", "yarn"):
            raise UserError(f"--methods takes pi, ntk, yarn; got {m!r}")
    if cfg.select not in ("loss", "tail"):
        raise UserError(f"--select must be loss or tail, got {cfg.select!r}")
    for k in ("windows", "batch_size"):
        if getattr(cfg, k) <= 0:
            raise UserError(f"--{k} must be > 0, got {getattr(cfg, k)}")


def main():
    cfg = parse_config(RopeGridConfig, section="rope_grid", description=__doc__)
    check(cfg)
    device = pick_device(cfg.device)
    dtype = pick_dtype(cfg.dtype, device)
    model, ckpt = load_checkpoint(cfg.ckpt, device)
    if model.config.pos_encoding != "rope":
        raise UserError(f"the RoPE grid needs a RoPE checkpoint; {cfg.ckpt} is "
                        f"{model.config.pos_encoding}")
    model, ckpt = load_checkpoint(cfg.ckpt, device, family="rope_scaled")  # RoPE, stretchable
    model.set_head_scales(1.0)
    model.set_head_slopes(0.0)
    L = model.config.block_size
    ds = Dataset.for_model(model.config, ckpt, cfg.dataset)
    out = cfg.out_dir or os.path.join(os.path.dirname(os.path.abspath(cfg.ckpt)), "scales_rope")
    windows_at = {n: ds.windows(n, cfg.windows, seed=cfg.seed, subset="search")
                  for n in length_list(cfg.lengths, L)}
    rows, best, tail = rope_factor_grid(model, windows_at, cfg, L, autocast(device, dtype))
    write_csv(os.path.join(out, "rope_grid.csv"), rows,
              ["method", "length", "factor", "loss", "tail_loss"])
    write_json(os.path.join(out, "rope_factors.json"),
               {"train_len": L, "dataset": ds.name, "ckpt": os.path.abspath(cfg.ckpt),
                "tail": tail, "select": cfg.select, "seed": cfg.seed, "methods": best})
    print(f"wrote {out}/rope_grid.csv, rope_factors.json")


if __name__ == "__main__":
    run_main(main)
