"""
The grader (python -m classroom grade / grade-all): a submission's task functions
checked by the project's own tests, where the student's code cannot reach the verdict.

    the snapshot   the project once, taken when grading starts (classroom/source.py): in a git
                   checkout the tracked files at HEAD; the tests, tasks.toml and the reference
                   functions all come from it, never from the live checkout
    the upload     read as data (classroom/upload.py): regular files inside it only, each
                   bounded; any error reading, parsing or normalising a file is a 0 for its
                   tasks, with the reason
    per task       the submitted functions are taken by `ast` (a decorator, another def line or
                   a helper outside the function is refused) into the worker's copy: the
                   modules the graded functions import (an allow-list), every other task's
                   function blank but those the task uses (worker_copy). The judge
                   (classroom/judge.py) runs the task's tests from the snapshot, each graded
                   function a stand-in that calls the student's in the worker, inside the
                   sandbox and its bounds (classroom/sandbox.py)
    the verdict    every check the snapshot's tests hold for the task, each passed, failed or
                   not run (a skip, a crash, a timeout: failed); all or nothing per task,
                   unless tasks.toml gives the task partial_credit
    afterwards     every process the grading started is killed; the checkout and the snapshot
                   are checked unchanged, else grading stops with one line

Seeds come from the teacher's secret and the whole graded text of the task (no secret: the
public seeds, which stored numbers can pass); the edge cases each handout names run in every
grading whatever the seed. The student's output shows no seed and no number of a hidden case;
the teacher's console and a hidden field of results.json do (classroom/report.py).
A Grader may grade several submissions at once from threads (grade-all), each with its slot.
"""

import ast
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import astuple
from pathlib import Path

from classroom import copyflag, sandbox
from classroom.report import plain, result
from classroom.source import (Refused, blank, find_function, fingerprint, parse_text,
                              python_gap, split_spec, submitted_function, take, take_snapshot,
                              task_of, tests_command)
from classroom.upload import UploadError, folders, holds, read_upload
from common import UserError

# What a task's copy holds (an allow-list): the modules the graded functions import and the
# worker's own (remote.py and what it imports). No test, no reference, no handout, none of the
# rest of the kit, no study code (some of it computes a task's answer another way).
WORKER_HOLDS = ("model.py", "families.py", "search_scales.py", "evaluate.py", "common.py",
                "data/__init__.py", "classroom/__init__.py", "classroom/remote.py",
                "classroom/wire.py", "classroom/sandbox.py", "classroom/report.py",
                "classroom/source.py")


def worker_copy(snap, dst, tasks, tid=None):
    """The worker's copy of the snapshot at dst: WORKER_HOLDS, with every task function blanked
    but those of task tid and of the tasks it `uses` (tasks.toml: T5's model calls T1), and with
    the project's functions that compute tid's answer another way (its `also_blank`) blanked
    too. So no copy holds the project's solution of a task its student's code runs in, and a
    task's copy is in the worker only while that task runs (judge.py), so no sibling copy does
    either. tid None: the copy the worker starts in, every task function blank."""
    keep = set() if tid is None else {tid, *tasks[tid].get("uses", [])}
    blanks = {}
    for t, task in tasks.items():
        for spec in task["functions"] if t not in keep else []:
            blanks.setdefault(split_spec(spec)[0], []).append(split_spec(spec)[1])
    for spec in [] if tid is None else tasks[tid].get("also_blank", []):
        blanks.setdefault(split_spec(spec)[0], []).append(split_spec(spec)[1])
    for rel in WORKER_HOLDS:
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        text = (Path(snap) / rel).read_text(encoding="utf-8")
        if rel in blanks:
            text = blank(text, blanks[rel], lambda name: f"{name}: not part of this task")
        (dst / rel).write_text(text, encoding="utf-8", newline="\n")


GRACE_S = 60  # the judge's own start-up and shut-down, beyond the task's limit
WALL = 4  # the judge's own wall-clock bound: WALL times each task's backstop, plus GRACE_S


class MachineFailure(UserError):
    """Grading ran, but the machine failed a task twice: the teacher must grade it again (exit
    status 3, after everything else was written)."""

    code = 3


def read_tasks(path):
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: requirements.txt names tomli there
        import tomli as tomllib
    with open(path, "rb") as f:
        return {t["id"]: t for t in tomllib.load(f)["task"]}


def task_files(tasks):
    return sorted({split_spec(s)[0] for t in tasks.values() for s in t["functions"]})


def stub_message(node):
    """The message of a function that is still its blank stub (its body, after the docstring,
    one `raise NotImplementedError(...)` of a constant), or None."""

    body = node.body[1:] if (node.body and isinstance(node.body[0], ast.Expr)
                             and isinstance(node.body[0].value, ast.Constant)
                             and isinstance(node.body[0].value.value, str)) else node.body
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].cause is not None:
        return None
    exc = body[0].exc
    if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
        return ""
    if (isinstance(exc, ast.Call) and isinstance(exc.func, ast.Name)
            and exc.func.id == "NotImplementedError" and not exc.keywords and len(exc.args) <= 1
            and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in exc.args)):
        return exc.args[0].value if exc.args else ""
    return None


def choose_submission(sub, tasks, most=20):
    """(the folder of the upload to grade, a line saying which and why, or "" when it is the
    upload itself and alone): among the folders holding a task file (at most `most`, shallowest
    first), the one where most task functions are written (not their blank stubs), then the one
    holding most task files, then the shallowest. None when no folder holds a task file."""

    names, found = task_files(tasks), []
    for order, here in enumerate(folders(sub)):
        present = [n for n in names if holds(here, n)]
        if not present:
            continue
        written = 0
        for spec in (s for t in tasks.values() for s in t["functions"]):
            path, qualname = split_spec(spec)
            if path in present:
                try:
                    node = find_function(parse_text(read_upload(here, path)), qualname)
                    written += node is not None and stub_message(node) is None
                # unreadable: read and refused again, with its reason, when graded
                except Exception:  # noqa: BLE001
                    pass
        found.append((written, len(present), -order, here))
        if len(found) >= most:
            break
    if not found:
        return None, ""
    found.sort(key=lambda f: f[:3], reverse=True)
    best, rest = found[0], found[1:]

    def rel(p):
        return (Path(p).relative_to(sub).as_posix() or ".") if p != Path(sub) else "."

    if not rest and best[3] == Path(sub):
        return best[3], ""
    line = f"graded the folder {plain(rel(best[3]), 200)}: {best[0]} task functions written there"
    if rest:
        line += "; also found " + ", ".join(f"{plain(rel(f[3]), 80)} ({f[0]} written)"
                                            for f in rest[:3])
    return best[3], line


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
    """One snapshot, one sandbox method and its bounds, for any number of submissions. Use as a
    context manager: its temporary folder goes at the end."""

    def __init__(self, root, secret="", seed=-1, timeout=60, method="auto",
                 limits=sandbox.Limits()):
        self.root, self.secret, self.seed, self.timeout = Path(root), secret, seed, timeout
        self.method, self.warning = sandbox.choose(method)
        self.limits = limits
        self.tmp = Path(tempfile.mkdtemp(prefix="nanonope_grade_"))
        try:  # a failure here leaves no temporary folder behind
            # the worker (another uid) reaches its copy (random names) but lists nothing
            os.chmod(self.tmp, 0o711)
            self.snap = self.tmp / "snapshot"
            self.snap.mkdir(mode=0o700)
            self.origin = take_snapshot(self.root, self.snap)
            self.tasks = read_tasks(self.snap / "classroom" / "tasks.toml")
            self.prints = {self.root: fingerprint(self.root), self.snap: fingerprint(self.snap)}
            # the project's own functions, fingerprinted once: the copy flag compares with them
            self.own = {tid: self.task_prints({s: self.project_function(s) for s in t["functions"]})
                        for tid, t in self.tasks.items()}
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        sandbox.become_subreaper()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        sandbox.kill_below()  # every grading has ended: whatever is left below is a stray
        shutil.rmtree(self.tmp, ignore_errors=True)

    def describe(self):
        edited = self.origin["edited"]
        lines = [
            f"grading from {self.origin['source']}"
            + (f" (uncommitted edits not graded: {', '.join(edited)})" if edited else "")
            + f", sandbox {self.method}, {self.timeout} s a task, worker memory "
            f"{self.limits.memory_mb} MB"
        ]
        if self.warning:
            lines.append("warning: " + self.warning)
        if python_gap():
            lines.append("warning: " + python_gap())
        if not self.secret and self.seed < 0:
            lines.append("warning: no secret: the public seeds, which numbers stored from the "
                         "public tests can pass")
        return lines

    def check_key(self, ids):
        """Before any student: the project's own functions, the key, graded in the same sandbox
        and environment, the first check of each task in ids (about 10 s). A key that fails is
        the grader's environment, not a student (a PyTorch the worker cannot import, say): one
        line for the teacher, and no student is graded (UserError)."""
        work = self.tmp / f"key_{secrets.token_hex(8)}"
        for part in ("staged", "copies", "root"):
            (work / part).mkdir(parents=True)
        try:
            jobs = {}
            for tid in ids:
                r = self.prepare(self.tasks[tid], self.snap, work / "staged")
                if "_job" not in r:
                    raise UserError(f"the key: {tid}: {r['output']}")
                jobs[tid] = r["_job"]
            worker_copy(self.snap, work / "copies" / "_worker", self.tasks)
            sandbox.make_readable(work)
            checks, why, _ = self.run_judge(jobs, 0, work, first_only=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        failed = [f"{tid}: {c['name']}: {c['why']}" for tid in ids for c in checks.get(tid, [])
                  if not c["ok"]] + [f"{tid}: no check ran ({why})" for tid in ids
                                     if not checks.get(tid)]
        if failed:
            raise UserError(
                f"the project's own functions fail in this grader (sandbox {self.method}, "
                f"{sys.executable}): {plain(failed[0], 400)}; no student was graded: fix the "
                "environment (classroom/README.md, 'The teacher's environment') and grade again")

    def project_function(self, spec):
        path, qualname = split_spec(spec)
        return find_function(parse_text((self.snap / path).read_text(encoding="utf-8")), qualname)

    @staticmethod
    def task_prints(nodes):
        """A task's fingerprints: the union of its functions' (classroom/copyflag.py)."""
        out = set()
        for spec, node in nodes.items():
            out |= {(spec, h) for h in copyflag.fingerprints(node)}
        return out

    # --- one submission -------------------------------------------------------------

    def grade(self, sub, ids, slot=0):
        """Results of each task in ids (dicts), in order: every task whose functions could be
        taken is checked by one judge, in one worker with a fresh process a task. A task that
        the machine failed (a check marked so: remote.MachineError) is graded once more; failed
        again, its result says so ("machine"), with no score. Each result's "_prints" holds its
        fingerprints (grade-all compares students with them)."""
        t0, sub = time.time(), Path(sub)
        work = self.tmp / secrets.token_hex(8)  # a name no other submission's worker can guess
        for part in ("staged", "copies", "root"):
            (work / part).mkdir(parents=True)
        try:
            results = {tid: self.prepare(self.tasks[tid], sub, work / "staged") for tid in ids}
            ready = {tid: r.pop("_job") for tid, r in results.items() if "_job" in r}
            for attempt in range(2):
                if not ready:
                    break
                worker_copy(self.snap, work / "copies" / "_worker", self.tasks)
                sandbox.make_readable(work)
                os.chmod(work / "staged", 0o700)  # the judge's alone until a task begins
                checks, why, machine = self.run_judge(ready, slot, work)
                for tid in ready:
                    self.verdict(results[tid], self.tasks[tid], checks.get(tid, []), why)
                    if attempt and machine.get(tid):  # twice: not graded, and the teacher told
                        results[tid] |= {"machine": machine[tid], "score": 0, "passed": False,
                                         "output": f"NOT GRADED: the machine failed it twice "
                                         f"({machine[tid]}); grade it again"}
                ready = {tid: job for tid, job in ready.items() if machine.get(tid)}
        finally:
            shutil.rmtree(work, ignore_errors=True)
        for folder, was in self.prints.items():
            if fingerprint(folder) != was:

                raise UserError(f"{folder} changed while {plain(sub, 200)} was graded: grading "
                                "stopped (git status shows what)")
        seconds = round(time.time() - t0, 1)
        return [r | {"seconds": r.get("seconds", seconds)} for r in results.values()]

    def prepare(self, task, sub, copies):
        """The task's result so far, with "_job" (its seed, and its functions still blank stubs)
        when its functions were taken, in copies/<task id>; else its score 0 and why. Nothing
        the upload holds stops the grading: any error in reading, parsing or normalising it is
        this task's 0, with the reason."""
        try:
            return self._prepare(task, sub, Path(copies) / task["id"])
        except (Refused, UploadError) as e:
            return result(task) | {"output": plain(e, 600), "seconds": 0.0}
        except FileNotFoundError as e:
            return result(task) | {"output": f"{Path(e.filename).name} is missing from the "
                                   "submission", "seconds": 0.0}
        except Exception as e:  # noqa: BLE001  (RecursionError, MemoryError, OSError ...)
            return result(task) | {"output": f"the upload could not be read as Python "
                                   f"({type(e).__name__}: {plain(e, 200)})", "seconds": 0.0}

    def _prepare(self, task, sub, copy):
        texts, nodes, stubs = {}, {}, {}
        for spec in task["functions"]:
            path, qualname = split_spec(spec)
            submitted = read_upload(sub, path)
            project = (self.snap / path).read_text(encoding="utf-8")
            text, nodes[spec] = submitted_function(submitted, qualname, project)
            texts[spec] = (submitted, text)
            if stub_message(nodes[spec]) is not None:
                stubs[spec] = stub_message(nodes[spec])
        out = result(task)
        out["_prints"] = self.task_prints(nodes)  # a blank stub has too few to be compared
        share = copyflag.similarity(out["_prints"], self.own[task["id"]])
        if share >= copyflag.FLAG:
            out["copied"] = f"the project's ({share:.2f})"
        seed = out["seed"] = (self.seed if self.seed >= 0
                              else seed_of(self.secret, task["id"], [t for _, t in texts.values()]))
        if len(stubs) < len(texts):  # a worker runs some of it: its copy
            try:
                worker_copy(self.snap, copy, self.tasks, task["id"])
                for spec, (submitted, _) in texts.items():
                    path, qualname = split_spec(spec)
                    put = take(submitted, (copy / path).read_text(encoding="utf-8"), qualname)
                    (copy / path).write_text(put, encoding="utf-8", newline="\n")
            except BaseException:
                shutil.rmtree(copy, ignore_errors=True)
                raise
        job = {"functions": task["functions"], "seed": seed, "limit_s": self.timeout,
               "backstop_s": 3 * self.timeout, "stubs": stubs}
        return out | {"_job": job}

    def run_judge(self, jobs, slot, work, first_only=False):
        """({task id: every check of the task with its outcome}, why when the tests did not run,
        {task id: why the machine failed it}). The judge moves each task's staged copy into the
        worker's view when the task starts and takes it away when it ends (judge.py)."""
        judge = self.tmp / f"judge_{secrets.token_hex(8)}"
        judge.mkdir(mode=0o700)
        try:
            spec = {"sandbox": self.method, "limits": list(astuple(self.limits)), "slot": slot,
                    "results": str(judge / "results.json"), "copies": str(work / "copies"),
                    "staged": str(work / "staged"), "log": str(judge / "worker.log"),
                    "first_only": first_only, "tasks": jobs}
            (judge / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
            env = {**sandbox.environment(str(judge)), "NANONOPE_JUDGE": str(judge / "spec.json"),
                   "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
            cmd = tests_command("classroom.judge", jobs) + ["--tb=no", "--no-header"]
            limit = WALL * sum(job["backstop_s"] for job in jobs.values()) + GRACE_S
            proc = subprocess.Popen(cmd, cwd=self.snap, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT)
            try:
                out = proc.communicate(timeout=limit)[0].decode("utf-8", errors="replace")
                tail = out.strip().splitlines()[-1:]
            except subprocess.TimeoutExpired:
                sandbox.kill_tree(proc.pid)  # this judge's tree alone: another grading's lives
                proc.communicate()
                tail = [f"the machine's failure: the judge itself ran past {limit} s"]
            out = judge / "results.json"
            if not out.exists():
                why = "the tests did not run: " + plain(" | ".join(tail))
                return {}, why, {tid: why for tid in jobs}
            got = json.loads(out.read_text(encoding="utf-8"))
        finally:
            shutil.rmtree(judge, ignore_errors=True)
        checks, machine = {}, {}
        for name in got["collected"]:
            c = got["checks"].get(
                name, {"ok": False, "why": "not run: the check never reported", "seconds": 0.0,
                       "machine": True}
            )
            tid = task_of(name)
            checks.setdefault(tid, []).append(
                {"name": name, "ok": bool(c["ok"]), "why": plain(c["why"]),
                 "seconds": c["seconds"], "hidden": c.get("hidden", True)}
            )
            if c.get("machine") and tid not in machine:
                machine[tid] = plain(c["why"])
        for tid, cs in checks.items():  # a task the student already failed is theirs: a 0
            if any(not c["ok"] and not got["checks"].get(c["name"], {}).get("machine", True)
                   for c in cs):
                machine.pop(tid, None)
        for tid, used in got.get("usage", {}).items():
            for c in checks.get(tid, []):
                c["usage"] = plain(used)
        return checks, "", machine

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


def limits_of(cfg):
    """The worker's bounds (classroom/sandbox.py's Limits) from the options."""
    for key in ("timeout", "memory_mb", "processes", "file_mb", "log_kb"):
        if getattr(cfg, key) < 1:
            raise UserError(f"--{key} must be at least 1, got {getattr(cfg, key)}")
    cpu = cfg.cpu_s or 2 * cfg.timeout + 30
    return sandbox.Limits(cfg.memory_mb, cfg.processes, cfg.file_mb, cpu, sandbox.Limits.tmpfs_mb,
                          cfg.log_kb)


def secret_of(cfg):
    return cfg.secret or os.environ.get("NANONOPE_SECRET", "")
