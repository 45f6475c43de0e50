"""
The project's own GPU check: every script on one CUDA card, then the gpu-preset study,
in one budget.

    # on a card: about 9 minutes
    python study/gpu_check.py --out_dir=out/gpu_check --budget=540
    # the study alone, other settings
    python study/gpu_check.py --smoke=false --study_args=seed=1338,passkey=true
    # with ALiBi and Scalable-Softmax beside NoPE (left out of the budgeted study by default)
    python study/gpu_check.py --study_args=beyond=true
    # any machine: the same steps on the CPU, tiny shapes, about a minute
    python study/gpu_check.py --trial
Steps, each a command of the project's own, in this order:
  smoke  every script at the tiny preset: reproduce.py (--slopes; train, search_scales, evaluate,
         plot, findings), train.py with passkey rows at a length where an example fits and
         passkey.py, sample.py, train.py under torchrun (nccl on a card), bench.py eager and
         compiled at the gpu preset's shapes
  study  reproduce.py --preset=gpu (--study_args added) with max_iters sized to the seconds left
Each command's output goes to OUT/logs/NAME.log as it runs; its run's small files (json, csv,
md, png; not the checkpoints, which stay in --work_dir) are copied to OUT/runs/NAME every 15 s
and when it ends, and OUT/check.json is rewritten after every command, so a time-out loses
nothing that finished. check.json holds each command's exit status, seconds and the peak CUDA
memory of every process it ran (torch.cuda.max_memory_allocated, written by common.run_main
when NANONOPE_MEMORY_LOG is set).
The trial (--trial) hides the card (CUDA_VISIBLE_DEVICES=''), shrinks every shape, lets the tiny
study stand for the smoke study and skips torch.compile (on a CPU it takes minutes and needs a
C++ compiler): it checks the check, not the card. Its time is mostly the ~16 processes each
starting torch (~2 s here).
"""

import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

if not __package__:  # run as a script, not imported: the repository's modules first
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (MEMORY_LOG, ROOT, UserError, format_seconds, parse_config, read_json,
                       run_main, write_json)
import torch
from data import Dataset

SMALL = (".json", ".csv", ".md", ".png", ".txt", ".log")  # what comes back; checkpoints (.pt) stay
# The gpu-preset study on one H200 (docs/gpu/, 2026-12-04), to size its steps to the time left:
# a compiled training step took 15 ms (bench: 13 ms); what is not training (fits, evaluations,
# plots, process starts) about 160 s; each training's compile and evaluations about 15 s.
H200_STEP_MS, H200_REST_S, COMPILE_S = 15.0, 160.0, 15.0


@dataclass
class CheckConfig:
    out_dir: str = "out/gpu_check"      # logs, check.json and the runs' small files
    work_dir: str = ""                  # the runs themselves, checkpoints included ('' = OUT/work)
    budget: float = 540.0               # seconds for the whole check; each command gets the rest
    smoke: bool = True                  # every script at the tiny preset first (~3 min on an H200)
    study: bool = True                  # then the gpu-preset study, sized to the time left
    study_args: list[str] = field(  # more reproduce.py settings, KEY=VALUE,...
        default_factory=list)
    max_steps: int = 2000               # the study's training steps at most (the preset's)
    step_ms: float = 0.0                # ms a step to size the study (0 = bench's, else the H200's)
    dataset: str = ""                   # '' = the presets' (the built-in corpus, data/pystdlib)
    trial: bool = False                 # CPU, tiny shapes, no compile: checks the check in seconds


class Check:
    """Runs commands one after another inside one time budget and keeps their traces."""

    def __init__(self, cfg, env):
        self.cfg, self.env, self.t0 = cfg, env, time.time()
        self.out = os.path.abspath(cfg.out_dir)
        self.work = os.path.abspath(cfg.work_dir or os.path.join(self.out, "work"))
        self.result = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "trial": cfg.trial,
                       "budget_s": cfg.budget, "machine": machine(env), "commands": []}
        os.makedirs(os.path.join(self.out, "logs"), exist_ok=True)

    def left(self):
        return self.cfg.budget - (time.time() - self.t0)

    def run(self, name, args, run_dir=None, launcher=None):
        """python [launcher] args..., with what is left of the budget; returns its exit status."""
        log, mem = (os.path.join(self.out, "logs", f"{name}.{ext}")
                    for ext in ("log", "memory.jsonl"))
        for path in (log, mem):
            if os.path.exists(path):
                os.remove(path)
        limit = self.left() - 5  # keep a few seconds to copy the last files
        entry = {"name": name, "cmd": " ".join(["python", *(launcher or []), *args]), "rc": None,
                 "seconds": 0.0}
        self.result["commands"].append(entry)
        if limit < 10:
            entry["rc"] = "skipped: budget spent"
            print(f"[{name}] skipped: the budget is spent", flush=True)
            return None
        print(f"[{name}] {entry['cmd']}  ({format_seconds(limit)} left)", flush=True)
        t0 = time.time()
        with open(log, "w", encoding="utf-8") as f:
            proc = subprocess.Popen([sys.executable, *(launcher or []), *args], cwd=ROOT,
                                    stdout=f, stderr=subprocess.STDOUT,
                                    env=self.env | {MEMORY_LOG: mem},
                                    start_new_session=os.name == "posix")
            rc = None
            while rc is None:
                try:
                    rc = proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    if run_dir:
                        self.keep(name, run_dir)
                    if time.time() - t0 > limit:
                        stop(proc)
                        rc = 124
        entry |= {"rc": rc, "seconds": round(time.time() - t0, 1), "memory": memory(mem)}
        if run_dir:
            self.keep(name, run_dir)
        write_json(os.path.join(self.out, "check.json"),
                   self.result | {"elapsed_s": round(time.time() - self.t0, 1)})
        peak = max((m["peak_cuda_mb"] or 0 for m in entry["memory"]), default=0)
        print(f"[{name}] exit {rc} after {format_seconds(entry['seconds'])}"
              + (f", peak CUDA memory {peak:,.0f} MB" if peak else ""), flush=True)
        return rc

    def keep(self, name, run_dir):
        """Copy the run's small files to OUT/runs/NAME (the same layout)."""
        for folder, _, files in os.walk(run_dir):
            for fn in files:
                src = os.path.join(folder, fn)
                if (fn.endswith(SMALL) and ".tmp" not in fn
                        and os.path.getsize(src) < 20 * 2 ** 20):
                    dst = os.path.join(self.out, "runs", name, os.path.relpath(src, run_dir))
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                    shutil.copy2(src, dst)


def stop(proc):
    """End a command and everything it started (reproduce.py's stages, torchrun's workers)."""
    if os.name == "posix":
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    proc.kill()
    proc.wait()


def memory(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def machine(env):
    """The card and the software, asked of a fresh process that sees what the commands see."""
    code = ("import json, platform, torch\n"
            "c = torch.cuda.is_available()\n"
            "print(json.dumps({'torch': torch.__version__, 'python': platform.python_version(), "
            "'cuda': c,\n"
            "  'gpu': torch.cuda.get_device_name() if c else None,\n"
            "  'capability': list(torch.cuda.get_device_capability()) if c else None,\n"
            "  'bf16_native': torch.cuda.is_bf16_supported(including_emulation=False) "
            "if c else None,\n"
            "  'memory_mb': torch.cuda.get_device_properties(0).total_memory // 2**20 "
            "if c else None}))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         encoding="utf-8", check=True)
    info = json.loads(out.stdout)
    try:
        info["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                        capture_output=True, text=True,
                                        encoding="utf-8").stdout.strip() or None
    except OSError:
        info["commit"] = None
    return info | {"host": platform.node(), "cpus": os.cpu_count()}


def study_steps(cfg, seconds_left, bench_json, study_args):
    """Training steps that fit the seconds left, from a step time (bench's compiled one if it ran,
    else the H200's) and the H200 study's other costs scaled by the same ratio. An estimate."""
    step_ms = cfg.step_ms
    if not step_ms and bench_json and os.path.exists(bench_json):
        step_ms = read_json(bench_json)["train"]["ms_per_step"]
    step_ms = step_ms or H200_STEP_MS
    ratio = step_ms / H200_STEP_MS
    trainings = 2 + (study_args.get("notoken", "true") != "false")
    trainings += 2 * (study_args.get("beyond", "false") != "false")  # alibi, nope_ssmax
    rest = H200_REST_S * ratio + COMPILE_S * trainings
    if study_args.get("passkey", "false") != "false":
        # two 600-step passkey fine-tunings at half the batch, fits, the passkey table
        rest += 120 * ratio
    steps = int((seconds_left - rest) / (trainings * step_ms / 1000 * 1.2)  # 20% for evaluations
                // 100 * 100)
    return min(steps, cfg.max_steps), step_ms


def main():
    cfg = parse_config(CheckConfig, section="gpu_check", description=__doc__)
    study_args = {}
    for a in cfg.study_args:
        key, eq, value = a.partition("=")
        if not eq or a.startswith("-"):
            raise UserError(f"--study_args takes KEY=VALUE pairs of reproduce.py settings, "
                            f"got {a!r}")
        study_args[key] = value
    # the budgeted study is the paper's first: ALiBi and SSMax (the gpu preset's beyond=True)
    # only when asked for, as their two trainings take steps from every model's
    study_args.setdefault("beyond", "false")
    if cfg.budget <= 0:
        raise UserError(f"--budget is in seconds and must be > 0, got {cfg.budget:g}")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if cfg.trial:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the same steps on the CPU
    else:
        if not torch.cuda.is_available():
            raise UserError("no CUDA card here: the check is for one; "
                            "--trial runs its steps on the CPU")
    chk = Check(cfg, env)
    print(f"gpu_check: {chk.result['machine']}, budget {format_seconds(cfg.budget)}, "
          f"out {chk.out}", flush=True)
    w, data = chk.work, [f"--dataset={cfg.dataset}"] if cfg.dataset else []
    tiny = ["--preset=tiny", *data]
    bench_json = None

    if cfg.smoke:
        # every script at the tiny preset (in the trial, the study below is this one)
        if not cfg.trial:
            chk.run("tiny_study", ["reproduce.py", *tiny, f"--out_dir={w}/tiny", "--notoken=false",
                                   "--slopes", "--lengths=1,2,4,8"], run_dir=f"{w}/tiny")
        ds = Dataset(cfg.dataset or "pystdlib", bos=True)
        n = ds.passkey().shortest()  # the first length at which a passkey example fits
        chk.run("passkey_train", ["train.py", *tiny, f"--out_dir={w}/passkey_train",
                                  f"--block_size={n}", "--passkey_frac=0.5", "--max_iters=20",
                                  "--overwrite"], run_dir=f"{w}/passkey_train")
        chk.run("passkey", ["study/passkey.py", f"--ckpts=nope={w}/passkey_train/ckpt.pt",
                            f"--out_dir={w}/passkey", "--lengths=1,2", "--keys=2", "--depths=2",
                            *data], run_dir=f"{w}/passkey")
        prompt = [] if cfg.dataset else ["--start=def main():"]  # another corpus may not spell it
        chk.run("sample", ["sample.py", f"--ckpt={w}/passkey_train/ckpt.pt", *prompt,
                           "--max_new_tokens=60", "--num_samples=1"])
        chk.run("torchrun", ["train.py", *tiny, f"--out_dir={w}/ddp", "--max_iters=10",
                             "--overwrite"], run_dir=f"{w}/ddp",
                launcher=["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1"])
        shapes = (["--preset=tiny", "--steps=2", "--eval_lengths=1", "--eval_windows=2",
                   "--grid_windows=2", "--matmul_size=256"] if cfg.trial
                  else ["--preset=gpu", "--eval_lengths=1,16"])
        chk.run("bench_eager", ["study/bench.py", *shapes, f"--out_dir={w}/bench_eager"],
                run_dir=f"{w}/bench_eager")
        bench_json = f"{w}/bench_eager/bench_{'tiny_cpu' if cfg.trial else 'gpu_cuda'}.json"
        if not cfg.trial:  # compiled: the step time the study's trainings will have
            chk.run("bench_compiled", ["study/bench.py", "--preset=gpu", "--compile=true",
                                       "--eval_lengths=1", "--steps=20",
                                       f"--out_dir={w}/bench_compiled"],
                    run_dir=f"{w}/bench_compiled")
            if os.path.exists(f"{w}/bench_compiled/bench_gpu_cuda.json"):
                bench_json = f"{w}/bench_compiled/bench_gpu_cuda.json"

    if cfg.study:
        steps, step_ms = study_steps(cfg, chk.left(), bench_json, study_args)
        chk.result["study_sizing"] = {"steps": steps, "step_ms": step_ms,
                                      "seconds_left": round(chk.left())}
        if steps < 100 and not cfg.trial:
            print(f"[study] skipped: {format_seconds(chk.left())} left is too little for 100 steps "
                  f"at {step_ms:.0f} ms a step (raise --budget, or --smoke=false)", flush=True)
        else:
            print(f"[study] {steps} training steps fit {format_seconds(chk.left())} "
                  f"at {step_ms:.0f} ms a step (an estimate)", flush=True)
            # the tiny preset's 20 steps at most, the fewest stages that still run every script
            if cfg.trial:
                preset = ["--preset=tiny", "--lengths=1,2", "--grid_lengths=2", "--fit_lengths=2",
                          "--ablation_length=2", "--notoken=false", "--rope_baselines=false",
                          "--slopes", "--slopes_length=2", "--slopes_fit_lengths=2"]
                steps = min(max(steps, 10), 20)
            else:
                preset = ["--preset=gpu"]
            chk.run("study", ["reproduce.py", *preset, *data, f"--out_dir={w}/study",
                              f"--max_iters={steps}",
                              *[f"--{k}={v}" for k, v in study_args.items()]],
                    run_dir=f"{w}/study")
    write_json(os.path.join(chk.out, "check.json"),
               chk.result | {"elapsed_s": round(time.time() - chk.t0, 1)})
    failed = [c["name"] for c in chk.result["commands"] if c["rc"] != 0]
    print(f"gpu_check: {len(chk.result['commands']) - len(failed)} of "
          f"{len(chk.result['commands'])} commands passed in {format_seconds(time.time() - chk.t0)}"
          + (f"; not passed: {', '.join(failed)}" if failed else "")
          + f"; {chk.out}/check.json", flush=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    run_main(main)
