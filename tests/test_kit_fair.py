"""Fair work and true feedback in the classroom kit (issue 57, effects 7 and 12): correct work the
handouts do not forbid is taken (annotations on the def line, any encoding PEP 263 declares), the
grader says when its Python is not the students', T5's handout says how many items a fit takes,
a student reads the hidden cases' numbers masked and the handouts' constants whole, and every
count and command a handout gives is true of the checks.

Each test reads the grader's own functions (source.take, upload.read_upload, report.masked,
Grader.describe) on small texts; nothing is graded and nothing a submission holds runs."""

import ast
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from classroom import copyflag, report, sandbox, source
from classroom.grade import Grader
from classroom.source import Refused, find_function, segment, take
from classroom.upload import UploadError, read_upload

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "classroom"


def project_text(path):
    return (ROOT / path).read_text(encoding="utf-8")


def with_def_line(path, qualname, line):
    """The project's file with qualname's def line replaced by `line` (and what else it holds)."""
    text = project_text(path)
    ours = segment(text, find_function(ast.parse(text), qualname))
    head = ours[:ours.index(":\n") + 1]
    return text.replace(ours, ours.replace(head, line, 1))


# -----------------------------------------------------------------------------
# Annotations: taken, dropped from the graded text, never run

ANNOTATED = {
    "hints": "def uniform_scale(lams: list, loss: 'np.ndarray', tail: int, width: int) -> dict:",
    "parenthesised, a lambda, a comma in a string":
        "def uniform_scale(lams: (list), loss: ('a, b'), tail: lambda a, b: 1, width)  ->  (dict) :",
    "one a line, with comments": "def uniform_scale(\n    lams: list,  # the grid: ascending\n    loss,\n"
                                 "    tail: int,\n    width,\n) -> dict:",
    "a line continuation": "def uniform_scale(lams, loss, tail, width) \\\n        -> dict:",
    "a lambda returned": "def uniform_scale(lams, loss, tail, width) -> lambda: 1:",
}


@pytest.mark.parametrize("case", list(ANNOTATED))
def test_an_annotated_def_line_is_taken_without_its_annotations(case):
    """T3 with type hints scored 0: its def line differed from the project's by annotations only.
    Taken now, the graded text has none, the body is the student's, and the copy flag reads the
    same fingerprints (copyflag.statements reads the body alone)."""
    project = project_text("search_scales.py")
    ours = find_function(ast.parse(project), "uniform_scale")
    submitted = with_def_line("search_scales.py", "uniform_scale", ANNOTATED[case])
    out = take(submitted, project, "uniform_scale")
    back = find_function(ast.parse(out), "uniform_scale")
    assert ast.dump(back) == ast.dump(ours), case  # the project's function, annotations gone
    assert "->" not in segment(out, back).split('"""')[0] and "list" not in segment(out, back).split('"""')[0]
    text, node = source.submitted_function(submitted, "uniform_scale", project)
    assert text == segment(out, back) and node.returns is None and not source.annotated(node)
    theirs = find_function(ast.parse(submitted), "uniform_scale")
    assert copyflag.fingerprints(theirs) == copyflag.fingerprints(node) == copyflag.fingerprints(ours)


def test_an_annotation_never_runs_and_other_def_lines_are_still_refused(tmp_path):
    """An annotation is evaluated when the def runs, at import in the worker: dropped, none runs.
    Arguments or defaults that differ are refused as before, annotated or not."""
    canary = tmp_path / "ran"
    project = project_text("search_scales.py")
    evil = with_def_line("search_scales.py", "fit_log_law",
                         f"def fit_log_law(positions: open({str(canary)!r}, 'w').write('x'), lam, L)"
                         f" -> open({str(canary)!r}, 'w').write('y'):")
    out = take(evil, project, "fit_log_law")
    assert "open(" not in segment(out, find_function(ast.parse(out), "fit_log_law"))
    exec(compile(ast.Module([find_function(ast.parse(out), "fit_log_law")], []), "<taken>", "exec"), {})
    assert not canary.exists()
    for line in ("def fit_log_law(positions: list, lam, L: int = 8) -> float:",
                 "def fit_log_law(positions, lam: list, L, k: int = 0):",
                 "async def fit_log_law(positions: list, lam, L):"):
        with pytest.raises(Refused, match="def line differs"):
            take(with_def_line("search_scales.py", "fit_log_law", line), project, "fit_log_law")


# -----------------------------------------------------------------------------
# Encodings: what PEP 263 declares

def upload(tmp_path, data, name="search_scales.py"):
    folder = tmp_path / f"up{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    (folder / name).write_bytes(data)
    return folder, name


def test_a_file_in_the_encoding_its_coding_line_declares_is_read_as_python_reads_it(tmp_path):
    """A Latin-1 file with a valid coding line scored 0 ("not UTF-8"). Read now as Python reads
    it, and its function taken into the project's UTF-8 file, where no coding line comes along."""
    project = project_text("search_scales.py")
    for coding, line in (("latin-1", "# -*- coding: latin-1 -*-\n"),
                         ("cp1252", "#!/usr/bin/env python\n# vim: set fileencoding=cp1252 :\n")):
        text = line + project.replace("    x = np.log(", "    # café, 5 €\n    x = np.log(")
        text = text.replace("€", "E") if coding == "latin-1" else text
        data = text.encode(coding)
        assert b"caf\xe9" in data
        got = read_upload(*upload(tmp_path, data))
        assert got == text
        out = take(got, project, "fit_log_law")
        assert "# café" in out and "coding" not in out[:200] and out.encode("utf-8").decode("utf-8") == out
    # utf-7 hides a line in a comment: the text graded is the one Python decodes, and so is the copy's
    hidden = b"# coding: utf-7\ndef f(x):\n    # note +AAo-    x = None\n    return x\n"
    got = read_upload(*upload(tmp_path, hidden))
    assert got == "# coding: utf-7\ndef f(x):\n    # note \n    x = None\n    return x\n"
    assert take(got, "def f(x):\n    return x\n\n\nY = 1\n", "f") == \
        "def f(x):\n    # note \n    x = None\n    return x\n\n\nY = 1\n"


@pytest.mark.parametrize("data, why", [
    (b"# coding: klingon\nx = 1\n", "declares an encoding Python does not know (klingon)"),
    (b"# coding: rot13\nx = 1\n", "not a text encoding"),
    (b"# coding: punycode\nx = 1\n", "punycode, which the grader does not decode"),
    (b"# coding: ascii\nx = '\xe9'\n", "is not ascii text (byte 22), as its coding line declares"),
    (b"\xef\xbb\xbf# coding: latin-1\nx = 1\n", "byte-order mark and a coding line declaring another"),
    (b"x = '\xe9'\n", "is not UTF-8 text and declares no other encoding"),
])
def test_an_encoding_python_would_refuse_is_refused_in_one_line(tmp_path, data, why):
    with pytest.raises(UploadError) as e:
        read_upload(*upload(tmp_path, data))
    assert why in str(e.value) and "\n" not in str(e.value) and "save it as UTF-8" in str(e.value)


# -----------------------------------------------------------------------------
# The students' Python and the grader's

def test_the_grader_says_before_grading_when_its_python_is_not_the_students(monkeypatch):
    """Classroom 50 gives students Python 3.12 (platforms.CLASSROOM50_PYTHON); a teacher grading
    with 3.11 scored a 3.12 f-string 0 without a word. Now describe() warns, naming the syntax,
    and a file that does not parse says which Python read it."""
    from classroom.platforms import CLASSROOM50_PYTHON
    assert source.students_python() == CLASSROOM50_PYTHON
    grader = types.SimpleNamespace(origin={"source": "files", "edited": []}, method="none", timeout=60,
                                   limits=sandbox.Limits(), warning="", secret="s", seed=-1)
    fstring = "x = f\"{'a' + \"b\"}\"\n"  # PEP 701: the f-string's own quotes inside it
    for ours, theirs, warned in (("3.11", "3.12", "3.12: f-strings that reuse their quotes"),
                                 ("3.12", "3.12", None), ("3.13", "3.12", "is graded here but fails")):
        major, minor = map(int, ours.split("."))
        monkeypatch.setattr(sys, "version_info", (major, minor, 0, "final", 0))
        monkeypatch.setattr(source, "students_python", lambda: theirs)
        lines = [line for line in Grader.describe(grader) if "Python" in line]
        if warned is None:
            assert not lines
            continue
        assert len(lines) == 1 and f"runs Python {ours}; the students are given Python {theirs}" in lines[0]
        assert warned in lines[0] and lines[0].startswith("warning: ")
        with pytest.raises(Refused, match=f"with Python {ours}, which grades; the course gives Python {theirs}"):
            source.parse_text("def f(:\n")
    monkeypatch.undo()
    if sys.version_info < (3, 12):
        with pytest.raises(Refused, match="does not parse"):
            source.parse_text(fstring)
    else:
        source.parse_text(fstring)


# -----------------------------------------------------------------------------
# T5: exactly `steps` items

def test_t5s_handout_says_what_its_check_counts():
    """Undecided in the issue: a fit asking `batches` for one item more. Decided: exactly one a
    step, as tests/test_paper.py counts (the fit asked for N batches in 5 steps) and T5.md says."""
    checks = project_text("tests/test_paper.py")
    assert 'assert len(seen) == 5, f"the fit asked for {len(seen)} batches in 5 steps: one a step"' in checks
    handout = " ".join((KIT / "T5.md").read_text(encoding="utf-8").split())
    assert "Ask `batches` for exactly one item a step and none after the last" in handout
    assert "ask for exactly one row a step" in handout


# -----------------------------------------------------------------------------
# What a student sees: hidden cases' numbers masked, the handouts' constants whole

MASKED = {
    # (a check's reason as the judge keeps it, what the student reads)
    "a = 0.276457, least squares of lambda - 1 on ln(i / L) over i >= L gives 0.308611 (it matches a fit with a "
    "free intercept: lambda(L) = 1, no intercept)":
        "a = #, least squares of lambda - 1 on ln(i / L) over i >= L gives # (it matches a fit with a free "
        "intercept: lambda(L) = 1, no intercept)",
    "step 1: lam_mean 1.1998 against the recipe's 1.2 (it matches AdamW's default weight decay 0.01: pass "
    "weight_decay=0.0)":
        "step #: lam_mean # against the recipe's # (it matches AdamW's default weight decay 0.01: pass "
        "weight_decay=0.0)",
    "ValueError: L350 p87.5000 x-0.25e-3 -4": "ValueError: L# p# x-# #",
    "NotImplementedError: T1: write query_scale (classroom/T1.md)":
        "NotImplementedError: T1: write query_scale (classroom/T1.md)",
    "a float tensor of shape (4, 40, 40) (6400 values) was made with B=2, nh=2, chunk=3, T=40: at most "
    "B*nh*chunk*T = 480 (go through the queries `chunk` at a time: no full T x T scores, and no float T x T mask)":
        "a float tensor of shape (#, #, #) (# values) was made with B=2, nh=2, chunk=3, T=40: at most "
        "B*nh*chunk*T = 480 (go through the queries `chunk` at a time: no full T x T scores, and no float T x T mask)",
    "a float tensor of shape (4, 40, 40) (6400 values) was made with B=2, nh=2, chunk=3, T=40: at most B*...":
        "a float tensor of shape (#, #, #) (# values) was made with B=2, nh=2, chunk=3, T=40: at most B*...",
    "bin 1's best lambda on a random table of 7 lambdas x 26 positions, tail 3, bins of 1":
        "bin #'s best lambda on a random table of # lambdas x # positions, tail #, bins of #",
    "lam_min < 1 in the log at steps [1, 2, 3, 4, 5]: clamp after every step, before logging":
        "lam_min < 1 in the log at steps [#, #, #, #, #]: clamp after every step, before logging",
    "position 20: a start-token model's sub-window is [start token, the last W - 1 tokens]":
        "position 20: a start-token model's sub-window is [start token, the last W - 1 tokens]",
    "position 21: a start-token model's sub-window is [start token, the last W - 1 tokens]":
        "position #: a start-token model's sub-window is [start token, the last W - 1 tokens]",
    "excess(nope_headscale_4L) = {8: -0.5253, 16: 0.5159}, want {8: 0.1115, 32: -0.5394}: its reference":
        "excess(nope_headscale_4L) = {#: #, #: #}, want {#: #, #: #}: its reference",
    "the fit asked for 6 batches in 5 steps: one a step": "the fit asked for # batches in 5 steps: one a step",
    "lambda = 0 (every logit 0): query i attends evenly to i keys, entropy log2(i) bits":
        "lambda = 0 (every logit 0): query i attends evenly to i keys, entropy log2(i) bits",
    "a = 0.5, least squares of lambda - 10 on ln(i / L)": "a = #, least squares of lambda - # on ln(i / L)",
}


@pytest.mark.parametrize("why", list(MASKED))
def test_a_hidden_reason_masks_the_cases_numbers_and_keeps_the_checks_constants(why):
    """The rule: a number is masked wherever it stands, glued to letters too, unless the checks'
    own text spells it there (a string's literal text; an f-string's stretch of fixed values,
    written out: chunk=3 of `B, nh, T, hs, chunk = 2, 2, 40, 2, 3`; position 20 of a loop over
    (20, 33, 39), not 21) or a handout writes the word (T1). Read from tests/test_paper.py and
    the handouts, not from a list kept by hand."""
    assert report.masked(why) == MASKED[why]
    assert report.seen_by_student({"why": why, "hidden": True}) == MASKED[why]
    assert report.seen_by_student({"why": why, "hidden": False}) == why


def test_the_constants_come_from_the_checks_text(tmp_path):
    """A check written later has its constants kept and its values masked with no list to edit;
    a module that cannot be read keeps nothing (every number masked)."""
    checks = tmp_path / "test_checks.py"
    checks.write_text(
        "import pytest\n\n\n@pytest.mark.parametrize('width', [3, 7])\n"
        "def test_T9_x(width):\n    got = f(SEED)\n"
        "    assert got == 1, f'width {width}: got {got}, want 1 (the bins of 4.5)'\n", encoding="utf-8")
    kept = report.constants(checks, tmp_path)
    assert report.masked("width 7: got 2.5, want 1 (the bins of 4.5)", kept) == "width 7: got #, want 1 (the bins of 4.5)"
    assert report.masked("width 8: got 2.5, want 1", kept) == "width #: got #, want #"
    assert report.masked("T1 float32 2", report.constants(tmp_path / "none.py", tmp_path)) == "T# float# #"


# -----------------------------------------------------------------------------
# Every count and command a handout gives is true

NUMBERS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen " \
          "sixteen seventeen eighteen nineteen twenty".split()


@pytest.fixture(scope="module")
def checks():
    """{task: [check names]} as pytest collects tests/test_paper.py (the student copy replays
    each one: classroom/snapshots.py records every check of the task)."""
    done = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "tests" / "test_paper.py"), "--collect-only",
                           "-q", "-p", "no:cacheprovider", "--noconftest", "-o", "addopts=", "-p", "classroom.fixtures"],
                          cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    names = re.findall(r"::(test_(T\d)_\S*)", done.stdout)
    assert names, done.stdout + done.stderr
    out = {}
    for name, tid in names:
        out.setdefault(tid, []).append(name)
    return out


@pytest.mark.parametrize("tid", ["T1", "T2", "T3", "T4", "T5", "T6"])
def test_a_handout_counts_its_tasks_checks_and_its_commands_run(tid, checks):
    """T1.md said eleven checks (there were 12), T2.md twelve (13). Each handout's "## Check"
    says how many checks its task has, in words, once; every check it names exists; its pytest
    command selects its own task; every script command names a script and options that exist."""
    text = (KIT / f"{tid}.md").read_text(encoding="utf-8")
    section = " ".join(text.split("## Check", 1)[1].split("\n## ", 1)[0].split())
    said = re.findall(r"\b(" + "|".join(NUMBERS) + r") checks\b", section)
    assert said == [NUMBERS[len(checks[tid])]], f"{tid}.md says {said}; the task has {len(checks[tid])} checks"
    every = {n.split("[")[0] for names in checks.values() for n in names}
    assert set(re.findall(r"test_T\d_\w+", text)) - {f"test_{tid}_"} <= every
    assert re.findall(r"python -m pytest tests/test_paper\.py -k (\S+)", text) == [f"test_{tid}_"]
    for script, options in re.findall(r"python ((?:\w+/)*\w+\.py)((?: --\w+(?:=\S*)?)*)", text):
        assert (ROOT / script).exists(), f"{tid}.md runs {script}, which the project does not have"
        fields = {n.target.id for n in ast.walk(ast.parse(project_text(script)))
                  if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        for option, value in re.findall(r"--(\w+)(?:=(\S*))?", options):
            assert option in fields, f"{tid}.md: {script} has no option --{option}"
            if option == "preset":
                assert (ROOT / "config" / f"{value}.py").exists(), f"{tid}.md: no preset {value}"
