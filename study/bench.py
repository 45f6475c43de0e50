"""
What every stage costs on this device, against the device's own measured matmul rate.

    python study/bench.py                 # CPU preset shapes on the current device
    python study/bench.py --preset=gpu    # GPU preset shapes (on a GPU: bf16; --compile to compare)
    python study/bench.py --preset=gpu --batch_size=4 --steps=3  # GPU shapes, a few steps on a CPU

Measures, on random tokens (no dataset needed):
  - the device's matmul rate: a square product in the precision the model runs in (fp32 on CPU
    and MPS, bf16 or fp16 on CUDA)
  - training: ms/step, tokens/s, model FLOPs per token, achieved FLOP/s, and their ratio to the
    matmul rate (model FLOPs utilisation, MFU)
  - one HeadScale fit step (only head_scale trainable) next to a full training step at 4L
  - one point of the uniform lambda grid (the search's windows at 4L, forward only)
  - evaluation tokens/s and peak memory at L, 4L, 16L, with and without attention entropy,
    each in a fresh process so its peak memory is its own
  - the families past the paper (--families=fox,nope_gated,nope_sink): training and evaluation
    tokens/s of each against the paper's NoPE of the same shapes, one after the other
Prints a table and writes out_dir/bench.json. Timings move ~15% between identical runs on a
shared machine: compare numbers from one run.
"""

import multiprocessing as mp
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

if not __package__:  # run as a script, not imported: the repository's modules first
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (UserError, autocast, grad_scaler, length_list, load_preset, parse_config,
                    pick_device, pick_dtype, run_main, write_json)
from evaluate import measure
from model import FAMILIES, GPT, GPTConfig, make_config
from search_scales import SearchConfig


@dataclass
class BenchConfig:
    preset: str = "cpu"                 # model shapes to measure: config/NAME.py's train section
    batch_size: int = 0                 # training batch (0 = the preset's)
    steps: int = 10                     # timed training steps, after 2 untimed warm-up steps
    eval_lengths: list[float] = field(default_factory=lambda: [1.0, 4.0, 16.0])  # units of L
    eval_batch: int = 8                 # windows per forward pass in evaluation
    eval_windows: int = 16              # windows per evaluation measurement
    grid_windows: int = 64              # windows in one uniform-grid point (search_scales default)
    fit_batch: int = 4                  # sequences per HeadScale fit step (search_scales default)
    matmul_size: int = 0                # side of the square matmul (0 = 2048 on CPU, 8192 on CUDA)
    vocab_size: int = 2049              # the cpu preset's BPE: 2048 ids and the start token
                                        # (the character-level corpus has 97 symbols and the token)
    out_dir: str = "out/bench"          # writes bench.json here
    device: str = "auto"                # auto | cpu | cuda | mps
    dtype: str = "auto"                 # auto | float32 | bfloat16 | float16
                                        # (auto on CUDA: bf16 where native, else fp16)
    compile: bool = False               # torch.compile the training step
    families: list[str] = field(        # families.py's, timed against NoPE (none by default:
        default_factory=list)           # gpu_check's bench runs stay as they were)


def sync(device):
    """Wait for the device's queued work, so the clock reads what it did (CUDA and MPS are
    asynchronous)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elif device.startswith("mps"):
        torch.mps.synchronize()


def timed(fn, device, reps, warmup=2):
    for _ in range(warmup):
        fn()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / reps


def matmul_rate(device, size, dtype):
    """FLOP/s of one square product in the model's own precision (dtype: 'float32', 'bfloat16',
    'float16')."""
    dtype = getattr(torch, dtype)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    dt = timed(lambda: a @ b, device, reps=10 if device.startswith("cuda") else 5)
    return 2 * size ** 3 / dt


def model_config(cfg):
    train = load_preset(cfg.preset, "train")
    keys = {"n_layer", "n_head", "n_embd", "block_size", "bias", "pos_encoding"}
    return GPTConfig(vocab_size=cfg.vocab_size,
                     **{k: v for k, v in train.items() if k in keys}), train


def train_step_time(model, B, T, device, ctx, scaler, reps, params):
    """Seconds per optimizer step at (B, T); params: what the optimizer trains."""
    opt = torch.optim.AdamW(params, lr=1e-4, fused=device.startswith("cuda"))
    x = torch.randint(0, model.config.vocab_size, (B, T), device=device)

    def step():
        with ctx:
            _, loss = model(x, x)
        scaler.scale(loss).backward()  # float16's scaler, as train.py; a no-op otherwise
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    return timed(step, device, reps)


def _status(field):
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise OSError(field)


def _lifetime_peak():
    """The process's peak resident memory where the resource module exists (Unix); None elsewhere
    (Windows: the memory column then reads as not measured)."""
    try:
        import resource  # Unix only
    except ImportError:
        return None
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            * (1 if sys.platform == "darwin" else 1024))


def rss_reset_peak():
    """Current resident memory, after resetting the kernel's peak (VmHWM) to it (Linux)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return _status("VmRSS:")
    except OSError:  # elsewhere: the process's lifetime peak, a coarser baseline
        return _lifetime_peak()


def rss_peak():
    try:
        return _status("VmHWM:")
    except OSError:
        return _lifetime_peak()


def eval_child(args, queue):
    """In a fresh process: evaluation time and the rise in peak memory it causes."""
    mcfg, n, windows, batch, entropy, device, dtype = args
    torch.manual_seed(0)
    model = GPT(GPTConfig(**mcfg)).to(device).eval()
    x = torch.randint(0, mcfg["vocab_size"], (windows, n + 1))
    ctx = autocast(device, dtype)
    measure(model, x[:1, :65], 1, ctx, entropy=entropy)  # warm up kernels before the baseline
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = rss_reset_peak()
    sync(device)
    t0 = time.perf_counter()
    measure(model, x, batch, ctx, entropy=entropy)
    sync(device)
    dt = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else rss_peak()
    extra = (peak - base) / 2 ** 20 if peak is not None and base is not None else None
    queue.put({"seconds": dt, "tokens_per_s": windows * n / dt, "peak_extra_mb": extra})


def flops_per_token(model, T):
    """Forward+backward FLOPs per token at length T: 6N for the weight matmuls plus the attention
    scores and values, 6 * n_layer * T * n_embd (causal, so on average half of the
    12 * n_layer * T * n_embd of the PaLM appendix)."""
    return 6 * model.get_num_params() + 6 * model.config.n_layer * T * model.config.n_embd


def family_rates(mcfg, names, B, steps, device, ctx, scaler, compile_=False):
    """Each family's training tokens/s at (B, L) and evaluation tokens/s at 4L (forward, SDPA,
    B windows) against the paper's NoPE of the same shapes ("nope", first): {name: {...,
    "train_vs_nope", "eval_vs_nope"}}. A family's own position encoding (ALiBi's) is its
    Config's default; every other setting is mcfg's."""
    L, out = mcfg.block_size, {}
    for name in ("", *names):
        if name not in FAMILIES:
            raise UserError(f"--families names {name!r}, not a family (families.py registers "
                            f"{', '.join(sorted(FAMILIES)[1:])})")
        torch.manual_seed(0)
        model = GPT(make_config(**vars(mcfg) | {
            "family": name, "pos_encoding": FAMILIES[name].Config.pos_encoding})).to(device)
        run = torch.compile(model) if compile_ else model
        train = train_step_time(run, B, L, device, ctx, scaler, steps, list(model.parameters()))
        x = torch.randint(0, mcfg.vocab_size, (B, 4 * L + 1))
        ev = timed(lambda: measure(model, x, B, ctx), device, reps=1, warmup=1)
        out[name or "nope"] = {"train_tokens_per_s": B * L / train,
                               "eval_tokens_per_s_4L": B * 4 * L / ev}
    for r in out.values():
        r["train_vs_nope"] = r["train_tokens_per_s"] / out["nope"]["train_tokens_per_s"]
        r["eval_vs_nope"] = r["eval_tokens_per_s_4L"] / out["nope"]["eval_tokens_per_s_4L"]
    return out


def main():
    cfg = parse_config(BenchConfig, section="bench", description=__doc__)
    device = pick_device(cfg.device)
    dtype = pick_dtype(cfg.dtype, device)
    ctx = autocast(device, dtype)
    mcfg, train = model_config(cfg)
    L = mcfg.block_size
    B = cfg.batch_size or train.get("batch_size", 64)
    if cfg.steps <= 0 or B <= 0:
        raise UserError("--steps and --batch_size must be > 0")
    torch.manual_seed(0)
    res = {"preset": cfg.preset, "device": device, "dtype": dtype,
           "threads": torch.get_num_threads(), "torch": torch.__version__,
           "cpu": platform.processor() or platform.machine(),
           "date": time.strftime("%Y-%m-%d"), "model": vars(mcfg), "batch_size": B}
    if device.startswith("cuda"):
        res["gpu"] = torch.cuda.get_device_name()
    size = cfg.matmul_size or (8192 if device.startswith("cuda") else 2048)
    peak = matmul_rate(device, size, dtype)
    res["matmul"] = {"size": size, "flops_per_s": peak}
    print(f"device {device} {dtype}, {res['threads']} threads; "
          f"matmul {size}^3: {peak / 1e9:.1f} GFLOP/s")

    # training step
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()  # the matmul's operands are not training's
    model = GPT(mcfg).to(device)
    run = torch.compile(model) if cfg.compile else model
    scaler = grad_scaler(dtype)
    dt = train_step_time(run, B, L, device, ctx, scaler, cfg.steps, list(model.parameters()))
    fpt = flops_per_token(model, L)
    tps = B * L / dt
    res["train"] = {"ms_per_step": dt * 1e3, "tokens_per_s": tps, "flops_per_token": fpt,
                    "flops_per_s": fpt * tps, "mfu": fpt * tps / peak, "compile": cfg.compile,
                    # what training at (B, L) holds on the card: weights, AdamW's state, activations
                    "peak_cuda_mb": (torch.cuda.max_memory_allocated() / 2 ** 20
                                     if device.startswith("cuda") else None)}
    print(f"train  L={L} B={B}: {dt * 1e3:.0f} ms/step, {tps / 1e3:.1f}k tok/s, "
          f"{fpt / 1e6:.2f} MFLOP/token, {fpt * tps / 1e9:.1f} GFLOP/s = "
          f"{100 * fpt * tps / peak:.0f}% of the matmul rate")

    # HeadScale fit step vs a full training step, both at 4L with the fit's batch
    n4 = 4 * L
    full = train_step_time(model, cfg.fit_batch, n4, device, ctx, scaler, max(2, cfg.steps // 2),
                           list(model.parameters()))
    model.requires_grad_(False)
    lam = torch.ones(mcfg.n_layer, mcfg.n_head, device=device, requires_grad=True)
    model.set_head_scales(lam)
    fit = train_step_time(model, cfg.fit_batch, n4, device, ctx, scaler, max(2, cfg.steps // 2),
                          [lam])
    model.requires_grad_(True)
    model.set_head_scales(1.0)
    res["headscale"] = {"length": n4, "batch": cfg.fit_batch, "fit_step_ms": fit * 1e3,
                        "full_step_ms": full * 1e3, "ratio": fit / full}
    print(f"fit    4L={n4} B={cfg.fit_batch}: HeadScale step {fit * 1e3:.0f} ms "
          f"vs full training step {full * 1e3:.0f} ms ({100 * fit / full:.0f}%)")

    # one point of the uniform grid: the search's windows at 4L, forward only
    x = torch.randint(0, mcfg.vocab_size, (cfg.grid_windows, n4 + 1))
    grid = timed(lambda: measure(model, x, cfg.eval_batch, ctx), device, reps=1, warmup=1)
    res["grid_point"] = {"length": n4, "windows": cfg.grid_windows, "seconds": grid}
    sc = SearchConfig()  # search_scales.py's default grid
    points = round((sc.lam_max - sc.lam_min) / sc.lam_step) + 1
    print(f"grid   one lambda at 4L ({cfg.grid_windows} windows): {grid:.2f} s; "
          f"a {points}-point grid at 2L+4L+8L takes about {points * grid * (2 + 4 + 8) / 4:.0f} s")

    # evaluation: time and peak memory, each measurement in a fresh process: forked, where the
    # OS can, from a server that imported PyTorch and the project once (and never touches CUDA)
    res["eval"] = []
    fork_server = "forkserver" in mp.get_all_start_methods()
    mp_ctx = mp.get_context("forkserver" if fork_server else "spawn")
    if fork_server:
        mp_ctx.set_forkserver_preload(["torch", "evaluate", "search_scales"])
    for n in length_list(cfg.eval_lengths, L):
        for entropy in (False, True):
            q = mp_ctx.Queue()
            p = mp_ctx.Process(target=eval_child,
                               args=((vars(mcfg), n, cfg.eval_windows, cfg.eval_batch, entropy,
                                      device, dtype), q))
            p.start()
            r = q.get()
            p.join()
            r |= {"length": n, "entropy": entropy}
            res["eval"].append(r)
            print(f"eval   n={n:5d} entropy={str(entropy):5}: "
                  f"{r['tokens_per_s'] / 1e3:.1f}k tok/s, peak memory "
                  + (f"+{r['peak_extra_mb']:.0f} MB" if r["peak_extra_mb"] is not None
                     else "not measured here")
                  + f" ({cfg.eval_windows} windows, batch {cfg.eval_batch})")
    # the families past the paper against NoPE, each a training step and a 4L forward pass
    if cfg.families:
        res["families"] = family_rates(mcfg, cfg.families, B, max(2, cfg.steps // 2), device,
                                       ctx, scaler, cfg.compile)
        for name, r in res["families"].items():
            print(f"family {name:>12}: train {r['train_tokens_per_s'] / 1e3:.1f}k tok/s "
                  f"({100 * r['train_vs_nope']:.0f}% of NoPE's), eval at 4L "
                  f"{r['eval_tokens_per_s_4L'] / 1e3:.1f}k tok/s ({100 * r['eval_vs_nope']:.0f}%)")
    os.makedirs(cfg.out_dir, exist_ok=True)
    path = os.path.join(cfg.out_dir, f"bench_{cfg.preset}_{device.split(':')[0]}.json")
    write_json(path, res)
    print(f"wrote {path}")


if __name__ == "__main__":
    run_main(main)
