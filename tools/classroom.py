"""
The paper's six pieces as classroom tasks: a student copy made from the project's own code,
its grader, and the lab's numbers. The tasks: classroom/tasks.toml; the teacher's guide and the
threat model: classroom/README.md. Its parts: tools/kit/.

    python tools/classroom.py student OUT_DIR [--tasks=T1,T3]
    python tools/classroom.py grade SUBMISSION [--json=results.json] [--tasks=T1,T3] [--secret=S]
                                               [--sandbox=auto|bwrap|unshare|user|none]
    python tools/classroom.py ranges STUDY [STUDY ...] [--json=ranges.json]

student: the project (the tracked files at HEAD) with each task's functions blanked by `ast`,
a GitHub Classroom workflow and .classroom.json (tools/kit/student.py).

grade: each task's functions taken from SUBMISSION (a folder; an upload nested in one folder
is found) and checked by the project's own tests, the student's code in a sandboxed worker
that sends back data only (tools/kit/grade.py). Seeds from the teacher's secret (--secret, or
the environment variable NANONOPE_SECRET, which other users cannot read) and the submitted
text; without one, the public seeds. Every check is reported; a task scores its points when
every check passes (classroom/tasks.toml may give partial credit). Exit 0 whenever grading
ran; 2 with one line for an empty or unreadable submission (after writing --json with every
task at 0), an unknown task or option, or a sandbox that is not available.

ranges: the lab's numbers (classroom/lab.md) read from study folders, one per seed, and their
range (tools/kit/lab.py).
"""

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as python tools/classroom.py: find the project

from tools.cli import UserError, atomic_write_text, parse_config, run_main  # noqa: E402
from tools.kit.grade import Grader, console_lines, find_submission, gradescope, read_tasks as _read, \
    zero_results  # noqa: E402
from tools.kit.source import blank, copy_tree, find_function, take  # noqa: E402,F401  (the tests' names)

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "classroom" / "tasks.toml"
COMMANDS = ("student", "grade", "ranges")
USAGE = ("usage: python tools/classroom.py student OUT_DIR | grade SUBMISSION | ranges STUDY... "
         "[--key=value] (-h)")


@dataclass
class ClassroomConfig:
    tasks: str = ""          # T1,T3,...: the tasks to blank or to grade ('' = every task)
    json: str = ""           # grade: also write Gradescope's results.json here; ranges: the numbers
    secret: str = ""         # grade: the secret that draws the seeds ('' = $NANONOPE_SECRET, else public seeds)
    seed: int = -1           # grade: this seed offset for every task (-1 = drawn from the secret)
    timeout: int = 60        # grade: seconds a task's checks may run, all together
    sandbox: str = "auto"    # grade: auto | bwrap | unshare | user | none (tools/kit/sandbox.py)


def read_tasks():
    return _read(TASKS)


def chosen(cfg, tasks):
    ids = [t.strip() for t in cfg.tasks.split(",") if t.strip()] or list(tasks)
    unknown = [t for t in ids if t not in tasks]
    if unknown:
        raise UserError(f"no task {', '.join(unknown)}: the tasks are {', '.join(tasks)} (classroom/tasks.toml)")
    return ids


def copy_project(dst, leave_out=()):
    """Copy this project to dst as it is on disk (.git and what .gitignore names left out)."""
    copy_tree(ROOT, dst, leave_out)


def secret_of(cfg):
    return cfg.secret or os.environ.get("NANONOPE_SECRET", "")


def grade(sub, ids, tasks, cfg, root=ROOT, quiet=False):
    """Grade one submission folder; print the teacher's lines; write cfg.json. Returns the
    results, one dict a task."""
    say = (lambda *a: None) if quiet else print
    t0 = time.time()
    folder = find_submission(sub, tasks)
    if folder is None:
        why = (f"{sub} holds none of the task files ({', '.join(sorted({s.split(':')[0] for t in tasks.values() for s in t['functions']}))})"
               ": upload the project's files (or the folder that holds them)")
        if cfg.json:
            atomic_write_text(cfg.json, json_text(gradescope(zero_results(ids, tasks, why), tasks, 0)))
        raise UserError(why)
    with Grader(root, secret_of(cfg), cfg.seed, cfg.timeout, cfg.sandbox) as grader:
        for line in grader.describe():
            say(line)
        if folder != Path(sub):
            say(f"the task files are in {folder}: graded from there")
        results = grader.grade(folder, ids)
    for line in console_lines(results):
        say(line)
    total, most = sum(r["score"] for r in results), sum(r["max_score"] for r in results)
    say(f"total {total:g}/{most} ({time.time() - t0:.0f} s)")
    if cfg.json:
        atomic_write_text(cfg.json, json_text(gradescope(results, tasks, time.time() - t0)))
    return results


def json_text(obj):
    import json
    return json.dumps(obj, indent=1, ensure_ascii=False) + "\n"


def main():
    args = sys.argv[1:]
    if any(a in ("-h", "--help") for a in args):
        parse_config(ClassroomConfig, ["-h"], description=__doc__)
    if not args:
        raise UserError(USAGE)
    command, rest = args[0], args[1:]
    folders = [a for a in rest if not a.startswith("--")]
    if command not in COMMANDS or not folders or (len(folders) > 1 and command != "ranges"):
        raise UserError(USAGE)
    cfg = parse_config(ClassroomConfig, [a for a in rest if a.startswith("--")])
    if command == "ranges":
        from tools.kit.lab import ranges
        return ranges(folders, cfg)
    tasks = read_tasks()
    ids = chosen(cfg, tasks)
    if command == "student":
        from tools.kit.student import student
        return student(folders[0], ids, tasks, ROOT)
    from tools.kit import sandbox
    sandbox.choose(cfg.sandbox)  # an unavailable sandbox refused before any work
    grade(folders[0], ids, tasks, cfg)


if __name__ == "__main__":
    run_main(main)
