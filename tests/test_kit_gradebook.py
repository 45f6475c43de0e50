"""The gradebook of a class (classroom/gradebook.py), without grading: the roster and the
deadline checked before any student, a row and a feedback file each student's own whatever
the folder names, --only exact, regrades keeping what they replace, and same_as sorted, capped
and pointing to the likely copy (issue 57's effects 10, 11, 13 and same_as of 12).

grade_all runs here with a stand-in for the grader (each student's score from a table), so
that the file takes a few seconds; the end-to-end class is tests/test_classroom.py's."""

import ast
import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

from classroom import gradebook, report
from classroom.command import ClassroomConfig, read_tasks
from classroom.grade import Grader
from classroom.source import find_function, split_spec
from common import UserError

ROOT = Path(__file__).resolve().parents[1]
TASKS = read_tasks()


class FakeGrader:
    """Grader's face to grade_all: each folder's T3 scored from `scores` (by folder name), with
    the grading counted; no snapshot, no sandbox."""

    scores, calls = {}, []
    method, origin = "none", {"source": "git HEAD 0123456789ab", "edited": []}

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def describe(self):
        return []

    def grade(self, sub, ids, slot=0):
        name = next((p for p in reversed(sub.parts) if p in FakeGrader.scores), sub.name)
        FakeGrader.calls.append(name)  # the student's folder, or the one graded inside it
        score = FakeGrader.scores.get(name, 10)
        return [report.result(TASKS["T3"]) | {"score": score, "passed": score == 10,
                                               "output": f"graded {name!r}: {score}"}]


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(gradebook, "Grader", FakeGrader)
    FakeGrader.scores, FakeGrader.calls = {}, []
    return FakeGrader


def make_class(root, names):
    for name in names:
        (root / name).mkdir(parents=True)
        (root / name / "search_scales.py").write_text("x = 1\n", encoding="utf-8")
    return root


def book_rows(path):
    with open(path, encoding="utf-8", newline="") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def run(klass, book, **options):
    cfg = ClassroomConfig(check_key=False, csv=str(book), tasks="T3", sandbox="none", jobs=1, **options)
    return gradebook.grade_all(klass, ["T3"], TASKS, cfg, ROOT)


# -----------------------------------------------------------------------------
# 10: the roster and the deadline, checked before any student

def test_a_bad_roster_cell_stops_the_class_before_any_grading_and_loses_nothing(fake, tmp_path):
    """A submitted_at of 03/02/2027 01:30 on the roster's third line: one line naming the file,
    the line, the folder and the cell and saying what to write; nobody graded; the gradebook
    and the feedback already written unchanged. Through the command: exit 2, one line."""
    klass = make_class(tmp_path / "class", ["ada", "bob", "cy"])
    book = tmp_path / "book.csv"
    run(klass, book)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and "class" not in p.parts}
    fake.calls.clear()
    roster = tmp_path / "roster.csv"
    roster.write_text("folder,submitted_at\nada,2027-03-01T20:00:00Z\nbob,03/02/2027 01:30\ncy,\n",
                      encoding="utf-8")
    with pytest.raises(UserError) as e:
        run(klass, book, roster=str(roster), deadline="2027-03-01T23:59:00+00:00")
    line = str(e.value)
    assert f"--roster={roster} line 3 (folder 'bob')" in line and "'03/02/2027 01:30'" in line
    assert "with an offset" in line and "2027-03-01T23:59:00+00:00" in line and "\n" not in line
    assert fake.calls == []  # no student graded
    assert {p: p.read_bytes() for p in before} == before  # nothing written changed
    assert not (tmp_path / "book_feedback" / "history").exists()
    out = subprocess.run([sys.executable, "-m", "classroom", "grade-all", str(klass),
                          f"--csv={tmp_path / 'other.csv'}", "--tasks=T3", "--sandbox=none",
                          f"--roster={roster}"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "line 3" in out.stderr, out.stderr
    assert not (tmp_path / "other.csv").exists()


def test_the_roster_and_deadline_rules(tmp_path):
    """Each cell parsed up front, with its offset (a time without one could be any zone);
    a folder on two lines, a column named as the gradebook's own, a deadline without a roster
    or its submitted_at: one line each. An empty cell is an unknown time: "no submitted_at",
    not counted late."""
    roster = tmp_path / "roster.csv"

    def check(text, deadline="2027-03-01T23:59:00+00:00"):
        roster.write_text(text, encoding="utf-8")
        cfg = ClassroomConfig(check_key=False, roster=str(roster), deadline=deadline)
        return gradebook.check_roster(cfg, ["student", "T3", "total", "late"])

    roster_, columns, times, no_folder, deadline = check(
        "folder,id,submitted_at\nada,s1,2027-03-02T01:30:00+00:00\nbob,s2,\n,s3,\n"
        "cy,s4,2027-03-01 16:00:00-08:00\n")
    assert sorted(roster_) == ["ada", "bob", "cy"] and columns == ["id", "submitted_at"]
    assert no_folder == [4] and times["bob"] is None
    assert gradebook.late(times["ada"], deadline) == "late 1 h 31 m"
    assert gradebook.late(times["cy"], deadline) == "late 0 h 01 m"  # 00:00 UTC the next day
    assert gradebook.late(times["bob"], deadline) == "no submitted_at"
    assert gradebook.late(None, None) == "" and gradebook.late(times["ada"], None) == ""
    with pytest.raises(UserError, match="line 2 .folder 'ada'.: submitted_at '2027-03-02 01:30'"):
        check("folder,submitted_at\nada,2027-03-02 01:30\n")  # no offset: which zone?
    with pytest.raises(UserError, match="lines 2 and 4: keep one line a student"):
        check("folder,id\nada,1\nbob,2\nada,3\n", deadline="")
    with pytest.raises(UserError, match="column 'late'.*rename it"):
        check("folder,late\nada,yes\n", deadline="")
    with pytest.raises(UserError, match="no submitted_at column"):
        check("folder,id\nada,1\n")
    with pytest.raises(UserError, match="--deadline '2027-03-01T23:59' is not an ISO 8601 time with an offset"):
        check("folder,submitted_at\n", deadline="2027-03-01T23:59")
    with pytest.raises(UserError, match="give --roster=FILE"):
        gradebook.check_roster(ClassroomConfig(check_key=False, deadline="2027-03-01T23:59Z"), [])


# -----------------------------------------------------------------------------
# 11: each student's own row and feedback file; --only exact

NAMES = ["a b", "a_b", "Bob", "bob", "BOB", "'bob", "=bob", "'=bob", "con", "CON", "nul.txt",
         "x" * 200, "x" * 199 + "y", "José", "Jose\u0301", "a_b-7faae47c", "a\tb", "a  b",
         ".-x", "löwe", "ö", "o"]


def test_every_folder_name_has_its_own_file_and_row():
    """Names that sanitise alike, differ only in case, are Windows devices, too long, or
    accented (composed or not): each file unique on a case-insensitive disk, safe on Windows,
    readable, the same in every run; each student cell unique and never a formula."""
    files = {n: gradebook.feedback_name(n) for n in NAMES}
    assert len({f.lower() for f in files.values()}) == len(NAMES), files
    for f in files.values():
        assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*\.md", f) and len(f) <= 70, f
        assert f.split(".")[0].lower() not in gradebook.DEVICES, f
    assert files["a_b"] == "a_b.md" and files["bob"] == "bob.md" and files["o"] == "o.md"
    assert re.fullmatch(r"a_b-[0-9a-f]{8}\.md", files["a b"]) and files["Bob"].startswith("Bob-")
    assert files["José"].startswith("Jose-") and files["con"].startswith("con-")
    assert files == {n: gradebook.feedback_name(n) for n in NAMES}  # the same every run
    cells = {n: gradebook.label(n) for n in NAMES}
    assert len(set(cells.values())) == len(NAMES), cells
    assert cells["bob"] == "bob" and cells["'bob"] == "'bob" and cells["=bob"] == "'=bob"
    assert re.fullmatch(r"'=bob \[[0-9a-f]{8}\]", cells["'=bob"])  # else it reads as =bob's
    assert all(c[:1] not in "=+-@" for c in cells.values())
    assert gradebook.names_of([Path(n) for n in NAMES])  # no two meet


def test_folders_that_sanitise_alike_get_their_own_feedback(fake, tmp_path):
    """`a b` and `a_b` (and Bob and bob): each feedback file holds its own student's result."""
    names = ["a b", "a_b", "Bob", "bob"]
    klass = make_class(tmp_path / "class", names)
    fake.scores = {"a b": 1, "a_b": 2, "Bob": 3, "bob": 4}
    run(klass, tmp_path / "book.csv")
    folder = tmp_path / "book_feedback"
    assert len(list(folder.iterdir())) == 4
    for name in names:
        text = (folder / gradebook.feedback_name(name)).read_text("utf-8")
        assert text.startswith(f"# {name}\n") and f"graded {name!r}: {fake.scores[name]}" in text
    assert {r["student"]: r["total"] for r in book_rows(tmp_path / "book.csv").values()} == \
        {"a b": "1", "a_b": "2", "Bob": "3", "bob": "4"}


def test_only_regrades_the_one_folder_of_exactly_that_name(fake, tmp_path):
    """--only=bob beside 'bob, =bob and '=bob: bob's row alone changes (the formula guard's
    quote no longer makes two names one), and what the run does not say again (the roster's
    columns, late) stays; a name matching no folder exactly, or other tasks than the
    gradebook's, is one line, before grading."""
    names = ["bob", "'bob", "=bob", "'=bob", "Bob"]
    klass = make_class(tmp_path / "class", names)
    book, roster = tmp_path / "book.csv", tmp_path / "roster.csv"
    roster.write_text("folder,email,submitted_at\nbob,b@u,2027-03-02T00:00:00Z\n'bob,q@u,\n",
                      encoding="utf-8")
    fake.scores = dict.fromkeys(names, 10)
    run(klass, book, roster=str(roster), deadline="2027-03-01T23:00:00Z")
    rows = book_rows(book)
    assert len(rows) == 5 and rows["bob"]["email"] == "b@u" and rows["bob"]["late"] == "late 1 h 00 m"
    fake.scores["bob"], fake.calls[:] = 0, []
    run(klass, book, only="bob")  # no roster, no deadline given again
    again = book_rows(book)
    assert fake.calls == ["bob"] and again["bob"]["total"] == "0"
    assert {k: v for k, v in again["bob"].items() if k not in ("T3", "total", "problems")} == \
        {k: v for k, v in rows["bob"].items() if k not in ("T3", "total", "problems")}
    assert {k: v for k, v in again.items() if k != "bob"} == {k: v for k, v in rows.items() if k != "bob"}
    for wrong in ("BOB", " bob", "bo", "'bob'"):
        with pytest.raises(UserError, match="no folder of that name, exactly"):
            run(klass, book, only=wrong)
    with pytest.raises(UserError, match="has T3: give --tasks=T3"):
        gradebook.grade_all(klass, ["T3", "T4"], TASKS, ClassroomConfig(check_key=False, csv=str(book), only="bob"), ROOT)
    assert fake.calls == ["bob"] and book_rows(book) == again


# -----------------------------------------------------------------------------
# 13: a regrade keeps what it replaces

def test_a_regrade_keeps_the_earlier_feedback_and_rows(fake, tmp_path):
    """The class graded, then grade-all again, then --only: each feedback file replaced is kept
    in history/STEM/, and every grading is a row of book_history.csv with when and what was
    graded; the gradebook keeps one current row a student."""
    klass = make_class(tmp_path / "class", ["ada", "a b"])
    (klass / "ada" / "search_scales.py").unlink()
    (klass / "ada" / "nested").mkdir()
    (klass / "ada" / "nested" / "search_scales.py").write_text("x = 1\n", encoding="utf-8")
    book, feedback = tmp_path / "book.csv", tmp_path / "book_feedback"
    fake.scores = {"ada": 10, "a b": 10}
    run(klass, book)
    first = (feedback / "ada.md").read_text("utf-8")
    run(klass, book)  # the same results: nothing to keep
    assert not (feedback / "history").exists()
    fake.scores["ada"] = 0
    run(klass, book)
    fake.scores["ada"] = 5
    run(klass, book, only="ada")
    kept = sorted((feedback / "history" / "ada").iterdir())
    assert [k.read_text("utf-8") for k in kept][0] == first and len(kept) == 2
    assert all(re.fullmatch(r"\d{8}T\d{6}Z(_\d+)?\.md", k.name) for k in kept)
    assert "graded 'ada': 5" in (feedback / "ada.md").read_text("utf-8")
    assert sorted(p.name for p in feedback.iterdir()) == sorted(["ada.md", gradebook.feedback_name("a b"),
                                                                 "history"])
    assert list(book_rows(book)) == ["a b", "ada"] and book_rows(book)["ada"]["total"] == "5"
    with open(tmp_path / "book_history.csv", encoding="utf-8", newline="") as f:
        history = list(csv.DictReader(f))
    assert [(r["student"], r["total"], r["graded_run"]) for r in history] == [
        ("a b", "10", "class"), ("ada", "10", "class"), ("a b", "10", "class"), ("ada", "10", "class"),
        ("a b", "10", "class"), ("ada", "0", "class"), ("ada", "5", "only")]
    ada = history[-1]
    assert ada["graded_tasks"] == "T3" and ada["graded_folder"] == "nested"
    assert ada["graded_from"] == "git HEAD 0123456789ab, sandbox none" and "same_as" not in ada
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", ada["graded_at"])


# -----------------------------------------------------------------------------
# 12 (same_as): sorted, capped, the likely copy first

def prints_of(tid, variant):
    """A task's fingerprints as the grader takes them from tests/independent/ (no grading)."""
    tree = ast.parse((ROOT / "tests" / "independent" / f"{tid}_{variant}.py").read_text("utf-8"))
    return Grader.task_prints({s: find_function(tree, split_spec(s)[1]) for s in TASKS[tid]["functions"]})


def test_what_fills_same_as_is_a_function_many_share():
    """Twenty students submitting one correct independent T3 (one source passed round) pair
    each with the other nineteen: that is what gave 60 pairs. A task flagged as the project's
    (prints None) and a blank stub (too few prints) pair with no one."""
    t3 = prints_of("T3", "a")
    klass = {f"s{i:02d}": {"T3": t3} for i in range(20)}
    klass["copier"] = {"T3": None}  # flagged as the project's: not compared again
    klass["stub"], klass["stub2"] = {"T3": {("x", 1), ("x", 2)}}, {"T3": {("x", 1), ("x", 2)}}
    found = gradebook.pairs(klass, ["T3"])
    assert sorted(found) == [f"s{i:02d}" for i in range(20)]
    assert all(len(m) == 19 and {g for *_, g in m} == {20} for m in found.values())
    cell = gradebook.same_as(found["s00"], ["T3"])
    assert cell == ("T3 s01 1.00 (group of 20); T3 s02 1.00 (group of 20); T3 s03 1.00 (group of 20); "
                    "T3 s04 1.00 (group of 20); T3 s05 1.00 (group of 20); +14 more")


def test_same_as_puts_the_likely_copy_first():
    """Twelve students from one source on T1 to T4; one edited T3 her own way and one copied
    that edit (adding a statement): the copy only the two share comes first, ahead of the 40
    pairs of the common source, with its closeness below 1 (one function inside the other); the
    rest, by group, closeness, task and name, cut at SAME_AS and counted."""
    ids = ["T1", "T2", "T3", "T4"]
    source = {t: prints_of(t, "a") for t in ids}
    klass = {f"s{i:02d}": dict(source) for i in range(12)}
    own = prints_of("T3", "b")
    klass["s03"]["T3"], klass["s07"]["T3"] = own, own | {("search_scales.py:uniform_scale", 1)}
    found = gradebook.pairs(klass, ids)
    assert len(found["s07"]) == 3 * 11 + 1 and len(found["s00"]) == 3 * 11 + 9
    cell = gradebook.same_as(found["s07"], ids, lambda name: name.upper())
    close = f"{int(len(own) / (len(own) + 1) * 100) / 100:.2f}"
    assert cell == (f"T3 S03 {close}; T1 S00 1.00 (group of 12); T1 S01 1.00 (group of 12); "
                    "T1 S02 1.00 (group of 12); T1 S03 1.00 (group of 12); +29 more")
    assert close != "1.00"
    assert gradebook.same_as(found["s00"], ids).startswith("T3 s01 1.00 (group of 10); ")
    assert gradebook.same_as([], ids) == ""
