"""
A class at once (python -m classroom grade-all CLASS_DIR --csv=FILE): every folder in
CLASS_DIR is one student's submission (a file or a link there is listed as skipped), graded
against one snapshot with the grader's isolation, --jobs students at a time (one a core: each
grading is one judge and one worker taking turns), each in its own slot (its own worker uid).

The gradebook never stops for one student: a submission that cannot be graded is a row of
zeros with its reason, and the file is written again after every row (sorted by student), so a
crash mid-class loses no finished row. The one stop: the checkout or the snapshot changed
(grading stops with one line; the rows written stay).

Its columns: student, each task's points, total, problems (each failed task's first reason),
copied (tasks whose functions are the project's own, classroom/copyflag.py), same_as (tasks
whose functions lie wholly inside another student's, with whom and how closely; a task already
flagged as the project's is not compared again), late, and the roster's columns. Neither copy
column changes a score.

For a term:
  --roster=FILE     a CSV with a `folder` column (the student's folder name) and any others
                    (id, name, email, login, submitted_at ...): each row of the gradebook carries
                    its student's; a folder the roster lacks, or a roster line without a folder,
                    is said
  --deadline=TIME   ISO 8601 (2027-03-01T23:59:00+00:00); a row whose roster `submitted_at`
                    (the platform's time: Gradescope's submission metadata, Classroom 50's tag
                    or its scores export; never a commit date, which a student sets) is later
                    is marked late, by how much
  feedback files    one Markdown file a student (every check, passed or failed and why, as the
                    student's results.json says it), in --feedback or FILE's folder + _feedback
  --only=FOLDER     grades that one student again and updates their row and feedback file in an
                    existing gradebook (same_as is left as it was: it needs the whole class)
"""

import csv
import os
import queue
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from classroom import copyflag
from classroom.grade import Grader, choose_submission, limits_of, secret_of
from classroom.report import NAME_CHARS, csv_cell, plain, student_output
from common import UserError, atomic_write_text, write_csv


def class_folders(folder):
    """(the students' folders, sorted; the names skipped): folders only, no link followed."""
    students, skipped = [], []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.name.startswith("."):
            continue
        if entry.is_dir(follow_symlinks=False):
            students.append(Path(entry.path))
        else:
            skipped.append(entry.name)
    return students, skipped


def when(text, what):
    """An ISO 8601 time, timezone-aware (UTC when it names none)."""
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UserError(
            f"{what} {text!r} is not an ISO 8601 time (2027-03-01T23:59:00+00:00)"
        ) from None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def read_roster(path):
    """{folder: {column: value}} from a roster CSV with a `folder` column."""
    if not path:
        return {}, []
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise UserError(
            f"--roster={path} cannot be read ({type(e).__name__}): a UTF-8 CSV"
        ) from None
    if not rows or "folder" not in rows[0]:
        raise UserError(f"--roster={path} needs a header with a `folder` column (and any others)")
    columns = [c for c in rows[0] if c and c != "folder"]
    return {r["folder"].strip(): {c: (r.get(c) or "").strip() for c in columns}
            for r in rows}, columns


def late(info, deadline):
    """'' or how late a roster line's submitted_at is past the deadline."""
    if deadline is None or not info.get("submitted_at"):
        return ""
    past = (when(info["submitted_at"], "a roster's submitted_at") - deadline).total_seconds()
    if past <= 0:
        return ""
    return f"late {int(past // 3600)} h {int(past % 3600 // 60):02d} m"


def feedback_name(student):
    return re.sub(r"[^\w.-]", "_", student)[:NAME_CHARS] + ".md"


def feedback_text(student, results, where=""):
    lines = [f"# {plain(student, NAME_CHARS)}", ""]
    if where:
        lines += [where, ""]
    total = sum(r["score"] for r in results)
    lines += [f"**{total:g}/{sum(r['max_score'] for r in results)}**", ""]
    for r in results:
        lines += [f"## {r['id']} {r['title']}: {r['score']:g}/{r['max_score']}", "", "```",
                  student_output(r), "```", ""]
    return "\n".join(lines)


def grade_all(folder, ids, tasks, cfg, root):

    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(
            f"{folder} is not a folder: give the folder that holds one folder a student"
        )
    if not cfg.csv:
        raise UserError("grade-all writes a gradebook: give --csv=FILE")
    roster, columns = read_roster(cfg.roster)
    deadline = when(cfg.deadline, "--deadline") if cfg.deadline else None
    students, skipped = class_folders(folder)
    if cfg.only:
        students = [s for s in students if s.name == cfg.only]
        if not students:
            raise UserError(f"--only={cfg.only}: {folder} holds no folder of that name")
        if not os.path.exists(cfg.csv):
            raise UserError(f"--only updates a gradebook: {cfg.csv} does not exist yet "
                            "(grade the class first)")
    for name in skipped:
        print(f"skipped {plain(name, NAME_CHARS)}: not a student's folder")
    if not students:
        raise UserError(f"{folder} holds no student's folder")
    limits = limits_of(cfg)
    fields = ["student", *ids, "total", "problems", "copied", "same_as", "late", *columns]
    feedback = Path(cfg.feedback or Path(cfg.csv).with_name(Path(cfg.csv).stem + "_feedback"))
    feedback.mkdir(parents=True, exist_ok=True)
    rows, prints, lock, t0 = {}, {}, threading.Lock(), time.time()
    if cfg.only:  # the other rows as they were
        with open(cfg.csv, encoding="utf-8", newline="") as f:
            rows = {r["student"].removeprefix("'"): {k: r.get(k, "") for k in fields}
                    for r in csv.DictReader(f)}

    def write():
        write_csv(cfg.csv, [[row[f] for f in fields] for _, row in sorted(rows.items())], fields)

    with Grader(root, secret_of(cfg), cfg.seed, cfg.timeout, cfg.sandbox, limits) as grader:
        for line in grader.describe():
            print(line)
        jobs = 1 if grader.method == "user" else cfg.jobs or min(4, os.cpu_count() or 1)
        slots = queue.Queue()
        for slot in range(jobs):
            slots.put(slot)

        def one(sub):
            slot = slots.get()
            try:
                results, problems = grade_one(grader, sub, ids, tasks, slot)
            finally:
                slots.put(slot)
            name = plain(sub.name, NAME_CHARS)
            info = roster.get(sub.name, {})
            row = {tid: 0 for tid in ids} | {"student": csv_cell(name), "copied": "", "same_as": "",
                                             "late": late(info, deadline)}
            row |= {c: csv_cell(info.get(c, "")) for c in columns}
            if results:
                row |= {r["id"]: r["score"] for r in results}
                problems = "; ".join(f"{r['id']}: {r['output']}" for r in results
                                     if not r["passed"])
                row["copied"] = " ".join(r["id"] for r in results if r.get("copied"))
            if cfg.only and sub.name in rows:
                row["same_as"] = rows[sub.name].get("same_as", "")
            row["total"] = sum(row[t] for t in ids)
            row["problems"] = csv_cell(problems)
            text = feedback_text(sub.name, results, results[0].get("where", "")) if results else \
                f"# {name}\n\n0: {plain(problems, 600)}\n"
            with lock:
                rows[sub.name] = row
                # two copies of the project's function match each other: said once, as copied
                prints[sub.name] = {r["id"]: None if r.get("copied") else r.get("_prints")
                                    for r in results or []}
                write()
                atomic_write_text(feedback / feedback_name(sub.name), text)
                done = time.time() - t0
                n = len(prints)
                eta = done / n * (len(students) - n)
                print(f"\rstudent {n} of {len(students)} ({name}): {row['total']:g}  "
                      f"{done:.0f} s, about {eta:.0f} s left", end="", flush=True)

        with ThreadPoolExecutor(jobs) as pool:
            futures = [pool.submit(one, sub) for sub in students]
            try:
                for f in futures:
                    f.result()
            except UserError:
                for f in futures:
                    f.cancel()
                print()
                raise
    print()
    if not cfg.only:
        for name, same in pairs(prints, ids).items():
            rows[name]["same_as"] = csv_cell("; ".join(same))
        write()
    for name in sorted(set(roster) - {s.name for s in students}) if roster and not cfg.only else []:
        print(f"the roster's {plain(name, NAME_CHARS)} has no folder in {folder}")
    for s in students if roster else []:
        if s.name not in roster:
            print(f"{plain(s.name, NAME_CHARS)} is not in the roster")
    seconds = time.time() - t0
    print(f"graded {len(students)} students in {seconds:.0f} s ({seconds / len(students):.1f} s "
          f"each, {jobs} at a time, sandbox {grader.method}): {cfg.csv}, feedback in {feedback}")
    return rows


def grade_one(grader, sub, ids, tasks, slot):
    """(the results, or None; why, when there are none). Only the checkout changing stops."""

    try:
        folder, where = choose_submission(sub, tasks)
        if folder is None:
            return None, "no task file in the folder"
        results = grader.grade(folder, ids, slot)
        return [r | {"where": where + "\n" if where else ""} for r in results], ""
    except UserError:
        raise  # the checkout or the snapshot changed: grading stops
    except Exception as e:  # noqa: BLE001  (one student never stops the class)
        return None, f"the grader failed on this folder: {type(e).__name__}"


def pairs(prints, ids):
    """{student: ["T3 bob 1.00", ...]}: for each task, the other students whose functions
    match this one's (copyflag.PAIR or more)."""
    out = {}
    names = sorted(prints)
    for tid in ids:
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                pa, pb = prints[a].get(tid), prints[b].get(tid)
                if pa and pb:
                    share = copyflag.similarity(pa, pb)
                    if share >= copyflag.PAIR:
                        out.setdefault(a, []).append(f"{tid} {plain(b, NAME_CHARS)} {share:.2f}")
                        out.setdefault(b, []).append(f"{tid} {plain(a, NAME_CHARS)} {share:.2f}")
    return out
