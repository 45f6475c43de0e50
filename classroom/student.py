"""
The student copy (python -m classroom student OUT): the project's snapshot (the tracked
files at HEAD) with each handed-out task's functions blanked by `ast` (signature and docstring
kept, the body replaced by raise NotImplementedError("T3: write uniform_scale
(classroom/T3.md)")). Nothing marks the solution in the project's code: the blanks are cut
from the code itself.

What the copy holds instead of the project's tests: tests/test_paper.py replays the project's
own checks from outputs stored at the public seeds (classroom/snapshots.py; recorded here by
running the project's tests), so no reference code ships. What it leaves out (TEACHER_ONLY):
the project's tests and CI, the teacher's guide, the lab's key, and the grader's parts the
students never run. It also writes classroom50/tests.json and classroom50/runtime.json, what a
teacher hands to Classroom 50 (`gh teacher assignment add ... --tests --runtime`;
classroom/platforms.py), and .classroom.json (which tasks are blank). It holds no workflow:
Classroom 50's own shim is written into each student's repository when they accept.
"""

import ast
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import tokenize
from pathlib import Path

from classroom.platforms import classroom50_runtime, classroom50_tests
from classroom.snapshots import read
from classroom.source import (blank, copy_tree, find_function, split_spec, take_snapshot,
                              tests_command)
from common import UserError

MARK = ".classroom.json"  # written into a student copy: which tasks are blank
TEACHER_ONLY = (
    "tests",
    ".ci",
    ".github",
    "classroom/README.md",
    "classroom/lab_key.md",
    "classroom/grade.py",
    "classroom/judge.py",
    "classroom/sandbox.py",
    "classroom/student.py",
    "classroom/platforms.py",
    "classroom/gradebook.py",
    "classroom/copyflag.py",
    "classroom/upload.py",
    "classroom/lab_ranges.json",
)


def record(snap, ids, tasks, out):
    """Run the project's checks of the tasks ids at the public seeds in snap, storing every
    call to their functions (classroom/snapshots.py) into out/T1.pt ..."""
    spec = Path(out) / "record.json"
    Path(out).mkdir(parents=True, exist_ok=True)
    spec.write_text(
        json.dumps({"tasks": {t: tasks[t]["functions"] for t in ids}, "out": str(out)}),
        encoding="utf-8",
    )
    env = {
        **os.environ,
        "NANONOPE_RECORD": str(spec),
        "NANONOPE_SEED": "0",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    cmd = tests_command("classroom.snapshots", ids) + ["--tb=line"]
    done = subprocess.run(
        cmd, cwd=snap, env=env, capture_output=True, text=True, encoding="utf-8", errors="replace"
    )

    for t in ids:
        f = Path(out) / f"{t}.pt.xz"
        failed = read(f)["failed"] if f.exists() else ["(none recorded)"]
        if failed:
            tail = (done.stdout + done.stderr).strip().splitlines()[-1:]
            raise UserError(
                f"the project's own checks of {t} fail at the public seeds "
                f"({', '.join(failed[:3])}; {' '.join(tail)}): "
                "fix the project before handing it out"
            )
    spec.unlink()


STUDENT_README = """# Your assignment

This is a student copy of nanoNoPE: the functions of your tasks ({tasks}) are blank, each
with its docstring and a `raise NotImplementedError`. Each task's sheet says what to write.

**Install** (Python 3.10 to 3.13), in this folder:

    # Linux: PyTorch's CPU build first (PyPI's is a CUDA build of several GB)
    python3 -m venv .venv && . .venv/bin/activate
    pip install torch --index-url https://download.pytorch.org/whl/cpu \\
        && pip install -r requirements.txt
    # macOS
    python3 -m venv .venv && source .venv/bin/activate
    pip install torch && pip install -r requirements.txt
    # Windows (PowerShell)
    py -m venv .venv; .venv\\Scripts\\Activate.ps1
    pip install torch; pip install -r requirements.txt

**Check one task** (T3 here): `python -m pytest tests/test_paper.py -k test_T3_`. Each check
replays one of the project's own checks; a failing one prints one short block: which call, and
what your function gave against what the project gave. T5's and
T6's checks run T1 (and T6's entropy T2): write those first. Your teacher's grade runs the
project's full checks with seeds of their own, so passing here is the first step, not the grade.

**Hand in** as your teacher says: through Classroom 50 (push, then a `submit/...` tag), or by
uploading `model.py`, `search_scales.py` and `evaluate.py` to Gradescope. Only each task's
function is graded: a helper goes inside it, and an import too.

---

"""


def dead_links_cut(copy):
    """Markdown links of the copy to files it does not hold (the teacher's) become plain text."""

    link = re.compile(r"\[([^\]]*)\]\(([^)#\s]+)(#[^)]*)?\)")
    for f in Path(copy).rglob("*.md"):
        text = f.read_text(encoding="utf-8")

        def keep(m, f=f):
            target = m.group(2)
            if "://" in target or target.startswith("mailto:"):
                return m.group(0)
            return m.group(0) if (f.parent / target).exists() else m.group(1)

        new = link.sub(keep, text)
        if new != text:
            f.write_text(new, encoding="utf-8")


def student(out, ids, tasks, root):

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not empty: name a new folder (nothing was written)")
    existed = out.exists()
    with tempfile.TemporaryDirectory(prefix="nanonope_student_") as tmp:
        snap = Path(tmp) / "snapshot"
        take_snapshot(root, snap)
        by_file = {}
        for tid in ids:
            for spec in tasks[tid]["functions"]:
                path, qualname = split_spec(spec)
                by_file.setdefault(path, []).append((tid, qualname))
        blanked = {}
        for path, items in by_file.items():  # every blank made before anything is written
            names = {q.split(".")[-1]: t for t, q in items}
            try:
                blanked[path] = blank(
                    (snap / path).read_text(encoding="utf-8"),
                    [q for _, q in items],
                    lambda name: (
                        f"{names[name]}: write {name} (classroom/{tasks[names[name]]['handout']})"
                    ),
                )
            except ValueError as e:
                raise UserError(str(e)) from None
        stored = Path(tmp) / "snapshots"
        record(snap, ids, tasks, stored)
        try:
            copy_tree(snap, out, leave_out=TEACHER_ONLY)
            for path, source in blanked.items():
                (out / path).write_text(source, encoding="utf-8", newline="\n")
            (out / "tests" / "snapshots").mkdir(parents=True)
            shutil.copy2(
                snap / "classroom" / "student_tests.py", out / "tests" / "test_paper.py"
            )
            for f in sorted(stored.glob("T*.pt.xz")):
                shutil.copy2(f, out / "tests" / "snapshots" / f.name)
            (out / MARK).write_text(json.dumps({"blank": ids}, indent=1) + "\n", encoding="utf-8")
            (out / "classroom50").mkdir()
            (out / "classroom50" / "tests.json").write_text(
                classroom50_tests([tasks[t] for t in ids]), encoding="utf-8")
            (out / "classroom50" / "runtime.json").write_text(classroom50_runtime(),
                                                               encoding="utf-8")
            dead_links_cut(out)
            readme = out / "README.md"
            readme.write_text(
                STUDENT_README.format(
                    tasks=", ".join(f"[{t}](classroom/{tasks[t]['handout']})" for t in ids))
                + readme.read_text(encoding="utf-8"),
                encoding="utf-8")
            found = leaks(out, answer_lines(snap, tasks, ids))
            if found:
                raise UserError(
                    f"the copy would hold an answer: {found[0][0]} has `{found[0][1]}` "
                    f"({len(found)} such lines; nothing was written)"
                )
        except BaseException:  # nothing half-written left behind (an empty folder given stays)
            for child in out.iterdir() if existed else [out]:
                shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink()
            raise
    print(
        f"wrote the student copy {out}: {', '.join(ids)} blank "
        f"({', '.join(f'{p}:{q}' for p, items in by_file.items() for _, q in items)}); "
        f"their checks: tests/test_paper.py "
        f"(the project's outputs at the public seeds, tests/snapshots/); "
        f"Classroom 50's tests and runtime: classroom50/tests.json, classroom50/runtime.json"
    )


# -----------------------------------------------------------------------------
# No answer in the copy


def _code_lines(text):
    """Each line of Python source without its comment, whitespace collapsed."""

    lines = text.splitlines()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                row, col = tok.start
                lines[row - 1] = lines[row - 1][:col]
    except (tokenize.TokenError, IndentationError):
        pass
    return [" ".join(line.split()) for line in lines]


def answer_lines(root, tasks, ids, shortest=25):
    """The code lines of the blanked bodies (after the docstring, comments dropped, whitespace
    collapsed, at least `shortest` characters), less those the project also holds outside the
    task functions: what must not appear in any text file of a student copy."""


    bodies, outside = set(), set()
    specs = [split_spec(s) for t in ids for s in tasks[t]["functions"]]
    for f in sorted(Path(root).rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        if rel.startswith(("tests/", "out/")) or "/." in "/" + rel:
            continue
        text = f.read_text(encoding="utf-8")
        code, inside = _code_lines(text), set()
        for path, qualname in specs:
            if path == rel:
                node = find_function(ast.parse(text), qualname)
                first = node.body[0]
                doc = isinstance(first, ast.Expr) and isinstance(
                    getattr(first, "value", None), ast.Constant
                )
                bodies.update(
                    line
                    for line in code[
                        first.end_lineno if doc else first.lineno - 1 : node.end_lineno
                    ]
                    if len(line) >= shortest
                )
                inside.update(range(node.lineno - 1, node.end_lineno))
        outside.update(line for i, line in enumerate(code) if i not in inside)
    return bodies - outside


def leaks(copy, lines):
    """(file, line) for each text file of the copy that holds one of `lines`."""
    found = []
    for f in sorted(Path(copy).rglob("*")):
        if not f.is_file():
            continue
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # not text (the stored outputs, the figures)
        flat = [" ".join(line.split()) for line in text.splitlines()]
        for line in lines:
            if any(line in row for row in flat):
                found.append((f.relative_to(copy).as_posix(), line))
    return found
