"""
A class at once (python -m classroom grade-all CLASS_DIR --csv=FILE): every folder in
CLASS_DIR is one student's submission (a file or a link there is listed as skipped), graded
against one snapshot with the grader's isolation, --jobs students at a time (one a core: each
grading is one judge and one worker taking turns), each in its own slot (its own worker uid).

Everything the teacher gave is checked before any student is graded: the roster, the deadline,
--only, the gradebook and history to update, and the class's names (below). A mistake there is
one line naming the file, its line and the cell, and what to write instead (exit 2); nothing
is graded and nothing already written changes.

The gradebook never stops for one student: a submission that cannot be graded is a row of
zeros with its reason, and the file is written again after every row (sorted by student), so a
crash mid-class loses no finished row. The one stop: the checkout or the snapshot changed
(grading stops with one line; the rows written stay).

Its columns: student, each task's points, total, problems (each failed task's first reason),
copied (tasks whose functions are the project's own, classroom/copyflag.py), same_as (below),
late, and the roster's columns. Neither copy column changes a score.

same_as: the classmates whose function of a task lies wholly inside this one's, or this one
inside theirs (copyflag.PAIR), each "T3 bob 0.92": the task, the classmate and how close the
two are (copyflag.closeness: the share of both functions' fingerprints they hold in common,
1.00 the same function up to the copy flag's normalisation). A task flagged as the project's
is not compared again, and a blank stub has too few fingerprints to be. The likeliest copy
comes first: pairs only the two share before those in a group ("T1 ada 1.00 (group of 12)":
one of the two matches 11 classmates' T1, a common source such as a solution passed round,
which singles no one out), then the closest, then by task and name. At most SAME_AS pairs are
listed (5), the rest counted ("+57 more"). A class of 12 students sharing one source for all six
tasks gives each 66 pairs: that, not the stubs or the project's code, is what fills the column.

Names. A student's row and feedback file are their own whatever their folder names:
  - the student cell is the folder's name (behind the formula guard's quote when it starts
    with = + - @), tagged " [tag]" (8 hex digits of a hash of the exact name) where it could
    be read as another's: control characters, over 80 characters, a name that itself starts
    with that quote before = + - @, or one that ends as a tag does;
  - the feedback file is NAME.md where the name is already safe on Windows, macOS and Linux
    and on a case-insensitive disk (lowercase letters, digits, _ . -; not a Windows device
    name such as con or nul; at most 64 characters); else the name made safe (accents
    dropped, other characters _) and -tag: `a b` is a_b-7faae47c.md, `a_b` is a_b.md, `Bob` is
    Bob-df0a8f59.md. Two folders whose tags still meet stop the class before grading.

For a term:
  --roster=FILE     a CSV with a `folder` column (the student's folder name) and any others
                    (id, name, email, login, submitted_at ...): each row of the gradebook carries
                    its student's. Refused before grading: a folder named on two lines, a
                    column named as one of the gradebook's own (late, total ...), a
                    submitted_at that is not an ISO 8601 time with an offset. Said at the end:
                    a folder the roster lacks, a roster line without a folder
  --deadline=TIME   ISO 8601 with an offset (2027-03-01T23:59:00+00:00, or ...Z); needs a
                    roster with a submitted_at column (the platform's time: Gradescope's
                    submission metadata, Classroom 50's tag or its scores export; never a commit
                    date, which a student sets). A row whose time is later is marked late, by
                    how much; one with no time (an empty cell, or no roster line) is marked
                    "no submitted_at": unknown, not counted late
  feedback files    one Markdown file a student (every check, passed or failed and why, as the
                    student's results.json says it), in --feedback or FILE's folder + _feedback
  --only=FOLDER     grades the one folder of exactly that name again and updates its row and
                    feedback file in an existing gradebook, no other row, with the gradebook's
                    tasks; same_as stays as it was (it needs the whole class), and so do the
                    roster's columns and late unless --roster and --deadline are given again
  history           nothing graded is lost on a regrade (--only, or grade-all again into the
                    same gradebook): a feedback file about to change is first copied to
                    history/STEM/TIME.md in the feedback folder (TIME: when it was written,
                    UTC), and every row graded is appended to FILE's stem + _history.csv, with
                    when it was graded (graded_at), the run, the tasks, the snapshot graded from
                    and the folder graded; the gradebook keeps one current row a student
"""

import csv
import hashlib
import math
import os
import queue
import re
import shutil
import threading
import time
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from classroom import copyflag
from classroom.grade import (Grader, MachineFailure, choose_submission, limits_of,
                             secret_of)
from classroom.report import NAME_CHARS, csv_cell, plain, student_output
from common import UserError, atomic_write_text, write_csv

SAME_AS = 5  # pairs a same_as cell lists, likeliest first (the rest counted)
TAG = re.compile(r"-[0-9a-f]{8}$")  # a feedback file's tag: a name ending so is tagged again
LABEL_TAG = re.compile(r" \[[0-9a-f]{8}\]$")  # a student cell's tag, likewise
SAFE_FILE = re.compile(r"[a-z0-9_][a-z0-9._-]{0,63}")  # a folder name kept as its file's name
DEVICES = {"con", "prn", "aux", "nul", *(f"{p}{i}" for p in ("com", "lpt") for i in range(10))}
HISTORY = ["graded_at", "graded_run", "graded_tasks", "graded_from", "graded_folder"]
TIME_FORM = "2027-03-01T23:59:00+00:00, or 2027-03-01T23:59:00Z for UTC"


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
    """An ISO 8601 time with its offset (Z for UTC): a time without one is refused, as it could
    be any zone (a spreadsheet's local time read as UTC would move every deadline)."""
    text = text.strip()
    try:
        t = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        t = None
    if t is None or t.tzinfo is None:
        raise UserError(f"{what} {plain(text, 60)!r} is not an ISO 8601 time with an offset: "
                        f"write it as {TIME_FORM}")
    return t


def roster_rows(path):
    """([(line, folder, {column: value})], the columns but folder) of a roster CSV with a
    `folder` column; a folder named on two lines is refused (which line is the student's?)."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            rows = [(reader.line_num, r) for r in reader]
            header = reader.fieldnames or []
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise UserError(
            f"--roster={path} cannot be read ({type(e).__name__}): a UTF-8 CSV"
        ) from None
    if "folder" not in header:
        raise UserError(f"--roster={path} needs a header with a `folder` column (and any others)")
    columns = [c for c in header if c and c != "folder"]
    out, seen = [], {}
    for line, r in rows:
        name = (r.get("folder") or "").strip()
        if name in seen:
            raise UserError(f"--roster={path} names the folder {plain(name, NAME_CHARS)!r} on "
                            f"lines {seen[name]} and {line}: keep one line a student")
        if name:
            seen[name] = line
        out.append((line, name, {c: (r.get(c) or "").strip() for c in columns}))
    return out, columns


def read_roster(path):
    """({folder: {column: value}}, the columns) from a roster CSV with a `folder` column (a line
    without a folder left out)."""
    if not path:
        return {}, []
    rows, columns = roster_rows(path)
    return {name: info for _, name, info in rows if name}, columns


def check_roster(cfg, fields):
    """The roster and the deadline, every cell checked before any student is graded:
    (roster, its columns, {folder: submitted_at, or None for an empty cell}, the lines without
    a folder, the deadline or None). A bad cell is one line: the file, the line, the folder,
    the cell, and the form to write."""
    deadline = when(cfg.deadline, "--deadline") if cfg.deadline else None
    if not cfg.roster:
        if deadline:
            raise UserError("--deadline marks rows late by the roster's submitted_at: give "
                            "--roster=FILE with a submitted_at column")
        return {}, [], {}, [], None
    rows, columns = roster_rows(cfg.roster)
    clash = [c for c in columns if c in fields or c in HISTORY]
    if clash:
        raise UserError(f"--roster={cfg.roster} has a column {plain(clash[0], 40)!r}, the name "
                        "of one of the gradebook's own: rename it in the roster")
    if deadline and "submitted_at" not in columns:
        raise UserError(f"--deadline needs the roster's submitted_at: --roster={cfg.roster} has "
                        "no submitted_at column")
    times = {}
    for line, name, info in rows:
        cell = info.get("submitted_at", "")
        try:
            times[name] = when(cell, "") if cell else None
        except UserError:
            raise UserError(
                f"--roster={cfg.roster} line {line} (folder {plain(name, NAME_CHARS)!r}): "
                f"submitted_at {plain(cell, 60)!r} is not an ISO 8601 time with an offset: "
                f"write it as {TIME_FORM}"
            ) from None
    roster = {name: info for _, name, info in rows if name}
    return roster, columns, times, [line for line, name, _ in rows if not name], deadline


def late(t, deadline):
    """The late cell: '' (on time, or no deadline), how late, or "no submitted_at" (the
    roster gives no time: unknown, not counted late)."""
    if deadline is None:
        return ""
    if t is None:
        return "no submitted_at"
    past = (t - deadline).total_seconds()
    if past <= 0:
        return ""
    return f"late {int(past // 3600)} h {int(past % 3600 // 60):02d} m"


def tag(name):
    """8 hex digits of a hash of the exact folder name (bytes a file system gave kept)."""
    return hashlib.blake2b(name.encode("utf-8", "surrogateescape"), digest_size=4).hexdigest()


def feedback_name(student):
    """The student's feedback file: NAME.md where NAME is already safe on every system and
    case-insensitive disk, else the name made safe and -tag (the module's doc)."""
    if SAFE_FILE.fullmatch(student) and not TAG.search(student) \
            and student.split(".")[0] not in DEVICES:
        return student + ".md"
    ascii_ = "".join(c for c in unicodedata.normalize("NFKD", student)
                     if not unicodedata.combining(c))
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", ascii_)[:40].lstrip(".-")
    readable = readable if readable.strip("_") else "student"  # no letter kept (日本語)
    if "." in readable and readable.split(".")[0].lower() in DEVICES:  # nul.txt-tag.md: nul
        readable = "_" + readable
    return f"{readable}-{tag(student)}.md"


def label(student):
    """The student cell: the folder's name, tagged where the gradebook could not show it
    exactly (the module's doc)."""
    shown = plain(student, NAME_CHARS)
    guarded = len(student) > 1 and student[0] == "'" and student[1] in "=+-@"
    if shown == student and not guarded and not LABEL_TAG.search(student):
        return csv_cell(shown)
    return csv_cell(plain(student, NAME_CHARS - 11) + f" [{tag(student)}]")


def names_of(students):
    """{folder name: (student cell, feedback file)}, each one a student's alone (a file's name
    compared as a case-insensitive disk would)."""
    out, cells, files = {}, {}, {}
    for s in students:
        out[s.name] = label(s.name), feedback_name(s.name)
        for seen, key in ((cells, out[s.name][0]), (files, out[s.name][1].lower())):
            if key in seen:
                raise UserError(f"the folders {plain(seen[key], NAME_CHARS)!r} and "
                                f"{plain(s.name, NAME_CHARS)!r} would share a row or a feedback "
                                "file: rename one")
            seen[key] = s.name
    return out


def feedback_text(student, results, where=""):
    lines = [f"# {plain(student, NAME_CHARS)}", ""]
    if where:
        lines += [where, ""]
    graded = [r for r in results if not r.get("machine")]  # NOT GRADED: in no total
    total = sum(r["score"] for r in graded)
    lines += [f"**{total:g}/{sum(r['max_score'] for r in graded)}**", ""]
    for r in results:
        score = "NOT GRADED" if r.get("machine") else f"{r['score']:g}/{r['max_score']}"
        lines += [f"## {r['id']} {r['title']}: {score}", "", "```",
                  student_output(r), "```", ""]
    return "\n".join(lines)


def keep_feedback(path, text, history):
    """Before path's feedback is replaced by a different text, a copy of it in
    history/STEM/TIME.md (TIME: when it was written, UTC)."""
    try:
        if path.read_bytes() == text.encode("utf-8"):
            return
        written = path.stat().st_mtime
    except FileNotFoundError:
        return
    stamp = datetime.fromtimestamp(written, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    folder = history / path.stem
    folder.mkdir(parents=True, exist_ok=True)
    kept, n = folder / f"{stamp}.md", 2
    while kept.exists():  # graded twice in one second
        kept, n = folder / f"{stamp}_{n}.md", n + 1
    shutil.copy2(path, kept)


def read_rows(path, what):
    """(header, rows as dicts) of a CSV the grader wrote; UserError when it cannot be read."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            return list(reader.fieldnames or []), rows
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise UserError(f"{what} {path} cannot be read ({type(e).__name__}): move it away, or "
                        "give another --csv") from None


class History:
    """FILE_history.csv: every row graded, appended with when and what was graded, in the
    order graded (its columns grow when a run's do; read before any student is graded)."""

    def __init__(self, path, fields):
        self.path = Path(path)
        self.fields, self.rows = read_rows(self.path, "the history") if self.path.exists() \
            else ([], [])
        for f in HISTORY + [f for f in fields if f != "same_as"]:  # same_as: the class's
            if f not in self.fields:
                self.fields.append(f)

    def add(self, row, **graded):
        self.rows.append({f"graded_{k}": v for k, v in graded.items()} | row
                         | {"graded_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        write_csv(self.path, [[r.get(f, "") for f in self.fields] for r in self.rows],
                  self.fields)


def grade_all(folder, ids, tasks, cfg, root):

    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(
            f"{folder} is not a folder: give the folder that holds one folder a student"
        )
    if not cfg.csv:
        raise UserError("grade-all writes a gradebook: give --csv=FILE")
    book = Path(cfg.csv)
    own = ["student", *ids, "total", "problems", "copied", "same_as", "late"]
    roster, columns, times, no_folder, deadline = check_roster(cfg, own)
    fields = own + columns
    students, skipped = class_folders(folder)
    names = names_of(students)
    rows, kept = {}, []
    if cfg.only:
        students = [s for s in students if s.name == cfg.only]  # exactly: no other row changes
        if not students:
            raise UserError(f"--only={plain(cfg.only, NAME_CHARS)}: {folder} holds no folder of "
                            "that name, exactly (case, spaces and quotes count)")
        if not book.exists():
            raise UserError(f"--only updates a gradebook: {book} does not exist yet "
                            "(grade the class first)")
        header, before = read_rows(book, "the gradebook")
        tasks_there = header[1:header.index("total")] if "total" in header else None
        if header[:1] != ["student"] or not tasks_there:
            raise UserError(f"{book} is not a gradebook of grade-all (student, the tasks, total "
                            "...): give the one --only is to update")
        if tasks_there != ids:
            raise UserError(f"--only regrades the gradebook's tasks: {book} has "
                            f"{','.join(tasks_there)}: give --tasks={','.join(tasks_there)}")
        kept = [c for c in header if c not in fields]  # roster columns not given again: kept
        fields += kept
        # the other rows as they were, each by its student cell (the names compared exactly)
        rows = {r.get("student", ""): {k: r.get(k) or "" for k in fields} for r in before}
    if not students:
        raise UserError(f"{folder} holds no student's folder")
    history = History(book.with_name(book.stem + "_history.csv"), fields)
    for name in skipped:
        print(f"skipped {plain(name, NAME_CHARS)}: not a student's folder")
    limits = limits_of(cfg)
    feedback = Path(cfg.feedback or book.with_name(book.stem + "_feedback"))
    feedback.mkdir(parents=True, exist_ok=True)
    prints, lock, t0 = {}, threading.Lock(), time.time()

    def write():
        write_csv(book, [[row[f] for f in fields] for _, row in sorted(rows.items())], fields)

    with Grader(root, secret_of(cfg), cfg.seed, cfg.timeout, cfg.sandbox, limits) as grader:
        for line in grader.describe():
            print(line)
        if cfg.check_key:
            grader.check_key(ids)  # once a class: the environment fails no student
        jobs = 1 if grader.method == "user" else cfg.jobs or min(4, os.cpu_count() or 1)
        slots = queue.Queue()
        for slot in range(jobs):
            slots.put(slot)
        graded = {"run": "only" if cfg.only else "class", "tasks": ",".join(ids),
                  "from": f"{grader.origin['source']}, sandbox {grader.method}"}

        unmarked = []  # (folder, task) the machine failed twice

        def one(sub):
            slot = slots.get()
            try:
                results, problems, where = grade_one(grader, sub, ids, tasks, slot)
            finally:
                slots.put(slot)
            name = plain(sub.name, NAME_CHARS)
            cell, file = names[sub.name]
            info = roster.get(sub.name, {})
            row = {tid: 0 for tid in ids} | {"student": cell, "copied": "", "same_as": "",
                                             "late": late(times.get(sub.name), deadline)}
            row |= {c: csv_cell(info.get(c, "")) for c in columns} | dict.fromkeys(kept, "")
            if results:  # a task the machine failed twice: no score, and the teacher told
                row |= {r["id"]: "" if r.get("machine") else r["score"] for r in results}
                unmarked.extend((sub.name, r["id"]) for r in results if r.get("machine"))
                problems = "; ".join(f"{r['id']}: {r['output']}" for r in results
                                     if not r["passed"])
                row["copied"] = " ".join(r["id"] for r in results if r.get("copied"))
            if cfg.only and cell in rows:  # what this run does not say again stays as it was
                was = rows[cell]
                row |= {c: was[c] for c in ["same_as", *kept] + (["late"] if not deadline else [])}
            row["total"] = sum(row[t] for t in ids if row[t] != "")
            row["problems"] = csv_cell(problems)
            text = feedback_text(sub.name, results, results[0].get("where", "")) if results else \
                f"# {name}\n\n0: {plain(problems, 600)}\n"
            with lock:
                rows[cell] = row
                # two copies of the project's function match each other: said once, as copied
                prints[sub.name] = {r["id"]: None if r.get("copied") else r.get("_prints")
                                    for r in results or []}
                write()
                history.add(row, **graded, folder=csv_cell(where))
                keep_feedback(feedback / file, text, feedback / "history")
                atomic_write_text(feedback / file, text)
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
        for name, matches in pairs(prints, ids).items():
            rows[names[name][0]]["same_as"] = csv_cell(
                same_as(matches, ids, lambda other: names[other][0]))
        write()
    for name in sorted(set(roster) - {s.name for s in students}) if roster and not cfg.only else []:
        print(f"the roster's {plain(name, NAME_CHARS)} has no folder in {folder}")
    for line in no_folder if not cfg.only else []:
        print(f"--roster={cfg.roster} line {line} names no folder")
    for s in students if roster else []:
        if s.name not in roster:
            print(f"{plain(s.name, NAME_CHARS)} is not in the roster")
    seconds = time.time() - t0
    print(f"graded {len(students)} students in {seconds:.0f} s ({seconds / len(students):.1f} s "
          f"each, {jobs} at a time, sandbox {grader.method}): {book}, feedback in {feedback}, "
          f"every grading kept in {history.path}")
    if unmarked:
        folders = sorted({f for f, _ in unmarked})
        raise MachineFailure(
            f"{len(unmarked)} tasks not graded, the machine's failure twice (their cells are "
            "empty, the problems column says why): grade each again with --only=FOLDER: "
            + ", ".join(plain(f, NAME_CHARS) for f in folders[:10])
            + (f" and {len(folders) - 10} more" if len(folders) > 10 else ""))
    return rows


def grade_one(grader, sub, ids, tasks, slot):
    """(the results, or None; why, when there are none; the folder graded in the upload, '.'
    for itself). Only the checkout changing stops."""

    try:
        folder, where = choose_submission(sub, tasks)
        if folder is None:
            return None, "no task file in the folder", ""
        results = grader.grade(folder, ids, slot)
        graded = Path(folder).relative_to(sub).as_posix() if Path(folder) != Path(sub) else "."
        return [r | {"where": where + "\n" if where else ""} for r in results], "", graded
    except UserError:
        raise  # the checkout or the snapshot changed: grading stops
    except Exception as e:  # noqa: BLE001  (one student never stops the class)
        return None, f"the grader failed on this folder: {type(e).__name__}", ""


def pairs(prints, ids):
    """{student: [(task, classmate, closeness, group)]}: for each task, the classmates whose
    functions match this one's (copyflag.PAIR or more, either inside the other); group: the
    students one of the two matches, the two included (2: a pair only they share)."""
    names, hits, matched = sorted(prints), [], {}
    for tid in ids:
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                pa, pb = prints[a].get(tid), prints[b].get(tid)
                if pa and pb and copyflag.similarity(pa, pb) >= copyflag.PAIR:
                    hits.append((tid, a, b, copyflag.closeness(pa, pb)))
                    for s in (a, b):
                        matched[s, tid] = matched.get((s, tid), 0) + 1
    out = {}
    for tid, a, b, close in hits:
        group = 1 + max(matched[a, tid], matched[b, tid])
        out.setdefault(a, []).append((tid, b, close, group))
        out.setdefault(b, []).append((tid, a, close, group))
    return out


def same_as(matches, ids, name=str):
    """A student's same_as cell from their pairs(): the likeliest copy first (a pair only the two
    share, then the smaller group; the closest; then by task and name), SAME_AS of them, the
    rest counted. Closeness is cut, not rounded, to 2 places: 1.00 only for the same function."""
    order = {t: i for i, t in enumerate(ids)}
    ranked = sorted(((t, name(b), math.floor(c * 100) / 100, g) for t, b, c, g in matches),
                    key=lambda m: (m[3], -m[2], order[m[0]], m[1]))
    shown = [f"{t} {b} {c:.2f}" + (f" (group of {g})" if g > 2 else "")
             for t, b, c, g in ranked[:SAME_AS]]
    if len(ranked) > SAME_AS:
        shown.append(f"+{len(ranked) - SAME_AS} more")
    return "; ".join(shown)
