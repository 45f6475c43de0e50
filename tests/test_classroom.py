"""The classroom kit (tools/classroom.py, classroom/tasks.toml) run as a teacher runs it: the
student copy fails every task's tests and still imports and runs what does not call a blank;
the grader passes the project, fails each blank and each known wrong version on its own task
only, scores a broken submission 0 where it is broken and goes on, and refuses bad input in
one line. The wrong versions are edits of the project's own code, kept in WRONG below."""

import ast
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from tools import classroom
from tools.classroom import ClassroomConfig, blank, copy_project, find_function, grade, read_tasks, take

ROOT = Path(__file__).resolve().parents[1]

# Each: (task, the mistake, file, [(the project's text, the wrong text), ...]). Every one must
# cost its task its points. The texts must sit inside the task's functions (checked below).
WRONG = [
    ("T1", "ln(i / L) without max(i, L)", "model.py", [("torch.log(i.clamp(min=L) / L)", "torch.log(i / L)")]),
    ("T2", "lambda applied to q and k alike (lambda^2)", "model.py",
     [("att = att * lam_i / math.sqrt(hs)", "att = att * lam_i * lam_i / math.sqrt(hs)")]),
    ("T2", "lambda after the softmax", "model.py",
     [("att = att * lam_i / math.sqrt(hs)", "att = att / math.sqrt(hs)"),
      ("att = F.softmax(att, dim=-1)", "att = F.softmax(att, dim=-1) * lam_i")]),
    ("T2", "entropy in nats", "model.py", [(".sum(-1) / math.log(2)", ".sum(-1)")]),
    ("T2", "SDPA called inside the written-out path", "model.py",
     [("y[:, :, s:e] = att.to(v.dtype) @ v[:, :, lo:e]",
       "y[:, :, s:e] = F.scaled_dot_product_attention((q.float() * lam).to(q.dtype), k, v, "
       "is_causal=True)[:, :, s:e]")]),
    ("T4", "the law fitted with an intercept", "search_scales.py",
     [("a = float((x * y).sum() / (x ** 2).sum())", "a = float(np.polyfit(x, y, 1)[0])")]),
    ("T5", "the clamp applied once, at the end", "search_scales.py",
     [("                lam.clamp_(min=min_scale)  # the focus constraint, after every step\n", "                pass\n"),
      ("    return lam.detach(), log", "    with torch.no_grad():\n        lam.clamp_(min=min_scale)\n    return lam.detach(), log")]),
    ("T5", "a weight other than lambda gets a gradient", "search_scales.py",
     [("model.requires_grad_(False)", "model.requires_grad_(True)")]),
    ("T5", "AdamW's default weight decay left on", "search_scales.py",
     [("weight_decay=0.0)", "weight_decay=0.01)")]),
    ("T6", "the last-L reference without the start token", "evaluate.py",
     [('if getattr(model.config, "bos", False):', "if False:")]),
]


def cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "tools/classroom.py", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, encoding="utf-8")


def function_source(path, qualname):
    source = (ROOT / path).read_text(encoding="utf-8")
    return ast.get_source_segment(source, find_function(ast.parse(source), qualname))


def test_every_task_names_functions_the_project_defines_and_a_handout():
    tasks = read_tasks()
    assert list(tasks) == ["T1", "T2", "T3", "T4", "T5", "T6"]
    assert sum(t["points"] for t in tasks.values()) == 100
    for t in tasks.values():
        assert (ROOT / "classroom" / t["handout"]).exists(), t["handout"]
        for spec in t["functions"]:
            path, qualname = spec.split(":")
            assert find_function(ast.parse((ROOT / path).read_text(encoding="utf-8")), qualname), spec
            assert f"Piece {t['id']}" in function_source(path, qualname), f"{spec}'s docstring names its piece"


def test_blank_keeps_signature_and_docstring_and_take_puts_a_function_back():
    source = (ROOT / "search_scales.py").read_text(encoding="utf-8")
    blanked = blank(source, ["fit_log_law"], lambda name: f"T4: write {name}")
    node = find_function(ast.parse(blanked), "fit_log_law")
    assert ast.get_docstring(node) == ast.get_docstring(find_function(ast.parse(source), "fit_log_law"))
    assert len(node.body) == 2 and isinstance(node.body[1], ast.Raise)
    assert take(source, blanked, "fit_log_law") == source  # and back, byte for byte
    assert blanked.count("\n") < source.count("\n")


def test_the_wrong_versions_edit_their_task_functions_only():
    tasks = read_tasks()
    for tid, what, path, edits in WRONG:
        inside = "".join(function_source(*spec.split(":")) for spec in tasks[tid]["functions"]
                         if spec.startswith(path + ":"))
        for old, _ in edits:
            assert inside.count(old) == 1, f"{what}: {old!r} must occur once in {tid}'s functions"


def junit_outcomes(xml):
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        out[case.get("name")] = ("skipped" if case.find("skipped") is not None else
                                 "failed" if case.find("failure") is not None or case.find("error") is not None
                                 else "passed")
    return out


@pytest.mark.slow
def test_the_kit_as_a_teacher_runs_it(tmp_path):
    """About 40 seconds on a free core: 12 task gradings of 2 to 5 seconds each."""
    tasks = read_tasks()
    # the student copy: every test of test_paper.py fails (none passes on a blank), the rest imports and runs
    kit = tmp_path / "kit"
    assert cli("student", kit).returncode == 0
    assert json.loads((kit / ".classroom.json").read_text(encoding="utf-8"))["blank"] == list(tasks)
    assert "raise NotImplementedError('T5: write fit_head_scales" in (kit / "search_scales.py").read_text("utf-8")
    assert not (kit / "out").exists() and not list(kit.glob("data/*/*.bin"))
    workflow = (kit / ".github" / "workflows" / "classroom.yml").read_text(encoding="utf-8")
    assert all(f"-k test_{t}_" in workflow and f"{t}_RESULTS" in workflow for t in tasks)
    try:  # YAML where PyYAML is installed (titles hold ": ", so they must be quoted)
        import yaml
        steps = yaml.safe_load(workflow)["jobs"]["run-autograding-tests"]["steps"]
        assert [s["with"]["max-score"] for s in steps if "max-score" in s.get("with", {})] == \
            [t["points"] for t in tasks.values()]
    except ImportError:
        pass
    subprocess.run([sys.executable, "-m", "pytest", "tests/test_paper.py", "-q", "-p", "no:cacheprovider",
                    "-o", "addopts=", f"--junitxml={tmp_path / 'kit.xml'}"], cwd=kit, capture_output=True,
                   env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    outcomes = junit_outcomes(tmp_path / "kit.xml")
    assert len(outcomes) > 40 and "passed" not in outcomes.values(), \
        [n for n, o in outcomes.items() if o == "passed"]
    imports = subprocess.run([sys.executable, "-c", "import train, search_scales, evaluate, sample, reproduce, "
                              "tools.plot, tools.findings; print(train.cosine_lr(0, 1, 2, 1.0, 0.1))"],
                             cwd=kit, capture_output=True, text=True)
    assert imports.returncode == 0 and imports.stdout.strip() == "0.5", imports.stderr

    # the grader: T1 blank beside the project's T2 in the same model.py, and T2 passes (each task
    # on its own)
    half = tmp_path / "half"
    assert cli("student", half, "--tasks=T1").returncode == 0
    cfg = ClassroomConfig(secret="a teacher's secret", jobs=1)  # one at a time: the suite runs beside it
    (t2,) = grade(half, ["T2"], tasks, cfg)
    assert t2["passed"], t2
    # the project's T5 against itself, the same fit kept aside (the suite's own run of
    # tests/test_paper.py shows the project passing every task on the public seeds)
    (t5,) = grade(ROOT, ["T5"], tasks, cfg)
    assert t5["passed"] and t5["score"] == tasks["T5"]["points"] and "all 7 checks" in t5["output"], t5

    # every wrong version costs its task its points
    for k, (tid, what, path, edits) in enumerate(WRONG):
        sub = tmp_path / f"wrong{k}"
        sub.mkdir()
        text = (ROOT / path).read_text(encoding="utf-8")
        for old, new in edits:
            text = text.replace(old, new)
        (sub / path).write_text(text, encoding="utf-8")
    results = []
    for k, (tid, what, path, edits) in enumerate(WRONG):
        results.append((what, grade(tmp_path / f"wrong{k}", [tid], tasks, cfg)[0]))
    passed = [what for what, r in results if r["passed"]]
    assert not passed, f"wrong versions that kept their points: {passed}"


@pytest.mark.slow
def test_a_broken_submission_scores_zero_where_broken_and_grading_goes_on(tmp_path):
    sub = tmp_path / "sub"
    copy_project(sub, leave_out=("docs",))
    (sub / "model.py").write_text((sub / "model.py").read_text("utf-8").replace("def query_scale(", "def query_scale(("),
                                  encoding="utf-8")
    text = (sub / "search_scales.py").read_text("utf-8")
    (sub / "search_scales.py").write_text(text.replace("def fit_log_law(", "def fit_log_law_renamed("),
                                          encoding="utf-8")
    text = (sub / "evaluate.py").read_text("utf-8")
    (sub / "evaluate.py").write_text(text.replace("    B, T = x.shape\n    loss, ent = _losses(",
                                                  "    __import__('time').sleep(600)\n    loss, ent = _losses("),
                                     encoding="utf-8")
    text = (sub / "search_scales.py").read_text("utf-8")
    (sub / "search_scales.py").write_text(blank(text, ["uniform_scale"], lambda name: f"T3: write {name}"),
                                          encoding="utf-8")
    out = cli("grade", sub, "--tasks=T1,T3,T4,T6", "--timeout=4", f"--json={tmp_path / 'results.json'}", "--seed=7")
    assert out.returncode == 0, out.stderr
    lines = {line[:2]: line for line in out.stdout.splitlines() if line[:2] in ("T1", "T3", "T4", "T6")}
    assert "does not parse: line" in lines["T1"] and "0/10" in lines["T1"]
    assert "not written yet (NotImplementedError: T3: write uniform_scale)" in lines["T3"] and "seed 7 " in lines["T3"]
    assert "has no function fit_log_law" in lines["T4"]
    assert "timed out after 4 s" in lines["T6"]
    report = json.loads((tmp_path / "results.json").read_text("utf-8"))
    assert report["score"] == 0 and [t["name"][:2] for t in report["tests"]] == ["T1", "T3", "T4", "T6"]
    assert all(set(t) >= {"name", "score", "max_score", "output"} for t in report["tests"])


def test_bad_input_is_refused_in_one_line_before_any_work(tmp_path, monkeypatch):
    cases = (["grade", tmp_path / "nowhere"], ["grade", tmp_path], ["grade", ROOT, "--tasks=T1,T9"],
             ["student", tmp_path / "new", "--tasks=T7"], ["teach", tmp_path], ["grade", ROOT, "--color=red"], [])
    for args in cases:  # in this process (each command line would import PyTorch again)
        monkeypatch.setattr(sys, "argv", ["tools/classroom.py", *map(str, args)])
        with pytest.raises(classroom.UserError) as e:
            classroom.main()
        assert "\n" not in str(e.value), args
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine", encoding="utf-8")
    out = cli("student", tmp_path / "full")  # and once as a user runs it: one line, exit 2
    assert out.returncode == 2 and out.stdout == "" and out.stderr.startswith("error: ") and \
        len(out.stderr.strip().splitlines()) == 1 and "not empty" in out.stderr
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["notes.txt"]  # nothing lost, nothing written
    assert not (tmp_path / "new").exists()

def fake_study(folder, L, seed, nope_L, rope_L, lam):
    """The files the lab's numbers are read from, made by hand: NoPE's loss flat to L then
    rising by 0.2 nats per L; two heads, the second with the lower entropy near 4L."""
    def row(pe, loss, context=None, scales=None):
        return {"pos_encoding": pe, "arch": pe, "bos": True, "context": context, "scales": scales, "slopes": None,
                "lengths": [L, 4 * L], "loss": loss}
    methods = {"nope": row("nope", [nope_L, nope_L + 0.6]), "rope": row("rope", [rope_L, rope_L + 0.9]),
               "nope_window_L": row("nope", [nope_L, nope_L + 0.1], context=L),
               "nope_uniform_4L": row("nope", [nope_L + 0.01, nope_L + 0.4], scales=[[1.3]]),
               "nope_headscale_4L": row("nope", [nope_L + 0.02, nope_L + 0.35], scales=[[1.5, 1.2]])}
    positions = np.arange(1, 8 * L + 1)
    curve = lambda level: np.where(positions <= L, level, level + 0.2 * (positions - L) / L).tolist()  # noqa: E731
    files = {"eval/results.json": {"train_len": L, "methods": methods},
             "eval/positions.json": {m: {"positions": positions.tolist(), "loss": curve(v)}
                                     for m, v in (("nope", nope_L), ("rope", rope_L))},
             "eval/entropy.json": {"nope": {"positions": positions.tolist(), "bin": 1, "length": 8 * L,
                                            "entropy_bits": [[np.log2(positions).tolist(),
                                                              (np.log2(positions) - 1).tolist()]]}},
             "scales/uniform.json": {"lengths": {"2L": {"best_lam": 1.1}, "4L": {"best_lam": lam},
                                                 "8L": {"best_lam": 1.4}}, "fit": {"a": 0.3, "r2": 0.95}},
             "nope/summary.json": {"seed": seed}}
    for name, obj in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(obj), encoding="utf-8")
    (folder / "scales" / "head_4L.csv").write_text("layer,head,scale\n0,0,1.5\n0,1,1.2\n", encoding="utf-8")


def test_ranges_reads_the_labs_numbers_from_study_folders(tmp_path):
    fake_study(tmp_path / "a", 16, 11, 3.0, 2.5, 1.3)
    fake_study(tmp_path / "b", 16, 12, 3.3, 3.0, 1.2)
    out = cli("ranges", tmp_path / "a", tmp_path / "b", f"--json={tmp_path / 'r.json'}")
    assert out.returncode == 0, out.stderr
    got = json.loads((tmp_path / "r.json").read_text("utf-8"))
    n = got["numbers"]
    assert got["seeds"] == [11, 12]
    assert n["NoPE against RoPE at L (%)"] == pytest.approx([20.0, 10.0])
    assert n["NoPE's excess at 4L (nats)"] == pytest.approx([0.5, 0.5])
    assert n["best uniform lambda at 4L"] == [1.3, 1.2]
    assert n["HeadScale at 4L takes back (%)"] == pytest.approx([50.0, 50.0])  # 1 - 0.25 / 0.5
    assert n["one lambda for all takes back (%)"] == pytest.approx([40.0, 40.0])
    assert n["HeadScale's cost at L (nats)"] == pytest.approx([0.02, 0.02])
    assert n["rank correlation, head entropy vs lambda"] == pytest.approx([1.0, 1.0])  # the higher-entropy head has the larger lambda
    assert n["loss onset, nope (L)"] == pytest.approx([1 + 9 / 16] * 2)  # 0.2 nats per L passes 0.1 past L/2
    assert "| NoPE against RoPE at L (%) | 20.0 | 10.0 | 10.0 – 20.0 |" in out.stdout
    assert cli("ranges", tmp_path / "nowhere").returncode == 2
