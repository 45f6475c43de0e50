"""
Classroom 50's guard: on Classroom 50 only the task functions' text is the student's. Standard
library only, and nothing of the student's repository imported before it is checked.

python -m classroom student writes this file into the copy as classroom50/verify.py, with
ASSIGNMENT filled in: the sha256 of every file the checks may load, the task files, the tasks
and the checks' pytest arguments. classroom50/tests.json, which the teacher keeps in their
private config repository (students cannot edit it), holds that file's sha256 and runs it only
when it matches (classroom/platforms.py, classroom50_tests):

    python -I -c "<classroom50/verify.py's sha256 checked, then run>" setup && python -I -m pip ...
    python -I -c "<the same>" T3

`python -I` (Python 3.11 and later: Classroom 50's runtime is 3.12): no directory of the
repository on sys.path (no pytest.py, pip.py or torch.py of the student's is imported), no
PYTHONPATH, no user site.

setup   requirements.txt must be the assignment's; then (tests.json) `python -I -m pip`
        installs PyTorch's CPU build and the requirements.
T3      every file of ASSIGNMENT["files"] must be the assignment's, byte for byte: one that
        differs or is missing fails the test, named, with the command that puts it back. They
        are written into a fresh folder, the pristine copy, and each task file there is the
        one handed out with every task function the grade takes from the student's file put
        in: classroom/snapshots.py's taken(), which calls classroom/source.py's take, the
        grade's own rule (a function it refuses stays blank, and the checks fail with the
        grade's reason). So a file the student added (a pytest.py, a conftest.py, a .pth, a
        __pycache__) is not there to load, and an edit outside the task functions is dropped,
        as the grade drops it. Then the task's checks run in the pristine copy,
        `python -I -m pytest tests/test_paper.py -k test_T3_`, and their exit status is the
        test's.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ASSIGNMENT = {}  # python -m classroom student fills it in (classroom/platforms.py)

# a file of these kinds that the assignment does not hold is named (it is never loaded here)
CODE = (".py", ".pyc", ".pth", ".ini", ".cfg", ".toml", ".so", ".pyd")


def digest(data):
    return hashlib.sha256(data).hexdigest()


def put_back(rel):
    return f"git checkout $(git rev-list --max-parents=0 HEAD) -- {rel}"


def checked(root, files):
    """({path: bytes} of each of `files` ({path: sha256}) found in root, [one line for each that
    is missing or differs])."""
    data, problems = {}, []
    for rel, want in sorted(files.items()):
        try:
            got = (Path(root) / rel).read_bytes()
        except OSError:
            problems.append(f"{rel} is missing: put it back ({put_back(rel)})")
            continue
        if digest(got) != want:
            problems.append(f"{rel} is not the assignment's: only the task functions are yours; "
                            f"put it back ({put_back(rel)})")
        data[rel] = got
    return data, problems


def added(root, assignment):
    """The code and configuration files of root that the assignment does not hold (a note:
    the pristine copy leaves them out)."""
    known = set(assignment["files"]) | set(assignment["graded"])
    out = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # .git, a .venv: not read
        for name in sorted(names):
            rel = Path(folder, name).relative_to(root).as_posix()
            if name.endswith(CODE) and rel not in known and not rel.startswith("classroom50/"):
                out.append(rel)
    return out


def setup(root, assignment):
    """The setup step's check: requirements.txt is the assignment's, before pip reads it."""
    _, problems = checked(root, {"requirements.txt": assignment["files"]["requirements.txt"]})
    print("\n".join(problems or ["requirements.txt is the assignment's"]))
    return 1 if problems else 0


def run_task(root, assignment, tid):
    """A task's test: the files checked, the pristine copy made, the task's checks run there."""
    data, problems = checked(root, assignment["files"])
    if problems:
        print(f"{tid}: not run, {len(problems)} file(s) of the assignment changed:")
        print("\n".join(f"  {p}" for p in problems[:20]))
        return 1
    extra = added(root, assignment)
    if extra:
        print(f"not used here (the grade takes only the task functions): {', '.join(extra[:5])}"
              + (f" and {len(extra) - 5} more" if len(extra) > 5 else ""), flush=True)
    with tempfile.TemporaryDirectory(prefix="nanonope_classroom50_") as tmp:
        pristine, submitted = Path(tmp) / "assignment", Path(tmp) / "submitted"
        for rel, b in data.items():
            (pristine / rel).parent.mkdir(parents=True, exist_ok=True)
            (pristine / rel).write_bytes(b)
        for rel in assignment["graded"]:  # the student's, as they are (a link stays a link)
            (submitted / rel).parent.mkdir(parents=True, exist_ok=True)
            if os.path.lexists(Path(root) / rel):
                shutil.copy2(Path(root) / rel, submitted / rel, follow_symlinks=False)
        sys.path.insert(0, str(pristine))  # the checked files only
        from classroom.snapshots import SUBMITTED, taken

        for rel, text in taken(pristine, submitted).items():
            (pristine / rel).write_text(text, encoding="utf-8", newline="\n")
        command = [sys.executable, "-I", "-m", "pytest", *assignment["pytest"], "-k",
                   f"test_{tid}_"]
        done = subprocess.run(command, cwd=pristine,
                              env={**os.environ, SUBMITTED: str(submitted)})
        return done.returncode


def main(argv, assignment=None):
    assignment = ASSIGNMENT if assignment is None else assignment
    if not assignment:
        print("this is classroom/verify.py as the kit holds it: python -m classroom student "
              "writes the assignment's own into its classroom50/")
        return 2
    what = argv[0] if argv else ""
    root = Path.cwd()
    if what == "setup":
        return setup(root, assignment)
    if what in assignment["tasks"]:
        return run_task(root, assignment, what)
    print(f"usage: classroom50/verify.py setup | {' | '.join(assignment['tasks'])}")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
