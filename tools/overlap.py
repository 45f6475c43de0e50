"""
How much text the scale search's windows share with the evaluation's, length by length.

    python tools/overlap.py --dataset=pystdlib_bpe2048 --L=128       # the cpu preset
    python tools/overlap.py --dataset=pystdlib --L=512               # the gpu preset

search_scales.py chooses lambda on the validation split's "search" windows and evaluate.py
scores its "eval" windows (data.Dataset.windows): at one length they are disjoint by
construction, but the slots of each length are cut on their own, so a search window of 4L can
hold text an eval window of 2L scores. For every (search length, eval length) this prints the
share of the eval windows' target tokens that some search window also holds as a target, with
both scripts' default seeds and window counts. Writes nothing but its table (stdout).
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as python tools/overlap.py: find the project

from data import Dataset  # noqa: E402
from evaluate import EvalConfig, length_name  # noqa: E402
from search_scales import SearchConfig  # noqa: E402
from tools.cli import UserError, parse_config, run_main  # noqa: E402


@dataclass
class OverlapConfig:
    dataset: str = "pystdlib_bpe2048"   # data/NAME or a folder, as prepared
    L: int = 128                        # the training length the lengths count in
    search_lengths: list[float] = field(default_factory=lambda: [2.0, 4.0, 8.0])  # search_scales' grid lengths
    eval_lengths: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0])  # evaluate's lengths


def targets(ds, n, count, seed, subset):
    """A mask over the validation split: True where a window of n positions scores a target."""
    mask = np.zeros(len(ds.tokens["val"]) + 1, dtype=bool)
    for o in ds.window_offsets(n, count, seed, "val", subset):
        mask[o + 1:o + n + 1] = True  # window tokens o..o+n; targets o+1..o+n
    return mask


def main():
    cfg = parse_config(OverlapConfig, description=__doc__)
    if cfg.L <= 0:
        raise UserError(f"--L must be > 0, got {cfg.L}")
    ds = Dataset(cfg.dataset, bos=True)
    search, ev = SearchConfig(), EvalConfig()
    evals = {k: targets(ds, int(k * cfg.L), ev.windows, ev.seed, "eval") for k in cfg.eval_lengths}
    print(f"{ds.name}, L = {cfg.L}: share of the eval windows' targets that search windows also score "
          f"({ev.windows} windows a length each, seeds {search.seed} and {ev.seed})\n")
    print("| search at | " + " | ".join(f"eval at {length_name(k)}" for k in cfg.eval_lengths) + " |")
    print("|---|" + "---:|" * len(cfg.eval_lengths))
    for s in cfg.search_lengths:
        mask = targets(ds, int(s * cfg.L), search.windows, search.seed, "search")
        print(f"| {length_name(s)} | " + " | ".join(f"{(mask & evals[k]).sum() / evals[k].sum():.1%}"
                                                  for k in cfg.eval_lengths) + " |")


if __name__ == "__main__":
    run_main(main)
