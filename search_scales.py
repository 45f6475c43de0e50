r"""
The paper's two remedies for NoPE past its training length L, on a train.py checkpoint:

1. UniformScale: logits lam q.k / sqrt(d), one lam for every head, the best of a grid by
   validation loss at each target length (uniform_scale, piece T3), and per position i, fitted
   to lam(i) = 1 + a ln(i / L) as in the paper's appendix (fit_log_law, T4).
2. HeadScale: one lam per (layer, head), every other weight frozen, fitted on the LM loss at the
   target length by AdamW, warm-up then cosine, lam >= 1 after every step (fit_head_scales, T5).
   --granularity=layer|uniform: one lam per layer, or one. --fit=slope fits instead this
   project's slopes a_h of lam_h(i) = 1 + a_h ln(max(i, L) / L), a_h >= 0 (study/set_slope.py
   sets one without a fit).

    python search_scales.py --ckpt=out/nope/ckpt.pt         # grid at 2L,4L,8L, fit at 2L,4L
    python search_scales.py --ckpt=out/nope/ckpt.pt --grid=false --min_scale=0 --tag=_noclamp

Into out_dir (default: <checkpoint folder>/scales): grid.csv, uniform.json (the best lam per
length and position, the fit), uniform_grid_4L.pt, head_4L.pt/.csv/.json (lam, its table, its
log). The grid reads the "search" documents, which evaluate.py never scores; HeadScale fits on
the training split. A hybrid's lam acts on its NoPE layers alone.
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
from common import (Progress, UserError, autocast, binned, cosine_lr, default_tail, length_list,
                    length_name, parse_config, pick_device, pick_dtype, read_json, run_main,
                    write_csv, write_json)
from data import Dataset
from evaluate import measure
from model import load_checkpoint, save_checkpoint


@dataclass
class SearchConfig:
    ckpt: str = "out/nope/ckpt.pt"      # a checkpoint written by train.py
    out_dir: str = ""                   # results folder ('' = <checkpoint folder>/scales)
    dataset: str = ""                   # '' = the dataset the checkpoint was trained on
    # UniformScale grid search
    grid: bool = True                   # run the uniform grid search
    lengths: list[float] = field(default_factory=lambda: [2.0, 4.0, 8.0])  # units of L
    lam_min: float = 1.0                # grid start
    lam_max: float = 2.0                # grid end (inclusive; a best lam there is said)
    lam_step: float = 0.05              # grid step
    windows: int = 64                   # windows per length (of the "search" documents)
    tail: int = 0                       # tail metric's tokens (0 = L/8, the paper's 256/2048)
    select: str = "loss"                # the best lam by: loss (mean over all positions) | tail
    position_bins: int = 0              # width of the position bins for lam(i) (0 = L/8)
    # HeadScale gradient fit
    fit_lengths: list[float] = field(default_factory=lambda: [2.0, 4.0])  # L units ('' = none)
    fit: str = "scale"                  # scale (HeadScale: lam) | slope (the slopes a, lam 1)
    granularity: str = "head"           # head (n_layer x n_head) | layer (n_layer) | uniform (1)
    init: float = 0.0                   # starting lam or a (0 = the grid's there: its best lam,
                                        # or its lam(i) fit's a)
    min_scale: float = 1.0              # clamp after every step: lam >= it (0: none; slopes >= 0)
    steps: int = 200                    # optimizer steps
    lr: float = 0.05                    # peak learning rate
    warmup_frac: float = 0.1            # linear warm-up over this share of the steps
    final_lr_frac: float = 0.1          # cosine decay down to final_lr_frac * lr
    beta1: float = 0.9                  # AdamW beta1
    beta2: float = 0.95                 # AdamW beta2
    fit_batch_size: int = 4             # training sequences per fit step
    tag: str = ""                       # suffix for the fit's output names (e.g. _noclamp)
    # system
    batch_size: int = 8                 # evaluation batch size
    seed: int = 4321                    # windows and fit batches
    device: str = "auto"                # auto | cpu | cuda | mps
    dtype: str = "auto"                 # auto | float32 | bfloat16 | float16 (fits: not fp16)
    log_interval: int = 20              # fit progress line every this many steps
    preset: str = ""                    # the preset used (set by --preset=NAME)


def check(cfg):
    """The settings that need no checkpoint, each refused in one line before any work."""
    if cfg.lam_step <= 0 or cfg.lam_max < cfg.lam_min:
        raise UserError(f"empty lambda grid {cfg.lam_min}..{cfg.lam_max} step {cfg.lam_step}")
    if cfg.lam_min <= 0 or cfg.init < 0:
        raise UserError("lambda must be > 0 (it multiplies the attention logits): --lam_min > 0, "
                        "--init >= 0 (0: the grid's)")
    if cfg.fit == "slope" and any(k <= 1 for k in cfg.fit_lengths):
        raise UserError("--fit=slope fits slopes that act only past L: every --fit_lengths must "
                        f"be > 1, got {cfg.fit_lengths}")
    for k, allowed in (("fit", ("scale", "slope")), ("granularity", ("head", "layer", "uniform")),
                       ("select", ("loss", "tail"))):
        if getattr(cfg, k) not in allowed:
            raise UserError(f"--{k} must be one of {allowed}, got {getattr(cfg, k)!r}")
    for k in ("windows", "steps", "fit_batch_size", "batch_size", "log_interval", "lr"):
        if getattr(cfg, k) <= 0:
            raise UserError(f"--{k} must be > 0, got {getattr(cfg, k)}")
    if cfg.tail < 0 or cfg.position_bins < 0:
        raise UserError("--tail and --position_bins must be >= 0 (0 = L/8)")


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
    partial bin dropped (common.binned); a bin's position is its centre. Ties go to the
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


def grid_search(model, windows_at, cfg, L, ctx, out, uniform_path, base, extras):
    """UniformScale at every grid length: each lambda of the grid measured on the same windows
    (uniform_scale picks), the log law fitted to the best lambda per position (fit_log_law);
    its files: grid.csv, uniform.json (the fits start there), uniform_grid_*.pt (evaluate.py)."""
    lams = np.round(np.arange(cfg.lam_min, cfg.lam_max + cfg.lam_step / 2, cfg.lam_step), 6)
    tail = cfg.tail or default_tail(L)
    width = cfg.position_bins or max(1, L // 8)
    rows, summary = [], {}
    for n, windows in windows_at.items():
        t0, per_pos = time.time(), []
        for lam in lams:
            model.set_head_scales(lam)  # a hybrid's RoPE layers keep 1
            per_pos.append(measure(model, windows, cfg.batch_size, ctx)["loss"])
        per_pos = np.stack(per_pos)  # (n_lam, n): loss per lambda and position
        rows += [[n, lam, round(a, 5), round(b, 5)]
                 for lam, a, b in zip(lams, per_pos.mean(1), per_pos[:, -tail:].mean(1))]
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
            print(f"note: at {name} a best lam is the grid's end {lams[-1]:g}: raise --lam_max")
        print(f"{name:>4} (n={n}): best lam {s['best_lam']:.2f} loss {s['best_loss']:.4f} (lam=1: "
              f"{s['loss_at_1']:.4f}) | tail: best {s['best_lam_tail']:.2f} | lam(i) fit a={a:.3f}"
              f" R2={r2:.3f} | {time.time() - t0:.0f}s", flush=True)
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
    init: the starting lam, (n_layer, n_head) (one per head), (n_layer, 1) (per layer) or (1, 1),
    each of which model.set_head_scales takes as a view, so the gradient reaches lam. batches:
    (x, y) token rows (sampler, precision and progress are the caller's: fit_at below). The model
    is left as it was found, after an error too: scales, requires_grad flags, train/eval mode.
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


def fit_batches(ds, cfg, n, device):
    """HeadScale's rows: fit_batch_size rows of n tokens of the training split, seeded by step,
    each inside one document as the evaluation's windows are."""
    g = torch.Generator()
    for step in itertools.count():
        g.manual_seed(cfg.seed * 7_919 + step)
        yield ds.get_batch("train", cfg.fit_batch_size, n, g, device, within_documents=True)


def fit_at(model, ds, cfg, n, init, ctx, device, dtype):
    """fit_head_scales at n as this script runs it (--granularity: per head, layer, or one lambda),
    with hooks on the model's forward for its precision, the slopes (--fit=slope), a progress
    line, the stop at a non-finite loss. Returns (lam or a, over the scaled layers; the log)."""
    slopes, progress, step = cfg.fit == "slope", Progress(cfg.steps, cfg.fit_batch_size * n), [0]
    layers, n_head, sym = model.scaled_layers(), model.config.n_head, "a" if slopes else "lam"
    fit_ctx = contextlib.nullcontext() if dtype == "float16" else ctx  # float16 grads overflowed
    precision = contextlib.ExitStack()  # fit_ctx around each forward pass (not the backward)

    def before(module, args):
        precision.enter_context(fit_ctx)  # the forward only: the backward runs outside autocast
        for attn in [model.transformer.h[i].attn for i in layers] if slopes else []:
            if attn.head_scale.requires_grad:  # what fit_head_scales set as lambda: the slopes a
                attn.head_slope, attn.head_scale = attn.head_scale, torch.ones_like(attn.head_slope)

    def after(module, args, out):
        precision.close()
        loss = out[1].item()
        if not math.isfinite(loss):
            raise UserError(f"the fit diverged (loss {loss}) at step {step[0]}; lower --lr")
        step[0] += 1
        if step[0] % cfg.log_interval == 0 or step[0] == cfg.steps:
            t = (model.get_head_slopes() if slopes else model.get_head_scales())[layers]
            stats = {f"{sym}_{k}": f"{getattr(t, k)().item():.3f}" for k in ("mean", "min", "max")}
            print(progress.line(step[0], loss=round(loss, 5), **stats), flush=True)
    shape = {"head": (len(layers), n_head), "layer": (len(layers), 1),
             "uniform": (1, 1)}[cfg.granularity]
    # the clamp: lam >= min_scale (the paper: 1; its no-clamp ablation, 0, keeps lam >= 1e-3 so a
    # logit's sign never flips), a >= 0
    floor = 0.0 if slopes else cfg.min_scale if cfg.min_scale > 0 else 1e-3
    hooks = [model.register_forward_pre_hook(before), model.register_forward_hook(after)]
    saved_slopes = model.get_head_slopes()  # fit_head_scales puts back lambda; the slopes are ours
    try:
        lam, log = fit_head_scales(
            model, fit_batches(ds, cfg, n, device),
            torch.full(shape, float(init), device=device), steps=cfg.steps, lr=cfg.lr,
            betas=(cfg.beta1, cfg.beta2), warmup=max(1, int(cfg.warmup_frac * cfg.steps)),
            final_lr=cfg.final_lr_frac * cfg.lr, min_scale=floor)
    finally:
        precision.close()
        for hook in hooks:
            hook.remove()
        model.set_head_slopes(saved_slopes)
    if slopes:  # the log in the slopes' own names
        log = [{k.replace("lam_", "a_"): v for k, v in row.items()} for row in log]
    return lam.cpu(), log


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


def check_against(cfg, model, uniform_path, L):
    """Every input that needs the checkpoint, checked before any work (the grid's windows are
    drawn in main before any measurement: a length the split cannot hold is said then)."""
    if not model.scaled_layers():  # a hybrid without a NoPE layer
        raise UserError(f"{cfg.ckpt} has no layer lambda applies to: nothing to scale")
    gridded = ({length_name(n / L) for n in length_list(cfg.lengths, L)} if cfg.grid else set()) | (
        set(read_json(uniform_path)["lengths"]) if os.path.exists(uniform_path) else set())
    missing = [length_name(n / L) for n in length_list(cfg.fit_lengths, L)
               if length_name(n / L) not in gridded]
    if cfg.init == 0 and missing:
        raise UserError(f"the fit at {', '.join(missing)} starts from the grid there, which "
                        f"neither this run nor {uniform_path} has: add it to --lengths, or give "
                        "--init=VALUE")
    for n in length_list(cfg.fit_lengths, L) if not cfg.grid else ():  # a grid of before's
        start_value(cfg, uniform_path, n, L)


def fit_and_write(model, ds, cfg, n, init, ctx, device, dtype, out, base, extras):
    """fit_at, announced and timed, held to the method's promise (no other weight moved), then
    its files: the checkpoint for evaluate.py, the (layer, head) table, the log."""
    slopes, name = cfg.fit == "slope", length_name(n / model.config.block_size)
    fitted, sym = ("head_slope", "a") if slopes else ("head_scale", "lam")
    before = {k: v.clone() for k, v in model.state_dict().items() if not k.endswith(fitted)}
    print(f"fitting {cfg.granularity} {'slopes' if slopes else 'scales'} at {name} (n={n}) from "
          f"{sym}={init:.3f}, clamp >= {0 if slopes else cfg.min_scale:g}")
    t0 = time.time()
    lam, log = fit_at(model, ds, cfg, n, init, ctx, device, dtype)
    seconds = time.time() - t0
    if changed := [k for k, v in before.items() if not torch.equal(v, model.state_dict()[k])]:
        raise RuntimeError(f"weights other than {fitted} changed during the fit: {changed[:3]}")
    stem = os.path.join(out, f"{cfg.granularity}{'slope' if slopes else ''}_{name}{cfg.tag}")
    (model.set_head_slopes if slopes else model.set_head_scales)(lam)  # the other layers keep 1, 0
    lam = model.get_head_slopes() if slopes else model.get_head_scales()  # (n_layer, n_head)
    info = {"method": cfg.granularity + ("slope" if slopes else ""), "length": n, "init": init,
            **({"min_slope": 0.0, "head_scale": 1.0} if slopes else {"min_scale": cfg.min_scale}),
            "steps": cfg.steps, "lr": cfg.lr, "tag": cfg.tag, sym: lam.tolist()}
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
    base = {"train_len": L, "dataset": ds.name, "ckpt": os.path.abspath(cfg.ckpt)}
    extras = {k: ckpt[k] for k in ("config", "dataset", "iter_num", "model_name") if k in ckpt}
    model.set_head_scales(1.0)  # every search starts from the plain model: lambda 1, no slope
    model.set_head_slopes(0.0)
    print(f"{model.config.pos_encoding} model, L={L}, {model.config.n_layer}x{model.config.n_head}"
          f" heads, {'with' if ds.bos else 'without'} the start token, {ds.name}, {device} {dtype}")
    uniform_path = os.path.join(out, "uniform.json")
    check_against(cfg, model, uniform_path, L)
    os.makedirs(out, exist_ok=True)
    windows_at = {n: ds.windows(n, cfg.windows, seed=cfg.seed, subset="search")
                  for n in length_list(cfg.lengths, L)} if cfg.grid else {}
    if cfg.grid:  # 1. UniformScale
        grid_search(model, windows_at, cfg, L, ctx, out, uniform_path, base, extras)
    for n in length_list(cfg.fit_lengths, L):  # 2. HeadScale (per head, per layer; or slopes)
        fit_and_write(model, ds, cfg, n, start_value(cfg, uniform_path, n, L), ctx, device, dtype,
                      out, base, extras)


if __name__ == "__main__":
    run_main(main)
