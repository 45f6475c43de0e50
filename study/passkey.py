r"""
Passkey retrieval: can a model still find one 5-digit number hidden far back?

    python study/passkey.py --ckpts=nope=out/nope_pk/ckpt.pt,rope=out/rope_pk/ckpt.pt \
        --out_dir=out/passkey
    python study/passkey.py --out_dir=out/passkey --plot_only

Models learn the skill from train.py --passkey_frac (ordinary text mixed with passkey examples
at the training length L). For each length n (the prompt and its answer fill n tokens) and
depth d (0%, 10%, ... 90% of the filler), the same `keys` random keys for every model; exact
match of the greedy continuation. A model trained with the start token gets it at position 0
of every prompt (counted in n). Writes
passkey.csv (method, length, depth, accuracy, n), passkey.json (the average accuracy over
lengths up to avg_up_to, as the paper reports), a heat map (length x depth) per model and a
markdown table.
"""

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

if not __package__:  # run as a script, not imported: the repository's modules first
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (UserError, atomic_write_text, autocast, length_list, length_name, parse_ckpts,
                    parse_config, pick_device, pick_dtype, read_json, run_main, write_csv,
                    write_json)
from data import Dataset
from evaluate import facts as row_facts
from model import load_checkpoint
from study import plot


@dataclass
class PasskeyConfig:
    ckpts: list[str] = field(  # NAME=PATH, comma-separated
        default_factory=lambda: ["nope=out/nope/ckpt.pt"])
    out_dir: str = "out/passkey"        # results folder (passkey.csv merges by method name)
    dataset: str = ""                   # '' = each checkpoint's own dataset (for its tokenizer)
    lengths: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0])  # units of L
    depths: int = 10                    # depths 0, 1/depths, ... (depths-1)/depths of the filler
    keys: int = 5                       # random keys per (length, depth) cell, same for every model
    avg_up_to: float = 8.0              # report the mean accuracy over lengths up to this many L
    seed: int = 2024                    # the keys
    plot_only: bool = False             # redraw from passkey.csv alone
    plots: bool = True                  # draw the heat maps (reproduce.py: once, at its end)
    device: str = "auto"                # auto | cpu | cuda | mps
    dtype: str = "auto"                 # auto | float32 | bfloat16 | float16
                                        # (auto on CUDA: bf16 where native, else fp16)
    preset: str = ""                    # the preset used (set by --preset=NAME)


@torch.no_grad()
def accuracy(model, pk, n, depth, keys, device, ctx):
    """Exact-match accuracy of greedy decoding for these keys at length n and depth: the
    prompt and the answer's tokens fill n positions, so at n = L every token is in range."""
    answers = [pk.answer(k).tolist() for k in keys]
    steps = max(len(a) for a in answers)
    prompts = torch.from_numpy(np.stack([pk.prompt(n - steps, depth, k) for k in keys])).to(device)
    with ctx:
        out = model.generate(prompts, steps, temperature=0)[:, n - steps:].tolist()  # greedy
    return sum(o[:len(a)] == a for o, a in zip(out, answers)) / len(keys)


def summarise(out_dir, rows, L, avg_up_to, facts=None):
    """Mean accuracy per method over lengths <= avg_up_to * L; a markdown table by length.
    facts: each method's, as evaluate.facts records a row's (kept from passkey.json)."""
    path = os.path.join(out_dir, "passkey.json")
    facts = (read_json(path).get("facts", {}) if os.path.exists(path) else {}) | (facts or {})
    methods = list(dict.fromkeys(r[0] for r in rows))
    lengths = sorted({r[1] for r in rows})
    by = {(m, n): np.mean([r[3] for r in rows if r[0] == m and r[1] == n])
          for m in methods for n in lengths}
    if min(lengths) > avg_up_to * L:
        raise UserError(f"--avg_up_to={avg_up_to:g} is below every evaluated length; raise it")
    avg = {m: float(np.mean([by[m, n] for n in lengths if n <= avg_up_to * L])) for m in methods}
    upto = max(n for n in lengths if n <= avg_up_to * L) / L  # the longest length in the mean
    lines = ["| method | " + " | ".join(length_name(n / L) for n in lengths)
             + f" | mean up to {length_name(upto)} |",
             "|---|" + "---:|" * (len(lengths) + 1)]
    for m in methods:
        lines.append(f"| {m} | " + " | ".join(f"{by[m, n]:.0%}" for n in lengths)
                     + f" | {avg[m]:.0%} |")
    table = "\n".join(lines)
    atomic_write_text(os.path.join(out_dir, "passkey.md"), table + "\n")
    write_json(path, {"train_len": L, "avg_up_to": upto, "mean_accuracy": avg,
                      "by_length": {m: {str(n): by[m, n] for n in lengths} for m in methods},
                      "facts": {m: facts.get(m, {}) for m in methods}})
    return table, avg, facts




def main():
    cfg = parse_config(PasskeyConfig, section="passkey", description=__doc__)
    os.makedirs(cfg.out_dir, exist_ok=True)
    csv_path = os.path.join(cfg.out_dir, "passkey.csv")
    if cfg.plot_only:
        if not os.path.exists(csv_path):
            raise UserError(f"--plot_only but {csv_path} does not exist; run the evaluation first")
        rows = plot.passkey_rows(csv_path)
        L = read_json(os.path.join(cfg.out_dir, "passkey.json"))["train_len"]
        table, avg, facts = summarise(cfg.out_dir, rows, L, cfg.avg_up_to)
        print(table)
        plot.report(cfg.out_dir, plot.draw_passkey(cfg.out_dir, rows, avg, L, facts), [])
        return
    if cfg.depths <= 0 or cfg.keys <= 0:
        raise UserError("--depths and --keys must be > 0")
    device = pick_device(cfg.device)
    ctx = autocast(device, pick_dtype(cfg.dtype, device))
    ckpts = parse_ckpts(cfg.ckpts)
    models = {name: load_checkpoint(path, device) for name, path in ckpts.items()}
    Ls = {m.config.block_size for m, _ in models.values()}
    if len(Ls) > 1:
        raise UserError(f"these checkpoints have different training lengths {sorted(Ls)}; "
                        "use separate --out_dir")
    L = Ls.pop()
    # each model gets prompts in its own start-token mode (Dataset.for_model checks the data)
    pks = {name: Dataset.for_model(model.config, ckpt, cfg.dataset).passkey()
           for name, (model, ckpt) in models.items()}
    lengths = length_list(cfg.lengths, L)
    need = max(pk.shortest() for pk in pks.values())
    if min(lengths) < need:
        raise UserError(f"length {min(lengths)} is shorter than the passkey template "
                        f"and its answer ({need} tokens)")
    rng = np.random.default_rng(cfg.seed)
    keys = rng.integers(10000, 100000, size=(len(lengths), cfg.depths, cfg.keys)).tolist()
    rows = ([r for r in plot.passkey_rows(csv_path) if r[0] not in models]
            if os.path.exists(csv_path) else [])
    for name, (model, _) in models.items():
        model.eval()
        pk = pks[name]
        for i, n in enumerate(lengths):
            accs = []
            for j in range(cfg.depths):
                depth = j / cfg.depths
                acc = accuracy(model, pk, n, depth, keys[i][j], device, ctx)
                rows.append((name, n, depth, acc, cfg.keys))
                accs.append(acc)
            print(f"{name:>28} n={n:5d}: accuracy {np.mean(accs):.0%} "
                  f"over {cfg.depths} depths x {cfg.keys} keys", flush=True)
        write_csv(csv_path, rows, ["method", "length", "depth", "accuracy", "n"])
    table, avg, facts = summarise(cfg.out_dir, rows, L, cfg.avg_up_to,
                                  {name: row_facts(model, ckpt) for name, (model, ckpt)
                                   in models.items()})
    print(table)
    if cfg.plots:
        plot.report(cfg.out_dir, plot.draw_passkey(cfg.out_dir, rows, avg, L, facts), [])


if __name__ == "__main__":
    run_main(main)
