"""
Slopes set, not fitted: lambda that follows the position, lam(i) = 1 + a ln(max(i, L) / L) with one
a for every head (model.query_scale; this project's, not the paper's: docs/slopes.md), written as
a checkpoint evaluate.py reads. search_scales.py --fit=slope fits one a per head instead.

    python study/set_slope.py --ckpt=out/nope/ckpt.pt --values=logn,grid,0.3

logn: Qwen's logn attention, q * log_L(i) past L, which is a = 1 / ln L. grid: the a of the
uniform grid's lambda(i) fit at its longest length (search_scales.py's uniform.json, in the same
folder). A number: that a. Each writes out_dir/slope_VALUE.pt and .json (out_dir: the
checkpoint's folder + /scales, as search_scales.py's).
"""

import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

if not __package__:  # run as a script, not imported: the repository's modules first
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import families  # noqa: E402,F401  (registers the families past the paper: their checkpoints load)
from common import UserError, parse_config, read_json, run_main, write_json  # noqa: E402
from model import load_checkpoint, save_checkpoint  # noqa: E402


@dataclass
class SetSlopeConfig:
    ckpt: str = "out/nope/ckpt.pt"      # a checkpoint written by train.py
    out_dir: str = ""                   # '' = <checkpoint folder>/scales (uniform.json's folder)
    values: list[str] = field(  # logn (Qwen: 1 / ln L), grid (uniform.json's a) or a number >= 0
        default_factory=lambda: ["logn", "grid"])
    device: str = "cpu"                 # where the checkpoint is read
    preset: str = ""                    # the preset used (set by --preset=NAME)


def slope_of(value, L, uniform_path):
    """(a, where it came from) for one of --values, refused in one line if it cannot be had."""
    if value == "logn":  # Qwen's logn attention, q * log_L(i) past L, is 1 + (1 / ln L) ln(i / L)
        return 1 / math.log(L), f"logn: 1 / ln L, L = {L}"
    if value == "grid":
        if not os.path.exists(uniform_path):
            raise UserError(f"--values=grid reads the lambda(i) fit from {uniform_path}: run "
                            "search_scales.py's grid first")
        fit = read_json(uniform_path)["fit"]
        if not (math.isfinite(fit["a"]) and fit["a"] >= 0):
            raise UserError(f"the grid's lambda(i) fit in {uniform_path} has a = {fit['a']}: "
                            "give --values=NUMBER")
        return fit["a"], f"grid: lambda(i) fit at {fit['length']} (R2 {fit['r2']:.3f})"
    try:
        a = float(value)
    except ValueError:
        a = -1.0
    if not (math.isfinite(a) and a >= 0):
        raise UserError(f"--values takes logn, grid or a number >= 0, got {value!r}")
    return a, "given"


def main():
    cfg = parse_config(SetSlopeConfig, section="set_slope", description=__doc__)
    model, ckpt = load_checkpoint(cfg.ckpt, cfg.device)
    L = model.config.block_size
    out = cfg.out_dir or os.path.join(os.path.dirname(os.path.abspath(cfg.ckpt)), "scales")
    slopes = {v: slope_of(v, L, os.path.join(out, "uniform.json")) for v in cfg.values}  # checked
    extras = {k: ckpt[k] for k in ("config", "dataset", "iter_num", "model_name") if k in ckpt}
    model.set_head_scales(1.0)
    for value, (a, source) in slopes.items():
        model.set_head_slopes(a)  # a hybrid's RoPE layers keep 0
        stem = os.path.join(out, f"slope_{value if value in ('logn', 'grid') else f'{a:g}'}")
        info = {"method": "set_slope", "value": value, "a": a, "source": source}
        save_checkpoint(stem + ".pt", model, **extras, scales=info)
        write_json(stem + ".json", info)
        print(f"wrote {stem}.pt/.json: every slope a = {a:.4f} ({source})")


if __name__ == "__main__":
    run_main(main)
