"""What decides whether a study's stage runs again (study/stages.py), and bench.py's portability."""

import sys

import pytest
import torch

from study import bench, stages


def project(tmp_path, monkeypatch):
    """A project of two files, a.py importing b.py, in place of this repository."""
    (tmp_path / "a.py").write_text("import b\nprint('ran')\n", encoding="utf-8")
    (tmp_path / "b.py").write_text("X = 1\n", encoding="utf-8")
    monkeypatch.setattr(stages, "ROOT", tmp_path)
    return tmp_path


def test_a_moved_study_is_the_same_study(tmp_path):
    one, two = str(tmp_path / "one"), str(tmp_path / "elsewhere" / "two")
    a = stages.fingerprint(["evaluate.py", f"--out_dir={one}/eval", "--resume"], one)
    b = stages.fingerprint(["evaluate.py", f"--out_dir={two}/eval"], two)
    assert a == b and a["cmd"] == ["evaluate.py", "--out_dir=$STUDY/eval"]


def test_an_edited_preset_reruns_the_stages_that_read_it(tmp_path):
    preset = tmp_path / "mine.py"
    preset.write_text("train = dict(max_iters=10)\nevaluate = dict(windows=4)\n", encoding="utf-8")
    cmd = ["train.py", f"--preset={preset}"]
    before = stages.fingerprint(cmd, str(tmp_path))
    preset.write_text("train = dict(max_iters=10)\nevaluate = dict(windows=8)\n", encoding="utf-8")
    assert stages.what_changed(before, stages.fingerprint(cmd, str(tmp_path))) is None  # not train's section
    preset.write_text("train = dict(max_iters=20)\nevaluate = dict(windows=8)\n", encoding="utf-8")
    assert stages.what_changed(before, stages.fingerprint(cmd, str(tmp_path))) == f"{preset} changed"


def test_edited_code_reruns_the_stage_and_says_which_file(tmp_path, monkeypatch, capsys):
    (tmp_path / "project").mkdir()
    root = project(tmp_path / "project", monkeypatch)
    study = tmp_path / "study"
    assert stages.project_sources("a.py") == ["a.py", "b.py"]
    stages.Stages(str(study), force=False).run("s", ["a.py"], [])
    stages.Stages(str(study), force=False).run("s", ["a.py"], [])
    assert "done before, skipped" in capsys.readouterr().out
    (root / "b.py").write_text("X = 2\n", encoding="utf-8")  # an edit the script only imports
    stages.Stages(str(study), force=False).run("s", ["a.py"], [])
    assert "[s] runs (b.py changed)" in capsys.readouterr().out
    (root / "README.md").write_text("not code\n", encoding="utf-8")  # the README decides no result
    stages.Stages(str(study), force=False).run("s", ["a.py"], [])
    assert "done before, skipped" in capsys.readouterr().out


def test_bench_runs_without_the_unix_only_resource_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "resource", None)  # `import resource` now raises ImportError
    assert bench._lifetime_peak() is None


def test_bench_waits_for_an_mps_device_before_reading_the_clock(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.append("mps"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append("cuda"))
    bench.sync("mps")
    bench.sync("cuda:0")
    bench.sync("cpu")
    assert calls == ["mps", "cuda"]


@pytest.mark.parametrize("fork", [True, False])
def test_a_stage_runs_as_python_would_run_it_and_gives_its_exit_status(tmp_path, monkeypatch, fork):
    # on Linux without CUDA a fork of this process (PyTorch already imported), else a new
    # interpreter: the same argv, working folder, output and exit status either way
    if fork and (sys.platform != "linux" or torch.cuda.is_available()):
        pytest.skip("a stage forks on Linux without CUDA only")
    if not fork:
        monkeypatch.setenv("NANONOPE_NO_FORK", "1")
    out = tmp_path / "out.txt"
    script = tmp_path / "s.py"
    script.write_text(
        "import os, sys\n"
        f"open({str(out)!r}, 'w').write(repr((sys.argv, os.getcwd(), 'torch' in sys.modules)))\n"
        "if sys.argv[1] == 'user': sys.exit(2)\n"
        "if sys.argv[1] == 'text': sys.exit('a message')\n"
        "if sys.argv[1] == 'crash': raise RuntimeError('boom')\n", encoding="utf-8")
    for arg, rc in (("ok", 0), ("user", 2), ("text", 1), ("crash", 1)):
        assert stages.run_script([str(script), arg]) == rc
        argv, cwd, torch_loaded = eval(out.read_text())
        assert argv == [str(script), arg] and cwd == str(stages.ROOT) and torch_loaded == fork
