r"""
The paper's two remedies for NoPE past its training length L, on any train.py checkpoint.

1. UniformScale (grid search, no training): attention logits lam * q.k / sqrt(d) with one lam
   for every head. For each target length, the validation loss of every lam on a grid, on the
   same fixed windows; the best lam per length, and per position i, with the fit
   lam(i) = 1 + a * ln(i / L) of the paper's appendix.
2. HeadScale (gradient fit): one lam per (layer, head), every other weight frozen, fitted on
   the LM loss at the target length: AdamW, warm-up then cosine, and after every step
   lam >= 1 (the "focus constraint"). Also one lam per layer (--granularity=layer).
3. Length-following scales (--fit=slope): lam_h(i) = 1 + a_h ln(max(i, L) / L), the log law of
   the grid's best lam per position, one slope a_h per head (or layer, or one), fitted the same
   way with head_scale fixed at 1 and, after every step, a_h >= 0; initialised at the grid's a
   at that length. Nothing changes at positions <= L. --set_slope writes a slope without a fit.

The paper's pieces here, each one function: uniform_scale (T3, the best lambda of a loss table),
fit_log_law (T4, lambda(i) = 1 + a ln(i / L)), fit_head_scales (T5, HeadScale). The rest reads
checkpoints and windows, measures, prints and writes files.

    python search_scales.py --ckpt=out/nope/ckpt.pt         # grid at 2L,4L,8L, fit at 2L,4L
    python search_scales.py --ckpt=out/nope/ckpt.pt --grid=false --fit_lengths=4 --min_scale=0 \
        --tag=_noclamp
    python search_scales.py --ckpt=out/nope/ckpt.pt --grid=false --fit_lengths=4 --init=1 \
        --tag=_noinit
    python search_scales.py --ckpt=out/nope/ckpt.pt --grid=false --fit_lengths=4 --fit=slope \
        --set_slope=logn,grid

Writes into out_dir (default: the checkpoint's folder + /scales):
    grid.csv            length, lam, loss, tail_loss for every grid point
    uniform.json        best lam per length (mean and tail metric), best lam per position, the fit
    uniform_grid_4L.pt  the checkpoint with every head_scale = the grid's best lam for 4L
                        (one per length)
    head_4L.pt/.csv/.json   the fitted scales: checkpoint, (layer, head, scale) table, fit log
                        (layer_4L.*, or uniform_4L.*: one lambda fitted by gradient, with
                        --granularity=layer or uniform; the study's rows nope_uniform_* are
                        the grid's)
    headslope_4L.pt/.csv/.json  --fit=slope: the fitted slopes a (layer, head, slope), head_scale 1
                        (layerslope_4L.*, uniformslope_4L.*)
    slope_logn.pt/.json  --set_slope=logn: every slope 1/ln L (Qwen's logn attention),
                        nothing fitted
    slope_grid.pt/.json  --set_slope=grid: every slope the grid's a at its longest length
                        (slope_0.3.*: a number)
On a hybrid of RoPE and NoPE layers (families.Hybrid) every scale and slope acts on its NoPE
layers alone; the RoPE layers keep lambda = 1.
The grid scores windows of the validation split's "search" documents; evaluate.py scores its "eval"
documents (protocol 3, data.doc_sides): lambda is never judged, at any length, on text it was
chosen on (python study/overlap.py prints 0.0% shared). HeadScale fits on the training split.
"""

import contextlib
import itertools
import math
import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch

import families  # noqa: F401  (registers the families past the paper: their checkpoints load)
from common import (Progress, UserError, autocast, cosine_lr, default_tail, length_list,
                    length_name, parse_config, pick_device, pick_dtype, read_json, run_main,
                    write_csv, write_json)
from data import Dataset
from evaluate import binned, measure
from model import load_checkpoint, save_checkpoint


@dataclass
class SearchConfig:
    ckpt: str = "out/nope/ckpt.pt"      # a checkpoint written by train.py
    out_dir: str = ""                   # results folder ('' = <checkpoint folder>/scales)
    dataset: str = ""                   # '' = the dataset the checkpoint was trained on
    # UniformScale grid search
    grid: bool = True                   # run the uniform grid search
    lengths: list[float] = field(  # grid target lengths, in units of L
        default_factory=lambda: [2.0, 4.0, 8.0])
    lam_min: float = 1.0                # grid start
    lam_max: float = 2.0                # grid end (inclusive): above every best lam measured so far
                                        # (docs/); a best lam at the end is said in one line
    lam_step: float = 0.05              # grid step
    windows: int = 64                   # validation windows per length (fixed, seeded, inside
                                        # the "search" documents: none of evaluate.py's text)
    tail: int = 0                       # tail metric's tokens (0 = L/8, the paper's 256/2048)
    select: str = "loss"                # the best lam by: loss (mean over all positions) | tail
    position_bins: int = 0              # width of the position bins for lam(i) (0 = L/8)
    # HeadScale gradient fit
    fit_lengths: list[float] = field(  # fit target lengths, units of L ('' = none)
        default_factory=lambda: [2.0, 4.0])
    fit: str = "scale"                  # scale (HeadScale: lam) | slope (the slopes a of
                                        # lam(i) = 1 + a ln(max(i, L) / L), head_scale 1,
                                        # a >= 0 after every step)
    granularity: str = "head"           # head (n_layer x n_head) | layer (n_layer) | uniform (1)
    init: float = 0.0                   # starting lam (0 = the best uniform lam for that length);
                                        # with --fit=slope the starting a (0 = the grid's lambda(i)
                                        # fit a at that length)
    min_scale: float = 1.0              # clamp after every step: lam >= min_scale (0 = no clamp;
                                        # --fit=slope: a >= 0)
    steps: int = 200                    # optimizer steps
    lr: float = 0.05                    # peak learning rate
    warmup_frac: float = 0.1            # linear warm-up over this share of the steps
    final_lr_frac: float = 0.1          # cosine decay down to final_lr_frac * lr
    beta1: float = 0.9                  # AdamW beta1
    beta2: float = 0.95                 # AdamW beta2
    fit_batch_size: int = 4             # training sequences per fit step
    tag: str = ""                       # suffix for the fit's output names (e.g. _noclamp)
    set_slope: list[str] = field(default_factory=list)  # write slope_VALUE.pt, nothing fitted:
                                        # every slope a = VALUE, a number >= 0, logn (Qwen:
                                        # 1/ln L) or grid (uniform.json's a, longest length)
    # system
    batch_size: int = 8                 # evaluation batch size
    seed: int = 4321                    # windows and fit batches
    device: str = "auto"                # auto | cpu | cuda | mps
    dtype: str = "auto"                 # auto | float32 | bfloat16 | float16 (fits run in float32)
    log_interval: int = 20              # fit progress line every this many steps
    preset: str = ""                    # the preset used (set by --preset=NAME)


def _number(text):
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def check(cfg):
    if cfg.lam_step <= 0 or cfg.lam_max < cfg.lam_min:
        raise UserError(f"empty lambda grid: need lam_step > 0 and lam_max >= lam_min "
                        f"(got {cfg.lam_min}..{cfg.lam_max} step {cfg.lam_step})")
    if cfg.lam_min <= 0:
        raise UserError("lambda must be > 0 (it multiplies the attention logits), got "
                        f"lam_min={cfg.lam_min}")
    if cfg.init < 0:
        raise UserError("--init must be > 0 (or 0: the grid's best uniform lambda, or with "
                        f"--fit=slope its lambda(i) fit a), got {cfg.init}")
    if cfg.fit not in ("scale", "slope"):
        raise UserError(f"--fit must be scale or slope, got {cfg.fit!r}")
    if cfg.fit == "slope" and any(k <= 1 for k in cfg.fit_lengths):
        raise UserError("--fit=slope fits slopes that act only past L: every --fit_lengths must "
                        f"be > 1, got {cfg.fit_lengths}")
    for v in cfg.set_slope:
        if v not in ("logn", "grid") and not (_number(v) is not None and _number(v) >= 0):
            raise UserError(f"--set_slope takes logn, grid or a number >= 0, got {v!r}")
    if cfg.granularity not in ("head", "layer", "uniform"):
        raise UserError(f"--granularity must be head, layer or uniform, got {cfg.granularity!r}")
    if cfg.select not in ("loss", "tail"):
        raise UserError(f"--select must be loss or tail, got {cfg.select!r}")
    for k in ("windows", "steps", "fit_batch_size", "batch_size", "log_interval", "lr"):
        if getattr(cfg, k) <= 0:
            raise UserError(f"--{k} must be > 0, got {getattr(cfg, k)}")
    for k in ("tail", "position_bins"):
        if getattr(cfg, k) < 0:
            raise UserError(f"--{k} must be >= 0 (0 = L/8), got {getattr(cfg, k)}")


# -----------------------------------------------------------------------------
# UniformScale: grid search

def uniform_scale(lams, loss, tail, width):
    """Piece T3: UniformScale's choice from a loss table (the paper: one lambda for every head,
    chosen by grid search on validation loss at the target length).

        best lam          = argmin_lam  mean_i loss(lam, i)     over every position i = 1..n
        best lam (tail)   = argmin_lam  the same mean over the last `tail` positions (the
                            paper's metric)
        best lam in bin b = argmin_lam  mean_{i in b} loss(lam, i)

    lams (n_lam,): the grid, ascending. loss (n_lam, n): each lambda's mean loss at positions
    i = 1..n, on the same windows. Bins are `width` consecutive positions from i = 1, a last
    partial bin dropped (evaluate.binned); a bin's position is its centre. Ties go to the
    smaller lambda (the first on the grid). Returns {best_lam, best_loss, best_lam_tail,
    best_tail_loss, positions (nb,), best_lam_per_position (nb,)}."""
    lams, loss = np.asarray(lams), np.asarray(loss)
    mean, tail_loss = loss.mean(1), loss[:, -tail:].mean(1)  # (n_lam,), (n_lam,)
    centers, per_bin = binned(loss, width)                   # (nb,), (n_lam, nb)
    return {"best_lam": float(lams[mean.argmin()]), "best_loss": float(mean.min()),
            "best_lam_tail": float(lams[tail_loss.argmin()]),
            "best_tail_loss": float(tail_loss.min()),
            "positions": centers, "best_lam_per_position": lams[per_bin.argmin(0)]}


def fit_log_law(positions, lam, L):
    """Piece T4: the law of the best lambda per position past L, fitted by least squares.

        lam(i) = 1 + a ln(i / L)      over the positions i >= L only

    No free intercept: lam(L) = 1, the model as trained (so a minimises
    sum (lam_i - 1 - a x_i)^2 with x_i = ln(i / L): a = sum x y / sum x^2, y = lam - 1).
    R^2 = 1 - SS_res / SS_tot, SS_tot about the mean of y over the same positions.
    Returns (a, R^2); (nan, nan) with fewer than two positions >= L, or all of them at L."""
    x = np.log(np.asarray(positions, dtype=np.float64) / L)
    y = np.asarray(lam, dtype=np.float64) - 1.0
    keep = x >= 0
    x, y = x[keep], y[keep]
    if len(x) < 2 or (x ** 2).sum() == 0:
        return float("nan"), float("nan")
    a = float((x * y).sum() / (x ** 2).sum())
    ss_res = float(((y - a * x) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return a, (1.0 - ss_res / ss_tot) if ss_tot > 0 else float("nan")


def grid_search(model, windows_at, cfg, L, ctx):
    """UniformScale at every grid length: each lambda of the grid measured on the same windows
    (uniform_scale picks), the log law fitted to the best lambda per position (fit_log_law)."""
    lams = np.round(np.arange(cfg.lam_min, cfg.lam_max + cfg.lam_step / 2, cfg.lam_step), 6)
    tail = cfg.tail or default_tail(L)
    width = cfg.position_bins or max(1, L // 8)
    rows, summary = [], {}
    for n, windows in windows_at.items():
        t0 = time.time()
        per_pos = []
        for lam in lams:
            model.set_head_scales(lam)  # a hybrid's RoPE layers keep 1
            per_pos.append(measure(model, windows, cfg.batch_size, ctx)["loss"])
        per_pos = np.stack(per_pos)  # (n_lam, n): loss per lambda and position
        rows += [[n, lam, round(a, 5), round(b, 5)]
                 for lam, a, b in zip(lams, per_pos.mean(1), per_pos[:, -tail:].mean(1))]
        # positions count from 1 at the window's first token (the start token, for a model trained
        # with it), and position i's loss is its prediction of token i + 1
        best = uniform_scale(lams, per_pos, tail, width)
        a, r2 = fit_log_law(best["positions"], best["best_lam_per_position"], L)
        if 1.0 in lams:  # the plain model's loss: on the grid, or measured once more
            at1 = per_pos[int(np.flatnonzero(lams == 1.0)[0])]
        else:
            model.set_head_scales(1.0)
            at1 = measure(model, windows, cfg.batch_size, ctx)["loss"]
        name = length_name(n / L)
        s = summary[name] = {
            "length": n, "windows": len(windows), "tokens": len(windows) * n,
            "tail_tokens": len(windows) * tail,
            **{k: best[k] for k in ("best_lam", "best_loss", "best_lam_tail", "best_tail_loss")},
            "loss_at_1": float(at1.mean()), "tail_loss_at_1": float(at1[-tail:].mean()),
            "positions": best["positions"].tolist(),
            "best_lam_per_position": best["best_lam_per_position"].tolist(),
            "fit_a": a, "fit_r2": r2}
        if max(max(s["best_lam_per_position"]), s["best_lam"], s["best_lam_tail"]) >= lams[-1]:
            print(f"note: at {name} a best lam is the grid's end {lams[-1]:g}; the optimum may lie "
                  "beyond it: raise --lam_max", flush=True)
        print(f"{name:>4} (n={n}): best lam {s['best_lam']:.2f} loss {s['best_loss']:.4f} "
              f"(lam=1: {s['loss_at_1']:.4f}) | tail: best lam {s['best_lam_tail']:.2f} "
              f"{s['best_tail_loss']:.4f} (lam=1: {s['tail_loss_at_1']:.4f}) | "
              f"lam(i) fit a={a:.3f} R2={r2:.3f} | {time.time() - t0:.0f}s", flush=True)
    return rows, summary, tail


# -----------------------------------------------------------------------------
# HeadScale: gradient fit of the scales alone (or of their slopes a, --fit=slope)

def fit_head_scales(model, batches, init, steps=200, lr=0.05, betas=(0.9, 0.95), warmup=20,
                    final_lr=0.005, min_scale=1.0):
    """Piece T5: HeadScale, the paper's fit of one lambda per (layer, head) on the LM loss at
    the target length, every other weight frozen.

        minimise over lam:  mean cross-entropy of model(x; lam) on y,   (x, y) from `batches`

    AdamW on lam alone (no weight decay); the learning rate rises linearly for `warmup` steps,
    then falls on a cosine from lr to final_lr at the last step (common.cosine_lr); after every
    step lam = max(lam, min_scale), the paper's focus constraint (min_scale = 1). The paper
    starts at the best uniform lambda: pass it as init.
    init: the starting lam, (n_layer, n_head) (one per head), (n_layer, 1) (per layer) or (1, 1);
    model.set_head_scales takes each shape as a view, so the gradient reaches lam.
    batches: an iterator of (x, y) token rows (the sampler is the caller's, as are precision,
    progress and the stop at a non-finite loss: fit_at below adds them as hooks on the model).
    The model is left as it was found, after an error too: scales, requires_grad flags and
    train/eval mode.
    Returns (lam fitted, detached, init's shape; the log: one dict a step with step, loss,
    lam_mean, lam_min and lam_max after the clamp, and lr)."""
    saved = model.get_head_scales(), model.training, [p.requires_grad for p in model.parameters()]
    lam = init.detach().clone().float().requires_grad_(True)  # fp32 whatever the model's dtype
    opt = torch.optim.AdamW([lam], lr=lr, betas=betas, weight_decay=0.0)
    model.requires_grad_(False)  # frozen: no weight gets a gradient, only lam on the way back
    model.eval()                 # no dropout: the fit sees the model as it is evaluated
    log = []
    try:
        for step, (x, y) in zip(range(steps), batches):
            rate = cosine_lr(step, warmup, steps, lr, final_lr)
            opt.param_groups[0]["lr"] = rate
            model.set_head_scales(lam)  # lam_h q.k / sqrt(d): a view of lam in every layer
            _, loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                lam.clamp_(min=min_scale)  # the focus constraint, after every step
            log.append({"step": step + 1, "loss": round(loss.item(), 5),
                        "lam_mean": round(lam.mean().item(), 4),
                        "lam_min": round(lam.min().item(), 4),
                        "lam_max": round(lam.max().item(), 4), "lr": rate})
    finally:  # the model as it was
        model.set_head_scales(saved[0])
        model.train(saved[1])
        for p, g in zip(model.parameters(), saved[2]):
            p.requires_grad_(g)
    return lam.detach(), log


def fit_hooks(model, progress, log_interval, slopes):
    """fit_at's additions to the model's forward while T5 fits it, as hooks (removed after):
    with slopes, before each forward the values fit_head_scales set as lambda become the slopes
    a of lam(i) = 1 + a ln(max(i, L) / L) and lambda is 1; after it, a loss gone non-finite
    stops the fit, and every log_interval steps a progress line. Returns the hooks' handles."""
    step = [0]  # forward passes so far

    def scales_to_slopes(module, args):
        for layer in model.scaled_layers():
            attn = model.transformer.h[layer].attn
            attn.head_slope, attn.head_scale = attn.head_scale, torch.ones_like(attn.head_scale)

    def after(module, args, out):
        loss = out[1].item()
        if not math.isfinite(loss):
            raise UserError(f"the fit diverged (loss {loss}) at step {step[0]}; lower --lr")
        step[0] += 1
        if step[0] % log_interval == 0 or step[0] == progress.total:
            sym = "a" if slopes else "lam"
            table = model.get_head_slopes() if slopes else model.get_head_scales()
            fitted = table[model.scaled_layers()]
            stats = {f"{sym}_{k}": f"{f(fitted).item():.3f}" for k, f in
                     (("mean", torch.mean), ("min", torch.min), ("max", torch.max))}
            print(progress.line(step[0], loss=round(loss, 5), **stats), flush=True)

    hooks = [model.register_forward_pre_hook(scales_to_slopes)] if slopes else []
    return hooks + [model.register_forward_hook(after)]


def fit_batches(ds, cfg, n, device):
    """HeadScale's rows: fit_batch_size rows of n tokens from the training split, seeded by step,
    each inside one document as the evaluation's windows are (a row across two files would ask
    lambda to carry attention over a boundary the measurement never shows)."""
    g = torch.Generator()
    for step in itertools.count():
        g.manual_seed(cfg.seed * 7_919 + step)
        yield ds.get_batch("train", cfg.fit_batch_size, n, g, device, within_documents=True)


def fit_at(model, ds, cfg, n, init, ctx, device, dtype):
    """fit_head_scales at length n, as this script runs it: per head, per layer or one lambda
    (--granularity), on the layers lambda applies to (a hybrid's NoPE layers), the slopes
    instead with --fit=slope, under the script's precision, with a progress line and the stop at
    a non-finite loss (fit_hooks). Returns (the model's (n_layer, n_head) table, the log)."""
    slopes = cfg.fit == "slope"
    layers, n_head = model.scaled_layers(), model.config.n_head
    shape = {"head": (len(layers), n_head), "layer": (len(layers), 1),
             "uniform": (1, 1)}[cfg.granularity]
    # the clamp after every step: lam >= min_scale (the paper: 1). --min_scale=0 is the paper's
    # no-clamp ablation, which still keeps lam >= 1e-3 (a logit's sign never flips); slopes a >= 0
    floor = 0.0 if slopes else cfg.min_scale if cfg.min_scale > 0 else 1e-3
    # float16 cards fit in float32: lambda's gradient through float16 activations overflowed
    # (a gradient scaler then skipped steps), and a fit of a few hundred steps is cheap. The
    # precision's autocast holds the backward too: it runs in the forward's dtypes either way
    fit_ctx = contextlib.nullcontext() if dtype == "float16" else ctx
    hooks = fit_hooks(model, Progress(cfg.steps, cfg.fit_batch_size * n), cfg.log_interval, slopes)
    try:
        with fit_ctx:
            lam, log = fit_head_scales(
                model, fit_batches(ds, cfg, n, device),
                torch.full(shape, float(init), device=device), steps=cfg.steps, lr=cfg.lr,
                betas=(cfg.beta1, cfg.beta2), warmup=max(1, int(cfg.warmup_frac * cfg.steps)),
                final_lr=cfg.final_lr_frac * cfg.lr, min_scale=floor)
    finally:
        for hook in hooks:
            hook.remove()
    table = torch.full((model.config.n_layer, n_head), 0.0 if slopes else 1.0)  # the rest keep it
    table[layers] = lam.expand(len(layers), n_head).cpu()
    if slopes:  # the log in the slopes' own names
        log = [{k.replace("lam_", "a_"): v for k, v in row.items()} for row in log]
    return table, log


def start_value(cfg, uniform_path, n, L):
    """Where the fit at length n starts: --init, or the grid's best uniform lambda there (with
    --fit=slope: the grid's lambda(i) fit a there), read from uniform.json."""
    if cfg.init > 0:
        return cfg.init
    name, slopes = length_name(n / L), cfg.fit == "slope"
    found = read_json(uniform_path)["lengths"].get(name) if os.path.exists(uniform_path) else None
    what = "lambda(i) fit" if slopes else "best uniform lambda"
    if found is None:
        raise UserError(f"no {what} for {name} in {uniform_path}: run the grid with "
                        f"--lengths including {n / L:g}, or give --init=VALUE")
    init = (found["fit_a"] if slopes else found["best_lam"] if cfg.select == "loss"
            else found["best_lam_tail"])
    if not math.isfinite(init):
        raise UserError(f"the {what} for {name} in {uniform_path} is {init}: give --init=VALUE")
    return max(init, 0.0)  # a >= 0 from the start (lam >= lam_min > 0 already)


def set_slope(model, value, L, uniform_path, out, extras):
    """Write slope_VALUE.pt/.json: every slope a = VALUE, head_scale 1, nothing fitted."""
    if value == "logn":  # Qwen's logn attention, q * log_L(i) past L, is 1 + (1 / ln L) ln(i / L)
        a, source = 1 / math.log(L), f"logn: 1 / ln L, L = {L}"
    elif value == "grid":
        if not os.path.exists(uniform_path):
            raise UserError(f"--set_slope=grid reads the lambda(i) fit from {uniform_path}: "
                            "run the grid first")
        fit = read_json(uniform_path)["fit"]
        if not (math.isfinite(fit["a"]) and fit["a"] >= 0):
            raise UserError(f"the grid's lambda(i) fit in {uniform_path} has a = {fit['a']}: "
                            "give --set_slope=NUMBER")
        a, source = fit["a"], f"grid: lambda(i) fit at {fit['length']} (R2 {fit['r2']:.3f})"
    else:
        a, source = float(value), "given"
    model.set_head_slopes(a)  # a hybrid's RoPE layers keep 0
    stem = os.path.join(out, f"slope_{value if value in ('logn', 'grid') else f'{a:g}'}")
    info = {"method": "set_slope", "value": value, "a": a, "source": source}
    save_checkpoint(stem + ".pt", model, **extras, scales=info)
    write_json(stem + ".json", info)
    model.set_head_slopes(0.0)
    print(f"wrote {stem}.pt/.json: every slope a = {a:.4f} ({source})")


def check_against(cfg, model, uniform_path, L):
    """Every input that needs the checkpoint, checked before any work: a fit started at the
    grid's lambda needs the grid there, and a grid length the validation split cannot hold is
    said now (its windows are drawn in main, before any measurement)."""
    if not model.scaled_layers():
        raise UserError(f"{cfg.ckpt} has no layer lambda applies to (a hybrid without a NoPE "
                        f"layer, of {model.config.n_layer}): nothing to scale")
    gridded = ({length_name(n / L) for n in length_list(cfg.lengths, L)} if cfg.grid else set()) | (
        set(read_json(uniform_path)["lengths"]) if os.path.exists(uniform_path) else set())
    missing = [length_name(n / L) for n in length_list(cfg.fit_lengths, L)
               if length_name(n / L) not in gridded]
    if cfg.init == 0 and missing:
        raise UserError(f"the fit at {', '.join(missing)} starts from the grid there, which "
                        f"neither this run nor {uniform_path} has: add it to --lengths, or give "
                        "--init=VALUE")
    if "grid" in cfg.set_slope and not gridded:
        raise UserError("--set_slope=grid reads the grid's lambda(i) fit: run the grid "
                        "(--grid=true) or give a number")
    if not cfg.grid:  # the fits start from a grid run before: its values checked now
        for n in length_list(cfg.fit_lengths, L):
            start_value(cfg, uniform_path, n, L)


def write_uniform_grid(model, windows_at, cfg, L, ctx, out, uniform_path, base, extras):
    """Section 1's files: the fits start from uniform.json, evaluate.py reads uniform_grid_*.pt."""
    rows, summary, tail = grid_search(model, windows_at, cfg, L, ctx)
    write_csv(os.path.join(out, "grid.csv"), rows, ["length", "lam", "loss", "tail_loss"])
    longest = max(summary.values(), key=lambda s: s["length"])
    write_json(uniform_path, base | {"tail": tail, "select": cfg.select, "seed": cfg.seed,
                                     "lengths": summary,
                                     "fit": {"length": longest["length"], "a": longest["fit_a"],
                                             "r2": longest["fit_r2"]}})
    for name, s in summary.items():
        lam = s["best_lam"] if cfg.select == "loss" else s["best_lam_tail"]
        model.set_head_scales(lam)
        save_checkpoint(os.path.join(out, f"uniform_grid_{name}.pt"), model, **extras,
                        scales={"method": "uniform", "length": s["length"], "lam": lam})
    model.set_head_scales(1.0)
    print(f"wrote {out}/grid.csv, uniform.json, uniform_grid_*.pt; lam(i) = 1 + a ln(i/L) at "
          f"{longest['length']}: a = {longest['fit_a']:.3f}, R2 = {longest['fit_r2']:.3f}")


def checked_fit(model, ds, cfg, n, init, ctx, device, dtype):
    """fit_at, announced and timed, then held to the method's promise: no other weight moved."""
    slopes, name = cfg.fit == "slope", length_name(n / model.config.block_size)
    fitted, sym = ("head_slope", "a") if slopes else ("head_scale", "lam")
    before = {k: v.clone() for k, v in model.state_dict().items() if not k.endswith(fitted)}
    clamp = "a >= 0, head_scale 1" if slopes else f"clamp >= {cfg.min_scale:g}"
    print(f"fitting {cfg.granularity} {'slopes' if slopes else 'scales'} at {name} (n={n}) from "
          f"{sym}={init:.3f}, {clamp}")
    t0 = time.time()
    lam, log = fit_at(model, ds, cfg, n, init, ctx, device, dtype)
    seconds = time.time() - t0
    after = model.state_dict()
    changed = [k for k, v in before.items() if not torch.equal(v, after[k])]
    if changed:  # the method's promise: only head_scale (or only its slopes) moves
        raise RuntimeError(f"weights other than {fitted} changed during the fit: {changed[:3]}")
    return lam, log, seconds


def write_fit(model, cfg, n, init, lam, log, seconds, out, base, extras):
    """Section 2's files: the checkpoint for evaluate.py, the table and log to read the fit by."""
    slopes, name = cfg.fit == "slope", length_name(n / model.config.block_size)
    fitted = "head_slope" if slopes else "head_scale"
    stem = os.path.join(out, f"{cfg.granularity}{'slope' if slopes else ''}_{name}{cfg.tag}")
    if slopes:
        model.set_head_slopes(lam)
        info = {"method": f"{cfg.granularity}slope", "length": n, "init": init, "min_slope": 0.0,
                "head_scale": 1.0, "steps": cfg.steps, "lr": cfg.lr, "tag": cfg.tag,
                "a": lam.tolist()}
    else:
        model.set_head_scales(lam)
        info = {"method": cfg.granularity, "length": n, "init": init, "min_scale": cfg.min_scale,
                "steps": cfg.steps, "lr": cfg.lr, "tag": cfg.tag, "lam": lam.tolist()}
    save_checkpoint(stem + ".pt", model, **extras, scales=info)
    table = [[l, h, round(v, 5)] for l, row in enumerate(lam.tolist()) for h, v in enumerate(row)]
    write_csv(stem + ".csv", table, ["layer", "head", "slope" if slopes else "scale"])
    write_json(stem + ".json", base | info | {"seconds": round(seconds, 1),
                                              "final_loss": log[-1]["loss"], "log": log})
    print(f"wrote {stem}.pt/.csv/.json ({seconds:.0f}s; only {fitted} changed)")
    model.set_head_scales(1.0)
    model.set_head_slopes(0.0)


def main():
    cfg = parse_config(SearchConfig, section="search_scales", description=__doc__)
    check(cfg)
    device = pick_device(cfg.device)
    dtype = pick_dtype(cfg.dtype, device)
    ctx = autocast(device, dtype)
    model, ckpt = load_checkpoint(cfg.ckpt, device)
    L = model.config.block_size
    ds = Dataset.for_model(model.config, ckpt, cfg.dataset)
    out = cfg.out_dir or os.path.join(os.path.dirname(os.path.abspath(cfg.ckpt)), "scales")
    os.makedirs(out, exist_ok=True)
    base = {"train_len": L, "dataset": ds.name, "ckpt": os.path.abspath(cfg.ckpt)}
    extras = {k: ckpt[k] for k in ("config", "dataset", "iter_num", "model_name") if k in ckpt}
    model.set_head_scales(1.0)  # every search starts from the plain model (lambda = 1, no slope)
    model.set_head_slopes(0.0)
    print(f"{model.config.pos_encoding} model, L={L}, {model.config.n_layer} layers x "
          f"{model.config.n_head} heads, {'with' if ds.bos else 'without'} the start token, "
          f"dataset {ds.name}, device {device} {dtype}")
    uniform_path = os.path.join(out, "uniform.json")
    check_against(cfg, model, uniform_path, L)
    windows_at = {n: ds.windows(n, cfg.windows, seed=cfg.seed, subset="search")
                  for n in length_list(cfg.lengths, L)} if cfg.grid else {}

    # --- 1. UniformScale: grid search -------------------------------------------------
    if cfg.grid:
        write_uniform_grid(model, windows_at, cfg, L, ctx, out, uniform_path, base, extras)

    # --- 1b. slopes set without a fit: Qwen's logn, the grid's a -----------------------------
    for value in cfg.set_slope:
        set_slope(model, value, L, uniform_path, out, extras)

    # --- 2. HeadScale (or per-layer) gradient fit, or of the slopes with --fit=slope --------
    for n in length_list(cfg.fit_lengths, L):
        init = start_value(cfg, uniform_path, n, L)
        lam, log, seconds = checked_fit(model, ds, cfg, n, init, ctx, device, dtype)
        write_fit(model, cfg, n, init, lam, log, seconds, out, base, extras)


if __name__ == "__main__":
    run_main(main)
