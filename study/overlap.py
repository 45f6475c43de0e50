"""
What the scale search and train.py's validation monitor read of the text the evaluation scores.

    python study/overlap.py --dataset=pystdlib_bpe2048 --L=128       # the cpu preset
    python study/overlap.py --dataset=pystdlib --L=512               # the gpu preset

search_scales.py chooses lambda on the validation split's "search" windows, train.py's monitor
reads its own windows of L there too, and evaluate.py scores the "eval" windows
(data.Dataset.windows). Under protocol 3 (evaluate.PROTOCOL) the two subsets are cut from
documents of their own (data.doc_sides), so every share below is 0.0%. For each reader (the
grid at each search length, the monitor at L) and each evaluation length, this prints the share
of the eval windows' target tokens that the reader's windows hold (as input or target), and the
share of eval windows whose document the reader reads at all; with every script's default seeds
and window counts. Writes nothing but its table (stdout).
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

if not __package__:  # run as a script, not imported: the repository's modules first
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import UserError, length_name, parse_config, run_main  # noqa: E402
from data import Dataset  # noqa: E402
from evaluate import EvalConfig
from search_scales import SearchConfig  # noqa: E402
from train import VAL_SEED, TrainConfig  # noqa: E402


@dataclass
class OverlapConfig:
    dataset: str = "pystdlib_bpe2048"   # data/NAME or a folder, as prepared
    L: int = 128                        # the training length the lengths count in
    search_lengths: list[float] = field(  # search_scales' grid lengths
        default_factory=lambda: [2.0, 4.0, 8.0])
    eval_lengths: list[float] = field(  # evaluate's lengths
        default_factory=lambda: [1.0, 2.0, 4.0, 8.0])


def tokens(ds, n, count, seed, subset, scored=False):
    """A mask over the validation split: True where a window of n positions reads a token (all of
    it, o..o+n) or, with scored=True, scores one (its targets, o+1..o+n)."""
    mask = np.zeros(len(ds.tokens["val"]) + 1, dtype=bool)
    for o in ds.window_offsets(n, count, seed, "val", subset):
        mask[o + (1 if scored else 0):o + n + 1] = True
    return mask


def documents(ds, n, count, seed, subset):
    """The indices of the documents that windows of n positions come from."""
    _, starts, _ = ds.docs("val")
    return set(np.searchsorted(starts, ds.window_offsets(n, count, seed, "val", subset),
                               side="right") - 1)


def main():
    cfg = parse_config(OverlapConfig, description=__doc__)
    if cfg.L <= 0:
        raise UserError(f"--L must be > 0, got {cfg.L}")
    ds = Dataset(cfg.dataset, bos=True)
    search, ev, tr = SearchConfig(), EvalConfig(), TrainConfig()
    evals = {k: (tokens(ds, int(k * cfg.L), ev.windows, ev.seed, "eval", scored=True),
                 ds.window_offsets(int(k * cfg.L), ev.windows, ev.seed, "val", "eval"))
             for k in cfg.eval_lengths}
    readers = {f"search at {length_name(s)}": (int(s * cfg.L), search.windows, search.seed)
               for s in cfg.search_lengths}
    readers["monitor at 1L"] = (cfg.L, tr.val_windows, VAL_SEED)
    _, starts, _ = ds.docs("val")
    print(f"{ds.name}, L = {cfg.L}: what each reader of the search documents shares with the "
          f"eval windows ({ev.windows} a length, seed {ev.seed}): their target tokens it reads / "
          "their documents it reads\n")
    print("| reader | " + " | ".join(f"eval at {length_name(k)}" for k in cfg.eval_lengths) + " |")
    print("|---|" + "---:|" * len(cfg.eval_lengths))
    for name, (n, count, seed) in readers.items():
        mask, docs = tokens(ds, n, count, seed, "search"), documents(ds, n, count, seed, "search")
        cells = []
        for k in cfg.eval_lengths:
            targets, offsets = evals[k]
            in_docs = np.isin(np.searchsorted(starts, offsets, side="right") - 1, list(docs)).mean()
            cells.append(f"{(mask & targets).sum() / targets.sum():.1%} / {in_docs:.1%}")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    run_main(main)
