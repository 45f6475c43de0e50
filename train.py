"""
Train a NoPE (or RoPE) GPT at length L = block_size.

    python train.py --preset=cpu                                   # NoPE, built-in corpus
    python train.py --preset=cpu --pos_encoding=rope --out_dir=out/rope
    python train.py --preset=cpu --resume                          # continue after a kill
    torchrun --standalone --nproc_per_node=2 train.py --preset=gpu  # data parallel (DDP)
    python train.py --preset=cpu --family=hybrid --pos_encoding=rope --nope_every=4  # families.py
    python train.py --preset=cpu --init_from=out/rope/ckpt.pt --pos_encoding=nope  # DroPE

Every row begins with the start token unless --bos=false (data/__init__.py says why). Writes
out_dir/ckpt.pt (the last, with the optimizer, for --resume), best.pt, train_log.csv, summary.json.
"""

import os
import sys
import time
import traceback
from dataclasses import dataclass

import torch

import families  # noqa: F401  (registers the families past the paper: --family=NAME)
from common import (Progress, UserError, autocast, config_dict, cosine_lr, end_processes,
                    finite_everywhere, format_seconds, grad_scaler, parse_config, pick_dtype,
                    optimizer_step, run_main, start_processes, wrap, write_csv, write_json)
from data import Dataset
from data.passkey import mixed_loss, training_share
from evaluate import measure
from families import arch_of, with_defaults
from model import FAMILIES, GPT, GPTConfig, load_checkpoint, make_config, save_checkpoint


@dataclass
class TrainConfig:
    # I/O
    out_dir: str = "out/nope"           # checkpoints and logs go here
    dataset: str = "pystdlib"           # data/NAME (prepared by data/NAME/prepare.py) or a folder
    resume: bool = False                # continue from out_dir/ckpt.pt (model, optimizer, step)
    init_from: str = ""                 # fine-tune: a checkpoint's weights and shape, new optimizer
    overwrite: bool = False             # allow a fresh run to replace an existing out_dir/ckpt.pt
    # the model: GPTConfig's fields (and a family's) are options too, --n_layer=4 ...; block_size
    # is the length the run trains at (with --init_from the model keeps its own L)
    # optimisation
    batch_size: int = 64                # sequences per micro-step per process
    gradient_accumulation_steps: int = 1  # micro-steps per optimizer step
    max_iters: int = 2000               # optimizer steps (0 with --init_from: convert and save)
    learning_rate: float = 2e-3         # peak learning rate
    min_lr: float = 2e-4                # floor of the cosine decay
    warmup_iters: int = 100             # linear warm-up steps
    lr_decay_iters: int = 0             # cosine decay ends here (0 = max_iters)
    weight_decay: float = 0.1           # AdamW weight decay on matrices
    beta1: float = 0.9                  # AdamW beta1
    beta2: float = 0.99                 # AdamW beta2
    grad_clip: float = 1.0              # clip the global gradient norm (0 = off)
    passkey_frac: float = 0.0           # passkey examples' share of a batch (loss: text + answers)
    # evaluation and logging
    eval_interval: int = 250            # validate and checkpoint every this many steps
    val_windows: int = 256              # fixed windows of the "search" documents, L positions
    log_interval: int = 25              # print a progress line every this many steps
    # system
    device: str = "auto"                # auto (cuda, mps, then cpu) | cpu | cuda | cuda:1 | mps
    dtype: str = "auto"                 # auto | float32 | bfloat16 | float16 (a grad scaler)
    compile: bool = False               # torch.compile the model (slow start, faster steps)
    seed: int = 1337                    # the same seed gives the same losses on the same machine
    preset: str = ""                    # the preset used (set by --preset=NAME)


VAL_SEED = 1234  # the monitor's windows (in the scale search's documents), not the training seed
VAL_BATCH = 32   # windows per forward pass of the monitor (does not change what it measures)
LOG_HEADER = ["step", "train_loss", "val_loss", "lr", "grad_norm", "seconds"]  # train_log.csv


def model_options():
    """The model's settings, options of train.py too: GPTConfig's, then each family's own."""
    return list(dict.fromkeys(attention.Config for attention in FAMILIES.values()))


def get_lr(it, cfg):
    return cosine_lr(it, cfg.warmup_iters, cfg.lr_decay_iters or cfg.max_iters, cfg.learning_rate,
                     cfg.min_lr)


def main():
    cfg, model_args = parse_config(TrainConfig, section="train", description=__doc__,
                                   more=model_options())
    check(cfg, model_args)
    ddp, rank, world, device = start_processes(cfg.device)
    try:
        train(cfg, model_args, ddp, rank, world, device)
    except BaseException as e:  # under DDP, an error (a loss not finite) ends every process alike:
        traceback.clear_frames(e.__traceback__)  # free what its frames hold (the DDP wrapper),
        if ddp:                                  # then the process group, as after a finished run
            end_processes(wait=False)
        raise
    if ddp:
        end_processes(wait=True)


def train(cfg, model_args, ddp, rank, world, device):
    """The run: setup, the loop, the summary (nanoGPT's train.py, top to bottom)."""
    master = rank == 0
    T = model_args.get("block_size", GPTConfig.block_size)  # the length this run trains at
    dtype = pick_dtype(cfg.dtype, device)
    ctx = autocast(device, dtype)
    scaler = grad_scaler(dtype)  # float16 only; otherwise its calls do nothing
    torch.manual_seed(cfg.seed)
    ckpt_path = os.path.join(cfg.out_dir, "ckpt.pt")

    # --- model, data, optimizer: fresh, resumed (--resume) or another's (--init_from) ---------
    model, ds, ckpt, record = make_model(cfg, model_args, ckpt_path, world)
    model.to(device)
    optimizer = model.configure_optimizers(cfg.weight_decay, cfg.learning_rate,
                                           (cfg.beta1, cfg.beta2), device.split(":")[0])
    iter_num, best_val, log_rows = resume_state(ckpt, optimizer, scaler)  # 0, inf, [] when fresh
    raw_model, model, ckpt = model, wrap(model, cfg.compile, ddp, device), None  # ckpt freed
    passkey, n_passkey = training_share(ds, cfg.passkey_frac, cfg.batch_size, T)  # or (None, 0)
    tokens_per_iter = cfg.gradient_accumulation_steps * world * cfg.batch_size * T
    val_windows = ds.windows(T, cfg.val_windows, seed=VAL_SEED, subset="search")
    if master:
        describe(cfg, raw_model, ds, T, tokens_per_iter, n_passkey, device, dtype, world, iter_num)

    def evaluation(iter_num, train_loss, lr, grad_norm, best_val):
        """The validation loss; rank 0 logs, saves and says it. Returns the best so far."""
        val = validate(raw_model, val_windows, ctx, ddp, device, master, iter_num)
        if master:
            wall = time.time() - t_start + elapsed_before
            best_val = log_and_save(cfg, record, raw_model, optimizer, scaler, log_rows, best_val,
                                    [iter_num, train_loss, val, lr, grad_norm, wall])
            print(f"step {iter_num}: val loss {val:.4f} (best {best_val:.4f}), saved {ckpt_path}"
                  + ("" if iter_num else " (no training step)"), flush=True)
            warn_if_memorising(log_rows)
        return best_val

    # --- the loop ---------------------------------------------------------------------------
    g = torch.Generator()
    elapsed_before = log_rows[-1][-1] if log_rows else 0.0
    train_loss, grad_norm, lr = float("nan"), float("nan"), get_lr(iter_num, cfg)
    loss_sum, loss_count = torch.zeros((), device=device), 0  # on the device: no sync per step
    progress = Progress(cfg.max_iters, tokens_per_iter, start_step=iter_num)
    t_start = time.time()
    model.train()
    while iter_num < cfg.max_iters:
        lr = get_lr(iter_num, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        for micro in range(cfg.gradient_accumulation_steps):
            # batches depend only on (seed, rank, step, micro-step): resumed runs see the same data
            g.manual_seed(cfg.seed * 1_000_003 + rank * 7_919 + iter_num * 101 + micro)
            x, y = ds.get_batch("train", cfg.batch_size, T, g, device)  # (B, T) each
            if ddp:  # sync gradients only on the last micro-step
                model.require_backward_grad_sync = micro == cfg.gradient_accumulation_steps - 1
            with ctx:
                if passkey is None:
                    _, loss = model(x, y)
                else:
                    loss = mixed_loss(model, x, y, passkey, n_passkey, g)
            scaler.scale(loss / cfg.gradient_accumulation_steps).backward()
            loss_sum += loss.detach()
            loss_count += 1
        norm = optimizer_step(model, optimizer, scaler, cfg.grad_clip)  # on the device, or None
        iter_num += 1

        evaluate_now = iter_num % cfg.eval_interval == 0 or iter_num == cfg.max_iters
        if evaluate_now or iter_num % cfg.log_interval == 0:  # evaluations log the training loss
            # the mean since the last report, read from the device (a NaN in any step shows)
            train_loss = finite(loss_sum.item() / loss_count, "training", iter_num, ddp, device)
            grad_norm = float(norm) if norm is not None else float("nan")
            loss_sum, loss_count = torch.zeros((), device=device), 0  # the next report's sum
            if master and iter_num % cfg.log_interval == 0:
                print(progress.line(iter_num, loss=train_loss, lr=f"{lr:.2e}",
                                    gnorm=f"{grad_norm:.2f}"), flush=True)
        if evaluate_now:
            best_val = evaluation(iter_num, train_loss, lr, grad_norm, best_val)
    if cfg.max_iters == 0:  # --init_from converted, not trained: its weights measured and saved
        best_val = evaluation(iter_num, train_loss, lr, grad_norm, best_val)
    if master:
        write_summary(cfg, raw_model, ds, T, log_rows, iter_num, best_val, tokens_per_iter,
                      val_windows, time.time() - t_start + elapsed_before, device, dtype, world)


# -----------------------------------------------------------------------------
# The run's machinery: how it starts, what it prints and writes, how it ends

def finite(value, what, iter_num, ddp, device):
    """value, if it is finite in every process; else every process stops in one line."""
    if not finite_everywhere(value, ddp, device):
        raise UserError(f"{what} loss is not finite by step {iter_num}; nothing saved. Lower "
                        "--learning_rate or raise --warmup_iters, then --resume")
    return value


def validate(model, windows, ctx, ddp, device, master, iter_num):
    """The validation loss on the monitor's fixed windows, measured by rank 0 (the others give 0);
    the model goes back to training mode."""
    val = float(measure(model, windows, VAL_BATCH, ctx)["loss"].mean()) if master else 0.0
    model.train()
    return finite(val, "validation", iter_num, ddp, device)


def log_and_save(cfg, record, model, optimizer, scaler, log_rows, best_val, row):
    """Rank 0, after an evaluation: `row` (LOG_HEADER's, unrounded) joins the log; best.pt (when
    the validation loss improved), ckpt.pt (with the optimizer, for --resume) and train_log.csv
    are written, each with `record`. Returns the best validation loss."""
    iter_num, train_loss, val, lr, grad_norm, wall = row
    log_rows.append([iter_num, round(train_loss, 5), round(val, 5), lr, round(grad_norm, 4),
                     round(wall, 1)])
    improved, best_val = val < best_val, min(best_val, val)
    record = record | {"iter_num": iter_num, "best_val_loss": best_val,
                       "log": [dict(zip(LOG_HEADER, r)) for r in log_rows]}
    if improved:
        save_checkpoint(os.path.join(cfg.out_dir, "best.pt"), model, **record)
    save_checkpoint(os.path.join(cfg.out_dir, "ckpt.pt"), model, **record,
                    optimizer=optimizer.state_dict(),
                    **({"scaler": scaler.state_dict()} if scaler.is_enabled() else {}))
    write_csv(os.path.join(cfg.out_dir, "train_log.csv"), log_rows, LOG_HEADER)
    return best_val


def resume_state(ckpt, optimizer, scaler):
    """(step, best validation loss, log rows) to go on from, the optimizer's (and float16
    scaler's) state loaded: a resumed checkpoint's, or (0, inf, []) for a fresh run."""
    if ckpt is None:
        return 0, float("inf"), []
    optimizer.load_state_dict(ckpt["optimizer"])
    if scaler.is_enabled() and "scaler" in ckpt:
        scaler.load_state_dict(ckpt["scaler"])
    return ckpt["iter_num"], ckpt["best_val_loss"], [list(r.values()) for r in ckpt.get("log", [])]


def describe(cfg, model, ds, T, tokens_per_iter, n_passkey, device, dtype, world, iter_num):
    """The run's first lines: what is trained, where, and how many times it reads the text."""
    os.makedirs(cfg.out_dir, exist_ok=True)
    c, text = model.config, len(ds.tokens["train"])
    source = cfg.init_from and f" from {cfg.init_from}"
    print(f"{c.pos_encoding}{c.family and '+' + c.family} GPT: {model.get_num_params() / 1e6:.2f}M "
          f"parameters, trained at length {T}{source}, {'with' if c.bos else 'without'} the start "
          f"token, {tokens_per_iter:,} tokens/step, device {device} {dtype}, {world} process(es)"
          + (f", resuming at step {iter_num}" if iter_num else ""))
    made_up = 1 - n_passkey / cfg.batch_size  # passkey rows are made up, not read from the text
    passes = cfg.max_iters * tokens_per_iter * made_up / text
    print(f"{cfg.max_iters} steps read {passes:.3g} passes over the {text:,} training tokens"
          + ("; validation will say if it memorises" if passes > 5 else ""))


def warn_if_memorising(log):
    """Say once, at the evaluation where it first shows, that the run memorises (memorising())."""
    pairs = [(a[1:3], b[1:3]) for a, b in zip(log, log[1:])]  # (train, val) losses, in turn
    if pairs and memorising(*pairs[-1]) and not any(memorising(*p) for p in pairs[:-1]):
        print(f"warning: memorising the training text (train loss {log[-2][1]:.2f} -> "
              f"{log[-1][1]:.2f}, val {log[-2][2]:.2f} -> {log[-1][2]:.2f}): use fewer "
              "--max_iters, a smaller vocabulary or character level, more --dropout, or more text",
              flush=True)


def write_summary(cfg, model, ds, T, log_rows, iter_num, best_val, tokens_per_iter, val_windows,
                  wall, device, dtype, world):
    """summary.json (when the last step was evaluated) and the closing line."""
    if log_rows and log_rows[-1][0] == iter_num:
        write_json(os.path.join(cfg.out_dir, "summary.json"), {  # train_len: L; seq_len: the run's
            "pos_encoding": model.config.pos_encoding, "dataset": cfg.dataset,
            "train_len": model.config.block_size, "seq_len": T, "bos": model.config.bos,
            "init_from": cfg.init_from, "params": model.get_num_params(), "steps": iter_num,
            "tokens": iter_num * tokens_per_iter, "final_val_loss": log_rows[-1][2],
            "best_val_loss": best_val,  # and bits per byte, which compares tokenizers:
            "final_val_bpb": round(ds.bits_per_byte(log_rows[-1][2], val_windows), 5),
            "wall_seconds": round(wall, 1), "device": device, "dtype": dtype, "processes": world,
            "seed": cfg.seed})
    print(f"done: {iter_num} steps, val loss {log_rows[-1][2] if log_rows else float('nan'):.4f}, "
          f"wall {format_seconds(wall)}")


def memorising(prev, now):
    """True when, between two evaluations (train_loss, val_loss), the run learned its training text
    and not the language: the training loss fell by more than 0.1 nats, the validation loss by
    less than a quarter of that, 0.2 nats above it already (docs/laptop.md, "A second corpus")."""
    train_drop, val_drop = prev[0] - now[0], prev[1] - now[1]
    return train_drop > 0.1 and val_drop < train_drop / 4 and now[1] - now[0] > 0.2


# --init_from takes the checkpoint's model. A setting given on the command line wins (DroPE:
# --pos_encoding=nope on a RoPE checkpoint; --family and its settings), a shape that differs is
# refused (the weights would not fit it); a preset's settings are a fresh model's, not these.
SHAPE_KEYS = ["n_layer", "n_head", "n_embd", "bias"]
KEPT_KEYS = SHAPE_KEYS + ["block_size", "vocab_size", "bos"]  # never changed by --init_from


def init_overrides(cfg, model_args, saved, argv=None):
    """The model settings to load an --init_from checkpoint with: those given that differ."""
    given = {a[2:].partition("=")[0] for a in (sys.argv[1:] if argv is None else argv)}
    clash = [f"{k}={getattr(saved, k)!r} (given {model_args[k]!r})" for k in SHAPE_KEYS
             if k in given and model_args[k] != getattr(saved, k)]
    if clash:
        raise UserError(f"{cfg.init_from} has {', '.join(clash)}: fine-tuning keeps a "
                        "checkpoint's shape; drop those settings or train a new model")
    changed = {k: v for k, v in model_args.items() if k in given and k not in KEPT_KEYS
               and v != getattr(saved, k, None)}
    if changed:
        print(f"--init_from with {', '.join(f'{k}={v!r}' for k, v in changed.items())} "
              f"(the checkpoint: {', '.join(f'{k}={getattr(saved, k, None)!r}' for k in changed)})")
    return changed


def check(cfg, model_args):
    """Every setting, refused in one line before any work."""
    given = vars(cfg) | {k: model_args.get(k, 1) for k in SHAPE_KEYS[:3] + ["block_size"]}
    for k in ("batch_size", "max_iters", "gradient_accumulation_steps", "eval_interval",
              "val_windows", "log_interval", "n_layer", "n_head", "n_embd", "block_size"):
        if given[k] <= 0 and not (k == "max_iters" and cfg.max_iters == 0 and cfg.init_from):
            raise UserError(f"--{k} must be > 0, got {given[k]}"
                            + (" (0 only with --init_from: the checkpoint converted, not trained)"
                               if k == "max_iters" else ""))
    if "vocab_size" in model_args:
        raise UserError("--vocab_size is the dataset's: prepare another dataset to change it")
    if not cfg.init_from:  # the model's own rules (and its family's), before any work
        try:
            make_config(**model_args)
        except ValueError as e:
            raise UserError(str(e)) from None
    if not 0 <= cfg.passkey_frac <= 1 or cfg.learning_rate <= 0:
        raise UserError("--passkey_frac must be between 0 and 1 and --learning_rate > 0")


# what --resume may change: how the run goes on, not what it trains (max_iters: see check_resume)
RESUME_MAY_CHANGE = {"resume", "overwrite", "max_iters", "eval_interval", "log_interval", "device",
                     "dtype", "compile", "preset"}


def check_resume(cfg, model_args, saved, path, iter_num, world, saved_world):
    """--resume continues the same run: every setting that decides what is trained must be the
    checkpoint's. How it runs (device, precision, intervals) may change, and max_iters may grow:
    with lr_decay_iters=0 the cosine then ends at the new max_iters."""
    differ = [f"{k}={saved.get(k)!r} (now {getattr(cfg, k)!r})"
              for k in TrainConfig.__dataclass_fields__
              if k not in RESUME_MAY_CHANGE and saved.get(k) != getattr(cfg, k)]
    old, new = with_defaults(saved.get("model", {})), with_defaults(model_args)
    differ += [f"{k}={old.get(k)!r} (now {new.get(k)!r})"
               for k in sorted(old | new) if old.get(k) != new.get(k)]
    if world != saved_world:  # each process reads its own batches: the processes decide the data
        differ.append(f"{saved_world} process(es) (now {world})")
    if differ:
        raise UserError(f"{path} was trained with {', '.join(differ)}: pass the same settings to "
                        "resume, or start a new --out_dir")
    if cfg.max_iters < iter_num:
        raise UserError(f"{path} is at step {iter_num}, past --max_iters={cfg.max_iters}: "
                        "nothing to resume")
    if cfg.max_iters != saved.get("max_iters"):
        print(f"resuming with max_iters {saved.get('max_iters')} -> {cfg.max_iters}"
              + (": the cosine now ends at the new max_iters" if not cfg.lr_decay_iters else ""))


def make_model(cfg, model_args, ckpt_path, world):
    """The model (on the CPU) and its data: fresh, resumed (--resume: the checkpoint, whose
    optimizer state train() loads) or from another checkpoint (--init_from: a fresh optimizer).
    Returns (model, dataset, the resumed checkpoint or None, the record its checkpoints carry)."""
    bos = model_args.get("bos", GPTConfig.bos)
    if cfg.init_from:  # the model's shape and L from that checkpoint, the text in its mode
        load = {"dropout": model_args.get("dropout", GPTConfig.dropout)}
        init_model, init_ckpt = load_checkpoint(cfg.init_from, "cpu", **load)
        source = arch_of(init_model.config), init_ckpt.get("model_name")
        changed = init_overrides(cfg, model_args, init_model.config)
        if changed:  # the same weights in the model asked for (DroPE: RoPE removed)
            init_model, init_ckpt = load_checkpoint(cfg.init_from, "cpu", **load, **changed)
        if bos != init_model.config.bos:  # a model keeps the start-token mode it was trained in
            raise UserError(f"{cfg.init_from} was trained "
                            f"{'with' if init_model.config.bos else 'without'} the start token; "
                            f"pass --bos={str(init_model.config.bos).lower()} to fine-tune it")
        ds = Dataset.for_model(init_model.config, init_ckpt, cfg.dataset)
    else:
        ds = Dataset(cfg.dataset, bos=bos)
    if cfg.resume and not os.path.exists(ckpt_path):
        raise UserError(f"--resume but {ckpt_path} does not exist; start without --resume")
    if cfg.resume:
        model, ckpt = load_checkpoint(ckpt_path, "cpu")
        check_resume(cfg, model_args, ckpt.get("config", {}), ckpt_path, ckpt["iter_num"], world,
                     ckpt.get("processes", 1))
        Dataset.for_model(model.config, ckpt, cfg.dataset)  # the same text as before it stopped
        return model, ds, ckpt, run_record(cfg, model_args, ckpt.get("model_name"), ds, world)
    if os.path.exists(ckpt_path) and not cfg.overwrite:
        raise UserError(f"{ckpt_path} already exists: pass --resume to continue it, --overwrite to "
                        "replace it, or another --out_dir")
    # the trained model's name (results.json's "model"): this run's folder, or its source's where a
    # fine-tune or a conversion keeps the architecture (rope_pi_ft_4L is RoPE's, DroPE its own)
    name = os.path.basename(os.path.normpath(cfg.out_dir))
    if cfg.init_from:
        name = source[1] if arch_of(init_model.config) == source[0] and source[1] else name
        return init_model, ds, None, run_record(cfg, model_args, name, ds, world)
    model = GPT(make_config(**model_args, vocab_size=ds.vocab_size))
    return model, ds, None, run_record(cfg, model_args, name, ds, world)


def run_record(cfg, model_args, name, ds, world):
    """What a checkpoint carries beside the weights: every setting (the model's as given), the
    trained model's name (results.json's "model"), the data's name and hash, the processes."""
    return {"model_name": name, "config": config_dict(cfg) | {"model": model_args},
            "processes": world, "dataset": {"name": cfg.dataset, "sha256": ds.meta.get("sha256")}}


if __name__ == "__main__":
    run_main(main)
