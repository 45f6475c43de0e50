"""
The paper's two remedies for NoPE past its training length L, on any train.py checkpoint.

1. UniformScale (grid search, no training): attention logits lam * q.k / sqrt(d) with one lam
   for every head. For each target length, the validation loss of every lam on a grid, on the
   same fixed windows; the best lam per length, and per position i, with the fit
   lam(i) = 1 + a * ln(i / L) of the paper's appendix.
2. HeadScale (gradient fit): one lam per (layer, head), every other weight frozen, fitted on
   the LM loss at the target length: AdamW, warm-up then cosine, and after every step
   lam >= 1 (the "focus constraint"). Also one lam per layer (--granularity=layer).
3. Length-following scales (--fit=log): lam_h(i) = 1 + a_h ln(max(i, L) / L), the log law of
   the grid's best lam per position, one slope a_h per head (or layer, or one), fitted the same
   way with head_scale fixed at 1 and, after every step, a_h >= 0; initialised at the grid's a
   at that length. Nothing changes at positions <= L. --set_log writes a slope without a fit.

    python search_scales.py --ckpt=out/nope/ckpt.pt                       # grid at 2L,4L,8L, fit at 2L,4L
    python search_scales.py --ckpt=out/nope/ckpt.pt --grid=false --fit_lengths=4 --min_scale=0 --tag=_noclamp
    python search_scales.py --ckpt=out/nope/ckpt.pt --grid=false --fit_lengths=4 --init=1 --tag=_noinit
    python search_scales.py --ckpt=out/nope/ckpt.pt --grid=false --fit_lengths=4 --fit=log --set_log=logn,grid

Writes into out_dir (default: the checkpoint's folder + /scales):
    grid.csv            length, lam, loss, tail_loss for every grid point
    uniform.json        best lam per length (mean and tail metric), best lam per position, the fit
    uniform_grid_4L.pt  the checkpoint with every head_scale = the grid's best lam for 4L (one per length)
    head_4L.pt/.csv/.json   the fitted scales: checkpoint, (layer, head, scale) table, fit log
                        (layer_4L.*, or uniform_4L.*: one lambda fitted by gradient, with
                        --granularity=layer or uniform; the study's rows nope_uniform_* are the grid's)
    headlog_4L.pt/.csv/.json    --fit=log: the fitted slopes a (layer, head, slope), head_scale 1
                        (layerlog_4L.*, uniformlog_4L.*)
    log_logn.pt/.json   --set_log=logn: every slope 1/ln L (Qwen's logn attention), nothing fitted
    log_grid.pt/.json   --set_log=grid: every slope the grid's a at its longest length (log_0.3.*: a number)
On a hybrid of RoPE and NoPE layers (GPTConfig.nope_every) every scale and slope acts on its NoPE
layers alone; the RoPE layers keep lambda = 1.
The grid scores windows of the validation split's "search" subset; evaluate.py scores its "eval"
subset, disjoint at each length: lambda chosen at 4L is not judged at 4L on text it was chosen on.
Windows of other lengths are cut on their own and share some text (python tools/overlap.py).
"""

import math
import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from data import Dataset
from evaluate import binned, default_tail, length_list, length_name, measure
from model import load_checkpoint, save_checkpoint
from train import cosine_lr
from tools.cli import (Progress, UserError, autocast, grad_scaler, parse_config, pick_device, pick_dtype, read_json,
                       run_main, write_csv, write_json)


@dataclass
class SearchConfig:
    ckpt: str = "out/nope/ckpt.pt"      # a checkpoint written by train.py
    out_dir: str = ""                   # results folder ('' = <checkpoint folder>/scales)
    dataset: str = ""                   # '' = the dataset the checkpoint was trained on
    # UniformScale grid search
    grid: bool = True                   # run the uniform grid search
    lengths: list[float] = field(default_factory=lambda: [2.0, 4.0, 8.0])  # grid target lengths, in units of L
    lam_min: float = 1.0                # grid start
    lam_max: float = 2.0                # grid end (inclusive): above every best lam measured (1.6 per position at
                                        # 8L on the gpu preset); a best lam at the end is said in one line
    lam_step: float = 0.05              # grid step
    windows: int = 64                   # validation windows per length (fixed, seeded, inside documents,
                                        # disjoint from evaluate.py's of the same length)
    tail: int = 0                       # tokens scored by the tail metric (0 = L/8, the paper's 256/2048)
    select: str = "loss"                # pick the best lam by: loss (mean over all positions) | tail
    position_bins: int = 0              # width of the position bins for lam(i) (0 = L/8)
    # HeadScale gradient fit
    fit_lengths: list[float] = field(default_factory=lambda: [2.0, 4.0])  # fit target lengths, units of L ('' = none)
    fit: str = "scale"                  # scale (HeadScale: lam) | log (the slopes a of
                                        # lam(i) = 1 + a ln(max(i, L) / L), head_scale 1, a >= 0 after every step)
    granularity: str = "head"           # head (n_layer x n_head values) | layer (n_layer) | uniform (1)
    init: float = 0.0                   # starting lam (0 = the best uniform lam for that length); with --fit=log
                                        # the starting a (0 = the grid's lambda(i) fit a at that length)
    min_scale: float = 1.0              # clamp after every step: lam >= min_scale (0 = no clamp; --fit=log: a >= 0)
    steps: int = 200                    # optimizer steps
    lr: float = 0.05                    # peak learning rate
    warmup_frac: float = 0.1            # linear warm-up over this share of the steps
    final_lr_frac: float = 0.1          # cosine decay down to final_lr_frac * lr
    beta1: float = 0.9                  # AdamW beta1
    beta2: float = 0.95                 # AdamW beta2
    fit_batch_size: int = 4             # training sequences per fit step
    tag: str = ""                       # suffix for the fit's output names (e.g. _noclamp)
    set_log: list[str] = field(default_factory=list)  # write log_VALUE.pt, every slope a = VALUE, nothing fitted:
                                        # a number >= 0, logn (Qwen: 1/ln L) or grid (uniform.json's a, longest length)
    # RoPE baselines: zero-shot extension factors (RoPE checkpoints only)
    rope_grid: bool = False             # grid over the factor of each rope_method at each of `lengths`
    rope_methods: list[str] = field(default_factory=lambda: ["pi", "ntk", "yarn"])  # PI, NTK-aware, YaRN
    factors: list[float] = field(default_factory=lambda: [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0])  # grid
    # system
    batch_size: int = 8                 # evaluation batch size
    seed: int = 4321                    # windows and fit batches
    device: str = "auto"                # auto | cpu | cuda | mps
    dtype: str = "auto"                 # auto | float32 | bfloat16 | float16 (the fits get a gradient scaler)
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
        raise UserError(f"lambda must be > 0 (it multiplies the attention logits), got lam_min={cfg.lam_min}")
    if cfg.init < 0:
        raise UserError(f"--init must be > 0 (or 0: the grid's best uniform lambda, or with --fit=log its "
                        f"lambda(i) fit a), got {cfg.init}")
    if cfg.fit not in ("scale", "log"):
        raise UserError(f"--fit must be scale or log, got {cfg.fit!r}")
    if cfg.fit == "log" and any(k <= 1 for k in cfg.fit_lengths):
        raise UserError(f"--fit=log fits slopes that act only past L: every --fit_lengths must be > 1, "
                        f"got {cfg.fit_lengths}")
    for v in cfg.set_log:
        if v not in ("logn", "grid") and not (_number(v) is not None and _number(v) >= 0):
            raise UserError(f"--set_log takes logn, grid or a number >= 0, got {v!r}")
    if cfg.granularity not in ("head", "layer", "uniform"):
        raise UserError(f"--granularity must be head, layer or uniform, got {cfg.granularity!r}")
    if cfg.select not in ("loss", "tail"):
        raise UserError(f"--select must be loss or tail, got {cfg.select!r}")
    if any(f < 1 for f in cfg.factors) or not cfg.factors:
        raise UserError(f"--factors must be >= 1 (1 = plain RoPE), got {cfg.factors}")
    for m in cfg.rope_methods:
        if m not in ("pi", "ntk", "yarn"):
            raise UserError(f"--rope_methods takes pi, ntk, yarn; got {m!r}")
    for k in ("windows", "steps", "fit_batch_size", "batch_size", "log_interval", "lr"):
        if getattr(cfg, k) <= 0:
            raise UserError(f"--{k} must be > 0, got {getattr(cfg, k)}")
    for k in ("tail", "position_bins"):
        if getattr(cfg, k) < 0:
            raise UserError(f"--{k} must be >= 0 (0 = L/8), got {getattr(cfg, k)}")


def scaled_layers(model):
    """The layers lambda (or its slope) applies to: a hybrid's NoPE layers, whose RoPE layers keep
    lambda = 1 (Llama 4 scales its NoPE layers alone); every layer otherwise."""
    c = model.config
    return c.nope_layers() if c.nope_every else list(range(c.n_layer))


def on_layers(model, value, fill):
    """value (a number, or a table with one row per scaled layer) as the model's (n_layer, n_head)
    table, `fill` (1 for lambda, 0 for a slope) on the layers not scaled; unchanged without a hybrid."""
    layers, n_layer, n_head = scaled_layers(model), model.config.n_layer, model.config.n_head
    if len(layers) == n_layer:
        return value
    value = torch.as_tensor(value, dtype=torch.float32, device=model.lm_head.weight.device).expand(len(layers), n_head)
    return torch.stack([value[layers.index(layer)] if layer in layers else torch.full_like(value[0], fill)
                        for layer in range(n_layer)])  # keeps value's gradient


# -----------------------------------------------------------------------------
# UniformScale: grid search

def fit_log_law(positions, lam, L):
    """Least squares for the paper's lam(i) = 1 + a * ln(i / L) over positions i >= L
    (no free intercept: lam(L) = 1). Returns a and R^2."""
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
    lams = np.round(np.arange(cfg.lam_min, cfg.lam_max + cfg.lam_step / 2, cfg.lam_step), 6)
    tail = cfg.tail or default_tail(L)
    width = cfg.position_bins or max(1, L // 8)
    rows, summary = [], {}
    for n, windows in windows_at.items():
        t0 = time.time()
        per_pos = []
        for lam in lams:
            model.set_head_scales(on_layers(model, lam, 1.0))
            per_pos.append(measure(model, windows, cfg.batch_size, ctx)["loss"])
        per_pos = np.stack(per_pos)  # (n_lam, n): loss per lambda and position
        loss, tail_loss = per_pos.mean(1), per_pos[:, -tail:].mean(1)
        rows += [[n, lam, round(a, 5), round(b, 5)] for lam, a, b in zip(lams, loss, tail_loss)]
        # best lambda per position bin; positions count from 1 at the window's first token (the start
        # token, for a model trained with it), and position i's loss is its prediction of token i+1
        centers, per_bin = binned(per_pos, width)                   # (nb,), (n_lam, nb)
        best_pos = lams[per_bin.argmin(0)]
        a, r2 = fit_log_law(centers, best_pos, L)
        if 1.0 in lams:  # the plain model's loss: on the grid, or measured once more
            at1 = per_pos[int(np.flatnonzero(lams == 1.0)[0])]
        else:
            model.set_head_scales(1.0)
            at1 = measure(model, windows, cfg.batch_size, ctx)["loss"]
        summary[length_name(n / L)] = {
            "length": n, "windows": len(windows), "tokens": len(windows) * n, "tail_tokens": len(windows) * tail,
            "best_lam": float(lams[loss.argmin()]), "best_loss": float(loss.min()),
            "best_lam_tail": float(lams[tail_loss.argmin()]), "best_tail_loss": float(tail_loss.min()),
            "loss_at_1": float(at1.mean()), "tail_loss_at_1": float(at1[-tail:].mean()),
            "positions": centers.tolist(), "best_lam_per_position": best_pos.tolist(), "fit_a": a, "fit_r2": r2}
        s = summary[length_name(n / L)]
        if max(best_pos.max(), s["best_lam"], s["best_lam_tail"]) >= lams[-1]:
            print(f"note: at {length_name(n / L)} a best lam is the grid's end {lams[-1]:g}; the optimum may lie "
                  "beyond it: raise --lam_max", flush=True)
        print(f"{length_name(n / L):>4} (n={n}): best lam {s['best_lam']:.2f} loss {s['best_loss']:.4f} "
              f"(lam=1: {s['loss_at_1']:.4f}) | tail: best lam {s['best_lam_tail']:.2f} {s['best_tail_loss']:.4f} "
              f"(lam=1: {s['tail_loss_at_1']:.4f}) | lam(i) fit a={a:.3f} R2={r2:.3f} | {time.time() - t0:.0f}s",
              flush=True)
    return rows, summary, tail


def rope_factor_grid(model, windows_at, cfg, L, ctx):
    """Zero-shot RoPE extension, the paper's "best of grid" rows: for each method and target
    length, the validation loss of every factor; the best factor is kept per length."""
    tail = cfg.tail or default_tail(L)
    rows, best = [], {m: {} for m in cfg.rope_methods}
    for n, windows in windows_at.items():
        plain = None  # plain RoPE's loss (factor 1), measured once a length if the grid lacks it
        for method in cfg.rope_methods:
            model.config.rope_scaling = method
            loss, tail_loss = [], []
            for s in cfg.factors:
                model.config.rope_factor = s  # the cos/sin tables are computed from the config on every call
                per_pos = measure(model, windows, cfg.batch_size, ctx)["loss"]
                loss.append(float(per_pos.mean()))
                tail_loss.append(float(per_pos[-tail:].mean()))
                rows.append([method, n, s, round(loss[-1], 5), round(tail_loss[-1], 5)])
            i = int(np.argmin(loss if cfg.select == "loss" else tail_loss))
            if 1.0 in cfg.factors:
                at1 = loss[cfg.factors.index(1.0)]
            elif plain is None:
                model.config.rope_factor = 1.0  # every method at factor 1 is plain RoPE
                plain = at1 = float(measure(model, windows, cfg.batch_size, ctx)["loss"].mean())
            else:
                at1 = plain
            best[method][length_name(n / L)] = {"length": n, "best_factor": cfg.factors[i], "loss": loss[i],
                                               "tail_loss": tail_loss[i], "loss_at_1": at1}
            print(f"{length_name(n / L):>4} {method:>4}: best factor {cfg.factors[i]:g}, loss {loss[i]:.4f} "
                  f"tail {tail_loss[i]:.4f}", flush=True)
    model.config.rope_scaling, model.config.rope_factor = "none", 1.0
    return rows, best, tail


# -----------------------------------------------------------------------------
# HeadScale: gradient fit of the scales alone (or of their slopes a, --fit=log)

def fit_scales(model, ds, cfg, n, init, ctx, device, scaler):
    """HeadScale: minimise the LM loss at length n over lam alone, one per (layer, head) (or per
    layer, or one), every weight of the model frozen; after every step the focus constraint
    lam >= min_scale. With --fit=log the same loop fits the slopes a of
    lam_h(i) = 1 + a_h ln(max(i, L) / L) instead, head_scale kept at 1, a >= 0 after every step.
    scaler: tools.cli.grad_scaler (float16: the loss scaled up before backward, the gradient
    scaled back before the step). Returns (the fitted (n_layer, n_head) table, log rows)."""
    slopes = cfg.fit == "log"
    n_layer, n_head = len(scaled_layers(model)), model.config.n_head  # a hybrid: its NoPE layers alone
    shape = {"head": (n_layer, n_head), "layer": (n_layer, 1), "uniform": (1, 1)}[cfg.granularity]
    lam = torch.full(shape, float(init), dtype=torch.float32, device=device, requires_grad=True)  # fp32 always
    lowest = 0.0 if slopes else cfg.min_scale or 1e-3  # min_scale 0: no clamp, but lam stays > 0

    def table():  # lam as the model's (n_layer, n_head) table; a hybrid's RoPE layers keep lam = 1, a = 0
        return on_layers(model, lam.expand(n_layer, n_head), 0.0 if slopes else 1.0)

    model.requires_grad_(False)  # frozen: autograd computes no weight gradients, only activations' on the way to lam
    model.eval()                 # no dropout: the fit sees the model as it is evaluated
    opt = torch.optim.AdamW([lam], lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=0.0)
    warmup = max(1, int(cfg.warmup_frac * cfg.steps))
    g = torch.Generator()
    progress = Progress(cfg.steps, cfg.fit_batch_size * n)
    log = []
    for step in range(cfg.steps):
        lr = cosine_lr(step, warmup, cfg.steps, cfg.lr, cfg.final_lr_frac * cfg.lr)  # train.py's schedule
        opt.param_groups[0]["lr"] = lr
        g.manual_seed(cfg.seed * 7_919 + step)
        x, y = ds.get_batch("train", cfg.fit_batch_size, n, g, device)
        if slopes:
            model.set_head_slopes(table())
        else:
            model.set_head_scales(table())  # logits lam_h q.k / sqrt(d): lam folded into q (model.py)
        with ctx:
            _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        with torch.no_grad():
            lam.clamp_(min=lowest)
        if not math.isfinite(loss.item()):
            raise UserError(f"the fit diverged (loss {loss.item()}) at step {step}; lower --lr")
        log.append([step + 1, round(loss.item(), 5), round(lam.mean().item(), 4), round(lam.min().item(), 4),
                    round(lam.max().item(), 4), lr])
        if (step + 1) % cfg.log_interval == 0 or step + 1 == cfg.steps:
            sym = "a" if slopes else "lam"
            print(progress.line(step + 1, loss=loss.item(), **{f"{sym}_mean": f"{lam.mean().item():.3f}",
                                f"{sym}_min": f"{lam.min().item():.3f}", f"{sym}_max": f"{lam.max().item():.3f}"}),
                  flush=True)
    return table().detach().clone(), log


def start_value(cfg, uniform_path, n, L):
    """Where the fit at length n starts: --init, or the grid's best uniform lambda there (with
    --fit=log: the grid's lambda(i) fit a there), read from uniform.json."""
    if cfg.init > 0:
        return cfg.init
    name, slopes = length_name(n / L), cfg.fit == "log"
    found = read_json(uniform_path)["lengths"].get(name) if os.path.exists(uniform_path) else None
    what = "lambda(i) fit" if slopes else "best uniform lambda"
    if found is None:
        raise UserError(f"no {what} for {name} in {uniform_path}: run the grid with "
                        f"--lengths including {n / L:g}, or give --init=VALUE")
    init = found["fit_a"] if slopes else found["best_lam"] if cfg.select == "loss" else found["best_lam_tail"]
    if not math.isfinite(init):
        raise UserError(f"the {what} for {name} in {uniform_path} is {init}: give --init=VALUE")
    return max(init, 0.0)  # a >= 0 from the start (lam >= lam_min > 0 already)


def set_log(model, value, L, uniform_path, out, extras):
    """Write log_VALUE.pt/.json: every slope a = VALUE, head_scale 1, nothing fitted."""
    if value == "logn":  # Qwen's logn attention, q * log_L(i) for i > L, is 1 + (1 / ln L) ln(i / L)
        a, source = 1 / math.log(L), f"logn: 1 / ln L, L = {L}"
    elif value == "grid":
        if not os.path.exists(uniform_path):
            raise UserError(f"--set_log=grid reads the lambda(i) fit from {uniform_path}: run the grid first")
        fit = read_json(uniform_path)["fit"]
        if not (math.isfinite(fit["a"]) and fit["a"] >= 0):
            raise UserError(f"the grid's lambda(i) fit in {uniform_path} has a = {fit['a']}: give --set_log=NUMBER")
        a, source = fit["a"], f"grid: lambda(i) fit at {fit['length']} (R2 {fit['r2']:.3f})"
    else:
        a, source = float(value), "given"
    model.set_head_slopes(on_layers(model, a, 0.0))
    stem = os.path.join(out, f"log_{value if value in ('logn', 'grid') else f'{a:g}'}")
    info = {"method": "set_log", "value": value, "a": a, "source": source}
    save_checkpoint(stem + ".pt", model, **extras, scales=info)
    write_json(stem + ".json", info)
    model.set_head_slopes(0.0)
    print(f"wrote {stem}.pt/.json: every slope a = {a:.4f} ({source})")


def main():
    cfg = parse_config(SearchConfig, section="search_scales", description=__doc__)
    check(cfg)
    device = pick_device(cfg.device)
    dtype = pick_dtype(cfg.dtype, device)
    ctx = autocast(device, dtype)
    model, ckpt = load_checkpoint(cfg.ckpt, device)
    L = model.config.block_size
    ds = Dataset.for_model(model.config, ckpt, cfg.dataset)
    dataset = ds.name
    out = cfg.out_dir or os.path.join(os.path.dirname(os.path.abspath(cfg.ckpt)), "scales")
    os.makedirs(out, exist_ok=True)
    base = {"train_len": L, "dataset": dataset, "ckpt": os.path.abspath(cfg.ckpt)}
    extras = {k: ckpt[k] for k in ("config", "dataset", "iter_num") if k in ckpt}
    model.set_head_scales(1.0)  # every search starts from the plain model (lambda = 1, no slope)
    model.set_head_slopes(0.0)
    print(f"{model.config.pos_encoding} model, L={L}, {model.config.n_layer} layers x {model.config.n_head} heads, "
          f"{'with' if ds.bos else 'without'} the start token, dataset {dataset}, device {device} {dtype}")

    # every input checked before any work: a fit started at the grid's lambda needs the grid there
    uniform_path = os.path.join(out, "uniform.json")
    if cfg.rope_grid and model.config.pos_encoding != "rope":
        raise UserError(f"--rope_grid needs a RoPE checkpoint; {cfg.ckpt} is {model.config.pos_encoding}")
    if not scaled_layers(model):
        raise UserError(f"{cfg.ckpt} is a hybrid with no NoPE layer (nope_every={model.config.nope_every}, "
                        f"{model.config.n_layer} layers): nothing to scale")
    gridded = ({length_name(n / L) for n in length_list(cfg.lengths, L)} if cfg.grid else set()) | (
        set(read_json(uniform_path)["lengths"]) if os.path.exists(uniform_path) else set())
    missing = [length_name(n / L) for n in length_list(cfg.fit_lengths, L) if length_name(n / L) not in gridded]
    if cfg.init == 0 and missing:
        raise UserError(f"the fit at {', '.join(missing)} starts from the grid there, which neither this run nor "
                        f"{uniform_path} has: add it to --lengths, or give --init=VALUE")
    if "grid" in cfg.set_log and not gridded:
        raise UserError("--set_log=grid reads the grid's lambda(i) fit: run the grid (--grid=true) or give a number")
    if not cfg.grid:  # the fits start from a grid run before: its values checked now
        for n in length_list(cfg.fit_lengths, L):
            start_value(cfg, uniform_path, n, L)
    # the grids' windows, drawn now: a length the validation split cannot hold is said before any work
    windows_at = {n: ds.windows(n, cfg.windows, seed=cfg.seed, subset="search")
                  for n in length_list(cfg.lengths, L)} if cfg.grid or cfg.rope_grid else {}

    # --- 1. UniformScale: grid search -------------------------------------------------
    if cfg.grid:
        rows, summary, tail = grid_search(model, windows_at, cfg, L, ctx)
        write_csv(os.path.join(out, "grid.csv"), rows, ["length", "lam", "loss", "tail_loss"])
        longest = max(summary.values(), key=lambda s: s["length"])
        write_json(uniform_path, base | {"tail": tail, "select": cfg.select, "seed": cfg.seed, "lengths": summary,
                                         "fit": {"length": longest["length"], "a": longest["fit_a"],
                                                 "r2": longest["fit_r2"]}})
        for name, s in summary.items():
            lam = s["best_lam"] if cfg.select == "loss" else s["best_lam_tail"]
            model.set_head_scales(on_layers(model, lam, 1.0))
            save_checkpoint(os.path.join(out, f"uniform_grid_{name}.pt"), model, **extras,
                            scales={"method": "uniform", "length": s["length"], "lam": lam})
        model.set_head_scales(1.0)
        print(f"wrote {out}/grid.csv, uniform.json, uniform_grid_*.pt; lam(i) = 1 + a ln(i/L) at "
              f"{longest['length']}: a = {longest['fit_a']:.3f}, R2 = {longest['fit_r2']:.3f}")

    if cfg.rope_grid:
        rows, best, tail = rope_factor_grid(model, windows_at, cfg, L, ctx)
        write_csv(os.path.join(out, "rope_grid.csv"), rows, ["method", "length", "factor", "loss", "tail_loss"])
        write_json(os.path.join(out, "rope_factors.json"), base | {"tail": tail, "select": cfg.select,
                                                                   "seed": cfg.seed, "methods": best})
        print(f"wrote {out}/rope_grid.csv, rope_factors.json")

    # --- 1b. slopes set without a fit: Qwen's logn, the grid's a -----------------------------
    for value in cfg.set_log:
        set_log(model, value, L, uniform_path, out, extras)

    # --- 2. HeadScale (or per-layer) gradient fit, or of the slopes with --fit=log --------
    slopes = cfg.fit == "log"
    fitted, sym = ("head_scale_log", "a") if slopes else ("head_scale", "lam")
    for n in length_list(cfg.fit_lengths, L):
        name = length_name(n / L)
        init = start_value(cfg, uniform_path, n, L)
        before = {k: v.clone() for k, v in model.state_dict().items() if not k.endswith(fitted)}
        clamp = "a >= 0, head_scale 1" if slopes else f"clamp >= {cfg.min_scale:g}"
        print(f"fitting {cfg.granularity} {'slopes' if slopes else 'scales'} at {name} (n={n}) from "
              f"{sym}={init:.3f}, {clamp}")
        t0 = time.time()
        lam, log = fit_scales(model, ds, cfg, n, init, ctx, device, grad_scaler(dtype))
        seconds = time.time() - t0
        after = model.state_dict()
        changed = [k for k, v in before.items() if not torch.equal(v, after[k])]
        if changed:  # the method's promise: only head_scale (or only its slopes) moves
            raise RuntimeError(f"weights other than {fitted} changed during the fit: {changed[:3]}")
        if slopes:
            model.set_head_slopes(lam)
            stem = os.path.join(out, f"{cfg.granularity}log_{name}{cfg.tag}")
            info = {"method": f"{cfg.granularity}log", "length": n, "init": init, "min_slope": 0.0,
                    "head_scale": 1.0, "steps": cfg.steps, "lr": cfg.lr, "a": lam.tolist()}
        else:
            model.set_head_scales(lam)
            stem = os.path.join(out, f"{cfg.granularity}_{name}{cfg.tag}")
            info = {"method": cfg.granularity, "length": n, "init": init, "min_scale": cfg.min_scale,
                    "steps": cfg.steps, "lr": cfg.lr, "lam": lam.tolist()}
        save_checkpoint(stem + ".pt", model, **extras, scales=info)
        write_csv(stem + ".csv", [[l, h, round(v, 5)] for l, row in enumerate(lam.tolist()) for h, v in enumerate(row)],
                  ["layer", "head", "slope" if slopes else "scale"])
        keys = ["step", "loss", f"{sym}_mean", f"{sym}_min", f"{sym}_max", "lr"]
        write_json(stem + ".json", base | info | {"seconds": round(seconds, 1), "final_loss": log[-1][1],
                                                  "log": [dict(zip(keys, r)) for r in log]})
        print(f"wrote {stem}.pt/.csv/.json ({seconds:.0f}s; only {fitted} changed)")
        model.requires_grad_(True)
        model.set_head_scales(1.0)
        model.set_head_slopes(0.0)


if __name__ == "__main__":
    run_main(main)
