"""bench.py runs end to end on tiny shapes and writes its JSON (no timing assertions)."""

import json

import pytest

from conftest import run_script

pytestmark = pytest.mark.slow


def test_bench_smoke(tmp_path):
    run_script("study/bench.py", "--preset=tiny", "--steps=2", "--eval_lengths=1,4", "--eval_windows=2",
               "--grid_windows=2", "--matmul_size=256", f"--out_dir={tmp_path}")
    res = json.loads((tmp_path / "bench_tiny_cpu.json").read_text())
    assert res["train"]["tokens_per_s"] > 0 and 0 < res["train"]["mfu"]
    assert res["headscale"]["fit_step_ms"] > 0 and res["grid_point"]["seconds"] > 0
    assert [(e["length"], e["entropy"]) for e in res["eval"]] == [(32, False), (32, True), (128, False), (128, True)]
    assert all(e["peak_extra_mb"] >= 0 for e in res["eval"])
