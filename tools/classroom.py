"""
The paper's six pieces as classroom tasks: a student copy made from the project's own code, and
its grader. The tasks: classroom/tasks.toml; the teacher's guide: classroom/README.md.

    python tools/classroom.py student OUT_DIR [--tasks=T1,T3]
    python tools/classroom.py grade SUBMISSION_DIR [--json=results.json] [--tasks=T1,T3]
    python tools/classroom.py ranges STUDY [STUDY ...] [--json=ranges.json]

student: copies the project into OUT_DIR (what .gitignore leaves out stays out) with each
task's functions blanked by `ast`: the signature and docstring kept, the body replaced by
raise NotImplementedError("T1: ..."). Nothing marks the solution in the project's code and no
second copy of it is kept anywhere: the blanks are cut from the code itself. It also writes
.github/workflows/classroom.yml (GitHub Classroom runs each task's public tests with its
points and a timeout) and .classroom.json (which tasks are blank).

grade: each task in a fresh copy of this project into which only that task's functions are
taken from SUBMISSION_DIR, so an edited test, helper or config changes nothing and a wrong T1
cannot sink T5. The task's tests (tests/test_paper.py -k test_T1_) run in a subprocess on the
CPU, in float32, on one thread, under a timeout. Their seeds are offset by NANONOPE_SEED, drawn
from the teacher's secret (--secret, or the environment variable NANONOPE_SECRET) and the
submitted functions' text; without a secret they are the public seeds. Each task's seed is
printed: --seed=N --tasks=T3 grades it again. Where a test needs the project's own version of
a function (T5: the same fit on the same rows), the grader keeps the project's file aside
(NANONOPE_REFERENCE) before the submission's function goes in.
A task scores all its points when every test passes, else 0. A missing function, a syntax
error or a timeout scores 0 on its task and grading goes on. Exit 0 whenever grading ran; 2
with one line for a folder that holds none of the tasks' files, or a task id that does not exist.
Python only, pathlib paths, sys.executable for the tests: the same on Linux, macOS and Windows.

ranges: the lab's numbers (classroom/lab.md) read from study folders, one per seed, and their
range: the expected ranges a teacher grades the lab against.
"""

import ast
import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as python tools/classroom.py: find the project

from tools.cli import UserError, atomic_write_text, parse_config, run_main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "classroom" / "tasks.toml"
MARK = ".classroom.json"  # written into a student copy: which tasks are blank
USAGE = "usage: python tools/classroom.py student OUT_DIR | grade SUBMISSION_DIR | ranges STUDY... [--key=value] (-h)"


@dataclass
class ClassroomConfig:
    tasks: str = ""          # T1,T3,...: the tasks to blank or to grade ('' = every task)
    json: str = ""           # grade: also write Gradescope's results.json here; ranges: the numbers
    secret: str = ""         # grade: the secret that draws the seeds ('' = $NANONOPE_SECRET, else public seeds)
    seed: int = -1           # grade: this seed offset for every task (-1 = drawn from the secret)
    timeout: int = 60        # grade: seconds per task, the subprocess killed after
    jobs: int = 2            # grade: tasks graded at once


def read_tasks():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    with open(TASKS, "rb") as f:
        return {t["id"]: t for t in tomllib.load(f)["task"]}


def chosen(cfg, tasks):
    ids = [t.strip() for t in cfg.tasks.split(",") if t.strip()] or list(tasks)
    unknown = [t for t in ids if t not in tasks]
    if unknown:
        raise UserError(f"no task {', '.join(unknown)}: the tasks are {', '.join(tasks)} (classroom/tasks.toml)")
    return ids


# -----------------------------------------------------------------------------
# The project's files, and its functions found by `ast`

def copy_project(dst, leave_out=()):
    """Copy the project to dst, leaving out .git, what .gitignore names, and the top-level
    folders in leave_out."""
    patterns = [p.strip() for p in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
                if p.strip() and not p.startswith("#")]

    def ignored(rel, is_dir):
        for p in patterns:
            if p.endswith("/"):
                if is_dir and fnmatch.fnmatch(rel.name, p[:-1]):
                    return True
            elif fnmatch.fnmatch(rel.as_posix() if "/" in p else rel.name, p):
                return True
        return False

    dst = Path(dst).resolve()
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder).relative_to(ROOT)
        dirs[:] = [d for d in dirs if d != ".git" and not ignored(here / d, True) and
                   not (here == Path(".") and d in leave_out) and (Path(folder) / d).resolve() != dst]
        for name in files:
            if not ignored(here / name, False):
                (dst / here).mkdir(parents=True, exist_ok=True)
                shutil.copy2(Path(folder) / name, dst / here / name)


def find_function(tree, qualname):
    """The def of `qualname` ("f" or "Class.method") in a parsed module, or None."""
    body, node = tree.body, None
    for part in qualname.split("."):
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            return None
        body = node.body
    return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def split_spec(spec):
    path, _, qualname = spec.partition(":")
    return path, qualname


def blank(source, qualnames, message):
    """source with each function's body (after its docstring) replaced by one raise."""
    tree, lines = ast.parse(source), source.splitlines(keepends=True)
    nodes = [find_function(tree, q) for q in qualnames]
    for q, node in zip(qualnames, nodes):
        if node is None:
            raise UserError(f"classroom/tasks.toml names {q}, which the project does not define")
    for node in sorted(nodes, key=lambda n: -n.lineno):  # from the bottom: line numbers above hold
        first = node.body[0]
        has_doc = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) \
            and isinstance(first.value.value, str)
        start = first.end_lineno if has_doc else first.lineno - 1  # lines[start:] go
        indent = " " * first.col_offset
        text = message(node.name)
        lines[start:node.end_lineno] = [f"{indent}raise NotImplementedError({text!r})\n"]
    return "".join(lines)


def take(submitted, project, qualname):
    """project's source with `qualname` replaced by the submission's version of it (its
    decorators, signature and body), re-indented to the project's indentation."""
    theirs, ours = find_function(ast.parse(submitted), qualname), find_function(ast.parse(project), qualname)
    a = min([theirs.lineno, *(d.lineno for d in theirs.decorator_list)])
    b = min([ours.lineno, *(d.lineno for d in ours.decorator_list)])
    new = submitted.splitlines()[a - 1:theirs.end_lineno]
    shift = ours.col_offset - theirs.col_offset
    new = [(" " * shift + s if shift > 0 else s[-shift:]) if s.strip() else s for s in new]
    lines = project.splitlines(keepends=True)
    lines[b - 1:ours.end_lineno] = [s + "\n" for s in new]
    return "".join(lines)


# -----------------------------------------------------------------------------
# student: the copy a class receives

def student(out, ids, tasks):
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} exists and is not empty: name a new folder (nothing was written)")
    by_file = {}
    for tid in ids:
        for spec in tasks[tid]["functions"]:
            path, qualname = split_spec(spec)
            by_file.setdefault(path, []).append((tid, qualname))
    blanked = {}
    for path, items in by_file.items():  # every blank made before anything is written
        source = (ROOT / path).read_text(encoding="utf-8")
        names = {q.split(".")[-1]: t for t, q in items}
        blanked[path] = blank(source, [q for _, q in items],
                              lambda name: f"{names[name]}: write {name} (classroom/{tasks[names[name]]['handout']})")
    copy_project(out)
    for path, source in blanked.items():
        (out / path).write_text(source, encoding="utf-8")
    (out / MARK).write_text(json.dumps({"blank": ids}, indent=1) + "\n", encoding="utf-8")
    workflow = out / ".github" / "workflows" / "classroom.yml"
    workflow.parent.mkdir(parents=True, exist_ok=True)
    workflow.write_text(github_workflow([tasks[t] for t in ids]), encoding="utf-8")
    print(f"wrote the student copy {out}: {', '.join(ids)} blank "
          f"({', '.join(f'{p}:{q}' for p, items in by_file.items() for _, q in items)}); "
          f"its GitHub Classroom workflow: {workflow.relative_to(out).as_posix()}")


def github_workflow(tasks):
    """GitHub Classroom's autograding: each task's public tests with its points and a timeout.
    Feedback only: students can edit their repository, so the grade of record is `grade`."""
    steps = [f"""    - name: {json.dumps(t['id'] + ' ' + t['title'])}
      id: {t['id'].lower()}
      uses: classroom-resources/autograding-command-grader@v1
      with:
        test-name: {t['id']}
        command: python -m pytest tests/test_paper.py -q -k test_{t['id']}_
        timeout: 5
        max-score: {t['points']}
""" for t in tasks]
    env = "".join(f"        {t['id']}_RESULTS: \"${{{{steps.{t['id'].lower()}.outputs.result}}}}\"\n" for t in tasks)
    return f"""# Written by tools/classroom.py student: the public tests of each task, for feedback.
name: Autograding Tests
'on':
- push
- repository_dispatch
permissions:
  checks: write
  actions: read
  contents: read
jobs:
  run-autograding-tests:
    runs-on: ubuntu-latest
    if: github.actor != 'github-classroom[bot]'
    steps:
    - name: Checkout code
      uses: actions/checkout@v4
    - name: Set up Python
      uses: actions/setup-python@v5
      with:
        python-version: '3.11'
    - name: Install the CPU build of torch, then the rest
      run: |
        python -m pip install torch --index-url https://download.pytorch.org/whl/cpu
        python -m pip install -r requirements.txt
{''.join(steps)}    - name: Autograding Reporter
      uses: classroom-resources/autograding-grading-reporter@v1
      env:
{env}      with:
        runners: {','.join(t['id'].lower() for t in tasks)}
"""


# -----------------------------------------------------------------------------
# grade: each task in its own fresh copy of the project

def submitted_functions(sub, task):
    """{spec: the submission's source file} for the task's functions, or a reason for 0."""
    files = {}
    for spec in task["functions"]:
        path, qualname = split_spec(spec)
        f = Path(sub) / path
        if not f.exists():
            return None, f"{path} is missing from the submission"
        try:
            source = f.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except UnicodeDecodeError:
            return None, f"{path} is not UTF-8 text"
        except SyntaxError as e:
            return None, f"{path} does not parse: line {e.lineno}: {e.msg}"
        node = find_function(tree, qualname)
        if node is None:
            return None, f"{path} has no function {qualname}"
        files[spec] = source
    return files, None


def seed_of(cfg, task, files):
    if cfg.seed >= 0:
        return cfg.seed
    secret = cfg.secret or os.environ.get("NANONOPE_SECRET", "")
    if not secret:
        return 0  # the public seeds
    text = "\n".join([secret, task["id"], *(ast.get_source_segment(s, find_function(ast.parse(s), split_spec(p)[1]))
                                             for p, s in sorted(files.items()))])
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:6], 16)


def first_failure(xml_path):
    """(checks run, passed, the first failing check in words) from pytest's junit XML (run
    with -x: no check runs after the first that fails)."""
    cases = ET.parse(xml_path).getroot().iter("testcase")
    run = passed = 0
    first = None
    for case in cases:
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if case.find("skipped") is not None and bad is None:
            continue
        run += 1
        if bad is None:
            passed += 1
        elif first is None:
            text = (bad.get("message") or bad.text or "").strip().splitlines()
            line = text[0] if text else "failed"
            if line.startswith("NotImplementedError"):
                line = "not written yet (" + line + ")"
            for prefix in ("AssertionError: ", "Failed: "):
                line = line.removeprefix(prefix)
            first = f"{case.get('name')}: {line}"
    return run, passed, first


def grade_task(task, sub, cfg, blank_here):
    tid, t0 = task["id"], time.time()
    result = {"id": tid, "title": task["title"], "max_score": task["points"], "score": 0, "seed": None,
              "passed": False}
    files, why = submitted_functions(sub, task)
    if why:
        return result | {"output": why, "seconds": 0.0}
    seed = result["seed"] = seed_of(cfg, task, files)
    with tempfile.TemporaryDirectory(prefix=f"grade_{tid}_") as tmp:
        copy, ref = Path(tmp) / "project", Path(tmp) / "reference"
        copy_project(copy, leave_out=("docs", "classroom", ".github"))
        env = {**os.environ, "NANONOPE_SEED": str(seed), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
               "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # no third-party plugin: a third of the start-up
        env.pop("NANONOPE_REFERENCE", None)
        if tid not in blank_here:  # the project's own versions, kept aside for the tests that need them
            for spec in task["functions"]:
                path = split_spec(spec)[0]
                (ref / path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / path, ref / path)
            env["NANONOPE_REFERENCE"] = str(ref)
        for spec, source in files.items():
            path, qualname = split_spec(spec)
            target = copy / path
            target.write_text(take(source, target.read_text(encoding="utf-8"), qualname), encoding="utf-8")
        xml = Path(tmp) / "report.xml"
        # -x: all or nothing, so grading stops at the first failing check
        cmd = [sys.executable, "-m", "pytest", "tests/test_paper.py", "-q", "-x", "-k", f"test_{tid}_", "-p",
               "no:cacheprovider", "-o", "addopts=", f"--junitxml={xml}"]
        try:
            proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, encoding="utf-8",
                                  errors="replace", timeout=cfg.timeout)
        except subprocess.TimeoutExpired:
            return result | {"output": f"timed out after {cfg.timeout} s", "seconds": round(time.time() - t0, 1)}
        if not xml.exists():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            return result | {"output": "the tests did not run: " + " | ".join(tail),
                             "seconds": round(time.time() - t0, 1)}
        run, passed, first = first_failure(xml)
    ok = run > 0 and passed == run
    output = f"all {run} checks passed" if ok else f"{passed} passed, then: {first or 'no check collected'}"
    return result | {"passed": ok, "score": task["points"] if ok else 0, "output": output,
                     "seconds": round(time.time() - t0, 1)}


def grade(sub, ids, tasks, cfg):
    sub = Path(sub)
    files = {split_spec(s)[0] for t in tasks.values() for s in t["functions"]}
    if not sub.is_dir() or not any((sub / f).exists() for f in files):
        raise UserError(f"{sub} holds none of {', '.join(sorted(files))}: give a copy of the project "
                        "(tools/classroom.py student) with the student's work in it")
    mark = ROOT / MARK
    blank_here = json.loads(mark.read_text(encoding="utf-8"))["blank"] if mark.exists() else []
    secret = cfg.secret or os.environ.get("NANONOPE_SECRET", "")
    print(f"grading {sub}: " + ("seed given" if cfg.seed >= 0 else "seeds from the teacher's secret" if secret
                                else "the public seeds (no secret)") + f", {cfg.timeout} s a task", flush=True)
    if blank_here:
        print(f"(graded from a student copy: {', '.join(blank_here)} have no reference here, so the checks "
              "that compare with the project's own version are skipped; the teacher's grade runs them)")
    t0 = time.time()
    with ThreadPoolExecutor(max(1, cfg.jobs)) as pool:
        results = list(pool.map(lambda tid: grade_task(tasks[tid], sub, cfg, blank_here), ids))
    for r in results:
        seed = "-" if r["seed"] is None else r["seed"]
        print(f"{r['id']}  {'passed' if r['passed'] else 'failed':6}  {r['score']:>3}/{r['max_score']:<3}  "
              f"seed {seed:<8}  {r['seconds']:5.1f} s  {r['output']}")
    total, most = sum(r["score"] for r in results), sum(r["max_score"] for r in results)
    print(f"total {total}/{most} ({time.time() - t0:.0f} s)")
    if cfg.json:
        report = {"score": total, "output": f"{total}/{most}",
                  "tests": [{"name": f"{r['id']} {r['title']}", "score": r["score"], "max_score": r["max_score"],
                             "output": f"seed {r['seed']}: {r['output']}", "visibility": "visible"}
                            for r in results]}
        atomic_write_text(cfg.json, json.dumps(report, indent=1) + "\n")
    return results


# -----------------------------------------------------------------------------
# ranges: the lab's expected ranges, from studies of several seeds

def lab_numbers(run):
    """The numbers the lab asks for (classroom/lab.md), from one study folder."""
    import numpy as np

    from evaluate import excess
    from tools.findings import entropy_onset, loss_at, measures, onset
    from tools.plot import head_entropy_near, read_head_table
    from tools.cli import read_json
    ev = Path(run) / "eval"
    res, pos = read_json(ev / "results.json"), read_json(ev / "positions.json")
    uni, ent = read_json(Path(run) / "scales" / "uniform.json"), read_json(ev / "entropy.json")
    L, rows = res["train_len"], res["methods"]
    out = {"NoPE against RoPE at L (%)": 100 * (loss_at(res, "nope", L) / loss_at(res, "rope", L) - 1)}
    for m in ("nope", "rope"):
        out[f"loss onset, {m} (L)"] = onset(pos[m]["positions"], pos[m]["loss"], L, 0.1) / L
    out["entropy onset, nope (L)"] = entropy_onset(ent["nope"], L) / L
    for k, v in excess(res, "nope").items():
        if k > L:
            out[f"NoPE's excess at {k // L}L (nats)"] = v
    for k, v in uni["lengths"].items():
        out[f"best uniform lambda at {k}"] = v["best_lam"]
    out["a of lambda(i) = 1 + a ln(i/L)"], out["R^2 of that fit"] = uni["fit"]["a"], uni["fit"]["r2"]
    took = measures(res)
    out["HeadScale at 4L takes back (%)"] = 100 * took["recovered_nope_headscale_4L"]
    out["one lambda for all takes back (%)"] = 100 * took["recovered_nope_uniform_4L"]
    out["HeadScale's cost at L (nats)"] = loss_at(res, "nope_headscale_4L", L) - loss_at(res, "nope", L)
    if "nope_layerscale_4L" in rows:  # lab question 5: one lambda per layer
        layer = excess(res, "nope_layerscale_4L")[4 * L]
        out["one lambda per layer takes back (%)"] = 100 * (1 - layer / took["rise_4L"])
    head = Path(run) / "scales" / "head_4L.csv"
    h = head_entropy_near(ent["nope"], 4 * L)
    if head.exists() and h is not None:  # lab question 6: lower-entropy heads, larger lambda? (plot.py's Fig. 5)
        x, y = h.ravel(), read_head_table(head).ravel()
        rank = lambda v: np.argsort(np.argsort(v))  # noqa: E731  (no ties in real numbers)
        out["rank correlation, head entropy vs lambda"] = float(np.corrcoef(rank(x), rank(y))[0, 1])
    if {"nope_mask", "rope_mask"} <= set(rows):  # lab question 8: a sliding-window mask against recomputing
        for m in ("nope", "rope"):
            out[f"{m}: mask minus recomputed, at 4L (nats)"] = (loss_at(res, f"{m}_mask", 4 * L)
                                                                 - loss_at(res, f"{m}_window_L", 4 * L))
    return {k: float(v) for k, v in out.items()}


def ranges(runs, cfg):
    from tools.cli import read_json, write_json
    for r in runs:
        if not (Path(r) / "eval" / "results.json").exists():
            raise UserError(f"{r} is not a finished study: python reproduce.py --seed=N --out_dir={r}")
    seeds = [read_json(Path(r) / "nope" / "summary.json").get("seed", "?") for r in runs]
    numbers = [lab_numbers(r) for r in runs]
    keys = [k for k in numbers[0] if all(k in n for n in numbers)]
    print("| quantity | " + " | ".join(f"seed {s}" for s in seeds) + " | range |")
    print("|---|" + "---|" * (len(runs) + 1))
    for k in keys:
        v = [n[k] for n in numbers]
        digits = 1 if "%" in k else 2 if "(L)" in k or "lambda at" in k else 3
        cells = " | ".join(f"{x:.{digits}f}" for x in v)
        print(f"| {k} | {cells} | {min(v):.{digits}f} – {max(v):.{digits}f} |")
    if cfg.json:
        write_json(cfg.json, {"runs": [str(r) for r in runs], "seeds": seeds,
                              "numbers": {k: [n[k] for n in numbers] for k in keys}})


def main():
    args = sys.argv[1:]
    if any(a in ("-h", "--help") for a in args):
        parse_config(ClassroomConfig, ["-h"], description=__doc__)
    if not args:
        raise UserError(USAGE)
    command, rest = args[0], args[1:]
    folders = [a for a in rest if not a.startswith("--")]
    if command not in ("student", "grade", "ranges") or not folders or (len(folders) > 1 and command != "ranges"):
        raise UserError(USAGE)
    cfg = parse_config(ClassroomConfig, [a for a in rest if a.startswith("--")])
    if command == "ranges":
        return ranges(folders, cfg)
    tasks = read_tasks()
    ids = chosen(cfg, tasks)
    if command == "student":
        student(folders[0], ids, tasks)
    else:
        grade(folders[0], ids, tasks, cfg)


if __name__ == "__main__":
    run_main(main)
