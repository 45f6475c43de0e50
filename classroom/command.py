"""
The paper's six pieces as classroom tasks: a student copy made from the project's own code,
its grader, the platforms a course runs on, and the lab's numbers. The tasks:
classroom/tasks.toml; the teacher's guide and the threat model: classroom/README.md. Its
parts: classroom/ (one module a role).

    python -m classroom student OUT_DIR [--tasks=T1,T3]
    python -m classroom grade SUBMISSION [--json=results.json] [--tasks=T1,T3] [--secret=S]
                                               [--sandbox=auto|bwrap|unshare|user|none]
    python -m classroom grade-all CLASS_DIR --csv=gradebook.csv [--tasks=...] [--secret=S]
                                        [--roster=roster.csv] [--deadline=TIME] [--only=FOLDER]
    python -m classroom gradescope OUT.zip [--tasks=T1,T3] [--secret=S] [--try_on=SUBMISSION]
    python -m classroom ranges STUDY [STUDY ...] [--json=ranges.json]
    python -m classroom ranges --check=HANDINS [--csv=FILE] [--roster=roster.csv]
    python -m classroom ranges --assign=students.csv --roster=roster.csv
    python -m classroom key [--tasks=T1,T3] [--sandbox=...]

student: the project (the tracked files at HEAD) with each task's functions blanked by `ast`,
its checks replayed from the project's outputs at the public seeds, no teacher file
(classroom/student.py).

grade: each task's functions taken from SUBMISSION (a folder; an upload nested in one folder
is found) and checked by the project's own tests, the student's code in a sandboxed worker
that sends back data only (classroom/grade.py). Seeds from the teacher's secret (--secret, or
the environment variable NANONOPE_SECRET, which other users cannot read) and the submitted
text; without one, the public seeds. Every check is reported; a task scores its points when
every check passes (classroom/tasks.toml may give partial credit). Exit 0 whenever grading
ran; 2 with one line for an empty or unreadable submission (after writing --json with every
task at 0), an unknown task or option, or a sandbox that is not available.

grade-all: every subfolder of CLASS_DIR a student, one snapshot, a CSV gradebook with the copy
flags, one feedback file a student, a roster's columns and a deadline, every grading kept in a
history (classroom/gradebook.py).
gradescope: the autograder zip (classroom/platforms.py).
key: the project's own functions graded in the sandbox, the first check of each task: what
grade and grade-all do before any student (exit 2 when the environment fails them); the
Gradescope zip's setup.sh runs it once, and its run_autograder grades with --check_key=false.

ranges: the lab's numbers (classroom/lab.md) read from study folders, one per seed, and their
range; --check: the students' hand-ins against the expected ranges (classroom/lab.py).
"""

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from classroom.report import console_lines, gradescope, plain, zero_results
from classroom.source import copy_tree
from common import UserError, atomic_write_text, parse_config

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "classroom" / "tasks.toml"
COMMANDS = ("student", "grade", "grade-all", "gradescope", "ranges", "key")
USAGE = (
    "usage: python -m classroom student OUT_DIR | grade SUBMISSION | grade-all CLASS_DIR | "
    "gradescope OUT.zip | ranges STUDY... | key [--key=value] (-h)"
)


@dataclass
class ClassroomConfig:
    tasks: str = ""  # T1,T3,...: the tasks to blank or to grade ('' = every task)
    json: str = ""  # grade: also write Gradescope's results.json here; ranges: the numbers
    csv: str = ""  # grade-all: the gradebook; ranges --check: one row a student
    secret: str = ""  # grade, grade-all, gradescope: the seeds' secret ('' = $NANONOPE_SECRET)
    seed: int = -1  # grade: this seed offset for every task (-1 = drawn from the secret)
    timeout: int = 60  # grade: seconds a task's checks may run, all together
    sandbox: str = "auto"  # grade: auto | bwrap | unshare | user | none (classroom/sandbox.py)
    memory_mb: int = 1024  # grade: the worker's data size (heap and private mappings)
    processes: int = 64  # grade: processes and threads of the worker's uid (in a sandbox)
    file_mb: int = 16  # grade: the largest file the worker may write
    cpu_s: int = 0  # grade: the worker's CPU seconds (0 = twice --timeout, plus 30)
    log_kb: int = 1024  # grade: what a worker prints, kept in its log (the rest cut)
    jobs: int = 0  # grade-all: students graded at once (0 = one a core, at most 4)
    roster: str = ""  # grade-all: a CSV, a `folder` column and any others (id, email, submitted_at)
    deadline: str = ""  # grade-all: ISO 8601 with an offset; a later roster submitted_at: late
    feedback: str = ""  # grade-all: one feedback file a student here ('' = beside --csv)
    only: str = ""  # grade-all: grade the folder of exactly this name again; update its row
    check: str = ""  # ranges: a folder of the students' JSON hand-ins to check
    assign: str = ""  # ranges: a CSV with a `folder` column; --roster gets one seed a student
    try_on: str = ""  # gradescope: run the zip on this submission as Gradescope would
    check_key: bool = True  # grade, grade-all: the project's own functions first (the key)


def read_tasks():
    # the teacher's: not in a student copy, which runs this command too
    from classroom.grade import read_tasks as read

    return read(TASKS)


def chosen(cfg, tasks):
    ids = [t.strip() for t in cfg.tasks.split(",") if t.strip()] or list(tasks)
    unknown = [t for t in ids if t not in tasks]
    if unknown:
        raise UserError(
            f"no task {', '.join(unknown)}: the tasks are {', '.join(tasks)} (classroom/tasks.toml)"
        )
    return ids


def copy_project(dst, leave_out=()):
    """Copy this project to dst as it is on disk (.git and what .gitignore names left out)."""

    copy_tree(ROOT, dst, leave_out)


def grade(sub, ids, tasks, cfg, root=ROOT, quiet=False):
    """Grade one submission folder; print the teacher's lines; write cfg.json. Returns the
    results, one dict a task."""
    from classroom.grade import (Grader, MachineFailure, choose_submission, limits_of,
                                 secret_of, task_files)

    say = (lambda *a: None) if quiet else print
    t0 = time.time()
    limits = limits_of(cfg)
    folder, where = choose_submission(sub, tasks)
    if folder is None:
        why = (
            f"{plain(sub, 200)} holds none of the task files ({', '.join(task_files(tasks))}): "
            "upload the project's files, or the folder that holds them"
        )
        if cfg.json:
            atomic_write_text(
                cfg.json, json_text(gradescope(zero_results(ids, tasks, why), tasks, 0))
            )
        raise UserError(why)
    with Grader(root, secret_of(cfg), cfg.seed, cfg.timeout, cfg.sandbox, limits) as grader:
        for line in grader.describe():
            say(line)
        if cfg.check_key:
            grader.check_key(ids)
        if where:
            say(where)
        results = [r | {"where": where + "\n" if where else ""} for r in grader.grade(folder, ids)]
    for line in console_lines(results):
        say(line)
    total, most = sum(r["score"] for r in results), sum(r["max_score"] for r in results)
    say(f"total {total:g}/{most} ({time.time() - t0:.0f} s)")
    if cfg.json:
        atomic_write_text(cfg.json, json_text(gradescope(results, tasks, time.time() - t0)))
    failed = [r["id"] for r in results if r.get("machine")]
    if failed and not quiet:
        raise MachineFailure(f"{', '.join(failed)} not graded: the machine failed each twice "
                             "(above); grade again with --tasks=" + ",".join(failed))
    return results


def json_text(obj):

    return json.dumps(obj, indent=1, ensure_ascii=False) + "\n"


def main():
    args = sys.argv[1:]
    if any(a in ("-h", "--help") for a in args):
        parse_config(ClassroomConfig, ["-h"], description=__doc__)
    if not args:
        raise UserError(USAGE)
    command, rest = args[0], args[1:]
    folders = [a for a in rest if not a.startswith("--")]
    cfg = parse_config(ClassroomConfig, [a for a in rest if a.startswith("--")])
    many = command == "ranges"
    if (
        command not in COMMANDS
        or (not folders and not (many and (cfg.check or cfg.assign)) and command != "key")
        or (folders and command == "key")
        or (len(folders) > 1 and not many)
    ):
        raise UserError(USAGE)
    if command == "ranges":
        # lab reads studies with PyTorch and the project's modules: -h and grading need neither
        from classroom.lab import assign_seeds, check_handins, ranges

        if cfg.assign:
            return assign_seeds(cfg.assign, cfg.roster)
        return check_handins(cfg.check, cfg) if cfg.check else ranges(folders, cfg)
    if not (ROOT / "classroom" / "grade.py").exists():
        raise UserError(
            f"{command} is the teacher's: this is a student copy (run it from the project itself)"
        )
    tasks = read_tasks()
    ids = chosen(cfg, tasks)
    if command == "student":
        # the teacher's: not in a student copy, which runs this command too
        from classroom.student import student

        return student(folders[0], ids, tasks, ROOT)
    # the teacher's: not in a student copy, which runs this command too
    from classroom import sandbox
    # the teacher's: not in a student copy, which runs this command too
    from classroom.grade import limits_of, secret_of

    if command == "gradescope":
        # the teacher's: not in a student copy, which runs this command too
        from classroom.platforms import gradescope, try_zip

        gradescope(folders[0], ids, tasks, secret_of(cfg), ROOT, cfg.timeout)
        return try_zip(folders[0], cfg.try_on) if cfg.try_on else None
    limits_of(cfg)  # bad bounds and an unavailable sandbox refused before any work
    sandbox.choose(cfg.sandbox)
    if command == "key":
        # the teacher's: not in a student copy, which runs this command too
        from classroom.grade import Grader

        with Grader(ROOT, "", 0, cfg.timeout, cfg.sandbox, limits_of(cfg)) as grader:
            grader.check_key(ids)
            return print(f"the key passes in sandbox {grader.method}: {', '.join(ids)}")
    if command == "grade-all":
        # the teacher's: not in a student copy, which runs this command too
        from classroom.gradebook import grade_all

        return grade_all(folders[0], ids, tasks, cfg, ROOT)
    grade(folders[0], ids, tasks, cfg)

