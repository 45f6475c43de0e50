"""The GPU path, tested on a CPU: the CUDA branches reached by monkeypatching what the machine
reports, float16's gradient scaler, lambda's precision under autocast, and gpu_check.py's trial."""

import json
import os

import pytest
import torch
# imported before the fixture below patches torch's device checks: PyTorch 2.14's dynamo reads
# torch.backends.mps.is_available.__wrapped__ when it is first imported (as stages.preload and
# any optimizer import it), and a plain lambda in its place has none
import torch._dynamo  # noqa: F401

import reproduce
from conftest import make_docs, run_script
from model import GPT, GPTConfig
import common as cli
from common import UserError, optimizer_step, pick_device, pick_dtype


@pytest.fixture
def machine(monkeypatch):
    """Pretend to be a machine with or without a CUDA card, with or without native bfloat16."""
    def set_(cuda, bf16=True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Test card")
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
        monkeypatch.setattr(cli, "native_bf16", lambda: bf16)
    return set_


def test_auto_picks_the_cpu_study_without_a_card_and_the_gpu_study_with_one(machine):
    machine(cuda=False)
    assert pick_device("auto") == "cpu" and pick_dtype("auto", "cpu") == "float32"
    argv, why = reproduce.choose_preset([])
    assert argv == ["--preset=cpu"] and "no CUDA card" in why
    machine(cuda=True)
    assert pick_device("auto") == "cuda" and pick_dtype("auto", "cuda") == "bfloat16"
    argv, why = reproduce.choose_preset(["--max_iters=5", "--preset=auto"])
    assert argv == ["--preset=gpu", "--max_iters=5"] and "preset gpu: CUDA is available (Test card)" in why
    assert reproduce.choose_preset(["--preset=tiny"]) == (["--preset=tiny"], None)  # an explicit preset wins
    with pytest.raises(UserError, match="--preset needs a name"):
        reproduce.choose_preset(["--preset="])


def test_a_card_without_native_bf16_gets_float16(machine):
    machine(cuda=True, bf16=False)  # a T4 or a V100: PyTorch's default check would say yes (emulated)
    assert pick_dtype("auto", "cuda") == "float16"
    assert pick_dtype("float16", "cuda:0") == "float16" and pick_dtype("float32", "cuda") == "float32"
    assert cli.grad_scaler("float16").is_enabled() and not cli.grad_scaler("bfloat16").is_enabled()


def test_float16_on_a_cpu_is_one_line_before_any_work(machine, tmp_path):
    machine(cuda=False)
    for dtype in ("float16", "bfloat16"):
        with pytest.raises(UserError, match=f"--dtype={dtype} is for CUDA cards"):
            pick_dtype(dtype, "cpu")
    with pytest.raises(UserError, match="must be one of"):
        pick_dtype("half", "cpu")
    proc = run_script("train.py", "--dtype=float16", f"--out_dir={tmp_path / 'run'}", check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: --dtype=float16 is for CUDA cards; on cpu use --dtype=float32 (or auto)"]
    assert not (tmp_path / "run").exists()


def test_under_torchrun_an_explicit_card_is_refused_not_replaced_by_the_cpu(tmp_path):
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29512"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        proc = run_script("train.py", "--device=cuda:1", f"--out_dir={tmp_path / 'run'}", check=False)
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    assert proc.returncode == 2 and "each process takes cuda:LOCAL_RANK" in proc.stderr


def _step(scaler, clip):
    """One SGD step of a tiny GPT through common.optimizer_step (SGD: unlike Adam, its update is
    proportional to the gradient, so a gradient left scaled would show)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=16))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x = torch.randint(0, 16, (4, 8), generator=torch.Generator().manual_seed(1))
    _, loss = model(x, x)
    scaler.scale(loss).backward()
    norm = optimizer_step(model, opt, scaler, clip)
    return model.state_dict(), norm


@pytest.mark.parametrize("clip", [0.05, 0.0])
def test_a_scaled_step_equals_the_unscaled_step(clip):
    plain, norm_plain = _step(torch.amp.GradScaler("cpu", enabled=False), clip)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12)
    scaled, norm_scaled = _step(scaler, clip)
    if clip:
        assert norm_plain > clip  # the clip is active: the norm it saw must be the true one
        torch.testing.assert_close(norm_scaled, norm_plain, rtol=1e-5, atol=0)
        assert isinstance(norm_scaled, torch.Tensor)  # left on the device: no sync per step
    for k in plain:
        torch.testing.assert_close(scaled[k], plain[k], rtol=1e-5, atol=1e-7)
    assert scaler.get_scale() == 2.0 ** 12  # no overflow, nothing skipped


def _queries(model, x, monkeypatch):
    """The query that reaches SDPA in the first layer."""
    import model as model_module
    seen = []
    sdpa = model_module.F.scaled_dot_product_attention

    def spy(q, *args, **kwargs):
        seen.append(q)
        return sdpa(q, *args, **kwargs)
    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention", spy)
    model(x)
    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention", sdpa)
    return seen[0]


def test_lambda_keeps_its_precision_under_bf16_autocast(monkeypatch):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, block_size=256, n_layer=1, n_head=4, n_embd=128)).eval()
    x = torch.randint(0, 64, (4, 256))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        q1 = _queries(model, x, monkeypatch)
        model.set_head_scales(1.15)
        q = _queries(model, x, monkeypatch)
    assert q.dtype == torch.bfloat16 and q.numel() >= 1e5
    keep = q1.float().abs() > 1e-3
    ratio = (q.float()[keep] / q1.float()[keep]).mean().item()
    assert abs(ratio - 1.15) < 1e-4, ratio  # lam.to(bfloat16) would give 1.1484
    with torch.no_grad():  # float32: the product as it always was, bit for bit
        model.set_head_scales(1.0)
        q1 = _queries(model, x, monkeypatch)
        model.set_head_scales(1.15)
        assert torch.equal(_queries(model, x, monkeypatch), q1 * torch.tensor(1.15))


@pytest.mark.slow
def test_gpu_check_trial_runs_every_step_on_the_cpu(tmp_path):
    from data import CharTokenizer, write_dataset
    from data.passkey import FILLER, KEY_SENTENCE, QUESTION
    pk = FILLER * 10 + KEY_SENTENCE.format(key="0123456789") + QUESTION + "\n"
    train, val = make_docs(40, seed=0) + [("pk.py", pk)], make_docs(8, seed=1, min_len=2500, max_len=6000)
    ds = tmp_path / "data"
    write_dataset(ds, train, val, CharTokenizer.from_texts(t for _, t in train + val), {"corpus": "test"})
    out = tmp_path / "check"
    # every process it starts warns where a text file is opened in the locale's encoding (Windows'
    # would fail on the report's "lambda"); none may be ours (matplotlib's own are not)
    utf8 = {"PYTHONWARNDEFAULTENCODING": "1", "PYTHONWARNINGS": "default::EncodingWarning"}
    proc = run_script("study/gpu_check.py", "--trial", f"--out_dir={out}", f"--dataset={ds}", "--budget=400",
                      timeout=600, env=utf8)
    assert "6 of 6 commands passed" in proc.stdout
    logs = [proc.stderr] + [p.read_text(encoding="utf-8") for p in (out / "logs").glob("*.log")]
    ours = [line for text in logs for line in text.splitlines()
            if "EncodingWarning" in line and "site-packages" not in line and "/lib/python3" not in line]
    assert not ours, ours[:3]
    res = json.loads((out / "check.json").read_text())
    assert [c["name"] for c in res["commands"]] == ["passkey_train", "passkey", "sample", "torchrun", "bench_eager",
                                                    "study"]
    assert all(c["rc"] == 0 and c["memory"] for c in res["commands"])  # every process logged its memory
    assert {m["script"] for m in res["commands"][-1]["memory"]} >= {"reproduce.py", "train.py", "search_scales.py",
                                                                    "evaluate.py"}
    assert (out / "runs" / "study" / "report.md").exists() and (out / "runs" / "study" / "eval" / "hero.png").exists()
    assert not list((out / "runs").rglob("*.pt"))  # checkpoints stay in the work folder
    refused = run_script("study/gpu_check.py", f"--out_dir={tmp_path / 'no'}", check=False)
    assert refused.returncode == 2 and "--trial" in refused.stderr and not (tmp_path / "no").exists()


def test_the_budgeted_study_sizes_alibi_and_ssmax_in_only_when_asked():
    from study.gpu_check import CheckConfig, study_steps
    cfg = CheckConfig(step_ms=15.0, max_steps=100000)
    plain, _ = study_steps(cfg, 600, None, {"notoken": "false"})
    beyond, _ = study_steps(cfg, 600, None, {"notoken": "false", "beyond": "true"})
    assert 0 < beyond < plain  # four trainings share the seconds two had
    assert study_steps(cfg, 600, None, {"notoken": "false", "beyond": "false"})[0] == plain
