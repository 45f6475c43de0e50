"""
The judge: a pytest plugin that runs the tasks' tests with each graded function a StandIn for
the student's (tools/kit/remote.py), and writes every check's outcome to a file only the
grader reads. tools/kit/grade.py starts it once a submission, as

    NANONOPE_JUDGE=spec.json python -m pytest tests/test_paper.py -k "test_T1_ or test_T3_"
        -p tools.kit.judge

spec.json: {"sandbox": METHOD, "results": where to write, "tasks": {"T1": {"functions":
["model.py:query_scale"], "copy": the worker's copy, "seed": n, "limit_s": s, "log": the
worker's output}, ...}}. No line of the student's runs in this process: each task has its own
worker, started inside the sandbox in its own copy when the task's first check runs and
stopped when its last has run, and only data comes back from it.

Before each check the judge puts the stand-ins of that check's task in place (and the
project's own functions for every other task: a wrong T1 cannot sink T5) and sets the tests'
SEED to the task's seed. A check passes when its test passes; a skip, an error, or a check
that never reported is a failure.
"""

import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.kit import remote, sandbox
from tools.kit.source import task_of

SPEC = "NANONOPE_JUDGE"


class State:
    spec = None
    links = {}  # task id -> Link
    swaps = []  # (task id, function name, the project's own, its stand-in)
    current = None  # the task whose stand-ins are in place
    collected = []
    checks = {}


def start_worker(kind, task):
    """The task's worker, in the sandbox, its stdin and stdout the pipes of the messages:
    (Popen, read fd, write fd, tail)."""
    log = open(task["log"], "wb")
    argv = [sys.executable, "-m", "tools.kit.remote"]
    proc = subprocess.Popen(**sandbox.command(kind, task["copy"], argv), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=log)
    log.close()

    def tail():
        """The last line the worker printed (an import-time error's last line)."""
        with open(task["log"], "rb") as f:
            f.seek(max(0, os.path.getsize(task["log"]) - 4096))
            lines = f.read().decode("utf-8", errors="replace").strip().splitlines()
        return lines[-1][:300] if lines else ""

    return proc, proc.stdout.fileno(), proc.stdin.fileno(), tail


def pytest_configure(config):
    spec = State.spec = json.loads(Path(os.environ[SPEC]).read_text(encoding="utf-8"))
    for tid, task in spec["tasks"].items():
        start = lambda task=task: start_worker(spec["sandbox"], task)  # noqa: E731
        link = State.links[tid] = remote.Link(start, task["limit_s"])
        for name in task["functions"]:
            path, _, qualname = name.partition(":")
            owner = importlib.import_module(path.removesuffix(".py").replace("/", "."))
            for part in qualname.split(".")[:-1]:
                owner = getattr(owner, part)
            last = qualname.split(".")[-1]
            own = getattr(owner, last)
            State.swaps.append((tid, last, own, remote.StandIn(link, name, own)))
    if State.links:  # the first task's worker imports PyTorch while pytest collects
        next(iter(State.links.values()))._open()


def put_in_place(tid):
    """The stand-ins of task tid wherever a module holds the project's function (its own
    module, and any that imported it by name, test_paper among them); the project's own for
    the other tasks."""
    for t, name, own, stand_in in State.swaps:
        want = stand_in if t == tid else own
        for module in list(sys.modules.values()):
            if getattr(module, name, None) in (own, stand_in):
                setattr(module, name, want)


def pytest_collection_finish(session):
    State.collected = [item.name for item in session.items]


def pytest_runtest_setup(item):
    tid = task_of(item.name)
    if tid != State.current:
        if State.current in State.links:
            State.links[State.current].stop()  # one worker at a time: its task is done
        put_in_place(tid)
        State.current = tid
        link = State.links.get(tid)
        if link is not None and link.deadline is None:
            # the task's clock starts at its first check
            link.deadline = time.monotonic() + link.limit_s
    item.module.SEED = State.spec["tasks"][tid]["seed"]


def why(report, call):
    """The first line of what went wrong."""
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        return "skipped, so not passed: " + reason.removeprefix("Skipped: ")
    exc = call.excinfo.value if call.excinfo is not None else None
    if exc is None:
        return "failed"
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    if isinstance(exc, remote.StudentError):
        return text
    if isinstance(exc, AssertionError):
        return text or "a check failed"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.when == "call" or not report.passed:
        old = State.checks.get(item.name)
        if old is None or old["ok"]:  # the first failure of a check is its reason
            State.checks[item.name] = {
                "ok": report.passed and report.when == "call",
                "why": "" if report.passed else why(report, call),
                "seconds": round(report.duration, 2),
            }


def pytest_sessionfinish(session):
    for link in State.links.values():
        link.stop()
    if State.spec is None:
        return
    out = Path(State.spec["results"])
    tmp = out.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(
            {
                "collected": State.collected,
                "checks": State.checks,
                "calls": {t: link.calls for t, link in State.links.items()},
            }
        ),
        encoding="utf-8",
    )
    os.replace(tmp, out)
