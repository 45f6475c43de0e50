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
                   a helper outside the function is refused) into a fresh copy of the snapshot
                   without its tests, docs and classroom files: the worker's copy. The judge
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
import tempfile
import threading
import time
from dataclasses import astuple
from pathlib import Path

from classroom import copyflag, sandbox
from classroom.report import plain, result
from classroom.source import (Refused, copy_tree, find_function, fingerprint, parse_text,
                              split_spec, submitted_function, take, take_snapshot, task_of,
                              tests_command)
from classroom.upload import UploadError, folders, holds, read_upload
from common import UserError

# what a task's copy leaves out: no test, no reference, no handout and none of the kit but the
# worker's own modules (remote.py and what it imports)
WORKER_LEAVES_OUT = ("tests", "docs", ".github", ".ci", "out")
WORKER_KEEPS = ("__init__.py", "remote.py", "wire.py", "sandbox.py", "report.py", "source.py")


def worker_leaves_out(snap):
    """WORKER_LEAVES_OUT, and every file of the snapshot's classroom/ but WORKER_KEEPS."""
    kit = Path(snap) / "classroom"
    return WORKER_LEAVES_OUT + tuple(f"classroom/{p.name}" for p in sorted(kit.iterdir())
                                     if p.name not in WORKER_KEEPS)
GRACE_S = 60  # the judge's own start-up and shut-down, beyond the task's limit


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
        self.lock, self.judges = threading.Lock(), set()
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
            + f", sandbox {self.method}, {self.timeout} s a task, worker memory "
            f"{self.limits.memory_mb} MB"
        ]
        if self.warning:
            lines.append("warning: " + self.warning)
        from classroom.source import python_gap  # this Python against the students' (source.py)
        if python_gap():
            lines.append("warning: " + python_gap())
        if not self.secret and self.seed < 0:
            lines.append("warning: no secret: the public seeds, which numbers stored from the "
                         "public tests can pass")
        return lines

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
        taken is checked by one judge, in one worker with a fresh process a task. Each result's
        "_prints" holds its fingerprints (grade-all compares students with them)."""
        t0, sub = time.time(), Path(sub)
        work = self.tmp / secrets.token_hex(8)  # a name no other submission's worker can guess
        (work / "copies").mkdir(parents=True)
        (work / "root").mkdir()
        try:
            results = {tid: self.prepare(self.tasks[tid], sub, work / "copies") for tid in ids}
            ready = {tid: r.pop("_job") for tid, r in results.items() if "_job" in r}
            if ready:
                sandbox.make_readable(work)
                checks, why = self.run_judge(ready, slot, work / "copies")
                for tid, r in results.items():
                    if tid in ready:
                        self.verdict(r, self.tasks[tid], checks.get(tid, []), why)
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
                copy_tree(self.snap, copy, leave_out=worker_leaves_out(self.snap))
                for spec, (submitted, _) in texts.items():
                    path, qualname = split_spec(spec)
                    put = take(submitted, (copy / path).read_text(encoding="utf-8"), qualname)
                    (copy / path).write_text(put, encoding="utf-8", newline="\n")
            except BaseException:
                shutil.rmtree(copy, ignore_errors=True)
                raise
        job = {"functions": task["functions"], "seed": seed, "limit_s": self.timeout,
               "stubs": stubs}
        return out | {"_job": job}

    def run_judge(self, jobs, slot, copies):
        """({task id: every check of the task with its outcome}, why when the tests did not run)."""
        judge = self.tmp / f"judge_{secrets.token_hex(8)}"
        judge.mkdir(mode=0o700)
        try:
            spec = {"sandbox": self.method, "limits": list(astuple(self.limits)), "slot": slot,
                    "results": str(judge / "results.json"), "copies": str(copies),
                    "log": str(judge / "worker.log"), "tasks": jobs}
            (judge / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
            env = {**sandbox.environment(str(judge)), "NANONOPE_JUDGE": str(judge / "spec.json"),
                   "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
            cmd = tests_command("classroom.judge", jobs) + ["--tb=no", "--no-header"]
            limit = self.timeout * len(jobs) + GRACE_S
            with self.lock:
                proc = subprocess.Popen(cmd, cwd=self.snap, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT)
                self.judges.add(proc.pid)
            try:
                out = proc.communicate(timeout=limit)[0].decode("utf-8", errors="replace")
                tail = out.strip().splitlines()[-1:]
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                tail = [f"the judge itself ran past {limit} s"]
            finally:
                with self.lock:
                    self.judges.discard(proc.pid)
                    # strays of this grading, none of another's
                    sandbox.kill_below(keep=self.judges)
            out = judge / "results.json"
            if not out.exists():
                return {}, "the tests did not run: " + plain(" | ".join(tail))
            got = json.loads(out.read_text(encoding="utf-8"))
        finally:
            shutil.rmtree(judge, ignore_errors=True)
        checks = {}
        for name in got["collected"]:
            c = got["checks"].get(
                name, {"ok": False, "why": "not run: the check never reported", "seconds": 0.0}
            )
            checks.setdefault(task_of(name), []).append(
                {"name": name, "ok": bool(c["ok"]), "why": plain(c["why"]),
                 "seconds": c["seconds"], "hidden": c.get("hidden", True)}
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
