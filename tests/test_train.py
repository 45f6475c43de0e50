"""train.py end to end: tiny runs, exact resume, a kill mid-run, DDP with two CPU processes."""

import contextlib
import csv
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT, TINY_TRAIN, run_script
from model import load_checkpoint
from common import UserError, config_dict
from common import finite_everywhere
from train import TrainConfig, check_resume, memorising

pytestmark = pytest.mark.slow


def test_memorising_is_the_gap_growing_not_the_pass_count():
    # (train loss, val loss) at two evaluations, measured: a 466 KB text at the cpu preset (25 passes)
    assert memorising((3.78, 4.51), (2.46, 4.44))
    # the gpu preset's NoPE and RoPE (7 passes, dropout 0.1): both still learning, no warning
    assert not memorising((0.98336, 0.91069), (0.84911, 0.83108))
    assert not memorising((0.76423, 0.76776), (0.66793, 0.72022))
    assert not memorising((3.0, 3.2), (2.95, 3.35))  # a small train gain is noise, not memorising


def test_a_run_over_a_tiny_text_counts_its_passes_and_warns(tmp_path):
    import random
    from data import CharTokenizer, write_dataset
    r, alpha = random.Random(0), "abcdefghij "
    text = lambda n: "".join(r.choice(alpha) for _ in range(n))  # noqa: E731  random: nothing to learn but by heart
    write_dataset(tmp_path / "d", [("t", text(600))], [(f"v{i}", text(3000)) for i in range(4)],
                  CharTokenizer.from_texts([alpha]), {"corpus": "test"})
    proc = run_script("train.py", f"--dataset={tmp_path / 'd'}", f"--out_dir={tmp_path / 'o'}", "--n_layer=2",
                      "--n_head=2", "--n_embd=64", "--block_size=32", "--batch_size=16", "--warmup_iters=10",
                      "--val_windows=16", "--max_iters=300", "--eval_interval=100", "--learning_rate=3e-3")
    assert "300 steps read 256 passes over the 600 training tokens" in proc.stdout
    assert proc.stdout.count("warning: memorising the training text") == 1


def log(out):
    with open(out / "train_log.csv") as f:
        return list(csv.DictReader(f))


def test_trains_and_writes_checkpoints(tiny_dataset, tmp_path):
    out = tmp_path / "run"
    proc = run_script("train.py", f"--dataset={tiny_dataset}", f"--out_dir={out}", *TINY_TRAIN,
                      "--max_iters=40", "--eval_interval=20")
    assert "tok/s" in proc.stdout and "eta" in proc.stdout and "memorising" not in proc.stdout
    rows = log(out)
    assert [int(r["step"]) for r in rows] == [20, 40]
    assert float(rows[-1]["val_loss"]) < float(rows[0]["val_loss"])  # it learns
    model, ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["iter_num"] == 40 and "optimizer" in ckpt
    assert torch.equal(model.get_head_scales(), torch.ones(2, 2))
    assert (out / "best.pt").exists() and (out / "summary.json").exists()
    # a second fresh run must not overwrite the first
    again = run_script("train.py", f"--dataset={tiny_dataset}", f"--out_dir={out}", *TINY_TRAIN, check=False)
    assert again.returncode == 2 and "--resume" in again.stderr


def test_resume_reproduces_the_uninterrupted_run(tiny_dataset, tmp_path):
    common = [f"--dataset={tiny_dataset}", *TINY_TRAIN, "--eval_interval=10", "--lr_decay_iters=30",
              "--pos_encoding=rope"]
    run_script("train.py", f"--out_dir={tmp_path / 'a'}", *common, "--max_iters=30")
    run_script("train.py", f"--out_dir={tmp_path / 'b'}", *common, "--max_iters=20")
    run_script("train.py", f"--out_dir={tmp_path / 'b'}", *common, "--max_iters=30", "--resume")
    a, b = log(tmp_path / "a"), log(tmp_path / "b")
    assert [r["val_loss"] for r in a] == [r["val_loss"] for r in b]
    # resuming with another model shape is refused
    proc = run_script("train.py", f"--out_dir={tmp_path / 'b'}", *common, "--n_embd=64", "--resume", check=False)
    assert proc.returncode == 2 and "n_embd=32 (now 64)" in proc.stderr
    # ... and so is another seed, batch or learning rate: all named in one line
    proc = run_script("train.py", f"--out_dir={tmp_path / 'b'}", *common, "--seed=7", "--learning_rate=1e-3",
                      "--resume", check=False)
    assert proc.returncode == 2 and "seed=1337 (now 7)" in proc.stderr and "learning_rate=0.002 (now 0.001)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_resume_on_another_number_of_processes_is_refused():
    cfg, model = TrainConfig(max_iters=20), {"n_layer": 2}
    saved = config_dict(cfg) | {"model": model}
    check_resume(cfg, model, saved, "ckpt.pt", 10, world=2, saved_world=2)  # the same run: accepted
    with pytest.raises(UserError, match=r"2 process\(es\) \(now 1\)"):  # each process read its own batches
        check_resume(cfg, model, saved, "ckpt.pt", 10, world=1, saved_world=2)
    with pytest.raises(UserError, match=r"n_layer=2 \(now 3\)"):  # the model's settings too
        check_resume(cfg, {"n_layer": 3}, saved, "ckpt.pt", 10, world=2, saved_world=2)
    # a default given on one command and left out on the other is the same model
    check_resume(cfg, {"n_layer": 2, "pos_encoding": "nope"}, saved, "ckpt.pt", 10, 2, 2)
    with pytest.raises(UserError, match=r"pos_encoding='nope' \(now 'rope'\)"):
        check_resume(cfg, {"n_layer": 2, "pos_encoding": "rope"}, saved, "ckpt.pt", 10, 2, 2)


def test_kill_mid_run_then_resume(tiny_dataset, tmp_path):
    out = tmp_path / "run"
    args = [sys.executable, "train.py", f"--dataset={tiny_dataset}", f"--out_dir={out}", *TINY_TRAIN,
            "--max_iters=100000", "--eval_interval=5"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not (out / "ckpt.pt").exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # let it write a few more checkpoints, then kill it wherever it is
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    model, ckpt = load_checkpoint(out / "ckpt.pt")  # never half-written
    step = ckpt["iter_num"]
    assert step >= 5
    run_script("train.py", f"--dataset={tiny_dataset}", f"--out_dir={out}", *TINY_TRAIN,
               f"--max_iters={step + 10}", "--eval_interval=5", "--resume")
    assert load_checkpoint(out / "ckpt.pt")[1]["iter_num"] == step + 10


def test_divergence_stops_without_a_broken_checkpoint(tiny_dataset, tmp_path):
    out = tmp_path / "run"
    proc = run_script("train.py", f"--dataset={tiny_dataset}", f"--out_dir={out}", *TINY_TRAIN,
                      "--max_iters=40", "--eval_interval=20", "--learning_rate=1e30", "--grad_clip=0",
                      check=False)
    assert proc.returncode == 2 and any(m in proc.stderr for m in ("loss is nan", "loss is inf", "not finite"))
    assert not (out / "ckpt.pt").exists()


FINITE_CASES = (([float("nan"), 0.0], False), ([1.0, 2.0], True), ([1.0, float("inf")], False))


def _finite_in_rank(rank, path, out):
    torch.distributed.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=2)
    got = [finite_everywhere(values[rank], True, "cpu") for values, _ in FINITE_CASES]
    torch.distributed.destroy_process_group()
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(got))


def test_a_loss_not_finite_in_one_process_stops_every_process(tmp_path):
    """Rank 0 alone measures validation: if its loss is not finite, rank 1 must stop too, not wait
    for it at the next gradient all-reduce (each case one collective of the same two processes)."""
    import torch.multiprocessing as mp
    mp.spawn(_finite_in_rank, args=(str(tmp_path / "rendezvous"), str(tmp_path)), nprocs=2, join=True)
    expected = [e for _, e in FINITE_CASES]
    assert [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)] == [expected] * 2


def test_ddp_two_cpu_processes(tiny_dataset, tmp_path):
    # a family past the paper with a parameter of its own: Scalable-Softmax's learned s (NoPE trains
    # under DDP in the test below)
    out = tmp_path / "ddp"
    proc = run_script("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py",
                      f"--dataset={tiny_dataset}", f"--out_dir={out}", *TINY_TRAIN, "--max_iters=10",
                      "--eval_interval=10", "--family=ssmax", timeout=240)
    assert "2 process(es)" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["steps"] == 10 and math.isfinite(summary["final_val_loss"])
    model, _ = load_checkpoint(out / "ckpt.pt")
    assert model.config.family == "ssmax" and model.transformer.h[0].attn.ssmax.requires_grad


def test_a_loss_gone_non_finite_under_ddp_ends_every_process_in_one_line(tiny_dataset, tmp_path):
    """Both ranks stop at the same step (finite_everywhere), each with one error line and exit 2,
    and tear the process group down first: no gloo abort ("terminate called"), run after run."""
    for run in range(2):
        proc = run_script("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py",
                          f"--dataset={tiny_dataset}", f"--out_dir={tmp_path / str(run)}", *TINY_TRAIN,
                          "--max_iters=20", "--eval_interval=20", "--learning_rate=1e30", "--grad_clip=0",
                          timeout=240, check=False)
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode != 0 and len(errors) == 2 and all("not finite" in e or "loss is" in e for e in errors)
        assert "terminate called" not in proc.stderr + proc.stdout
        assert proc.stderr.count("exitcode  : 2") + proc.stderr.count("exitcode : 2") >= 1, proc.stderr[-2000:]
        assert not (tmp_path / str(run) / "ckpt.pt").exists()


def test_fine_tuning_keeps_train_len_the_model_L(tiny_dataset, tmp_path):
    run_script("train.py", f"--dataset={tiny_dataset}", f"--out_dir={tmp_path / 'a'}", *TINY_TRAIN, "--max_iters=2",
               "--eval_interval=2")
    tune = [f"--dataset={tiny_dataset}", f"--out_dir={tmp_path / 'b'}", *TINY_TRAIN, "--max_iters=2",
            "--eval_interval=2", f"--init_from={tmp_path / 'a' / 'ckpt.pt'}", "--block_size=64"]
    run_script("train.py", *tune)
    s = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert (s["train_len"], s["seq_len"]) == (32, 64) and s["bos"]  # train_len means L, as in results.json
    proc = run_script("train.py", *tune, "--overwrite", "--bos=false", check=False)  # never silently mixed
    assert proc.returncode == 2 and "trained with the start token; pass --bos=true" in proc.stderr


class Refused:
    """A precision context that must not be entered."""

    def __enter__(self):
        raise AssertionError("entered")

    def __exit__(self, *exc):
        return False


def test_fit_at_stops_a_diverging_fit_and_fits_float16_cards_in_float32(tiny_dataset):
    """search_scales.fit_at, around the paper's fit_head_scales: a loss gone non-finite stops
    the fit in one line with the model as it was found; a float16 card's fit runs in float32
    (its autocast is never entered), any other dtype's under the script's precision."""
    import search_scales
    from data import Dataset
    from test_model import make
    from common import UserError
    model = make("nope", bos=True, vocab_size=Dataset(str(tiny_dataset)).vocab_size, n_layer=1)
    ds = Dataset(str(tiny_dataset), bos=True)
    cfg = search_scales.SearchConfig(steps=3, log_interval=100, fit_batch_size=2)
    lam, log = search_scales.fit_at(model, ds, cfg, 16, 1.3, Refused(), "cpu", "float16")
    assert lam.shape == (1, 4) and len(log) == 3 and torch.isfinite(lam).all()
    with pytest.raises(AssertionError, match="entered"):
        search_scales.fit_at(model, ds, cfg, 16, 1.3, Refused(), "cpu", "bfloat16")
    model.eval()
    model.forward = lambda x, y: (None, (model.lm_head.weight.sum() * 0 + float("nan")))
    with pytest.raises(UserError, match=r"the fit diverged \(loss nan\) at step 0; lower --lr"):
        search_scales.fit_at(model, ds, cfg, 16, 1.3, contextlib.nullcontext(), "cpu", "float32")
    assert not model.training and all(p.requires_grad for p in model.parameters())
    assert torch.equal(model.get_head_scales(), torch.ones(1, 4))


def test_fit_at_with_slopes_leaves_the_model_as_found_and_a_lambda_set_once_still_fits(
        tiny_dataset, capsys):
    """--fit=slope: what fit_head_scales sets as lambda becomes the slopes a, on every forward of
    the fit (a T5 that sets lam once, before its loop, too); after it the model's scales and
    slopes are what they were, none of them requiring grad; the progress line shows mean, min
    and max."""
    import search_scales
    from data import Dataset
    from test_model import make
    model = make("nope", bos=True, vocab_size=Dataset(str(tiny_dataset)).vocab_size, n_layer=2)
    ds = Dataset(str(tiny_dataset), bos=True)
    model.set_head_slopes(0.25)
    cfg = search_scales.SearchConfig(steps=3, log_interval=3, fit_batch_size=2, fit="slope")
    a, log = search_scales.fit_at(model, ds, cfg, 16, 0.1, contextlib.nullcontext(), "cpu",
                                  "float32")
    assert a.shape == (2, 4) and len(log) == 3 and set(log[0]) >= {"a_mean", "a_min", "a_max"}
    assert torch.equal(model.get_head_slopes(), torch.full((2, 4), 0.25))
    assert torch.equal(model.get_head_scales(), torch.ones(2, 4))
    assert not any(b.attn.head_slope.requires_grad or b.attn.head_scale.requires_grad
                   for b in model.transformer.h)
    out = capsys.readouterr().out
    assert all(f"a_{k} " in out for k in ("mean", "min", "max")), out

    def set_once(model, batches, init, steps, lr, **_):  # lam set before the loop, not each step
        lam, grads = init.clone().requires_grad_(True), []
        model.set_head_scales(lam)
        for _, (x, y) in zip(range(steps), batches):
            model(x, y)[1].backward()
            grads.append(lam.grad.clone())
        return torch.stack(grads), [{"loss": 0.0}]

    real, search_scales.fit_head_scales = search_scales.fit_head_scales, set_once
    try:
        grads, _ = search_scales.fit_at(model, ds, cfg, 16, 0.1, contextlib.nullcontext(), "cpu",
                                       "float32")
    finally:
        search_scales.fit_head_scales = real
    assert all(not torch.equal(g, h) for g, h in zip(grads, grads[1:]))  # each step reached a
