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
students never run. It also writes tests/snapshots/graded.json (each task's functions and
handout, and the task files as handed out: the copy's checks apply the grade's own rule against
them), classroom50/tests.json, classroom50/runtime.json and classroom50/verify.py, what a
teacher hands to Classroom 50 (`gh teacher assignment add ... --tests --runtime`;
classroom/platforms.py, classroom/verify.py), and .classroom.json (which tasks are blank). It
holds no workflow: Classroom 50's own shim is written into each student's repository when they
accept.

The copy's text is true of the copy (copy_text): its README opens with the student's part
(the counts of checks computed from what was stored), and in every Markdown file of the copy a
sentence, list item or table row naming a file of the project that the copy leaves out, or a
command only the teacher's project runs, is cut; a code line running the project's suite
becomes the copy's; docs/tests.md describes the copy's tests.
"""

import ast
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import textwrap
import tokenize
from pathlib import Path

from classroom.platforms import (VERIFIER, classroom50_runtime, classroom50_tests,
                                 classroom50_verifier)
from classroom.snapshots import GRADED, read
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
    "classroom/verify.py",  # the copy holds it filled in, as classroom50/verify.py
    "classroom/lab_ranges.json",
)
# what Classroom 50's checks never load: a student may edit or add these (classroom/verify.py
# checks every other file of the copy; the task files it takes function by function)
NOT_LOADED = ("docs/", "classroom50/", ".classroom.json")
NOT_LOADED_SUFFIXES = (".md", ".png", ".gitignore")
STUDENT_COMMANDS = ("ranges",)  # python -m classroom's commands that a copy runs


def record(snap, ids, tasks, out):
    """Run the project's checks of the tasks ids at the public seeds in snap, storing every
    call to their functions (classroom/snapshots.py) into out/T1.pt.xz ...; returns {task:
    {"checks": how many, "uses": the other tasks its checks run}}."""
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

    kept = {}
    for t in ids:
        f = Path(out) / f"{t}.pt.xz"
        data = read(f) if f.exists() else {"failed": ["(none recorded)"]}
        failed = data["failed"]
        if failed:
            tail = (done.stdout + done.stderr).strip().splitlines()[-1:]
            raise UserError(
                f"the project's own checks of {t} fail at the public seeds "
                f"({', '.join(failed[:3])}; {' '.join(tail)}): "
                "fix the project before handing it out"
            )
        kept[t] = {"checks": len(data["checks"]), "uses": data.get("uses", [])}
    spec.unlink()
    return kept


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

**Check your work**: `python -m pytest tests/test_paper.py` runs the {n} checks of your tasks
({per_task}); `python -m pytest tests/test_paper.py -k test_{first}_` runs {first}'s alone.
Each check replays one of the project's own checks; a failing one prints one block: the call
and its arguments, what your function gave against what the project gave and by how much,
what the check tests, and the handout.{uses} Your teacher's grade runs the project's full
checks with seeds of their own, so passing here is the first step, not the grade.

**Only each task function is yours.** The grade takes each function's own text from your file
and nothing else: its `def` line as handed out, no decorator, and no name your file defines
outside it (a helper goes inside the function as a nested `def`, an import inside it too).
The checks here apply the grade's own rule first, and fail every check of a task it refuses,
with its reason.

**Hand in** as your teacher says: through Classroom 50 (push, then a `submit/...` tag; each of
its tests first checks that every file but your task functions is the one handed out, naming
any you changed), or by uploading {files} to Gradescope.

---

"""

STUDENT_TESTS = """# Tests (this copy)

This copy holds one test file, `tests/test_paper.py`: the {n} checks of your tasks
({per_task}). Each is one of the project's own checks, replayed: the calls it made to the
project's function at the public seeds, and what the project returned, are stored in
`tests/snapshots/` ({kb} KB), with no reference code.

```bash
python -m pytest tests/test_paper.py                 # every check of your tasks
python -m pytest tests/test_paper.py -k test_{first}_   # {first}'s alone
```

Before a task's checks run, its functions are taken from your file by the grade's own rule
(`take` in `classroom/source.py`): a `def` line that is not the one handed out, a decorator,
or a name your file defines outside the function (a helper, an import at the top) fails every
check of the task, with the grade's reason. A check passes when every stored call gives the
project's result (floats within 2e-4, or 1e-4 relative; bfloat16 and float16 within four
steps of the dtype), leaves its inputs and the model as the project leaves them, and, where
the check looks at how the function computes, runs no fused attention and makes no tensor
larger than the check allows. A failing check prints one block: the call and its arguments,
what differs and by how much, what the check tests, and the handout.{uses}

On Classroom 50 each task's test first checks that every file the checks load is the one
handed out (`classroom50/verify.py`), then runs these checks in a fresh copy that holds your
task functions and nothing else of yours.

The project's own suite (the tests of every module, of the grader, and independent
implementations of each task) stays with your teacher, whose grade runs the project's full
checks with seeds of their own: passing here is the first step, not the grade.
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
        kept = record(snap, ids, tasks, stored)
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
            graded = {"tasks": {t: {"functions": tasks[t]["functions"],
                                    "handout": tasks[t]["handout"]} for t in ids},
                      "files": blanked}  # as handed out: what the grade's rule reads against
            (out / "tests" / "snapshots" / GRADED).write_text(
                json.dumps(graded, indent=1) + "\n", encoding="utf-8")
            (out / MARK).write_text(json.dumps({"blank": ids}, indent=1) + "\n", encoding="utf-8")
            dead_links_cut(out)
            copy_text(out, snap, ids, tasks, kept, list(by_file))
            (out / "classroom50").mkdir()
            verifier = classroom50_verifier(loaded_files(out, list(by_file)), list(by_file),
                                            [tasks[t] for t in ids])
            (out / VERIFIER).write_text(verifier, encoding="utf-8", newline="\n")
            (out / "classroom50" / "tests.json").write_text(
                classroom50_tests([tasks[t] for t in ids],
                                  hashlib.sha256((out / VERIFIER).read_bytes()).hexdigest()),
                encoding="utf-8")
            (out / "classroom50" / "runtime.json").write_text(classroom50_runtime(),
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
        f"Classroom 50's tests, runtime and guard: classroom50/tests.json, "
        f"classroom50/runtime.json, {VERIFIER}"
    )


def loaded_files(copy, graded):
    """{path: sha256} of every file of the copy that Classroom 50's checks may load: all but
    the task files (`graded`: the student's, taken function by function) and NOT_LOADED."""
    out = {}
    for f in sorted(Path(copy).rglob("*")):
        rel = f.relative_to(copy).as_posix()
        if (f.is_file() and rel not in graded and not rel.startswith(NOT_LOADED)
                and not f.name.endswith(NOT_LOADED_SUFFIXES)):
            out[rel] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


# -----------------------------------------------------------------------------
# The copy's text, true of the copy


def copy_text(out, snap, ids, tasks, kept, files):
    """The copy's README opened by the student's part, docs/tests.md the copy's tests, and in
    every Markdown file what the copy cannot back cut (for_the_copy): counts from `kept`
    (record's), files from `files` (the task files)."""
    out = Path(out)
    first = "T3" if "T3" in ids else ids[0]  # the handouts' example, when the copy has it
    uses = [f"{t}'s checks run {' and '.join(kept[t]['uses'])}" for t in ids if kept[t]["uses"]]
    fields = {
        "tasks": ", ".join(f"[{t}](classroom/{tasks[t]['handout']})" for t in ids),
        "n": sum(kept[t]["checks"] for t in ids),
        "per_task": ", ".join(f"{t}: {kept[t]['checks']}" for t in ids),
        "first": first,
        "uses": f" {'; '.join(uses)}: write those first." if uses else "",
        "files": " and ".join(", ".join(f"`{f}`" for f in files).rsplit(", ", 1)),
        "kb": sum(f.stat().st_size for f in (out / "tests" / "snapshots").iterdir()) >> 10,
    }
    suite = (f"python -m pytest tests/test_paper.py  # your tasks' {fields['n']} checks "
             "(the project's own suite stays with your teacher)")
    for f in sorted(out.rglob("*.md")):
        text = f.read_text(encoding="utf-8")
        new = for_the_copy(text, f.parent, out, snap, suite)
        if new != text:
            f.write_text(new, encoding="utf-8")
    if (out / "docs" / "tests.md").exists():
        (out / "docs" / "tests.md").write_text(wrapped(STUDENT_TESTS.format(**fields)),
                                               encoding="utf-8")
    readme = out / "README.md"
    text = wrapped(STUDENT_README.format(**fields)) + readme.read_text(encoding="utf-8")
    readme.write_text(lines_counted(text, out), encoding="utf-8")


def wrapped(text, width=100):
    """text's paragraphs (not its code, headings or tables) filled to width, once the counts
    are in."""
    out = []
    for block in text.split("\n\n"):
        if block.startswith(("    ", "#", "|", "```", "---")):
            out.append(block)
        else:
            out.append("\n".join(filled(" ".join(block.split()), width)))
    return "\n\n".join(out)


def filled(text, width):
    """text's lines filled to width, none of them starting as Markdown would read as a list,
    a quote, a heading or a table (such a line joins the one above)."""
    lines = []
    for line in textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False):
        if lines and re.match(r"([-+*>#|]|\d+[.)])(\s|$)", line):
            lines[-1] += " " + line
        else:
            lines.append(line)
    return lines or [""]


def names_missing(text, here, copy, snap):
    """Whether text names (in backticks, or as a path with a /) a file or folder of the project
    that the copy leaves out, or a command only the project runs (python -m classroom grade
    ..., or its own suite: python -m pytest without tests/test_paper.py)."""
    spans = re.findall(r"`([^`]+)`", text)
    for span in spans:
        if re.match(r"python -m pytest\b", span) and "tests/test_paper.py" not in span:
            return True
        m = re.match(r"python -m classroom (\S+)", span)
        if m and m.group(1) not in STUDENT_COMMANDS:
            return True
    bare = re.sub(r"\]\([^)]*\)|https?://\S+", " ", re.sub(r"`[^`]*`", " ", text))
    tokens = [t for s in spans for t in re.split(r"[\s,]+", s)] + re.findall(
        r"[\w.-]*[\w-]/[\w./-]*", bare)
    for token in tokens:
        token = token.strip("()[]:;,.'\"").rstrip("/")
        if not token or not ("/" in token or re.search(r"\.(py|md|json|toml|txt|ini)$", token)):
            continue
        for base in (copy, here):
            rel = (Path(base) / token).resolve()
            try:
                rel = rel.relative_to(Path(copy).resolve())
            except ValueError:
                continue
            if not (Path(copy) / rel).exists() and (Path(snap) / rel).exists():
                return True
    return False


def sentences(text):
    """A paragraph's sentences (a full stop before a space and a capital, a backtick, a
    parenthesis or an emphasis ends one)."""
    return re.split(r"(?<=[.!?])\s+(?=[A-Z`(*\[])", text)


def cut(sentence, missing):
    """sentence without what names a file the copy leaves out: the parentheses that name it,
    else its clauses (between semicolons) that do, else all of it (None)."""
    for m in reversed(list(re.finditer(r"\s?\([^()]*\)", sentence))):
        if missing(m.group(0)):
            sentence = sentence[:m.start()] + sentence[m.end():]
    if not missing(sentence):
        return sentence
    clauses = re.split(r"(?<=;)\s+", sentence)
    left = [c for c in clauses if not missing(c)]
    if not left:
        return None
    text = " ".join(left)
    return text[:-1] + "." if text.endswith(";") else text


def for_the_copy(text, here, copy, snap, suite):
    """One Markdown file's text with what the copy cannot back cut: a code line running the
    project's suite becomes `suite`; one naming a file the copy leaves out, or a teacher's
    command, goes (and a code block left empty, with the paragraph that introduces it); a
    table row whose first cell names such a file goes; a sentence of a paragraph or list item
    naming one goes; a heading left with nothing under it goes."""

    def missing(t):
        return names_missing(t, here, copy, snap)

    blocks, lines, i = [], text.split("\n"), 0
    while i < len(lines):  # blocks: ("code", [lines]), ("table", [rows]), ("text", [lines])
        line = lines[i]
        indented = line.startswith("    ") and (not blocks or blocks[-1][0] == "blank")
        if line.startswith("```") or indented:
            fence = line.startswith("```")
            j = i + 1
            if fence:
                while j < len(lines) and not lines[j].startswith("```"):
                    j += 1
                j += 1
            else:
                while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                    j += 1
                while j > i + 1 and not lines[j - 1].strip():
                    j -= 1
            blocks.append(("code" if fence else "indented", lines[i:j]))
            i = j
        elif not line.strip():
            blocks.append(("blank", [line]))
            i += 1
        else:
            kind = "table" if line.startswith("|") else "heading" if line.startswith("#") else \
                "text"
            j = i + 1
            while (kind != "heading" and j < len(lines) and lines[j].strip()
                   and not lines[j].startswith(("```", "#"))
                   and (kind == "table") == lines[j].startswith("|")
                   and not (kind == "text" and re.match(r"\s*([-*]|\d+\.) ", lines[j]))):
                j += 1
            blocks.append((kind, lines[i:j]))
            i = j
    kept, changed = [], False
    for kind, block in blocks:
        if kind in ("code", "indented"):
            body = block[1:-1] if kind == "code" else block
            new = []
            for line in body:
                command = line.split("#")[0]
                if re.match(r"\s*python -m pytest\b", command) and "tests/test_paper.py" not in \
                        command:
                    changed = True
                    if suite not in new:  # the project's several suite lines: the copy's one
                        new.append(suite)
                elif not command.strip() or not missing(f"`{command.strip()}`"):
                    new.append(line)
                else:
                    changed = True
            if not any(x.strip() for x in new):
                changed = True
                while kept and kept[-1][0] == "blank":
                    kept.pop()
                if kept and kept[-1][0] == "text" and kept[-1][1][-1].rstrip().endswith(":"):
                    kept.pop()
                continue
            kept.append((kind, [block[0], *new, block[-1]] if kind == "code" else new))
        elif kind == "table":
            rows = [r for k, r in enumerate(block) if k < 2 or not missing(
                r.split("|")[1] if r.count("|") > 1 else r)]
            changed |= len(rows) < len(block)
            kept.append((kind, rows))
        elif kind == "text":
            lead = re.match(r"\s*(?:[-*]|\d+\.)\s+|\s*", block[0]).group(0)
            flat = " ".join(x.strip() for x in block)[len(lead.strip()):].strip()
            parts = sentences(flat)
            left = [x for x in (cut(x, missing) if missing(x) else x for x in parts) if x]
            if left == parts:
                kept.append((kind, block))
                continue
            changed = True
            if left:
                body = filled(" ".join(left), 100 - len(lead))
                pad = " " * len(lead)
                kept.append((kind, [lead + body[0]] + [pad + x for x in body[1:]]))
            elif kept and kept[-1][0] == "blank":
                kept.pop()
        else:
            kept.append((kind, block))
    if not changed:
        return text
    final = []  # headings with nothing under them (up to the next of their level or above) go
    for k, (kind, block) in enumerate(kept):
        if kind == "heading":
            level = len(block[0]) - len(block[0].lstrip("#"))
            rest = []
            for kind2, block2 in kept[k + 1:]:
                if kind2 == "heading" and len(block2[0]) - len(block2[0].lstrip("#")) <= level:
                    break
                rest.append(kind2)
            if all(x == "blank" for x in rest):
                continue
        if kind == "blank" and final and final[-1][0] == "blank":
            continue
        final.append((kind, block))
    return "\n".join(line for _, block in final for line in block)


def lines_counted(text, copy):
    """text with its "about N lines: this README, `a.py`, ..." counted in the copy: text's own
    lines and those of each file named."""
    pattern = re.compile(r"about [\d,]+ lines: this README((?:,\s+`[^`]+`)+)")

    def count(m):
        named = [Path(copy) / f for f in re.findall(r"`([^`]+)`", m.group(1))]
        n = len(text.splitlines()) + sum(len(f.read_text(encoding="utf-8").splitlines())
                                         for f in named if f.is_file())
        return f"about {round(n, -1):,} lines: this README{m.group(1)}"

    return pattern.sub(count, text)


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
