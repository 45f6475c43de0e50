"""
evaluate.py's results as tables, from its files alone: out_dir/table.md (the tail-metric
perplexity, the mean loss, and each row's excess over its reference, by length), results.csv
(one row a method, length and metric) and samples.md (each model's continuation of the same
prompt). reproduce.py writes them once its evaluations are done; any evaluate.py folder too:

    python study/tables.py out/eval
"""

import math
import os
import sys
from pathlib import Path

if not __package__:  # run as a script, not imported: the repository's modules first
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (UserError, atomic_write_text, length_name, read_json,  # noqa: E402
                    run_main, write_csv)
from evaluate import excess  # noqa: E402


def write_tables(out, results):
    """table.md and results.csv of a results dict; returns table.md's text."""
    L = results["train_len"]
    rows, lines = [], []
    lengths = sorted({n for m in results["methods"].values() for n in m["lengths"]})
    head = "| method | " + " | ".join(length_name(n / L) for n in lengths) + " |"
    rule = "|---|" + "---:|" * len(lengths)
    tables = (("Tail-metric perplexity (the paper's protocol)", "tail_loss",
               lambda v: f"{math.exp(v):.2f}"),
              ("Mean loss over all positions (nats/token)", "loss", lambda v: f"{v:.3f}"))
    for title, key, fmt in tables:
        lines += [f"**{title}**, L = {L}", "", head, rule]
        for name, m in results["methods"].items():
            by_n = dict(zip(m["lengths"], m[key]))
            cells = [fmt(by_n[n]) if n in by_n else "" for n in lengths]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["**Excess over a model of the same kind reading only its last L positions** (mean "
              "loss minus that of nope_window_L, rope_window_L or nope_notoken_window_L at the "
              "same length, on the same windows; nats/token: what the long context costs the "
              f"row), L = {L}", "", head, rule]
    for name in results["methods"]:
        ex = excess(results, name)
        if ex:
            cells = [f"{ex[n]:+.3f}" if n in ex else "" for n in lengths]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += sink_share_table(results)
    for name, m in results["methods"].items():
        for i, n in enumerate(m["lengths"]):
            rows.append([name, n, "mean", m["loss"][i], round(math.exp(m["loss"][i]), 4),
                         m["tokens"][i]])
            rows.append([name, n, "tail", m["tail_loss"][i], round(math.exp(m["tail_loss"][i]), 4),
                         m["tail_tokens"][i]])
    write_csv(os.path.join(out, "results.csv"), rows,
              ["method", "length", "protocol", "loss", "perplexity", "tokens"])
    table = "\n".join(lines)
    atomic_write_text(os.path.join(out, "table.md"), table)
    return table


def sink_share_table(results):
    """The sink share of the rows that measured it (evaluate.py, with the entropy): the attention
    each query gives key 0 (the start token; in a last-L reference, each sub-window's), averaged
    over heads and over the query positions 1..n-1 of windows of n tokens, per layer and its mean
    over layers; beside it, for a learned sink, the mass of its column (not added to the first).
    No rows, no table (a list of lines)."""
    L = results["train_len"]
    rows = [(name, m) for name, m in results["methods"].items() if m.get("sink_share")]
    if not rows:
        return []
    lines = ["**Sink share**: the attention each query gives key 0 (the start token; a last-L "
             "reference's: each sub-window's), mean over heads and query positions 1..n-1, per "
             f"layer and the mean over layers; a learned sink's column beside it, L = {L}", "",
             "| method | n | sink share | per layer | sink column | per layer |",
             "|---|---:|---:|---|---:|---|"]
    for name, m in rows:
        for n, share in m["sink_share"].items():
            column = (m.get("sink_column") or {}).get(n)
            cells = [f"{sum(share) / len(share):.3f}", " / ".join(f"{x:.3f}" for x in share)]
            cells += ([f"{sum(column) / len(column):.3f}", " / ".join(f"{x:.3f}" for x in column)]
                      if column else ["", ""])
            lines.append(f"| {name} | {length_name(int(n) / L)} | " + " | ".join(cells) + " |")
    return lines + [""]


def write_samples(out, samples):
    """samples.md from samples.json's {row: {prompt_tail, continuation}}."""
    md = ["# Samples: each model continues the same prompt of 3L tokens", ""]
    prompt_tail = next(iter(samples.values()))["prompt_tail"]
    md += ["**prompt (last 200 tokens):**", "```", prompt_tail, "```"]
    for name, s in samples.items():
        md += [f"**{name}:**", "```", s["continuation"], "```"]
    atomic_write_text(os.path.join(out, "samples.md"), "\n".join(md) + "\n")


def write_all(out):
    """Every table of one evaluate.py folder. Returns table.md's text."""
    path = os.path.join(out, "results.json")
    if not os.path.exists(path):
        raise UserError(f"{path} does not exist: evaluate first (evaluate.py or reproduce.py)")
    table = write_tables(out, read_json(path))
    samples = os.path.join(out, "samples.json")
    if os.path.exists(samples) and (written := read_json(samples)):
        write_samples(out, written)
    return table


def main():
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        raise UserError("give evaluate.py's folder: python study/tables.py out/eval")
    print(write_all(sys.argv[1]))


if __name__ == "__main__":
    run_main(main)
