"""
The grader (python tools/classroom.py grade / grade-all): a submission's task functions
checked by the project's own tests, where the student's code cannot reach the verdict.

    the snapshot   the project once, taken when grading starts (tools/kit/source.py): in a git
                   checkout the tracked files at HEAD; the tests, tasks.toml and the reference
                   functions all come from it, never from the live checkout
    per task       the submitted functions are taken by `ast` (a decorator or another def line
                   is refused) into a fresh copy of the snapshot without its tests, docs and
                   classroom files: the worker's copy. The judge (tools/kit/judge.py) runs the
                   task's tests from the snapshot, each graded function a stand-in that calls
                   the student's in the worker, inside the sandbox (tools/kit/sandbox.py)
    the verdict    every check the snapshot's tests hold for the task, each passed, failed or
                   not run (a skip, a crash, a timeout: failed); all or nothing per task,
                   unless tasks.toml gives the task partial_credit
    afterwards     every process the task started is killed; the checkout and the snapshot are
                   checked unchanged, else grading stops with one line

Seeds come from the teacher's secret and the whole graded text of the task (no secret: the
public seeds, which stored numbers can pass). The student's output shows no seed; the
teacher's console and a hidden field of results.json do.
"""

import ast
import hashlib
import json
import math
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tools.kit import sandbox
from tools.kit.source import (
    Refused,
    copy_tree,
    find_function,
    fingerprint,
    normalised,
    split_spec,
    submitted_function,
    take,
    take_snapshot,
    task_of,
    tests_command,
)

WORKER_LEAVES_OUT = ("tests", "docs", "classroom", ".github", ".ci", "out")  # no test, no reference
GRACE_S = 60  # the judge's own start-up and shut-down, beyond the task's limit
SHOWN = 3  # failed checks a task shows on the teacher's console (results.json has them all)


def read_tasks(path):
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    with open(path, "rb") as f:
        return {t["id"]: t for t in tomllib.load(f)["task"]}


def task_files(tasks):
    return sorted({split_spec(s)[0] for t in tasks.values() for s in t["functions"]})


def find_submission(sub, tasks):
    """The folder that holds the task files: sub itself, or the shallowest folder inside it
    that holds any (an upload nested in one folder, as GitHub's zip download gives). None if
    there is none."""
    names = task_files(tasks)
    queue = [Path(sub)]
    while queue:
        here = queue.pop(0)
        try:
            if any((here / n).is_file() for n in names):
                return here
            queue += sorted(
                p
                for p in here.iterdir()
                if p.is_dir() and not p.is_symlink() and not p.name.startswith((".", "__MACOSX"))
            )
        except OSError:
            continue
    return None


def seed_of(secret, tid, texts):
    """The seed offset of one task: from the secret and every graded text of the task."""
    if not secret:
        return 0  # the public seeds
    h = hashlib.sha256("\0".join([secret, tid, *texts]).encode("utf-8"))
    return int(h.hexdigest()[:8], 16)


def score_checks(task, checks):
    """Points for each check (the last takes the remainder) and the task's score."""
    points = task["points"]
    if not task.get("partial_credit", False):
        ok = bool(checks) and all(c["ok"] for c in checks)
        return points if ok else 0
    weights = [float(task.get("weights", {}).get(c["name"].split("[")[0], 1.0)) for c in checks]
    total = sum(weights) or 1.0
    shares = [round(points * w / total, 2) for w in weights]
    shares[-1] = round(points - sum(shares[:-1]), 2)
    return round(sum(s for s, c in zip(shares, checks) if c["ok"]), 2)


class Grader:
    """One snapshot and one sandbox method for any number of submissions. Use as a context
    manager: its temporary folder goes at the end."""

    def __init__(self, root, secret="", seed=-1, timeout=60, method="auto"):
        self.root, self.secret, self.seed, self.timeout = Path(root), secret, seed, timeout
        self.method, self.warning = sandbox.choose(method)
        self.tmp = Path(tempfile.mkdtemp(prefix="nanonope_grade_"))
        # the user method's worker reaches its copy (random names) but lists nothing
        os.chmod(self.tmp, 0o711)
        self.snap = self.tmp / "snapshot"
        self.snap.mkdir(mode=0o700)
        self.origin = take_snapshot(self.root, self.snap)
        self.tasks = read_tasks(self.snap / "classroom" / "tasks.toml")
        self.prints = {self.root: fingerprint(self.root), self.snap: fingerprint(self.snap)}
        # the project's own functions, normalised once: the copy flag compares with them
        self.shapes = {spec: normalised(self.project_function(spec))
                       for t in self.tasks.values() for spec in t["functions"]}
        sandbox.become_subreaper()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def describe(self):
        edited = self.origin["edited"]
        lines = [
            f"grading from {self.origin['source']}"
            + (f" (uncommitted edits not graded: {', '.join(edited)})" if edited else "")
            + f", sandbox {self.method}, {self.timeout} s a task"
        ]
        if self.warning:
            lines.append("warning: " + self.warning)
        if not self.secret and self.seed < 0:
            lines.append(
                "warning: no secret: the public seeds, which numbers stored from the public tests can pass"
            )
        return lines

    def project_function(self, spec):
        path, qualname = split_spec(spec)
        return find_function(ast.parse((self.snap / path).read_text(encoding="utf-8")), qualname)

    # --- one submission -------------------------------------------------------------

    def grade(self, sub, ids):
        """Results of each task in ids (dicts), in order: every task whose functions could be
        taken is checked by one judge, each in its own worker."""
        t0, sub = time.time(), Path(sub)
        results = {tid: self.prepare(self.tasks[tid], sub) for tid in ids}
        ready = {tid: r.pop("_job") for tid, r in results.items() if "_job" in r}
        try:
            if ready:
                checks, why = self.run_judge(ready)
                for tid, r in results.items():
                    if tid in ready:
                        self.verdict(r, self.tasks[tid], checks.get(tid, []), why)
        finally:
            for job in ready.values():
                shutil.rmtree(Path(job["copy"]).parent, ignore_errors=True)
        sandbox.kill_descendants(sandbox.student_ids()[0] if self.method == "user" else None)
        for folder, was in self.prints.items():
            if fingerprint(folder) != was:
                from tools.cli import UserError

                raise UserError(
                    f"{folder} changed while {sub} was graded: grading stopped (git status shows what)"
                )
        seconds = round(time.time() - t0, 1)
        return [r | {"seconds": r.get("seconds", seconds)} for r in results.values()]

    def prepare(self, task, sub):
        """The task's result so far, with "_job" (the worker's copy, the seed) when its functions
        were taken; else its score 0 and why."""
        tid = task["id"]
        result = {
            "id": tid,
            "title": task["title"],
            "max_score": task["points"],
            "score": 0,
            "passed": False,
            "seed": None,
            "copied": False,
            "checks": [],
            "output": "",
        }
        texts = {}
        for spec in task["functions"]:
            path, qualname = split_spec(spec)
            project = (self.snap / path).read_text(encoding="utf-8")
            try:
                submitted = (sub / path).read_text(encoding="utf-8")
                texts[spec] = (submitted, *submitted_function(submitted, qualname, project))
            except FileNotFoundError:
                return result | {"output": f"{path} is missing from the submission", "seconds": 0.0}
            except UnicodeDecodeError:
                return result | {"output": f"{path} is not UTF-8 text", "seconds": 0.0}
            except OSError as e:
                return result | {"output": f"{path} cannot be read ({e.strerror})", "seconds": 0.0}
            except Refused as e:
                return result | {"output": f"{path}: {e}", "seconds": 0.0}
        copied = [normalised(node) == self.shapes[spec] for spec, (_, _, node) in texts.items()]
        result["copied"] = all(copied)
        seed = result["seed"] = (
            self.seed
            if self.seed >= 0
            else seed_of(self.secret, tid, [t[1] for t in texts.values()])
        )
        work = self.tmp / secrets.token_hex(8)  # a name no other task's worker can guess
        copy = work / "task"
        copy_tree(self.snap, copy, leave_out=WORKER_LEAVES_OUT)
        for spec, (submitted, _, _) in texts.items():
            path, qualname = split_spec(spec)
            try:
                put = take(submitted, (copy / path).read_text(encoding="utf-8"), qualname)
            except Refused as e:
                shutil.rmtree(work, ignore_errors=True)
                return result | {"output": f"{path}: {e}", "seconds": 0.0}
            (copy / path).write_text(put, encoding="utf-8", newline="\n")
        (work / "root").mkdir()
        sandbox.make_readable(work)
        return result | {
            "_job": {
                "functions": task["functions"],
                "copy": str(copy),
                "seed": seed,
                "limit_s": self.timeout,
            }
        }

    def run_judge(self, jobs):
        """({task id: every check of the task with its outcome}, why when the tests did not run)."""
        judge = self.tmp / f"judge_{secrets.token_hex(8)}"
        judge.mkdir(mode=0o700)
        try:
            for tid, job in jobs.items():
                job["log"] = str(judge / f"worker_{tid}.log")
            spec = {"sandbox": self.method, "results": str(judge / "results.json"), "tasks": jobs}
            (judge / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
            env = {
                **sandbox.environment(str(judge)),
                "NANONOPE_JUDGE": str(judge / "spec.json"),
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            }
            cmd = tests_command("tools.kit.judge", jobs) + ["--tb=no", "--no-header"]
            limit = self.timeout * len(jobs) + GRACE_S
            try:
                proc = subprocess.run(
                    cmd,
                    cwd=self.snap,
                    env=env,
                    capture_output=True,
                    text=True,
                    encoding="utf-8",
                    errors="replace",
                    timeout=limit,
                )
                tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:]
            except subprocess.TimeoutExpired:
                tail = [f"the judge itself ran past {limit} s"]
            out = judge / "results.json"
            if not out.exists():
                return {}, "the tests did not run: " + " | ".join(tail)
            got = json.loads(out.read_text(encoding="utf-8"))
        finally:
            shutil.rmtree(judge, ignore_errors=True)
        checks = {}
        for name in got["collected"]:
            c = got["checks"].get(
                name, {"ok": False, "why": "not run: the check never reported", "seconds": 0.0}
            )
            checks.setdefault(task_of(name), []).append(
                {"name": name, "ok": bool(c["ok"]), "why": c["why"], "seconds": c["seconds"]}
            )
        return checks, ""

    @staticmethod
    def verdict(result, task, checks, why):
        result["checks"] = checks
        result["score"] = score_checks(task, checks) if checks else 0
        result["passed"] = bool(checks) and all(c["ok"] for c in checks)
        result["seconds"] = round(sum(c["seconds"] for c in checks), 1)
        failed = [c for c in checks if not c["ok"]]
        result["output"] = (
            (why or "no check of this task was found in the tests")
            if not checks
            else f"all {len(checks)} checks passed"
            if not failed
            else f"{len(checks) - len(failed)} of {len(checks)} checks passed; first failed: "
            f"{failed[0]['name']}: {failed[0]['why']}"
        )


# -----------------------------------------------------------------------------
# What the teacher and the student see


def console_lines(results):
    """The teacher's log: one line a task (with its seed), then each failed check."""
    lines = []
    for r in results:
        seed = "-" if r["seed"] is None else r["seed"]
        flag = "  COPY: the project's own function" if r.get("copied") else ""
        lines.append(
            f"{r['id']}  {'passed' if r['passed'] else 'failed':6}  {fmt(r['score']):>5}/{r['max_score']:<3}  "
            f"seed {seed:<10}  {r['seconds']:5.1f} s  {r['output']}{flag}"
        )
        failed = [c for c in r["checks"] if not c["ok"]]
        lines += [f"      fail  {c['name']}: {c['why'][:160]}" for c in failed[:SHOWN]]
        if len(failed) > SHOWN:
            lines.append(
                f"      ... and {len(failed) - SHOWN} more failed checks (every one in --json's output)"
            )
    return lines


def fmt(x):
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}"


def student_output(r):
    """What a student reads for one task: every check, pass or fail and why; no seed."""
    if not r["checks"]:
        return f"0/{r['max_score']}: {r['output']}"
    passed = sum(c["ok"] for c in r["checks"])
    head = f"{passed} of {len(r['checks'])} checks passed" + (
        "" if r["passed"] else " (all must pass for the points)" if r["score"] == 0 else ""
    )
    return "\n".join(
        [head]
        + [
            f"{'pass' if c['ok'] else 'FAIL'}  {c['name']}" + ("" if c["ok"] else f": {c['why']}")
            for c in r["checks"]
        ]
    )


def gradescope(results, tasks, seconds, note=""):
    """Gradescope's results.json: one visible test a task, a hidden one with the seed and the
    copy flag, the total and the time."""
    tests = []
    for r in results:
        t = tasks.get(r["id"], {})
        tests.append(
            {
                "name": f"{r['id']} {r['title']}",
                "score": r["score"],
                "max_score": r["max_score"],
                "output": student_output(r),
                "visibility": t.get("visibility", "visible"),
            }
        )
        tests.append(
            {
                "name": f"{r['id']} for the teacher",
                "score": 0,
                "max_score": 0,
                "visibility": "hidden",
                "output": f"seed {r['seed']}; copied: {'yes' if r.get('copied') else 'no'}; {r['output']}",
            }
        )
    total = sum(r["score"] for r in results)
    most = sum(r["max_score"] for r in results)
    return {
        "score": round(total, 2),
        "execution_time": math.ceil(seconds),
        "output": (note + "\n" if note else "") + f"{fmt(total)}/{most}",
        "tests": tests,
    }


def zero_results(ids, tasks, why):
    """Every requested task at 0, with why (a submission that could not be graded at all)."""
    return [
        {
            "id": t,
            "title": tasks[t]["title"],
            "max_score": tasks[t]["points"],
            "score": 0,
            "passed": False,
            "seed": None,
            "copied": False,
            "checks": [],
            "output": why,
            "seconds": 0.0,
        }
        for t in ids
    ]
