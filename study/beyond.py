"""
The tables of docs/beyond.md, read from finished studies (reproduce.py --beyond): one column
per study (a seed), nothing measured here. --rows=2025: docs/beyond2025.md's (reproduce.py
--beyond2025: FoX, NoPE with the output gate, NoPE with a learned sink).

    python study/beyond.py out/study out/study_s1338 > tables.md
    python study/beyond.py --rows=2025 out/study out/study_s1338

1. the loss at L and the excess at 2L / 4L / 8L (evaluate.excess: the row minus the same model
   reading only its last L, on the same windows) of NoPE, RoPE, RoPE + YaRN fine-tuned at 4L,
   NoPE + HeadScale, ALiBi (and its uniform lambda), NoPE + SSMax (and its remedies)
2. the attention entropy past L: the mean over layers and heads, over the last L/8 queries
   before each length (evaluate.py's entropy.json, the rows a figure draws), beside log2 n,
   the entropy of attention spread evenly over n keys
3. passkey retrieval at L, 2L and 4L (study/passkey.py's passkey.json), where the stage ran
4. the sink share at L and 4L (evaluate.py's, with the entropy): the attention each query gives
   key 0, the mean over layers, heads and query positions 1..n-1, each layer's at 4L, and a
   learned sink's column as a row of its own; printed where a study measured it
A row or a number a study lacks is a dash.
"""

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

if not __package__:  # run as a script, not imported: the repository's modules first
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import UserError, atomic_write_text, length_name, parse_config, read_json, run_main
from evaluate import excess
from study import finished_studies

LOSS_ROWS = ("nope", "rope", "rope_yarn_ft_4L", "nope_headscale_4L", "alibi", "alibi_uniform_4L",
             "nope_ssmax", "nope_ssmax_uniform_4L", "nope_ssmax_headscale_4L")
ENTROPY_ROWS = ("nope", "nope_headscale_4L", "alibi", "alibi_uniform_4L", "nope_ssmax",
                "nope_ssmax_headscale_4L")
PASSKEY_ROWS = ("nope", "rope", "nope_headscale_4L", "alibi", "nope_ssmax",
                "nope_ssmax_headscale_4L")
# reproduce.py --beyond2025's rows beside NoPE's (docs/beyond2025.md): each family, its uniform
# lambda and HeadScale at 4L
FAMILIES_2025 = ("fox", "nope_gated", "nope_sink")
ROWS_2025 = tuple(f"{m}{r}" for m in ("nope", *FAMILIES_2025)
                  for r in ("", "_uniform_4L", "_headscale_4L"))
SETS = {"beyond": (LOSS_ROWS, ENTROPY_ROWS, PASSKEY_ROWS, ENTROPY_ROWS),
        "2025": (ROWS_2025, ROWS_2025, ("nope", *FAMILIES_2025),
                 ROWS_2025 + tuple(f"{m}_window_L" for m in FAMILIES_2025))}
DASH = "–"


@dataclass
class BeyondConfig:
    out: str = ""                       # also write the tables to this file ('' = print only)
    rows: str = "beyond"                # beyond (ALiBi, SSMax) | 2025 (FoX, output gate, sink)


def number(x, fmt):
    return DASH if x is None else format(x, fmt)


def table(head, rows):
    return ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1),
            *("| " + " | ".join(r) + " |" for r in rows)]


def loss_table(studies, names=LOSS_ROWS):
    """Loss at L and excess at 2L, 4L, 8L; each cell 'seed a; seed b'."""
    cols = [("loss at L", None), ("excess 2L", 2), ("excess 4L", 4), ("excess 8L", 8)]
    rows = []
    for name in names:
        cells = []
        for _, k in cols:
            vals = []
            for res in studies.values():
                m, L = res["methods"].get(name), res["train_len"]
                if m is None:
                    vals.append(DASH)
                elif k is None:
                    vals.append(number(dict(zip(m["lengths"], m["loss"])).get(L), ".3f"))
                else:
                    vals.append(number(excess(res, name).get(k * L), "+.3f"))
            cells.append("; ".join(vals))
        rows.append([f"`{name}`", *cells])
    return table(["row", *(c for c, _ in cols)], rows)


def entropy_at(ent, L, n):
    """Mean entropy (bits) over layers, heads and queries in (n - L/8, n]; None if unmeasured."""
    per_pos = np.asarray(ent["layer_bits_per_position"]).mean(0)  # (positions,)
    if len(per_pos) < n:
        return None
    return float(per_pos[n - max(1, L // 8):n].mean())


def entropy_table(entropies, L, names=ENTROPY_ROWS):
    lengths = (1, 2, 4, 8)
    rows = [["uniform over n keys, log₂ n", *(f"{np.log2(k * L):.2f}" for k in lengths)]]
    for name in names:
        cells = ["; ".join(number(entropy_at(e[name], L, k * L), ".2f") if name in e else DASH
                           for e in entropies.values()) for k in lengths]
        rows.append([f"`{name}`", *cells])
    return table(["row", *(length_name(k) for k in lengths)], rows)


def passkey_table(passkeys, names=PASSKEY_ROWS):
    lengths = (1, 2, 4)
    rows = []
    for name in names:
        cells = []
        for k in lengths:
            vals = []
            for pk in passkeys.values():
                acc = (pk or {}).get("by_length", {}).get(name, {}).get(str(k * pk["train_len"])
                                                                         if pk else "")
                vals.append(DASH if acc is None else f"{100 * acc:.0f}%")
            cells.append("; ".join(vals))
        rows.append([f"`{name}`", *cells])
    return table(["row", *(length_name(k) for k in lengths)], rows)


def sink_table(studies, names):
    """Each row's sink share at L and 4L (the mean over layers) and each layer's at 4L, 'seed a;
    seed b'; a learned sink's column (results.json's sink_column) a row of its own. [] when no
    study measured any."""
    if not any(m.get("sink_share") for res in studies.values() for m in res["methods"].values()):
        return []
    rows = []
    for name in names:
        for key, label in (("sink_share", f"`{name}`"), ("sink_column", f"`{name}` sink column")):
            got = [((res["methods"].get(name) or {}).get(key) or {}, res["train_len"])
                   for res in studies.values()]
            if key == "sink_column" and not any(g for g, _ in got):
                continue
            at = lambda k: "; ".join(  # noqa: E731
                number(np.mean(g[str(k * L)]) if str(k * L) in g else None, ".3f") for g, L in got)
            layers = "; ".join("/".join(f"{x:.2f}" for x in g[str(4 * L)]) if str(4 * L) in g
                               else DASH for g, L in got)
            rows.append([label, at(1), at(4), layers])
    return table(["row", "1L", "4L", "each layer at 4L"], rows)


def main():
    cfg = parse_config(BeyondConfig, [a for a in sys.argv[1:] if a.startswith("-")],
                       description=__doc__)
    if cfg.rows not in SETS:
        raise UserError(f"--rows must be one of {', '.join(SETS)}, got {cfg.rows!r}")
    loss_rows, entropy_rows, passkey_rows, sink_rows = SETS[cfg.rows]
    flag = "--beyond2025" if cfg.rows == "2025" else "--beyond"
    studies = finished_studies(sys.argv[1:], "study/beyond.py", f"python reproduce.py {flag}")
    results = {s: read_json(os.path.join(s, "eval", "results.json")) for s in studies}
    L = next(iter(results.values()))["train_len"]
    ent = {s: (read_json(os.path.join(s, "eval", "entropy.json"))
               if os.path.exists(os.path.join(s, "eval", "entropy.json")) else {})
           for s in studies}
    pk = {s: (read_json(os.path.join(s, "passkey", "passkey.json"))
              if os.path.exists(os.path.join(s, "passkey", "passkey.json")) else None)
          for s in studies}
    order = "; ".join(os.path.basename(os.path.normpath(s)) for s in studies)
    lines = [f"Loss (nats/token) at L = {L} and excess over the same model reading only its "
             f"last L ({order}):", "", *loss_table(results, loss_rows), "",
             "Mean attention entropy (bits) of the last L/8 queries before each length "
             f"({order}):", "", *entropy_table(ent, L, entropy_rows), "",
             f"Passkey retrieval, exact match ({order}):", "", *passkey_table(pk, passkey_rows)]
    if sink := sink_table(results, sink_rows):
        lines += ["", "Sink share: the attention each query gives key 0 (the start token; a "
                  "last-L reference's: each sub-window's), the mean over layers, heads and query "
                  f"positions 1..n-1 of windows of n tokens ({order}):", "", *sink]
    print("\n".join(lines))
    if cfg.out:
        atomic_write_text(cfg.out, "\n".join(lines) + "\n")


if __name__ == "__main__":
    run_main(main)
