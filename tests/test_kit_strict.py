"""Every path as strict as the grade (issue 57): the student copy's local checks and Classroom 50's
tests apply the grade's own rule (only each task function's text is the student's), Classroom 50
runs nothing else of the student's repository, a failing check says what differs once, and
every count and command the copy's README names is true of the copy.

One student copy for the session (tests/test_classroom.py's `kit`, built once a run); each test
edits its own copy of it in tmp_path, as a student would, and runs the copy's commands the way
the student and Classroom 50 run them."""

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_classroom import kit, project  # noqa: F401  (the session's student copy, and its source)

from classroom import verify
from classroom.source import Refused, find_function, segment, submitted_function, take

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # a student copy built, and its checks run


def function(path, qualname):
    """The project's own text of a task function."""
    text = (ROOT / path).read_text(encoding="utf-8")
    return segment(text, find_function(ast.parse(text), qualname))


def written(copy, path, qualname, text=None):
    """copy's task file with qualname written: the project's function, or `text`."""
    mine = take(text or function(path, qualname), (copy / path).read_text("utf-8"), qualname)
    (copy / path).write_text(mine, encoding="utf-8")


def environment():
    """A runner's environment, reduced: this interpreter first on PATH as `python`."""
    keep = {k: os.environ[k] for k in ("HOME", "TMPDIR", "OMP_NUM_THREADS") if k in os.environ}
    return {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **keep}


def classroom50(copy, tid):
    """(exit status, output) of the copy's Classroom 50 test of task tid (or "setup"), its
    command from classroom50/tests.json run in the copy as Classroom 50 runs a `run` test."""
    tests = json.loads((copy / "classroom50" / "tests.json").read_text("utf-8"))
    test = next(t for t in tests if t["name"].startswith(tid))
    done = subprocess.run(test["run"], shell=True, cwd=copy, env=environment(), capture_output=True,
                          text=True, timeout=test["timeout"])
    return done.returncode, done.stdout + done.stderr


def refusal(path, qualname, text):
    """The grade's own reason for refusing `qualname` in the file `text`."""
    with pytest.raises(Refused) as e:
        submitted_function(text, qualname, (ROOT / path).read_text("utf-8"))
    return str(e.value)


def test_a_helper_outside_the_function_fails_locally_with_the_grades_reason(kit, tmp_path):  # noqa: F811
    """T3 calling a helper defined beside it (which the grade refuses: T1 0) and T4 fitted with
    an intercept, checked as the student checks them: every T3 check fails with the grade's own
    reason, and each T4 failure is one block, printed once, naming the call, its arguments'
    shapes, what differs and by how much, and the handout."""
    copy = tmp_path / "copy"
    shutil.copytree(kit, copy)
    helper = function("search_scales.py", "uniform_scale").replace(
        "binned(loss, width)", "my_binned(loss, width)")
    written(copy, "search_scales.py", "uniform_scale", helper)
    text = (copy / "search_scales.py").read_text("utf-8").replace(
        "\ndef uniform_scale", "\ndef my_binned(loss, width):\n    return binned(loss, width)\n\n\n"
        "def uniform_scale")
    (copy / "search_scales.py").write_text(text, encoding="utf-8")
    written(copy, "search_scales.py", "fit_log_law", function("search_scales.py", "fit_log_law").replace(
        "a = float((x * y).sum() / (x ** 2).sum())", "a = float(np.polyfit(x, y, 1)[0])"))
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/test_paper.py", "-q", "-p", "no:cacheprovider",
                           "-k", "test_T3_ or test_T4_"], cwd=copy, capture_output=True, text=True,
                          env=environment() | {"PYTHONDONTWRITEBYTECODE": "1"}, timeout=300)
    out = done.stdout
    why = refusal("search_scales.py", "uniform_scale", text)
    assert "my_binned" in why and out.count(why) == 7, out[-3000:]  # every T3 check, once each
    assert "During handling" not in out and "Traceback" not in out, out[-3000:]
    blocks = re.search(r"test_T4_the_law_against_lstsq\[0\]\] _+\n(.*?)\n[_=]{3}", out, re.S).group(1)
    assert blocks.count("the result[0] is") == 1, blocks
    assert re.search(r"the result\[0\] is [\d.]+, the project's [\d.]+ \(off by -[\d.]+, -[\d.]+%", blocks)
    assert "fit_log_law(positions=a float64 array (40,), lam=a float64 array (40,), L=" in blocks
    assert "classroom/T4.md" in blocks and done.returncode == 1


def test_classroom50_runs_only_the_task_functions_of_the_student(kit, tmp_path):  # noqa: F811
    """Classroom 50's tests on copies a student edited: T3 written honestly passes (beside an
    import the student added at the top, which the pristine copy drops as the grade does); a pytest.py added at the top (which `python -m pytest`
    would import: exit 0, full points) is named and not used; T4 through a top-level import
    fails with the grade's reason; T1 skipping itself fails; tests/test_paper.py edited to skip
    T4, and requirements.txt edited, fail before anything runs, naming the file."""
    copy = tmp_path / "copy"
    shutil.copytree(kit, copy)
    written(copy, "search_scales.py", "uniform_scale")
    text = (copy / "search_scales.py").read_text("utf-8")
    text = text.replace("import numpy as np\n", "import numpy as np\nfrom numpy import polyfit  # mine\n", 1)
    (copy / "search_scales.py").write_text(text, encoding="utf-8")
    t4 = function("search_scales.py", "fit_log_law").replace(
        "a = float((x * y).sum() / (x ** 2).sum())", "a = float(polyfit(x, y, 1)[0])")
    written(copy, "search_scales.py", "fit_log_law", t4)
    (copy / "pytest.py").write_text("import sys\nsys.exit(0)\n", encoding="utf-8")
    written(copy, "model.py", "query_scale",  # issue 41's first attack, on Classroom 50
            'def query_scale(head_scale, slope, T, L):\n    import pytest\n    pytest.skip("done")\n')

    code, out = classroom50(copy, "T3")
    assert code == 0 and "7 passed" in out and "not used here" in out and "pytest.py" in out, out[-2000:]
    code, out = classroom50(copy, "T4")
    why = refusal("search_scales.py", "fit_log_law", (copy / "search_scales.py").read_text("utf-8"))
    assert code != 0 and "polyfit" in why and why in out and "8 failed" in out, out[-2000:]
    code, out = classroom50(copy, "T1")
    assert code != 0 and "raised Skipped" in out, out[-2000:]

    edited = tmp_path / "edited"
    shutil.copytree(kit, edited)
    paper = edited / "tests" / "test_paper.py"
    paper.write_text(paper.read_text("utf-8").replace(
        "def test_task(check):\n", "def test_task(check):\n    if 'T4' in check:\n        pytest.skip('mine')\n"),
        encoding="utf-8")
    (edited / "requirements.txt").write_text("numpy\n--index-url https://example.com/simple\n", encoding="utf-8")
    code, out = classroom50(edited, "T4")
    assert code == 1 and "tests/test_paper.py is not the assignment's" in out and "requirements.txt" in out, out
    assert "passed" not in out and "failed" not in out  # nothing ran
    code, out = classroom50(edited, "setup")
    assert code == 1 and out.startswith("requirements.txt is not the assignment's"), out  # before pip ran
    assert "test_paper" not in out
    (edited / "classroom50" / "verify.py").write_text("import sys\nsys.exit(0)\n", encoding="utf-8")
    code, out = classroom50(edited, "T4")  # the guard itself replaced
    assert code == 1 and "classroom50/verify.py is not the assignment one" in out, out


def test_the_guard_lists_every_file_the_checks_load(kit):  # noqa: F811
    """classroom50/verify.py's list holds every code and configuration file of the copy but
    the task files, and its hash is the one tests.json checks; the template in classroom/ is
    refused when run as it is."""
    tree = ast.parse((kit / "classroom50" / "verify.py").read_text("utf-8"))
    listed = next(ast.literal_eval(n.value) for n in tree.body
                  if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "ASSIGNMENT")
    code = {f.relative_to(kit).as_posix() for f in kit.rglob("*")
            if f.suffix in (".py", ".toml", ".ini", ".txt", ".json", ".xz") and "classroom50" not in f.parts
            and not f.is_relative_to(kit / "docs")}
    assert code - {".classroom.json"} <= set(listed["files"]) | set(listed["graded"])
    assert not any(f.endswith((".md", ".png")) or f.startswith("docs/") for f in listed["files"])
    assert {"tests/test_paper.py", "pytest.ini", "requirements.txt", "classroom/snapshots.py",
            "classroom/source.py", "tests/snapshots/graded.json"} <= set(listed["files"])
    assert listed["graded"] == ["evaluate.py", "model.py", "search_scales.py"]
    sha = hashlib.sha256((kit / "classroom50" / "verify.py").read_bytes()).hexdigest()
    assert all(sha in t["run"] and t["run"].startswith("python -I -c ")
               for t in json.loads((kit / "classroom50" / "tests.json").read_text("utf-8")))
    assert verify.main(["T1"]) == 2  # the kit's template: nothing listed


def test_the_copys_readme_names_only_what_the_copy_holds(kit, tmp_path):  # noqa: F811
    """Each command the copy's README and docs/tests.md name runs something the copy holds
    (a script, a module, `python -m classroom ranges`, the copy's own checks with a -k that
    selects some), each count of checks is the number pytest collects, and no Markdown file of
    the copy names a test file, CI script or teacher's command the copy does not hold. The
    session's copy is made without docs/: its README as `student` wrote it is checked, and the
    project's README and docs/*.md put through the same rewriting (student.copy_text) too."""
    from classroom.command import read_tasks
    from classroom.snapshots import stored
    from classroom.student import STUDENT_README, copy_text
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/test_paper.py", "--collect-only", "-q",
                           "-p", "no:cacheprovider"], cwd=kit, capture_output=True, text=True, timeout=300)
    ids = re.findall(r"test_task\[(test_(T\d)_[^\n]*)\]", done.stdout)
    assert len(ids) > 40, done.stdout[-2000:]
    per_task = {}
    for _, tid in ids:
        per_task[tid] = per_task.get(tid, 0) + 1

    mine = tmp_path / "copy"  # the kit with the project's docs, rewritten as `student` does
    shutil.copytree(kit, mine, ignore=shutil.ignore_patterns("*.xz", "data"))
    for f in (ROOT / "docs").rglob("*.md"):
        (mine / f.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, mine / f.relative_to(ROOT))
    shutil.copy2(ROOT / "README.md", mine / "README.md")
    uses = stored(kit / "tests" / "snapshots")["uses"]
    tasks = read_tasks()
    copy_text(mine, ROOT, list(tasks), tasks, {t: {"checks": per_task[t], "uses": uses[t]} for t in tasks},
              ["model.py", "search_scales.py", "evaluate.py"])
    assert (mine / "README.md").read_text("utf-8").count(STUDENT_README[:20]) == 1

    for folder, name in ((kit, "README.md"), (mine, "README.md"), (mine, "docs/tests.md")):
        text = (folder / name).read_text("utf-8")
        code = re.findall(r"^(?:    )?(python3? [^\n#]*)", text, re.M) + re.findall(r"`(python3? [^`]*)`", text)
        assert len(code) >= 2, name
        for command in code:
            words = command.split()
            if words[1] == "-m":
                module = words[2]
                assert module in ("pytest", "pip", "venv") or (kit / module).is_dir() or (
                    kit / f"{module}.py").is_file(), (name, command)
                if module == "classroom" and len(words) > 3:
                    assert words[3] == "ranges", (name, command)  # the one command of a copy's
                if module == "pytest":
                    assert "tests/test_paper.py" in words and "-n" not in words, (name, command)
                    if "-k" in words:
                        k = words[words.index("-k") + 1]
                        assert any(k in i for i, _ in ids), (name, command)
            else:
                assert (kit / words[1]).is_file(), (name, command)
        counts = [int(n) for n in re.findall(r"(\d+) checks", text)]
        assert counts and set(counts) == {len(ids)}, (name, counts)
        stated = dict(re.findall(r"\b(T\d):\s+(\d+)\b", text))
        assert {t: int(n) for t, n in stated.items()} == per_task, (name, stated)
        assert not re.search(r"\d+ tests\b", text), name
    for f in list(kit.rglob("*.md")) + list(mine.rglob("*.md")):
        text = f.read_text("utf-8")
        for target in re.findall(r"`([^`\s]+)`", text) + re.findall(r"(?<![\w/])(?:tests|\.ci)/[\w./-]+", text):
            target = target.strip(".,:;()").rstrip("/")
            teachers = target.startswith(("tests/", ".ci/", ".github/", "classroom/"))
            if teachers and (ROOT / target).exists():  # a file of the project's
                assert (kit / target).exists(), f"{f} names {target}, which the copy does not hold"
        for teacher in re.findall(r"python -m classroom (\w\S*)", text):
            assert teacher == "ranges", f"{f}: python -m classroom {teacher}"
