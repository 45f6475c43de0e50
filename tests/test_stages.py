"""What decides whether a study's stage runs again (tools/stages.py), and bench.py's portability."""

import sys

import torch

from tools import bench, stages


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
