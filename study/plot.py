"""
Every figure of the project, drawn from saved files alone: no model is loaded, nothing is
measured here, so a figure can be changed and redrawn in seconds.

    python study/plot.py --study=out/study   # all of a study's figures (eval/, scales/, passkey/)
    python study/plot.py --eval_dir=out/eval --search_dir=out/nope/scales
    python study/plot.py --screen=out/sweep/screen.json   # the recipe screen: the gap at L
                                                          # against tokens

reproduce.py, study/passkey.py and study/sweep.py --screen call the same functions. A method has
one colour and line style in every figure (STYLE below): one colour per family (NoPE, RoPE and
its extensions, the uniform lambda, HeadScale, the length-following lambda), a shade or a line
style per member, dotted for a model reading only its last L positions. The colours are the
Okabe-Ito palette, which colour-blind readers can tell apart. A figure whose rows are missing
is skipped with one line saying what is missing.
"""

import csv
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

if not __package__:  # run as a script, not imported: the repository's modules first
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# the one definition of a row's reference and excess
from common import UserError, length_name, parse_config, read_json, run_main
from evaluate import excess, reference_of
from study.findings import entropy_trend  # criterion (3)'s trend, drawn as findings.py fits it
import matplotlib.colors as mc
import matplotlib
import matplotlib.pyplot as plt

# Okabe & Ito (2008): distinguishable with every common colour-vision deficiency
BLUE, SKY, VERMILLION, ORANGE, GREEN, PURPLE, YELLOW, BLACK = (
    "#0072B2", "#56B4E9", "#D55E00", "#E69F00", "#009E73", "#CC79A7", "#F0E442", "#000000")
DARK_RED = "#7A1F00"  # DroPE: RoPE's vermillion, darker
OLIVE = "#8F7F00"  # the length-following rows: a darker yellow, readable on white
TEAL = "#1B6F6A"  # reproduce.py --beyond: ALiBi, and NoPE with Scalable-Softmax (SKY's family)
# the rows whose attention entropy a figure draws (evaluate.py --entropy_rows: reproduce.py measures
# entropy for these alone, as each costs an explicit-softmax pass at the longest length)
ENTROPY_ROWS = ("nope", "nope_uniform_4L", "nope_headscale_4L", "nope_headslope_4L", "nope_notoken",
                "hybrid", "hybrid_swa", "hybrid_llama4", "hybrid_headscale_4L", "drope",
                "drope_headscale_4L", "alibi", "alibi_uniform_4L", "nope_ssmax",
                "nope_ssmax_headscale_4L")
SMOOTH = 4         # per-position curves: a moving average over L/SMOOTH positions (the paper:
                   # 100 at L = 2048 over far more text; our 64 windows a length need a wider one)


def shade(color, k):
    """Member k = 0, 1, 2 of a family: the family's colour, then lighter and darker."""
    rgb = np.array(mc.to_rgb(color))
    return mc.to_hex({0: rgb, 1: rgb + (1 - rgb) * 0.45, 2: rgb * 0.6}[k % 3])


# Each trained model's colour, line style, marker and label: its rows as trained, and its rows
# read only by their last L (dotted)
MODELS = {  # model -> colour, line style, marker, label, and its name in its remedies' labels
    "nope": (BLUE, "-", "o", "NoPE", "NoPE"),
    "nope_notoken": (SKY, "-", "o", "NoPE without start token", "NoPE without start token"),
    "rope": (VERMILLION, "-", "s", "RoPE", "RoPE"),
    # NoPE as production models use it (reproduce.py --modern): hybrids black, DroPE a dark red
    "hybrid": (BLACK, "-", "o", "hybrid RoPE/NoPE", "hybrid"),
    "hybrid_swa": (BLACK, "--", "o", "hybrid, windowed RoPE", "hybrid, windowed RoPE"),
    "drope": (DARK_RED, "--", "v", "DroPE, recalibrated", "DroPE"),
    "drope_short": (DARK_RED, "-.", "v", "DroPE, short recalibration", "DroPE, short"),
    "drope_zeroshot": (DARK_RED, ":", "x", "DroPE, zero-shot", "DroPE, zero-shot"),
    # the other answers to "attend past L" (reproduce.py --beyond)
    "alibi": (TEAL, "-", "P", "ALiBi", "ALiBi"),
    "nope_ssmax": (SKY, "-", "*", "NoPE + Scalable-Softmax", "NoPE + SSMax"),
}
# Each remedy's colour on NoPE (a shade per fit length), line style, marker and label; on another
# model the remedy takes that model's colour
REMEDIES = {
    "uniform": (GREEN, "-", "^", "uniform λ"),
    "headscale": (PURPLE, "-", "D", "HeadScale"),
    "layerscale": (PURPLE, "-.", "D", "λ per layer"),
    "uniform_fit": (PURPLE, ":", "D", "one λ, fitted"),
    "headslope": (OLIVE, "-", "v", "length-following λ"),
    "layerslope": (OLIVE, "--", "v", "slope per layer"),
    "uniformslope": (OLIVE, "-.", "v", "one slope, fitted"),
    "logn": (OLIVE, ":", "x", "logn (Qwen)"),
    "slope_grid": (OLIVE, (0, (5, 1, 1, 1)), "x", "λ(i) of the grid"),
    "slope": (OLIVE, "--", "x", "a slope set"),
    "llama4": (BLACK, None, "x", "Llama 4 temperature"),
}
VARIANTS = {"noclamp": ("--", "no clamp"), "noinit": (":", "init 1")}
SLOPES = ("headslope", "layerslope", "uniformslope", "logn", "slope_grid", "slope")
MODERN_MODELS = ("hybrid", "hybrid_swa", "drope", "drope_short", "drope_zeroshot")
EXTENSIONS = {"pi": ("--", "PI"), "ntk": ("-.", "NTK"), "yarn": ((0, (5, 1, 1, 1)), "YaRN")}


def style(row, L):
    """Colour, line style, marker and a readable label of a row of results.json, from the facts
    evaluate.py recorded in it (model, remedy, variant, fit_length, context), the same in every
    figure."""
    model, remedy = row.get("model"), row.get("remedy")
    color, ls, marker, label, short = MODELS.get(model, ("#777777", "-", ".", model or "?",
                                                         model or "?"))
    if row.get("context"):  # a model reading only its last L positions: the reference
        base = style({"model": model}, L)
        return base | {"ls": ":", "marker": None, "label": base["label"] + ", last L only"}
    at = f" ({length_name(row['fit_length'] / L)})" if row.get("fit_length") else ""
    method, _, kind = (remedy or "").partition("_")
    if method in EXTENSIONS and kind in ("zeroshot", "ft"):  # RoPE stretched: a style a method
        return {"color": ORANGE if kind == "ft" else shade(ORANGE, 2), "ls": EXTENSIONS[method][0],
                "marker": "s" if kind == "ft" else "^",
                "label": f"RoPE + {EXTENSIONS[method][1]}, "
                         + ("fine-tuned" + at if kind == "ft" else "zero-shot")}
    if remedy in REMEDIES:
        r_color, r_ls, marker, r_label = REMEDIES[remedy]
        variant = VARIANTS.get(row.get("variant"))
        name = r_label + (f", {variant[1]}" if variant else "")
        if model == "nope":  # NoPE's remedies: the remedy's colour, 4L (the paper's) darkest
            rank = length_rank(row.get("fit_length") or 4 * L, L)
            color = shade(r_color, rank) if r_color in (GREEN, PURPLE) else r_color
            return {"color": color, "ls": variant[0] if variant else r_ls,
                    "marker": marker.lower() if variant else marker, "label": name + at}
        # another model's remedies: its colour, the remedy's marker; a hybrid's its line style,
        # the others' a line style apart from their model's solid one
        if model not in ("hybrid", "hybrid_swa") and remedy != "llama4":
            ls = {"uniform": "-.", "headscale": "--"}.get(remedy, ":") if ls == "-" else "-"
        return {"color": color, "ls": ls, "marker": marker, "label": f"{short}, {name}{at}"}
    return {"color": color, "ls": ls, "marker": marker, "label": label}


def length_rank(n, L):
    """A fitted length's shade: 4L (the paper's) darkest, then 2L, 8L; other lengths as 4L."""
    return {4: 0, 2: 1, 8: 2}.get(round(n / L), 0)


def line(ax, x, y, results, name, **kw):
    """One row's curve, in its style."""
    s = style(results["methods"][name], results["train_len"])
    ax.plot(x, y, color=s["color"], ls=s["ls"], marker=s["marker"], label=s["label"], **kw)


# -----------------------------------------------------------------------------
# Helpers on the saved files

def moving_average(values, width):
    """Centred mean over `width` positions (fewer at the two ends), same length as values."""
    v = np.asarray(values, dtype=np.float64)
    c = np.concatenate([[0.0], np.cumsum(v)])
    i = np.arange(len(v))
    lo, hi = np.maximum(i - width // 2, 0), np.minimum(i + width - width // 2, len(v))
    return (c[hi] - c[lo]) / (hi - lo)


def best_rope_extension(results, n):
    """The RoPE extension row with the lowest mean loss at length n (None if there is none)."""
    extensions = {f"{m}_{k}" for m in EXTENSIONS for k in ("zeroshot", "ft")}
    rows = [(m["loss"][m["lengths"].index(n)], name) for name, m in results["methods"].items()
            if m.get("remedy") in extensions and n in m["lengths"]]
    return min(rows)[1] if rows else None


def mark_L(ax, L, text=True, scale=1):
    ax.axvline(L * scale, color="gray", ls="--", lw=0.8, zorder=0)
    if text:
        ax.annotate("L (trained)", (L * scale, 0), xycoords=("data", "axes fraction"),
                    xytext=(2, 2), textcoords="offset points", va="bottom", fontsize=8,
                    color="gray")  # below the legends


def length_axis(ax, L, lengths):
    """A log2 axis of lengths labelled L, 2L, 4L ..."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, ["L" if n == L else length_name(n / L) for n in lengths])
    ax.minorticks_off()


def position_axis(ax, L, n):
    """A linear axis of positions 0..n with ticks at multiples of L."""
    ticks = [k * L for k in range(0, n // L + 1) if k in (0, 1, 2, 4, 8, 16, 32)]
    ax.set_xticks(ticks, ["0" if t == 0 else "L" if t == L else length_name(t / L) for t in ticks])
    ax.set_xlim(0, n)


class Figures:
    """Draws into one folder, keeps the names it drew and says in one line what it skipped."""

    def __init__(self, out):
        matplotlib.use("Agg")
        self.plt, self.out, self.drawn, self.skipped = plt, out, [], []
        plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "legend.fontsize": 8,
                             "axes.spines.top": False, "axes.spines.right": False})

    def save(self, fig, name):
        fig.savefig(os.path.join(self.out, name), dpi=110, bbox_inches="tight")
        self.plt.close(fig)
        self.drawn.append(name)

    def skip(self, name, why):
        self.skipped.append(f"{name} ({why})")


def missing(have, want):
    return [w for w in want if w not in have]


# -----------------------------------------------------------------------------
# A study's evaluation: the hero figure and the families

def draw_eval(eval_dir, search_dir=""):
    """Every figure of an evaluate.py folder (results.json, positions.json, entropy.json) and,
    with search_dir, of search_scales.py's files. Returns (drawn, skipped)."""
    path = os.path.join(eval_dir, "results.json")
    if not os.path.exists(path):
        raise UserError(f"{path} does not exist; evaluate first (evaluate.py or reproduce.py)")
    results = read_json(path)
    pos = read_json(os.path.join(eval_dir, "positions.json")) if os.path.exists(
        os.path.join(eval_dir, "positions.json")) else {}
    ent = read_json(os.path.join(eval_dir, "entropy.json")) if os.path.exists(
        os.path.join(eval_dir, "entropy.json")) else {}
    F = Figures(eval_dir)
    hero(F, results, pos, ent)
    families(F, results)
    position_loss(F, results, pos)
    entropy_layers(F, results, ent)
    modern_families(F, results)
    entropy_modern(F, results, ent)
    modern_families(F, results, BEYOND, "loss_beyond.png",
                    "ALiBi and Scalable-Softmax beside NoPE")
    entropy_beyond(F, results, ent)
    if search_dir:
        search_figures(F, search_dir, ent)
    return F.drawn, F.skipped


def hero(F, results, pos, ent):
    """(a) where NoPE breaks, (b) why: its attention spreads, (c) how far each remedy carries it."""
    L, methods = results["train_len"], results["methods"]
    need = missing(methods, ["nope", "rope", "nope_window_L"])
    if need:
        return F.skip("hero.png", "no " + ", ".join(need))
    fig, axes = F.plt.subplots(1, 3, figsize=(15, 4.3))
    # (a) per-position loss, smoothed
    ax = axes[0]
    width = max(1, L // SMOOTH)
    n = 0
    for name in ("nope", "nope_notoken", "rope", "nope_window_L"):
        if name in pos and "loss_per_position" in pos[name]:
            y = pos[name]["loss_per_position"]
            n = max(n, len(y))
            line(ax, np.arange(1, len(y) + 1), moving_average(y, width), results, name, lw=1.3,
                 markevery=[])
    position_axis(ax, L, n or L)
    mark_L(ax, L)
    ax.set_xlabel("position i in the window (tokens)")
    ax.set_ylabel("loss at position i (nats per token)")
    ax.set_title("(a) Past L, NoPE's loss rises above its own last-L reading")
    ax.legend(loc="upper left", frameon=False)
    ax.text(0.99, 0.02, f"moving average over {width} positions (L/{SMOOTH})",
            transform=ax.transAxes, ha="right", va="bottom", fontsize=7, color="gray")
    # (b) attention entropy above the trend NoPE follows up to L
    ax = axes[1]
    rows = [r for r in ENTROPY_ROWS[:4] if r in ent]  # NoPE's, with the start token
    if "nope" in ent:
        trend = entropy_trend(ent["nope"]["positions"],
                              np.mean(ent["nope"]["entropy_bits"], (0, 1)), L)
        nb = L
        for name in rows:
            e = ent[name]
            per_pos = np.asarray(e.get("layer_bits_per_position", [])).mean(0) if e.get(
                "layer_bits_per_position") else None
            if per_pos is not None and len(per_pos):
                x = np.arange(1, len(per_pos) + 1)
                y = moving_average(per_pos, width)
            else:  # older files: the binned curve
                x, y = np.asarray(e["positions"]), np.mean(e["entropy_bits"], (0, 1))
            keep = x >= L / 4
            line(ax, x[keep], y[keep] - trend(x[keep]), results, name, lw=1.3, markevery=[])
            nb = max(nb, int(x[-1]))
        ax.axhline(0, color="gray", lw=0.8)
        position_axis(ax, L, nb)
        mark_L(ax, L)
        ax.legend(loc="upper left", frameon=False)
    else:
        ax.text(0.5, 0.5, "no entropy.json for nope", ha="center", transform=ax.transAxes)
    ax.set_xlabel("query position i (tokens)")
    ax.set_ylabel("mean attention entropy minus NoPE's trend (bits)")
    ax.set_title("(b) Why: past L its attention spreads (entropy)")
    ax.text(0.99, 0.02, "trend: a + b·log₂ i fitted to NoPE on L/4..L", transform=ax.transAxes,
            ha="right", va="bottom", fontsize=7, color="gray")
    # (c) each remedy's excess over the same model reading only its last L positions
    ax = axes[2]
    lengths = methods["nope"]["lengths"]
    n4 = 4 * L if 4 * L in lengths else lengths[-1]
    rows = ["nope", "rope", "nope_uniform_4L", "nope_headscale_4L",
            best_rope_extension(results, n4), "nope_headslope_4L"]
    for name in [r for r in rows if r and r in methods]:
        ex = excess(results, name)
        if ex:
            xs = sorted(ex)
            line(ax, xs, [ex[x] for x in xs], results, name, lw=1.5, ms=4)
    ax.axhline(0, color=BLACK, ls=":", lw=1, label="reading only its last L (reference)")
    length_axis(ax, L, lengths)
    ax.set_xlabel("evaluation length n")
    ax.set_ylabel("loss minus reference's (nats per token)")
    ax.set_title("(c) What the long context costs each method (0: nothing)")
    ax.legend(loc="upper left", frameon=False)
    fig.tight_layout()
    F.save(fig, "hero.png")


FAMILIES = {  # figure -> (title, which rows: a test of a row's facts and L)
    "loss_nope_remedies.png": ("NoPE and its remedies (λ fitted past L)",
                               lambda m, L: m.get("model") == "nope" and not m.get("context")
                               and m.get("remedy") in (None, "uniform", "headscale",
                                                       "layerscale", "uniform_fit")),
    "loss_rope_extensions.png": ("RoPE and its extensions (PI, NTK-aware, YaRN)",
                                 lambda m, L: m.get("model") == "rope" and not m.get("context")),
    "loss_length_following.png": ("λ that follows the position, against constant λ",
                                  lambda m, L: m.get("model") == "nope" and not m.get("context")
                                  and (m.get("remedy") in (None, *SLOPES)
                                       or m.get("remedy") in ("uniform", "headscale")
                                       and not m.get("variant") and m.get("fit_length")
                                       == 4 * L)),
    "loss_start_token.png": ("NoPE with and without the start token, RoPE",
                             lambda m, L: m.get("model") in ("nope", "nope_notoken", "rope")
                             and not m.get("remedy") and not m.get("context")),
}

# loss_modern.png: one column per recipe, each model beside its best remedy and its own reference
MODERN = (("NoPE (the paper)", "nope", ("nope_uniform_4L", "nope_headscale_4L")),
          ("hybrid: every 4th layer NoPE\n(Llama 4, SmolLM3)", "hybrid",
           ("hybrid_llama4", "hybrid_uniform_4L", "hybrid_headscale_4L")),
          ("hybrid_swa: RoPE layers windowed\n(Cohere)", "hybrid_swa",
           ("hybrid_swa_llama4", "hybrid_swa_uniform_4L", "hybrid_swa_headscale_4L")),
          ("DroPE: RoPE dropped, recalibrated", "drope",
           ("drope_uniform_4L", "drope_headscale_4L")))


def families(F, results):
    """Mean loss and excess against length, one figure per family of methods."""
    L, methods = results["train_len"], results["methods"]
    lengths = sorted({n for m in methods.values() for n in m["lengths"]})
    for fn, (title, member) in FAMILIES.items():
        rows = [n for n, m in methods.items() if member(m, L)]
        if (len(rows) < 2 or fn == "loss_length_following.png"
                and not any(methods[n].get("remedy") in SLOPES for n in rows)):
            F.skip(fn, "fewer than two of its rows" if len(rows) < 2
                   else "no length-following rows (--slopes)")
            continue
        fig, axes = F.plt.subplots(1, 2, figsize=(11, 4))
        refs = {ref for n in rows for ref in [reference_of(results, n)] if ref}
        for name in rows + sorted(refs):
            m = methods[name]
            line(axes[0], m["lengths"], m["loss"], results, name, lw=1.4, ms=4)
            ex = excess(results, name)
            if ex:
                xs = sorted(ex)
                line(axes[1], xs, [ex[x] for x in xs], results, name, lw=1.4, ms=4)
        axes[1].axhline(0, color=BLACK, ls=":", lw=1)
        for ax, ylabel in zip(axes, ("mean loss (nats per token)",
                                     "excess over the same model reading its last L")):
            length_axis(ax, L, lengths)
            ax.set_xlabel("evaluation length n")
            ax.set_ylabel(ylabel)
        axes[0].set_title("mean loss over all positions")
        axes[1].set_title("what the long context costs (0: no cost)")
        # label -> line, both panels
        handles = dict(zip(*reversed(axes[0].get_legend_handles_labels())))
        handles.update(zip(*reversed(axes[1].get_legend_handles_labels())))
        axes[1].legend(handles.values(), handles.keys(), loc="upper left",
                       bbox_to_anchor=(1.02, 1), frameon=False)
        fig.suptitle(title)
        fig.tight_layout()
        F.save(fig, fn)


BEYOND = (("NoPE (the paper)", "nope", ("nope_uniform_4L", "nope_headscale_4L")),
          ("ALiBi\n(Press et al. 2022)", "alibi", ("alibi_uniform_4L",)),
          ("NoPE + Scalable-Softmax\n(Nakanishi 2025)", "nope_ssmax",
           ("nope_ssmax_uniform_4L", "nope_ssmax_headscale_4L")))


def modern_families(F, results, recipes=MODERN, file="loss_modern.png",
                    heading="NoPE as used since the paper"):
    """loss_modern.png: for each recipe of reproduce.py --modern, its model (blue), its best remedy
    (green: the lowest loss at 4L among the same weights with Llama 4's temperature, the uniform
    lambda or HeadScale) and the same model reading its last L (grey, dotted): mean loss above,
    excess below, the panels of a row on one scale. With recipes=BEYOND, loss_beyond.png: the
    same for the rows of reproduce.py --beyond."""
    L, methods = results["train_len"], results["methods"]
    families = [(t, base, [r for r in more if r in methods]) for t, base, more in recipes
                if base in methods]
    if not any(base != "nope" for _, base, _ in families):
        return None  # drawn only for a study run with --modern (--beyond)
    lengths = sorted({n for m in methods.values() for n in m["lengths"]})
    fig, axes = F.plt.subplots(2, len(families), figsize=(3.6 * len(families), 6.4),
                               sharey="row", squeeze=False)
    for col, (title, base, remedies) in enumerate(families):
        at = 4 * L if 4 * L in lengths else lengths[-1]
        best = min(remedies, key=lambda r: dict(zip(methods[r]["lengths"],
                                                    methods[r]["loss"])).get(at, math.inf),
                   default=None)
        ref = reference_of(results, base)
        for name, color, ls, marker in ((base, BLUE, "-", "o"), (best, GREEN, "--", "^"),
                                        (ref, "gray", ":", None)):
            if name is None:
                continue
            m = methods[name]
            kw = dict(color=color, ls=ls, marker=marker, lw=1.5, ms=4, label=style(m, L)["label"])
            axes[0, col].plot(m["lengths"], m["loss"], **kw)
            ex = excess(results, name)
            if ex:
                axes[1, col].plot(sorted(ex), [ex[x] for x in sorted(ex)], **kw)
        axes[1, col].axhline(0, color=BLACK, ls=":", lw=1)
        axes[0, col].set_title(title, fontsize=9)
        for row in (0, 1):
            length_axis(axes[row, col], L, lengths)
            axes[row, col].legend(loc="upper left", fontsize=7, frameon=False)
        axes[1, col].set_xlabel("evaluation length n")
    axes[0, 0].set_ylabel("mean loss (nats per token)")
    axes[1, 0].set_ylabel("excess over itself reading its last L")
    fig.suptitle(f"{heading}: each recipe, its best remedy at 4L, and itself reading its last L")
    fig.tight_layout()
    F.save(fig, file)


def position_loss(F, results, pos):
    """Per-position loss of the base models, their references and the 4L remedies, smoothed."""
    L = results["train_len"]
    rows = [r for r in ("nope", "nope_notoken", "rope", "nope_uniform_4L", "nope_headscale_4L",
                        "nope_headslope_4L", "nope_window_L", "rope_window_L")
            if r in pos and "loss_per_position" in pos[r]]
    if not rows:
        return F.skip("position_loss.png", "no per-position curves in positions.json")
    width = max(1, L // SMOOTH)
    fig, ax = F.plt.subplots(figsize=(9, 4.3))
    n = 0
    for name in rows:
        y = pos[name]["loss_per_position"]
        n = max(n, len(y))
        line(ax, np.arange(1, len(y) + 1), moving_average(y, width), results, name, lw=1.2,
             markevery=[])
    position_axis(ax, L, n)
    mark_L(ax, L)
    ax.set_xlabel("position i in the window (tokens)")
    ax.set_ylabel("loss at position i (nats per token)")
    ax.set_title(f"Past L the loss rises for every model reading the whole window, "
                 f"not for the dotted ones reading their last L\n"
                 f"(per-position loss, moving average over {width} positions = L/{SMOOTH})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False)
    fig.tight_layout()
    F.save(fig, "position_loss.png")


def nope_layer_rows(arch, n_layer):
    """The NoPE layers of a model from results.json's arch (rope+nope/4: layers 3, 7, ...)."""
    if arch.startswith("nope"):
        return list(range(n_layer))
    k = re.search(r"\+nope/(\d+)", arch)
    return [i for i in range(n_layer) if k and (i + 1) % int(k.group(1)) == 0]


def entropy_modern(F, results, ent):
    """Does attention stay sharp past L? Mean entropy of the NoPE layers (a hybrid's NoPE layers,
    every layer of NoPE and DroPE) against position, for the rows of reproduce.py --modern."""
    methods = results["methods"]
    rows = [r for r in ENTROPY_ROWS
            if r in ent and r in methods and ent[r].get("layer_bits_per_position")
            and (methods[r].get("model") in MODERN_MODELS or methods[r].get("model") == "nope"
                 and methods[r].get("remedy") in (None, "headscale"))]
    if not any(methods[r].get("model") in MODERN_MODELS for r in rows):
        return None  # drawn only for a study run with --modern
    curves = {}
    for r in rows:  # the mean over the NoPE layers' heads, position by position
        per_layer = np.asarray(ent[r]["layer_bits_per_position"])  # (n_layer, n)
        layers = nope_layer_rows(methods[r].get("arch", methods[r]["pos_encoding"]), len(per_layer))
        curves[r] = per_layer[layers].mean(0)
    entropy_curves(F, results, curves, "mean entropy of the NoPE layers' heads (bits)",
                   "Attention entropy of the layers without position encoding",
                   "entropy_modern.png")


def entropy_curves(F, results, curves, ylabel, title, file):
    """One entropy curve a row against position (curves: row -> (n,) bits), smoothed over
    L/SMOOTH, beside log2 i, the entropy of attention spread evenly."""
    L = results["train_len"]
    width = max(1, L // SMOOTH)
    fig, ax = F.plt.subplots(figsize=(9, 4.3))
    for r, y in curves.items():
        line(ax, np.arange(1, len(y) + 1), moving_average(y, width), results, r, lw=1.2,
             markevery=[])
    n = max(len(y) for y in curves.values())
    x = np.arange(1, n + 1)
    ax.plot(x, np.log2(x), color="gray", lw=0.8, ls="--", label="uniform attention, log₂ i")
    position_axis(ax, L, n)
    mark_L(ax, L)
    ax.set_xlabel("query position i")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title} (moving average over {width})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False)
    fig.tight_layout()
    F.save(fig, file)


def entropy_beyond(F, results, ent):
    """Does a bias or a learned temperature keep attention sharp past L? Mean entropy of every
    layer's heads against position for the rows of reproduce.py --beyond, beside NoPE's."""
    methods = results["methods"]
    rows = [r for r in ("nope", "nope_headscale_4L", "alibi", "alibi_uniform_4L", "nope_ssmax",
                        "nope_ssmax_headscale_4L") if r in ent and r in methods
            and ent[r].get("layer_bits_per_position")]
    if not any(methods[r].get("model") in ("alibi", "nope_ssmax") for r in rows):
        return None  # drawn only for a study run with --beyond
    curves = {r: np.asarray(ent[r]["layer_bits_per_position"]).mean(0) for r in rows}
    entropy_curves(F, results, curves, "mean attention entropy (bits)",
                   "Attention entropy: NoPE, ALiBi and Scalable-Softmax", "entropy_beyond.png")


def entropy_layers(F, results, ent):
    """Mean attention entropy per layer against position for NoPE at lambda = 1 and its 4L
    remedies, with the bound of uniform attention, log2(i): on a linear axis, so a bend shows."""
    L = results["train_len"]
    rows = [r for r in ENTROPY_ROWS[:5]
            if r in ent and ent[r].get("layer_bits_per_position")]  # NoPE's
    if "nope" not in rows:
        return F.skip("entropy.png", "no per-position entropy of nope in entropy.json")
    width = max(1, L // SMOOTH)
    per_layer = {r: np.asarray(ent[r]["layer_bits_per_position"]) for r in rows}  # (n_layer, n)
    n_layer, n = per_layer["nope"].shape
    cols = min(n_layer, 4)
    fig, axes = F.plt.subplots(-(-n_layer // cols), cols,
                               figsize=(3.6 * cols, 3.3 * -(-n_layer // cols)),
                               sharey=True, squeeze=False)
    x = np.arange(1, n + 1)
    for layer, ax in enumerate(axes.flat):
        if layer >= n_layer:
            ax.axis("off")
            continue
        ax.plot(x, np.log2(x), color="gray", lw=0.8, ls="--", label="uniform attention, log₂ i")
        for r in rows:
            line(ax, x, moving_average(per_layer[r][layer], width), results, r, lw=1.2,
                 markevery=[])
        position_axis(ax, L, n)
        mark_L(ax, L, text=layer == 0)
        ax.set_title(f"layer {layer}")
        ax.set_xlabel("query position i")
    axes[0, 0].set_ylabel("mean entropy of its heads (bits)")
    axes[0, -1].legend(loc="lower right", frameon=False, fontsize=7)
    fig.suptitle(f"Attention entropy per layer (moving average over {width} positions)")
    fig.tight_layout()
    F.save(fig, "entropy.png")


def search_figures(F, search_dir, ent):
    """The uniform grid and lambda per position with its fit; the fitted scales and slopes."""
    uni_path = os.path.join(search_dir, "uniform.json")
    if os.path.exists(uni_path):
        lambda_grid(F, search_dir, read_json(uni_path))
    for fn in sorted(os.listdir(search_dir)):
        if fn.startswith(("head_", "headslope_")) and fn.endswith(".csv"):
            head_table(F, search_dir, fn, ent)


def lambda_grid(F, search_dir, uni):
    L = uni["train_len"]
    with open(os.path.join(search_dir, "grid.csv"), encoding="utf-8") as f:
        grid = list(csv.DictReader(f))
    fig, axes = F.plt.subplots(1, 2, figsize=(11, 4))
    ax = axes[0]
    for name, s in sorted(uni["lengths"].items(), key=lambda kv: kv[1]["length"]):
        pts = sorted((float(r["lam"]), float(r["loss"])) for r in grid
                     if int(r["length"]) == s["length"])
        lam, loss = np.array(pts).T
        c = shade(GREEN, length_rank(s["length"], L))
        ax.plot(lam, loss - loss.min(), color=c, marker=".",
                label=f"n = {name}: best λ {s['best_lam']:.2f}")
        ax.plot([s["best_lam"]], [0], "o", color=c, ms=7, mfc="none")
    ax.set_ylim(-0.01, 0.3)  # the minimum is what matters; far from it the loss climbs steeply
    ax.set_xlabel("λ, the same for every head")
    ax.set_ylabel("mean loss minus its minimum (nats per token)")
    ax.set_title("UniformScale: the best λ grows with the length")
    ax.legend(frameon=False)
    ax = axes[1]
    fit = uni["fit"]
    s = next(s for s in uni["lengths"].values() if s["length"] == fit["length"])
    ax.plot(s["positions"], s["best_lam_per_position"], "o", color=GREEN, ms=4,
            label=f"best λ per position bin, n = {length_name(fit['length'] / L)}")
    x = np.linspace(L, fit["length"], 200)
    ax.plot(x, 1 + fit["a"] * np.log(x / L), color=BLACK,
            label=f"1 + a ln(i/L): a = {fit['a']:.2f}, R² = {fit['r2']:.2f}")
    ax.set_xscale("log", base=2)
    ticks = [L * 2 ** k for k in range(0, 8) if L * 2 ** k <= fit["length"]]
    ax.set_xticks(ticks, ["L" if t == L else length_name(t / L) for t in ticks])
    ax.minorticks_off()
    mark_L(ax, L, text=False)
    ax.set_xlabel("position i (log scale)")
    ax.set_ylabel("best λ")
    ax.set_title("The best λ per position follows 1 + a ln(i/L)")
    ax.legend(frameon=False, loc="upper left")
    fig.tight_layout()
    F.save(fig, "lambda_grid.png")


def read_head_table(path, key="scale"):
    """(n_layer, n_head) array of a search_scales.py head_*.csv (key "scale") or
    headslope_*.csv ("slope")."""
    with open(path, encoding="utf-8") as f:
        rows = [(int(r["layer"]), int(r["head"]), float(r[key])) for r in csv.DictReader(f)]
    lam = np.zeros((max(r[0] for r in rows) + 1, max(r[1] for r in rows) + 1))
    for layer, head, v in rows:
        lam[layer, head] = v
    return lam


def head_entropy_near(e, length):
    """(n_layer, n_head) mean entropy (bits) of evaluate.py's entropy.json row `e` near position
    `length` (within a bin or length / 8), or None when the row does not reach it: the paper's
    Fig. 5 reads each head's entropy at the target length against its fitted lambda."""
    pos = np.array(e["positions"])
    near = np.abs(pos - length) <= max(e["bin"], length // 8)
    if not near.any() or length > e["length"]:
        return None
    return np.array(e["entropy_bits"])[:, :, near].mean(-1)


def head_table(F, search_dir, fn, ent):
    # the slopes a_h of lambda_h(i) = 1 + a_h ln(max(i, L) / L)
    slopes = fn.startswith("headslope_")
    lam = read_head_table(os.path.join(search_dir, fn), "slope" if slopes else "scale")
    fig, ax = F.plt.subplots(figsize=(1.6 + 0.7 * lam.shape[1], 1.2 + 0.6 * lam.shape[0]))
    im = ax.imshow(lam, cmap="cividis")
    mid = (lam.min() + lam.max()) / 2
    for (layer, head), v in np.ndenumerate(lam):
        ax.text(head, layer, f"{v:.2f}", ha="center", va="center", fontsize=7,
                color="k" if v > mid else "w")
    ax.set_xticks(range(lam.shape[1]))
    ax.set_yticks(range(lam.shape[0]))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    what = "slope a" if slopes else "λ"
    ax.set_title(f"{'Length-following' if slopes else 'HeadScale'} {what}, "
                 f"fitted at {fn.split('_', 1)[1][:-4]}", fontsize=9)
    fig.colorbar(im, ax=ax, label=what)
    F.save(fig, f"scales_{fn[:-4]}.png")
    if slopes or "nope" not in ent:
        return
    # the paper's Fig. 5: per-head entropy at the target length (lambda = 1) against the
    # fitted lambda
    meta = read_json(os.path.join(search_dir, fn[:-4] + ".json"))
    h = head_entropy_near(ent["nope"], meta["length"])  # (layers, heads)
    if h is None:
        return
    fig, ax = F.plt.subplots(figsize=(5, 4))
    for layer in range(lam.shape[0]):
        ax.plot(h[layer], lam[layer], "o", color=F.plt.cm.cividis(layer / max(lam.shape[0] - 1, 1)),
                label=f"layer {layer}")
    ax.set_xlabel(f"head entropy near i = {meta['length']} at λ = 1 (bits)")
    ax.set_ylabel("fitted λ")
    ax.set_title("Do lower-entropy heads get larger λ? (the paper's Fig. 5)", fontsize=9)
    ax.legend(frameon=False)
    fig.tight_layout()
    F.save(fig, f"entropy_vs_scale_{fn[5:-4]}.png")


# -----------------------------------------------------------------------------
# Passkey heat maps (passkey.py's passkey.csv)

def draw_passkey(out_dir, rows, avg, L, facts):
    """A heat map (depth x length in multiples of L) per model, and all of them in passkey_all.png.
    rows: (method, length, depth, accuracy, n); facts: each method's (passkey.json's)."""
    F = Figures(out_dir)
    methods = list(dict.fromkeys(r[0] for r in rows))
    lengths = sorted({r[1] for r in rows})
    depths = sorted({r[2] for r in rows})
    grids = {}
    for m in methods:
        acc = np.full((len(depths), len(lengths)), np.nan)
        for r in rows:
            if r[0] == m:
                acc[depths.index(r[2]), lengths.index(r[1])] = r[3]
        grids[m] = acc

    def draw(ax, m, first_column=True):
        im = ax.imshow(grids[m], cmap="cividis", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(len(lengths)), [length_name(n / L) for n in lengths])
        ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths] if first_column else [])
        ax.set_xlabel("prompt length")
        if first_column:
            ax.set_ylabel("depth of the key in the filler")
        ax.set_title(f"{style(facts.get(m, {}), L)['label']}: mean {avg[m]:.0%}", fontsize=9)
        return im

    for m in methods:
        fig, ax = F.plt.subplots(figsize=(1.8 + 0.8 * len(lengths), 4))
        fig.colorbar(draw(ax, m), ax=ax, label="exact-match accuracy")
        fig.tight_layout()
        F.save(fig, f"passkey_{m}.png")
    cols = min(3, len(methods))
    nrows = -(-len(methods) // cols)
    fig, axes = F.plt.subplots(nrows, cols,
                               figsize=(1 + cols * (0.8 + 0.7 * len(lengths)), nrows * 3.4),
                               squeeze=False, layout="constrained")
    for i, (ax, m) in enumerate(zip(axes.flat, methods)):
        im = draw(ax, m, first_column=i % cols == 0)
    for ax in axes.flat[len(methods):]:
        ax.axis("off")
    fig.colorbar(im, ax=axes, label="exact-match accuracy", shrink=0.8)
    fig.suptitle(f"Passkey retrieval (L = {L} tokens)")
    F.save(fig, "passkey_all.png")
    return F.drawn


def passkey_rows(path):
    """passkey.csv -> [(method, length, depth, accuracy, n)]"""
    with open(path, encoding="utf-8") as f:
        return [(r["method"], int(r["length"]), float(r["depth"]), float(r["accuracy"]),
                 int(r["n"]))
                for r in csv.DictReader(f)]


def read_passkey(out_dir):
    info = read_json(os.path.join(out_dir, "passkey.json"))
    return (passkey_rows(os.path.join(out_dir, "passkey.csv")), info["mean_accuracy"],
            info["train_len"], info.get("facts", {}))


# -----------------------------------------------------------------------------
# The recipe screen (sweep.py --screen's screen.json)

def draw_screen(path):
    """NoPE/RoPE at L against training tokens (log axis), one line per recipe family
    (recipes NAME, NAME_x0.5, NAME_x2 ... differ only in their tokens), every seed a point."""
    rows = read_json(path)["rows"]
    F = Figures(os.path.dirname(os.path.abspath(path)))
    pairs = {}
    for r in rows:
        pairs.setdefault((r["recipe"], r["seed"]), {})[r["pos_encoding"]] = r
    fam = {}
    for (recipe, seed), p in pairs.items():
        if {"nope", "rope"} <= set(p):
            base = re.sub(r"_x[\d.]+$", "", recipe)
            fam.setdefault(base, []).append(
                (p["nope"]["tokens"],
                 p["nope"]["final_val_loss"] / p["rope"]["final_val_loss"] - 1,
                 p["nope"]["final_val_bpb"], p["rope"]["final_val_bpb"]))
    # a curve needs two token counts
    fam = {k: v for k, v in fam.items() if len({t for t, *_ in v}) > 1}
    if not fam:
        F.skip("gap_vs_tokens.png", "no recipe family with two token counts")
        return F.drawn, F.skipped
    colors = [BLUE, VERMILLION, GREEN, PURPLE, ORANGE, SKY, OLIVE, BLACK]
    fig, axes = F.plt.subplots(1, 2, figsize=(11, 4))
    for (base, pts), c in zip(sorted(fam.items()), colors):
        pts = np.array(sorted(pts))
        tokens = np.unique(pts[:, 0])
        mean = [pts[pts[:, 0] == t].mean(0) for t in tokens]
        axes[0].plot(pts[:, 0], 100 * pts[:, 1], "o", color=c, ms=4, alpha=0.6)
        axes[0].plot(tokens, [100 * m[1] for m in mean], "-", color=c, label=base)
        axes[1].plot(tokens, [m[2] for m in mean], "-o", color=c, ms=4, label=f"{base}: NoPE")
        axes[1].plot(tokens, [m[3] for m in mean], "--s", color=c, ms=4, label=f"{base}: RoPE")
    axes[0].axhline(5, color="gray", ls="--", lw=0.8)
    axes[0].annotate("finding 1: within 5%", (1, 5), xycoords=("axes fraction", "data"),
                     ha="right", va="bottom", fontsize=8, color="gray")
    axes[0].set_ylabel("NoPE's loss above RoPE's at L (%)")
    axes[0].set_title("NoPE's gap to RoPE at L against training tokens (dots: seeds)")
    axes[1].set_ylabel("validation loss at L (bits per byte)")
    axes[1].set_title("Both models, in bits per byte (compares tokenizers)")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training tokens")
        ax.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    F.save(fig, "gap_vs_tokens.png")
    return F.drawn, F.skipped


# -----------------------------------------------------------------------------

@dataclass
class PlotConfig:
    study: str = ""                     # a reproduce.py folder: eval/ (with scales/) and passkey/
    eval_dir: str = ""                  # an evaluate.py folder
                                        # (results.json, positions.json, entropy.json)
    search_dir: str = ""                # a search_scales.py folder
                                        # (uniform.json, grid.csv, head_*.csv)
    passkey_dir: str = ""               # a passkey.py folder (passkey.csv, passkey.json)
    screen: str = ""                    # sweep.py --screen's screen.json


def report(where, drawn, skipped):
    if drawn:
        print(f"drew {', '.join(drawn)} in {where}")
    if skipped:
        print(f"skipped {'; '.join(skipped)}")


def main():
    cfg = parse_config(PlotConfig, description=__doc__)
    if cfg.study:
        cfg.eval_dir = cfg.eval_dir or os.path.join(cfg.study, "eval")
        cfg.search_dir = cfg.search_dir or os.path.join(cfg.study, "scales")
        pk = os.path.join(cfg.study, "passkey")
        cfg.passkey_dir = cfg.passkey_dir or (pk if os.path.exists(os.path.join(pk, "passkey.csv"))
                                              else "")
    if not (cfg.eval_dir or cfg.passkey_dir or cfg.screen):
        raise UserError("nothing to draw: give --study=DIR, --eval_dir=DIR, --passkey_dir=DIR "
                        "or --screen=FILE")
    if cfg.search_dir and not os.path.isdir(cfg.search_dir):
        raise UserError(f"--search_dir={cfg.search_dir} is not a folder")
    if cfg.eval_dir:
        report(cfg.eval_dir, *draw_eval(cfg.eval_dir, cfg.search_dir))
    if cfg.passkey_dir:
        if not os.path.exists(os.path.join(cfg.passkey_dir, "passkey.csv")):
            raise UserError(f"{cfg.passkey_dir}/passkey.csv does not exist; run passkey.py first")
        report(cfg.passkey_dir, draw_passkey(cfg.passkey_dir, *read_passkey(cfg.passkey_dir)), [])
    if cfg.screen:
        if not os.path.exists(cfg.screen):
            raise UserError(f"{cfg.screen} does not exist; run sweep.py --screen first")
        report(os.path.dirname(cfg.screen), *draw_screen(cfg.screen))


if __name__ == "__main__":
    run_main(main)
