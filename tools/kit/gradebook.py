"""
A class at once (python tools/classroom.py grade-all CLASS_DIR --csv=FILE): every folder in
CLASS_DIR is one student's submission (a file or a link there is listed as skipped), graded
against one snapshot with the grader's isolation, --jobs students at a time (one a core: each
grading is one judge and one worker taking turns), each in its own slot (its own worker uid).

The gradebook never stops for one student: a submission that cannot be graded is a row of
zeros with its reason, and the file is written again after every row (sorted by student), so a
crash mid-class loses no finished row. The one stop: the checkout or the snapshot changed
(grading stops with one line; the rows written stay).

Its columns: student, each task's points, total, problems (each failed task's first reason),
copied (tasks whose functions are the project's own, tools/kit/copyflag.py) and same_as (tasks
whose functions lie wholly inside another student's, with whom and how closely; a task already
flagged as the project's is not compared again). Neither changes a score.
"""

import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tools.cli import UserError, write_csv
from tools.kit import copyflag
from tools.kit.report import NAME_CHARS, csv_cell, plain


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


def grade_all(folder, ids, tasks, cfg, root):
    from tools.classroom import limits_of, secret_of
    from tools.kit.grade import Grader, task_files
    from tools.kit.upload import find_submission

    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder} is not a folder: give the folder that holds one folder a student")
    if not cfg.csv:
        raise UserError("grade-all writes a gradebook: give --csv=FILE")
    students, skipped = class_folders(folder)
    for name in skipped:
        print(f"skipped {plain(name, NAME_CHARS)}: not a student's folder")
    if not students:
        raise UserError(f"{folder} holds no student's folder")
    limits = limits_of(cfg)
    fields = ["student", *ids, "total", "problems", "copied", "same_as"]
    rows, prints, lock, t0 = {}, {}, threading.Lock(), time.time()

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
                where = find_submission(sub, task_files(tasks))
                results = grader.grade(where, ids, slot) if where is not None else None
                problems = "" if where is not None else "no task file in the folder"
            except UserError:
                raise  # the checkout or the snapshot changed: grading stops
            except Exception as e:  # noqa: BLE001  (one student never stops the class)
                results, problems = None, f"the grader failed on this folder: {type(e).__name__}"
            finally:
                slots.put(slot)
            name = plain(sub.name, NAME_CHARS)
            row = {tid: 0 for tid in ids} | {"student": csv_cell(name), "copied": "",
                                             "same_as": ""}
            if results:
                row |= {r["id"]: r["score"] for r in results}
                problems = "; ".join(f"{r['id']}: {r['output']}" for r in results if not r["passed"])
                row["copied"] = " ".join(r["id"] for r in results if r.get("copied"))
            row["total"] = sum(row[t] for t in ids)
            row["problems"] = csv_cell(problems)
            with lock:
                rows[sub.name] = row
                # two copies of the project's function match each other: said once, as copied
                prints[sub.name] = {r["id"]: None if r.get("copied") else r.get("_prints")
                                    for r in results or []}
                write()
                done = time.time() - t0
                eta = done / len(rows) * (len(students) - len(rows))
                print(f"\rstudent {len(rows)} of {len(students)} ({name}): {row['total']:g}  "
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
    for name, same in pairs(prints, ids).items():
        rows[name]["same_as"] = csv_cell("; ".join(same))
    write()
    seconds = time.time() - t0
    print(f"graded {len(students)} students in {seconds:.0f} s ({seconds / len(students):.1f} s "
          f"each, {jobs} at a time, sandbox {grader.method}): {cfg.csv}")
    return rows


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

