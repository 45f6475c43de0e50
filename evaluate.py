"""
Measure checkpoints past their training length L: the study's one measurement, defined here.

    python evaluate.py --ckpts=nope=out/nope/ckpt.pt,rope=out/rope/ckpt.pt --out_dir=out/eval
    python evaluate.py --ckpts=nope_window_L=out/nope/ckpt.pt --context=128 --out_dir=out/eval

Each checkpoint at each length n, on the same fixed, seeded windows of the "eval" documents (which
the scale search and train.py's monitor never read): loss, the mean over every position (nats per
token); tail_loss, the paper's metric (the last L/8 tokens of each window); the loss per position,
the attention entropy per (layer, head, position) and the sink share from one pass at the longest
length; a text sample. Rows merge into out_dir/results.json, each with its facts (facts) and its
reference (reference_of); a row's excess over that reference is excess(), the share a remedy takes
back taken_back(). Tables: study/tables.py; figures: study/plot.py, from the files alone. train.py's
monitor and search_scales.py's grid call the same measure().
"""

import contextlib
import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from common import (UserError, autocast, binned, default_tail, length_list, parse_ckpts,
                    parse_config, pick_device, pick_dtype, read_json, run_main, write_json)
from data import Dataset
from families import arch_of, first_key_probe, sink_facts, split_probe  # (registers families)
from model import GPTConfig, load_checkpoint

# What a measurement means, bumped when it changes: results of another are never merged, and
# reproduce.py reruns their stages. 2: the start token. 3: the validation documents divided once
# between the search and train.py's monitor and the evaluation: no evaluated token read by either.
PROTOCOL = 3


@dataclass
class EvalConfig:
    ckpts: list[str] = field(default_factory=lambda: ["nope=out/nope/ckpt.pt"])  # NAME=PATH,...
    out_dir: str = "out/eval"           # results folder (results.json is merged, not replaced)
    dataset: str = ""                   # '' = the one dataset the checkpoints were trained on
    lengths: list[float] = field(  # units of L
        default_factory=lambda: [1.0, 1.5, 2.0, 3.0, 4.0, 8.0, 16.0])
    windows: int = 64                   # windows per length (fixed, seeded, inside documents)
    tail: int = 0                       # tail metric's tokens (0 = L/8, the paper's 256/2048)
    context: int = 0                    # each token reads only its last W positions (0 = all)
    context_mode: str = "recompute"     # recompute (sub-windows of W tokens) | mask (a window)
    rope_scaling: str = ""              # RoPE, zero-shot: pi | ntk | yarn ('' = as trained)
    rope_factors: str = ""              # rope_factors.json: search_scales.py's best factors
                                        # per length ('' or a length not in it: factor n / L)
    entropy: bool = True                # attention entropy at the longest length
    entropy_rows: list[str] = field(  # with entropy: only these of --ckpts' names ('' = all)
        default_factory=list)
    sink_share: bool = True             # with the entropy: each query's attention to key 0
    bin: int = 0                        # position bin width for curves (0 = L/16)
    samples: bool = True                # generate a text sample per model from a 3L-token prompt
    sample_tokens: int = 200            # tokens generated per sample
    batch_size: int = 8                 # windows per forward pass
    chunk: int = 256                    # queries per chunk on the explicit (entropy) path
    seed: int = 1234                    # windows and samples
    device: str = "auto"                # auto | cpu | cuda | mps
    dtype: str = "auto"                 # auto | float32 | bfloat16 | float16
    preset: str = ""                    # the preset used (set by --preset=NAME)


def table_of(t, plain):
    """A model's lambda (plain=1) or slopes (plain=0) as results.json records them: None (all
    plain), one number (the same for every head), or the (layer x head) table."""
    if torch.all(t == plain):
        return None
    if torch.all(t == t.flatten()[0]):
        return round(float(t.flatten()[0]), 4)
    return [[round(v, 4) for v in row] for row in t.tolist()]


# -----------------------------------------------------------------------------
# The measurement: per-position loss (and attention entropy) on fixed windows, with or without
# a context limit (the recomputed last-L reference)

def _losses(model, x, y, ctx, mask_window, entropy, chunk):
    """Per-token losses (B, T) and, with entropy, the attention entropies
    (B, n_layer, n_head, T) in bits from the same pass (the written-out softmax)."""
    with ctx:
        out = model(x, y, window=mask_window, entropy=entropy, chunk=chunk, reduction="none")
    return out[1].float(), (out[2] if entropy else None)


def last_L_losses(model, x, y, context, batch_size, ctx=contextlib.nullcontext(), entropy=False,
                  chunk=256):
    """Piece T6: the honest reference, the model reading only its last `context` (= L) positions.

        loss_i = -log p(y_i | the last ~L tokens before it)     (a fresh pass per sub-window)

    Positions i < context are scored by one pass over the window's first `context` positions;
    later ones by sub-windows of `context` positions that end at them, stride s = context / 8,
    each scoring its last s positions (so every scored token sees between 7/8 and all of
    `context` positions). A model trained with the start token never saw text without it, so
    each of its sub-windows is the start token (the window's position 0) and the last
    context - 1 tokens. Positions restart at 1 in every sub-window, so a length-following lambda
    (model.query_scale) sees only i <= context, as a model that reads only its last L would.
    A row's excess over this reference is excess() below. Costs about 8x a plain pass.
    x, y (B, T). Returns per-token losses (B, T) and, with entropy, (B, n_layer, n_head, T)."""
    B, T = x.shape
    loss, ent = _losses(model, x[:, :context], y[:, :context], ctx, None, entropy, chunk)
    losses, ents = [loss], [ent]
    s = max(1, context // 8)
    ends = [min(c + s, T) for c in range(context, T, s)]  # each sub-window ends here (exclusive)
    starts = [e - context for e in ends]
    # xs, ys: the sub-windows stacked, (B * K, context), sub-window-major
    if getattr(model.config, "bos", False):  # [start token, last context - 1 tokens]
        xs = torch.cat([torch.cat([x[:, :1], x[:, a + 1:e]], 1) for a, e in zip(starts, ends)])
    else:
        xs = torch.cat([x[:, a:e] for a, e in zip(starts, ends)])
    ys = torch.cat([y[:, a:e] for a, e in zip(starts, ends)])
    parts = [_losses(model, xs[i:i + batch_size], ys[i:i + batch_size], ctx, None, entropy, chunk)
             for i in range(0, xs.size(0), batch_size)]
    sub_loss = torch.cat([p[0] for p in parts]).view(len(ends), B, context)
    sub_ent = (torch.cat([p[1] for p in parts]).view(len(ends), B, *parts[0][1].shape[1:])
               if entropy else None)
    prev = context
    for k, e in enumerate(ends):  # keep the positions prev..e-1, the tail of sub-window k
        losses.append(sub_loss[k][:, context - (e - prev):])
        if entropy:
            ents.append(sub_ent[k][..., context - (e - prev):])
        prev = e
    return torch.cat(losses, dim=1), (torch.cat(ents, dim=-1) if entropy else None)


@torch.no_grad()
def measure(model, windows, batch_size, ctx=contextlib.nullcontext(), context=None,
            context_mode="recompute", entropy=False, chunk=256, sink_share=False):
    """Run model over windows (k, n+1) tokens: inputs are the first n, targets the last n. context:
    each token reads at most its last `context` positions (with the start token: the token and the
    last context - 1 positions), by recomputation over sub-windows (context_mode="recompute", exact:
    the model sees only those tokens) or by a sliding-window attention mask in every layer ("mask":
    through the layers information still flows from further back; a model trained with the start
    token keeps it visible). Sums are kept in float32 on the model's device (Apple's MPS has no
    float64). Returns {'loss': (n,) mean loss per position in nats, 'tokens': k * n, 'entropy':
    (n_layer, n_head, n) mean attention entropy in bits; 'first_key', 'kept': with sink_share
    (n_layer, n), the attention to key 0 and the mass kept, means over heads
    (families.first_key_probe); each None when not measured}. SDPA unless entropy is asked for."""
    model.eval()
    device = next(model.parameters()).device
    k, n = windows.size(0), windows.size(1) - 1
    loss_sum = torch.zeros(n, device=device)  # float32
    ent_sum = None
    probe = entropy and sink_share  # its curves ride on the entropy, after the heads
    with first_key_probe(model) if probe else contextlib.nullcontext():
        for b in range(0, k, batch_size):
            xy = windows[b:b + batch_size].to(device)
            x, y = xy[:, :-1], xy[:, 1:]
            if context and context < n and context_mode == "recompute":
                loss, ent = last_L_losses(model, x, y, context, batch_size, ctx, entropy, chunk)
            else:
                mask_window = context if context_mode == "mask" else None
                loss, ent = _losses(model, x, y, ctx, mask_window, entropy, chunk)
            loss_sum += loss.sum(0)                                # (n,)
            if entropy:
                e = ent.float().sum(0)                             # (n_layer, 3 n_head | n_head, n)
                ent_sum = e if ent_sum is None else ent_sum + e
    ent = None if ent_sum is None else (ent_sum / k).cpu().numpy().astype("float64")
    ent, first_key, kept = split_probe(ent, model.config.n_head) if probe else (ent, None, None)
    return {"loss": (loss_sum / k).cpu().numpy().astype("float64"), "tokens": k * n, "windows": k,
            "entropy": ent, "first_key": first_key, "kept": kept}


# -----------------------------------------------------------------------------
# Evaluating checkpoints

def set_length(model, cfg, n, L):
    """A zero-shot RoPE row's factor at length n (--rope_scaling): the best of study/rope_grid.py
    there (--rope_factors), else n / L, at least 1. Returns it (None for every other row)."""
    if not cfg.rope_scaling:
        return None
    best = read_json(cfg.rope_factors)["methods"] if cfg.rope_factors else {}  # a method absent:
    found = [s["best_factor"] for s in best.get(cfg.rope_scaling, {}).values() if s["length"] == n]
    model.config.rope_factor = found[0] if found else max(1.0, n / L)  # the tables follow it
    return model.config.rope_factor


def facts(model, ckpt, rope_scaling=""):
    """What a row is, recorded where it is made, for plots and findings to read (never a row's
    name): model, the trained model it reads (train.py's model_name); remedy, what was done to it
    since (uniform, headscale, headslope, logn, ...: search_scales.py's; pi_zeroshot, yarn_ft:
    RoPE stretched; llama4; None); variant, the fit's tag (noclamp); fit_length (tokens)."""
    s, c = ckpt.get("scales") or {}, model.config
    remedy = {"head": "headscale", "layer": "layerscale",  # "uniform" fitted, not the grid's:
              "uniform": "uniform_fit" if "steps" in s else "uniform",
              "set_slope": {"logn": "logn", "grid": "slope_grid"}.get(s.get("value"), "slope")
              }.get(s.get("method"), s.get("method"))
    fit_length = s.get("length")
    if rope_scaling:  # evaluate.py --rope_scaling: the RoPE twin stretched, zero-shot
        remedy = f"{rope_scaling}_zeroshot"
    elif c.family == "rope_scaled":  # fine-tuned with its extension, at the run's length
        remedy = f"{c.rope_scaling}_ft"  # at train.py's T: the block_size given, or the default
        fit_length = ckpt["config"]["model"].get("block_size", GPTConfig.block_size)
    elif getattr(c, "nope_temp", 0) and not remedy:
        remedy = "llama4"
    return {"model": ckpt.get("model_name"), "remedy": remedy,
            "variant": s.get("tag", "").lstrip("_") or None, "fit_length": fit_length}


def evaluate_model(name, model, ckpt, ds, cfg, L, ctx, dtype):
    lengths = length_list(cfg.lengths, L)
    tail = cfg.tail or default_tail(L)
    window = cfg.context or None
    width = cfg.bin or max(1, L // 16)
    res = {"context": window, "context_mode": cfg.context_mode if window else None, "bos": ds.bos,
           "lengths": [], "loss": [], "bpb": [], "tail_loss": [], "tokens": [], "tail_tokens": [],
           "windows": [], "scales": table_of(model.get_head_scales(), 1),
           "slopes": table_of(model.get_head_slopes(), 0),
           "pos_encoding": model.config.pos_encoding, "arch": arch_of(model.config),
           "temp": getattr(model.config, "nope_temp", 0) or None, "dtype": dtype,
           **facts(model, ckpt, cfg.rope_scaling)}
    factors = []
    for n in lengths:
        t0 = time.time()
        factors.append(set_length(model, cfg, n, L))
        windows = ds.windows(n, cfg.windows, seed=cfg.seed, subset="eval")
        # the longest length also gives the per-position curve, the entropy and the sink share
        with_entropy = cfg.entropy and n == lengths[-1] and name in (cfg.entropy_rows or [name])
        m = measure(model, windows, cfg.batch_size, ctx, context=window, sink_share=cfg.sink_share,
                    context_mode=cfg.context_mode, entropy=with_entropy, chunk=cfg.chunk)
        res["lengths"].append(n)
        res["loss"].append(round(float(m["loss"].mean()), 5))
        res["bpb"].append(round(ds.bits_per_byte(m["loss"].mean(), windows), 5))  # any tokenizer
        res["tail_loss"].append(round(float(m["loss"][-tail:].mean()), 5))
        res["tokens"].append(m["tokens"])
        res["tail_tokens"].append(m["windows"] * tail)
        res["windows"].append(m["windows"])
        print(f"{name:>24} n={n:5d}: loss {res['loss'][-1]:.4f} ({res['bpb'][-1]:.3f} bits/byte) "
              f"tail {res['tail_loss'][-1]:.4f} ({m['tokens']:,} tokens"
              f"{', entropy' if m['entropy'] is not None else ''}, {time.time() - t0:.1f}s)",
              flush=True)
    if cfg.rope_scaling:
        res["scales"] = factors  # the extension factor at each length
    res |= sink_facts(m["first_key"], m["kept"], L, model)  # with the entropy, else None
    centers, values = binned(m["loss"], width)
    positions = {"length": lengths[-1], "bin": width, "windows": m["windows"],
                 "positions": centers.tolist(), "loss": np.round(values, 5).tolist(),
                 "loss_per_position": np.round(m["loss"], 4).tolist()}  # position i: index + 1
    entropy = None
    if m["entropy"] is not None:
        centers, ent = binned(m["entropy"], width)  # (n_layer, n_head, bins)
        # what attending evenly gives, log2 i, averaged over each bin as the entropy is
        bound = binned(np.log2(np.arange(1, lengths[-1] + 1)), width)[1]  # (bins,)
        entropy = {"length": lengths[-1], "bin": width, "windows": m["windows"],
                   "positions": centers.tolist(), "entropy_bits": np.round(ent, 4).tolist(),
                   "bound_bits": bound.round(4).tolist(),  # and unbinned, each layer's mean:
                   "layer_bits_per_position": np.round(m["entropy"].mean(1), 4).tolist()}
    return res, positions, entropy


def sample(model, ds, cfg, L, device):
    """Continue a 3L-token validation prompt, so the model writes well past L."""
    set_length(model, cfg, 4 * L, L)  # a zero-shot RoPE row: its factor at 4L
    prompt = ds.windows(3 * L, 1, seed=cfg.seed + 2, subset="eval")[:, :3 * L].to(device)
    out = model.generate(prompt, cfg.sample_tokens, temperature=0.8, window=cfg.context or None,
                         generator=torch.Generator(device=device).manual_seed(cfg.seed))
    return {"prompt_tail": ds.decode(prompt[0, -200:].tolist()),
            "continuation": ds.decode(out[0, 3 * L:].tolist())}


# -----------------------------------------------------------------------------
# A row's reference, its excess over it (T6) and the share of that a remedy takes back

def reference_of(results, name):
    """The row a method is compared with at each length: the same trained model (the row's
    "model") reading only its last L positions (evaluate.py --context=L, recomputed), at
    lambda = 1 (no slope, no temperature), at the row's start-token mode and precision:
    nope_window_L for every NoPE row, rope_window_L for RoPE and its extensions. None for a
    context-limited row (a reference itself), or when no such row was measured. evaluate.py
    writes it into every row as "reference"; this is its one definition."""
    m, L = results["methods"][name], results["train_len"]
    if m.get("context") or m.get("model") is None:
        return None
    refs = [r for r, x in results["methods"].items()
            if x.get("context") == L and x.get("context_mode", "recompute") == "recompute"
            and x.get("scales") is None and x.get("slopes") is None and not x.get("temp")
            and x.get("model") == m["model"] and x.get("bos") == m.get("bos")
            and x.get("dtype") == m.get("dtype")]
    return min(refs) if refs else None  # one a model; should a file hold two, always the same


def excess(results, name, key="loss"):
    """Piece T6's second half: what the long context costs a row.

        excess(n) = loss_row(n) - loss_reference(n)     at each length n both were measured

    on the same windows, the reference being reference_of(results, name) (the same kind of model
    reading only its last L: last_L_losses). > 0: the long context costs the row; < 0: it buys.
    Defined here once; the report, findings.py and sweep.py read it. Returns {length: excess}."""
    ref = reference_of(results, name)
    if ref is None:
        return {}
    m, ref = results["methods"][name], results["methods"][ref]
    by_ref = dict(zip(ref["lengths"], ref[key]))
    return {n: v - by_ref[n] for n, v in zip(m["lengths"], m[key]) if n in by_ref}


def taken_back(results, name, base, n):
    """The share of a row's excess that a remedy takes back, at length n: of what the long context
    costs the `base` row, the part the `name` row no longer pays,

        taken_back = (excess_base(n) - excess_name(n)) / excess_base(n)

    (the README's "HeadScale takes back 31%": base nope, name nope_headscale_4L, n = 4L). 1: as
    good as reading its last L alone; 0: no better than base. nan where base has no excess,
    None where either excess was not measured."""
    a, b = excess(results, base).get(n), excess(results, name).get(n)
    if a is None or b is None:
        return None
    return (a - b) / a if a else float("nan")


# -----------------------------------------------------------------------------
# Checking the input, then the script

def check(cfg):
    """The settings that need no checkpoint, checked first: a mistake is said before any work."""
    for k in ("windows", "batch_size", "chunk", "context"):
        if getattr(cfg, k) < (0 if k == "context" else 1):
            raise UserError(f"--{k} must be > 0 (--context: >= 0), got {getattr(cfg, k)}")
    for k, allowed in (("context_mode", ("recompute", "mask")),
                       ("rope_scaling", ("", "pi", "ntk", "yarn"))):
        if getattr(cfg, k) not in allowed:
            raise UserError(f"--{k} must be one of {allowed}, got {getattr(cfg, k)!r}")
    if cfg.rope_factors and not os.path.exists(cfg.rope_factors):
        raise UserError(f"--rope_factors={cfg.rope_factors} does not exist: run study/rope_grid.py")


def check_models(cfg, models):
    """One table compares like with like: one L, vocabulary and dataset. Returns L, datasets."""
    shapes = {(m.config.block_size, m.config.vocab_size) for m, _ in models.values()}
    if len(shapes) > 1:
        raise UserError("these checkpoints do not share a training length and vocabulary "
                        f"{sorted(shapes)}; evaluate them into separate --out_dir folders")
    if cfg.rope_scaling and any(m.config.pos_encoding != "rope" for m, _ in models.values()):
        raise UserError("--rope_scaling stretches RoPE: evaluate other checkpoints in another run")
    # each model reads the dataset in its own start-token mode; all score the same target tokens
    data = {name: Dataset.for_model(model.config, ckpt, cfg.dataset)
            for name, (model, ckpt) in models.items()}
    if len({(d.name, d.meta.get("sha256")) for d in data.values()}) > 1:
        raise UserError("these checkpoints were trained on different datasets; pass --dataset=NAME "
                        "or evaluate them into separate --out_dir folders")
    return shapes.pop()[0], data


def main():
    cfg = parse_config(EvalConfig, section="evaluate", description=__doc__)
    check(cfg)
    ckpts = parse_ckpts(cfg.ckpts)
    if unknown := [r for r in cfg.entropy_rows if r not in ckpts]:
        raise UserError(f"--entropy_rows names {', '.join(unknown)}, not among --ckpts")
    device = pick_device(cfg.device)
    dtype = pick_dtype(cfg.dtype, device)
    ctx = autocast(device, dtype)
    models = {name: load_checkpoint(path, device) for name, path in ckpts.items()}  # all, first
    os.makedirs(cfg.out_dir, exist_ok=True)
    L, data = check_models(cfg, models)
    if cfg.rope_scaling:  # zero-shot: the same weights, RoPE stretched (families.RopeScaled)
        models = {name: load_checkpoint(path, device, family="rope_scaled",
                                        rope_scaling=cfg.rope_scaling)
                  for name, path in ckpts.items()}
    length_list(cfg.lengths, L)  # validates
    protocol = {"dataset": next(iter(data.values())).name, "train_len": L, "windows": cfg.windows,
                "seed": cfg.seed, "tail": cfg.tail or default_tail(L), "protocol": PROTOCOL}
    paths = {k: os.path.join(cfg.out_dir, f"{k}.json")
             for k in ("results", "positions", "entropy", "samples")}
    stores = {k: read_json(p) if os.path.exists(p) else {} for k, p in paths.items()}
    results = stores.pop("results") or (protocol | {"methods": {}})
    if {k: results.get(k) for k in protocol} != protocol:
        raise UserError(f"{paths['results']} was measured with other settings "
                        f"({ {k: results.get(k) for k in protocol} }, now {protocol}); "
                        "use another --out_dir")
    if any("model" not in m for m in results["methods"].values()):  # rows named, not described
        raise UserError(f"{paths['results']} has rows without their facts (written before "
                        "2026-12-07): python study/add_facts.py on it first, or another --out_dir")
    for name, (model, ckpt) in models.items():
        res, positions, entropy = evaluate_model(name, model, ckpt, data[name], cfg, L, ctx, dtype)
        results["methods"][name] = {"ckpt": os.path.abspath(ckpts[name])} | res
        for row in results["methods"]:  # every row's reference, among the rows measured so far
            results["methods"][row]["reference"] = reference_of(results, row)
        stores["positions"][name] = positions
        for store in (stores["entropy"], stores["samples"]):  # nothing of an earlier measurement
            store.pop(name, None)
        if entropy:
            stores["entropy"][name] = entropy
        if cfg.samples:
            stores["samples"][name] = sample(model, data[name], cfg, L, device)
        write_json(paths["results"], results)  # after every model: a kill keeps what it measured
        for k, v in stores.items():
            if v or os.path.exists(paths[k]):
                write_json(paths[k], v)
    print(f"tables: python study/tables.py {cfg.out_dir}; figures: python study/plot.py "
          f"--eval_dir={cfg.out_dir}")


if __name__ == "__main__":
    run_main(main)
