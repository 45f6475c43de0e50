r"""
Which of the paper's findings hold in one or more runs of reproduce.py (one per seed).

    python study/findings.py out/study                       # one run
    python study/findings.py out/sweep/cpu_s1337 out/sweep/cpu_s1338 \
        --name=cpu --out=out/sweep/cpu.json

Reads only the files the study wrote. The criteria are fixed here, before looking at any
result, and are never tuned to make a finding pass:
  1. NoPE within 5% of RoPE at L             loss(nope, L) <= 1.05 * loss(rope, L)
  2. both degrade past L, NoPE's onset later the onset is the first position past L whose loss
                                              (bins of L/16) exceeds the mean loss over positions
                                              L/2..L by more than DELTA = 0.1 nats; NoPE's > RoPE's
  3. mean entropy bends up where loss does    the entropy onset (first position past L where the
                                              mean entropy exceeds the log2-linear trend fitted on
                                              L/4..L by more than 0.1 bits) within a factor 1.5 of
                                              the loss onset
  4. best uniform lambda > 1, grows with n    best(4L) > 1, and it grows: never smaller at a longer
                                              length (best(2L) <= best(4L) <= best(8L)) and larger
                                              at 8L than at 2L (best(8L) > best(2L)), so a tie all
                                              along does not count
  5. lambda(i) fit a > 0 and R^2 >= 0.9       every seed (the paper, Appendix B: a = 0.30-0.40,
                                              R^2 >= 0.97)
  6. at 4L: HeadScale < best uniform < 1      mean loss at 4L of
                                              nope_headscale_4L < nope_uniform_4L < nope
  7. HeadScale costs < 0.05 nats at L         loss(nope_headscale_4L, L) - loss(nope, L) < 0.05
  8. passkey ordering (when passkey ran)      full > no clamp > no init (the paper, Table 4:
                                              81 / 53 / 26%), and NoPE > RoPE averaged over the
                                              lengths beyond L
A finding holds for a recipe when it holds in every seed given.

Besides the findings, two measured effects (no threshold), both on the same windows at 4L:
  rise     what the long context costs NoPE: loss(nope, 4L) - loss(nope_window_L, 4L)
  recovered  for each remedy, the share of that rise it takes back (evaluate.taken_back):
             (loss(nope) - loss(remedy)) / (loss(nope) - loss(nope_window_L)), all at 4L
"""

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

if not __package__:  # run as a script, not imported: the repository's modules first
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import length_name, parse_config, read_json, run_main, write_json
from evaluate import excess, taken_back
from study import finished_studies

DELTA = 0.1          # nats above the in-distribution loss that count as "degraded"
ENTROPY_DELTA = 0.1  # bits above the in-distribution entropy trend


def onset(positions, values, L, delta):
    """First position past L where values exceed their mean over positions L/2..L by delta."""
    x, y = np.asarray(positions), np.asarray(values)
    ref = y[(x >= L / 2) & (x <= L)].mean()
    past = np.where((x > L) & (y > ref + delta))[0]
    return float(x[past[0]]) if len(past) else float("inf")


def entropy_trend(positions, entropy, L):
    """The log2-linear trend a + b log2(i) of a mean-entropy curve, fitted on L/4 <= i <= L:
    what the entropy does in distribution. Past L, the curve's rise above it is the bend
    (criterion 3; plot.py draws the same trend)."""
    x, h = np.asarray(positions, dtype=np.float64), np.asarray(entropy, dtype=np.float64)
    fit = (x >= L / 4) & (x <= L)
    b, a = np.polyfit(np.log2(x[fit]), h[fit], 1)
    return lambda i: a + b * np.log2(i)


def entropy_onset(e, L):
    x = np.asarray(e["positions"])
    h = np.asarray(e["entropy_bits"]).mean((0, 1))  # mean over layers and heads
    excess = h - entropy_trend(x, h, L)(x)
    past = np.where((x > L) & (excess > ENTROPY_DELTA))[0]
    return float(x[past[0]]) if len(past) else float("inf")


def loss_at(results, method, n):
    m = results["methods"][method]
    return m["loss"][m["lengths"].index(n)]


def lambda_grows(best):
    """Finding (4) on {'2L': lam, '4L': lam, '8L': lam}: above 1 at 4L, never smaller at a longer
    length, and strictly larger at 8L than at 2L."""
    if not {"2L", "4L", "8L"} <= set(best):
        return False
    return best["4L"] > 1 and best["2L"] <= best["4L"] <= best["8L"] and best["8L"] > best["2L"]


REMEDIES = ("nope_uniform_4L", "nope_headscale_4L", "nope_headscale_4L_noclamp",
            "nope_headscale_4L_noinit")


def measures(results):
    """The rise past L at 4L and each remedy's recovered share there (see the docstring):
    evaluate.excess and evaluate.taken_back, their one definitions."""
    n4, methods = 4 * results["train_len"], results["methods"]
    rise = excess(results, "nope").get(n4) if "nope" in methods else None
    if rise is None:
        return {}
    out = {"rise_4L": rise}
    for r in REMEDIES:
        share = taken_back(results, r, "nope", n4) if r in methods else None
        if share is not None:
            out[f"recovered_{r}"] = share
    return out


def check_run(run):
    """The numbers behind each finding for one study folder."""
    ev = os.path.join(run, "eval")
    results = read_json(os.path.join(ev, "results.json"))
    pos = read_json(os.path.join(ev, "positions.json"))
    uni = read_json(os.path.join(run, "scales", "uniform.json"))
    L = results["train_len"]
    f = {}
    nope_L, rope_L = loss_at(results, "nope", L), loss_at(results, "rope", L)
    f[1] = (nope_L <= 1.05 * rope_L,
            f"NoPE {nope_L:.3f} vs RoPE {rope_L:.3f} nats at L ({nope_L / rope_L - 1:+.1%})")
    on = {m: onset(pos[m]["positions"], pos[m]["loss"], L, DELTA) for m in ("nope", "rope")}
    f[2] = (np.isfinite(on["nope"]) and np.isfinite(on["rope"]) and on["nope"] > on["rope"],
            f"onset NoPE {on['nope'] / L:.2f}L, RoPE {on['rope'] / L:.2f}L")
    ent_path = os.path.join(ev, "entropy.json")
    ent = read_json(ent_path) if os.path.exists(ent_path) else {}  # one read: the file is large
    if "nope" in ent:
        eo = entropy_onset(ent["nope"], L)
        ok = (np.isfinite(eo) and np.isfinite(on["nope"])
              and abs(np.log(eo / on["nope"])) <= np.log(1.5))
        f[3] = (bool(ok), f"entropy onset {eo / L:.2f}L vs loss onset {on['nope'] / L:.2f}L")
    best = {k: v["best_lam"] for k, v in uni["lengths"].items()}
    grows = lambda_grows(best)
    f[4] = (bool(grows), "best lambda " + ", ".join(f"{k} {v:.2f}" for k, v in best.items()))
    a, r2 = uni["fit"]["a"], uni["fit"]["r2"]
    f[5] = (bool(a > 0 and r2 >= 0.9), f"a = {a:.3f}, R^2 = {r2:.3f}")
    n4 = 4 * L
    if {"nope_headscale_4L", "nope_uniform_4L"} <= set(results["methods"]):
        # a study evaluated only up to 2L has no 4L
        if n4 in results["methods"]["nope"]["lengths"]:
            hs, un, one = (loss_at(results, m, n4)
                           for m in ("nope_headscale_4L", "nope_uniform_4L", "nope"))
            f[6] = (hs < un < one,
                    f"at 4L: HeadScale {hs:.3f}, uniform {un:.3f}, lambda=1 {one:.3f}")
        cost = loss_at(results, "nope_headscale_4L", L) - nope_L
        f[7] = (cost < 0.05, f"HeadScale at L: {cost:+.3f} nats")
    pk_path = os.path.join(run, "passkey", "passkey.json")
    if os.path.exists(pk_path):
        pk = read_json(pk_path)
        acc = pk["mean_accuracy"]
        names = ("nope_headscale_4L", "nope_headscale_4L_noclamp", "nope_headscale_4L_noinit")
        if all(n in acc for n in names + ("nope", "rope")):
            full, noclamp, noinit = (acc[n] for n in names)
            by_len = pk["by_length"]
            beyond = [n for n in by_len["nope"] if int(n) > L]
            nope_b = np.mean([by_len["nope"][n] for n in beyond]) if beyond else float("nan")
            rope_b = np.mean([by_len["rope"][n] for n in beyond]) if beyond else float("nan")
            f[8] = (full > noclamp > noinit and nope_b > rope_b,
                    f"full {full:.0%}, no clamp {noclamp:.0%}, no init {noinit:.0%}; "
                    f"beyond L NoPE {nope_b:.0%}, RoPE {rope_b:.0%}")
    return f


def headline(run):
    """The study in a few sentences, each with its numbers: report.md opens with them."""
    ev = os.path.join(run, "eval")
    results = read_json(os.path.join(ev, "results.json"))
    methods, L = results["methods"], results["train_len"]
    if not {"nope", "rope"} <= set(methods):
        return []
    at = lambda m, n: loss_at(results, m, n) if n in methods[m]["lengths"] else None  # noqa: E731
    nope_L, rope_L = at("nope", L), at("rope", L)
    out = [f"At the training length L = {L} tokens, NoPE's loss is {nope_L:.3f} nats per token "
           f"against RoPE's {rope_L:.3f} ({nope_L / rope_L - 1:+.1%})."]
    ex, ex_rope = excess(results, "nope"), excess(results, "rope")
    past = [n for n in sorted(ex) if n > L]
    if past:
        out.append("Past L the long context costs NoPE "
                   + " / ".join(f"{ex[n]:+.2f}" for n in past) + " nats at "
                   + " / ".join(length_name(n / L) for n in past)
                   + " against the same model reading only its last L positions (RoPE: "
                   + " / ".join(f"{ex_rope[n]:+.2f}" for n in past if n in ex_rope) + ").")
    pos, ent_path = read_json(os.path.join(ev, "positions.json")), os.path.join(ev, "entropy.json")
    ent = read_json(ent_path) if os.path.exists(ent_path) else {}  # one read: the file is large
    if "nope" in pos and "nope" in ent:
        on = onset(pos["nope"]["positions"], pos["nope"]["loss"], L, DELTA)
        eo = entropy_onset(ent["nope"], L)
        where = lambda x: f"at {x / L:.2f}L" if np.isfinite(x) else "nowhere"  # noqa: E731
        out.append(f"NoPE's mean attention entropy leaves the trend it follows up to L "
                   f"{where(eo)}, its loss rises above its level at L {where(on)}.")
    uni_path = os.path.join(run, "scales", "uniform.json")
    if os.path.exists(uni_path):
        uni = read_json(uni_path)
        best = {k: v["best_lam"] for k, v in uni["lengths"].items()}
        out.append("The best uniform λ (one for every head) is "
                   + " / ".join(f"{v:.2f}" for v in best.values()) + " at " + " / ".join(best)
                   + "; fitting the best λ per position to 1 + a ln(i/L) gives "
                   f"a = {uni['fit']['a']:.2f}, R² = {uni['fit']['r2']:.2f}.")
    m, n4 = measures(results), 4 * L
    if "recovered_nope_headscale_4L" in m:
        cost = at("nope_headscale_4L", L) - nope_L
        text = (f"At 4L, HeadScale (one λ per head) takes back "
                f"{m['recovered_nope_headscale_4L']:.0%} of that cost and the best uniform λ "
                f"{m.get('recovered_nope_uniform_4L', float('nan')):.0%}; "
                f"HeadScale costs {cost:+.2f} nats at L")
        rope_rows = [(excess(results, r).get(n4), r) for r, row in methods.items()
                     if row.get("model") == "rope" and row.get("remedy")]  # its extensions
        rope_rows = [x for x in rope_rows if x[0] is not None]
        if rope_rows:
            e, r = min(rope_rows)
            text += f"; the RoPE extension closest to its reference at 4L, {r}, keeps {e:+.2f}"
        out.append(text + ".")
    return out


def readme_rows(run):
    """The README's results table for one study folder: {row: the value}, each computed by the
    function its row names (the README's map names them too)."""
    ev = os.path.join(run, "eval")
    results = read_json(os.path.join(ev, "results.json"))
    L, ex = results["train_len"], {m: excess(results, m) for m in ("nope", "rope")}
    pos = read_json(os.path.join(ev, "positions.json"))
    ent = read_json(os.path.join(ev, "entropy.json"))
    best = read_json(os.path.join(run, "scales", "uniform.json"))["lengths"]
    took = {r: taken_back(results, r, "nope", 4 * L) if r in results["methods"] else None
            for r in ("nope_headscale_4L", "nope_uniform_4L")}
    held = [k for k, (ok, _) in check_run(run).items() if ok]
    at = lambda values, k, fmt: "–" if values.get(k) is None else format(values[k], fmt)  # noqa: E731
    return {
        "NoPE's loss at L against RoPE's (`findings.loss_at`)":
            f"{loss_at(results, 'nope', L) / loss_at(results, 'rope', L) - 1:+.1%}",
        "what the long context costs NoPE, at 2L / 4L / 8L, nats (`evaluate.excess`)":
            " / ".join(at(ex["nope"], k * L, "+.2f") for k in (2, 4, 8)),
        "what it costs RoPE (`evaluate.excess`)":
            " / ".join(at(ex["rope"], k * L, "+.2f") for k in (2, 4, 8)),
        "where NoPE's attention entropy leaves its trend / its loss turns up "
        "(`findings.entropy_onset`, `findings.onset`)":
            f"{entropy_onset(ent['nope'], L) / L:.2f}L / "
            f"{onset(pos['nope']['positions'], pos['nope']['loss'], L, DELTA) / L:.2f}L",
        "the best uniform λ at 2L / 4L / 8L (`search_scales.uniform_scale`)":
            " / ".join(at({k: v["best_lam"] for k, v in best.items()}, k, ".2f")
                       for k in ("2L", "4L", "8L")),
        "the share of NoPE's excess at 4L taken back by HeadScale / by one λ for all heads "
        "(`evaluate.taken_back`)": " / ".join(at(took, r, ".0%") for r in took),
        "the paper's findings (1)–(8) that hold (`findings.check_run`)":
            ", ".join(f"({k})" for k in held) or "none",
    }


def readme_table(runs):
    """The README's table, one column for these runs (one a seed): 'a; b' where they differ."""
    per_run = [readme_rows(r) for r in runs]
    lines = []
    for row in per_run[0]:
        values = list(dict.fromkeys(p[row] for p in per_run))
        lines.append(f"| {row} | {'; '.join(values)} |")
    return "\n".join(lines)


@dataclass
class FindingsConfig:
    name: str = ""                      # recipe name for the table ('' = the first folder's name)
    out: str = ""                       # also write the findings here as JSON
    table: bool = False                 # print the README's results table for these runs instead


def main():
    cfg = parse_config(FindingsConfig, [a for a in sys.argv[1:] if a.startswith("-")],
                       description=__doc__)
    runs = finished_studies(sys.argv[1:], "study/findings.py")
    if cfg.table:
        return print(readme_table(runs))
    per_run = {r: check_run(r) for r in runs}
    keys = sorted({k for f in per_run.values() for k in f})
    results = {r: read_json(os.path.join(r, "eval", "results.json")) for r in runs}
    protocols = {r: results[r].get("protocol") for r in runs}
    summary = {"recipe": cfg.name or os.path.basename(os.path.normpath(runs[0])), "runs": runs,
               "findings": {}, "measures": {}, "protocols": protocols}
    if len(set(protocols.values())) > 1:  # evaluate.PROTOCOL: what a measurement means
        print("these runs were measured under different protocols: "
              + ", ".join(f"{r}: protocol {p}" for r, p in protocols.items()))
    for k in keys:
        got = [per_run[r][k] for r in runs if k in per_run[r]]
        summary["findings"][k] = {"holds": all(ok for ok, _ in got),
                                  "evidence": [e for _, e in got]}
        mark = "yes" if summary["findings"][k]["holds"] else "no"
        print(f"({k}) {mark:3}  " + " | ".join(e for _, e in got))
    per_run_m = {r: measures(results[r]) for r in runs}
    for k in sorted({k for m in per_run_m.values() for k in m}):
        values = [per_run_m[r].get(k, float("nan")) for r in runs]
        summary["measures"][k] = values
        text = " | ".join(f"{v:+.3f} nats" if k == "rise_4L" else f"{v:.0%}" for v in values)
        print(f"{k}: {text}" + ("   (4L: nope - nope_window_L)" if k == "rise_4L" else ""))
    if cfg.out:
        write_json(cfg.out, summary)


if __name__ == "__main__":
    run_main(main)
