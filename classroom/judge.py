"""
The judge: a pytest plugin that runs the tasks' tests with each graded function a StandIn for
the student's (classroom/remote.py), and writes every check's outcome to a file only the
grader reads. classroom/grade.py starts it once a submission, as

    NANONOPE_JUDGE=spec.json python -m pytest tests/test_paper.py -k "test_T1_ or test_T3_"
        -p classroom.judge

spec.json: {"sandbox": METHOD, "limits": [the sandbox.Limits fields], "slot": n, "results":
where to write, "copies": the folder the worker sees (_worker/, the copy it starts in, and the
running task's copy, T3/ ...), "staged": where each task's copy waits out of its sight, "log":
the worker's output, "first_only": the key's short form (one
check a task), "tasks": {"T1": {"functions": ["model.py:query_scale"], "seed": n, "limit_s": CPU
seconds, "backstop_s": seconds waited, "stubs": {function: its message}}, ...}}. No line of the
student's runs in this process: one worker process, inside the sandbox, forks a process for each
task in that task's copy (remote.Server), started when the task's first check runs and ended
when its last has run, and only data comes back from it. A function that is still its blank stub
(its body one raise of NotImplementedError) is not run: its stand-in raises that error here.
What the worker prints is kept up to Limits.log_kb in its log, and the rest cut (said at the
end).

Before each check the judge puts the stand-ins of that check's task in place (and the
project's own functions for every other task: a wrong T1 cannot sink T5) and sets the tests'
SEED to the task's seed. A check passes when its test passes; a skip, an error, or a check
that never reported is a failure. A check whose test reads SEED is marked hidden: the student
sees its reason without numbers (classroom/report.py).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from classroom import remote, sandbox
from classroom.report import plain
from classroom.source import resolve, task_of

SPEC = "NANONOPE_JUDGE"
SIGNALS = {
    signal.SIGKILL: "killed (SIGKILL)",
    getattr(signal, "SIGXCPU", -1): "past one process's CPU time limit (RLIMIT_CPU, --cpu_s)",
    getattr(signal, "SIGXFSZ", -1): "past its file size limit (--file_mb)",
    signal.SIGSEGV: "crashed (segmentation fault)",
}
JUDGE_MB = 4096  # the judge's own data bound (RLIMIT_DATA): a backstop only


class State:
    spec = None
    pool = None  # the submission's worker (remote.Pool)
    links = {}  # task id -> Link
    swaps = []  # (task id, function name, the project's own, its stand-in)
    current = None  # the task whose stand-ins are in place
    collected = []
    checks = {}
    hidden = set()  # checks whose inputs come from the seed


class Log:
    """What the worker prints, kept in its log up to `limit` bytes (the rest cut, and how much
    said at the end), and the last few KB kept in memory: the last line the worker printed
    before it ended, whatever was cut."""

    def __init__(self, path, limit):
        self.path, self.limit, self.tail, self.read_at = path, limit, b"", time.monotonic()

    def keep(self, pipe):
        kept = cut = 0
        with open(self.path, "wb") as log:
            while True:
                chunk = pipe.read1(1 << 16)
                if not chunk:
                    break
                self.read_at = time.monotonic()
                self.tail = (self.tail + chunk)[-4096:]
                room = max(0, self.limit - kept)
                log.write(chunk[:room])
                log.flush()
                kept += min(room, len(chunk))
                cut += max(0, len(chunk) - room)
            if cut:
                log.write(f"\n[{cut} more bytes printed, cut: "
                          f"the log keeps {self.limit} bytes]\n".encode())

    def last_line(self):
        """The last line printed, once the log has caught up (nothing read for 0.2 s; 3 s at
        most)."""
        start = time.monotonic()
        while time.monotonic() - self.read_at < 0.2 and time.monotonic() - start < 3:
            time.sleep(0.05)
        lines = self.tail.decode("utf-8", errors="replace").strip().splitlines()
        return plain(lines[-1], 200) if lines else ""


def keep_log(pipe, path, limit):
    """Copy what the worker prints to its log, at most limit bytes; say how much was cut."""
    Log(path, limit).keep(pipe)


def start_worker():
    """The submission's worker, in the sandbox, its stdin and stdout the pipes of the messages:
    (Popen, read fd, write fd, why a task's process or the worker ended)."""
    spec = State.spec
    limits = sandbox.Limits(*spec["limits"])
    argv = [sys.executable, "-m", "classroom.remote"]
    proc = subprocess.Popen(
        **sandbox.command(spec["sandbox"], spec["copies"], argv, limits, spec["slot"], "_worker"),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    log = Log(spec["log"], limits.log_kb << 10)
    threading.Thread(target=log.keep, args=(proc.stderr,), daemon=True).start()

    def ended(code):
        """Why the process ended: its exit code or signal, and the last line it printed."""
        if code is not None and code < 0:
            what = SIGNALS.get(-code, f"ended by signal {-code}")
        else:
            what = f"ended (exit code {code})"
        line = log.last_line()
        return f"the worker {what}" + (f": {line}" if line else "")

    return proc, proc.stdout.fileno(), proc.stdin.fileno(), ended


class Stub:
    """A graded function still its blank stub: raises, here, what it would raise in the worker."""

    def __init__(self, name, message):
        self.__name__, self.message = name, message

    def __call__(self, *args, **kwargs):
        raise remote.StudentError(f"NotImplementedError: {plain(self.message)}")

    def observe(self, args, kwargs, bound=None):
        self(*args, **kwargs)


def pytest_configure(config):
    if not os.environ.get(SPEC):
        return
    spec = State.spec = json.loads(Path(os.environ[SPEC]).read_text(encoding="utf-8"))
    limit_memory(JUDGE_MB)
    limits = sandbox.Limits(*spec["limits"])
    sandbox.become_subreaper()  # a worker's orphans come back here, and die with the session
    pool = State.pool = remote.Pool(start_worker)
    for tid, task in spec["tasks"].items():
        link = State.links[tid] = remote.Link(pool, tid, task["limit_s"], limits.memory_mb,
                                               task.get("backstop_s"))
        for name in task["functions"]:
            own = resolve(name)
            stub = task.get("stubs", {}).get(name)
            stand_in = (Stub(own.__name__, stub) if stub is not None
                        else remote.StandIn(link, name, own))
            State.swaps.append((tid, own.__name__, own, stand_in))
    if any(len(t.get("stubs", {})) < len(t["functions"]) for t in spec["tasks"].values()):
        pool.acquire()  # the worker imports PyTorch while pytest collects


def limit_memory(mb):
    """The judge's own bound: what it decodes from a worker is bounded message by message
    (classroom/wire.py); this data limit is the backstop beyond which it fails rather than
    take the machine's memory (a MemoryError here is the machine's failure, not the
    student's)."""
    try:
        import resource  # Unix only: the kit imports on Windows too
    except ImportError:
        return
    hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
    value = mb << 20 if hard == resource.RLIM_INFINITY else min(mb << 20, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (value, hard))


def show_copy(tid):
    """Only task tid's copy in the worker's view: the last task's copy taken away (its process
    has ended), tid's copied in from where the grader staged it, out of the worker's sight. A
    task's code never sees another task's copy, which holds the project's version of it."""
    copies, staged = Path(State.spec["copies"]), Path(State.spec["staged"])
    for old in copies.iterdir():
        if old.name != "_worker":
            shutil.rmtree(old)
    if tid and (staged / tid).is_dir():
        shutil.copytree(staged / tid, copies / tid)


def put_in_place(tid):
    """The stand-ins of task tid wherever a module holds the project's function (its own
    module, and any that imported it by name, test_paper among them); the project's own for
    the other tasks."""
    for t, name, own, stand_in in State.swaps:
        want = stand_in if t == tid else own
        for module in list(sys.modules.values()):
            if getattr(module, name, None) in (own, stand_in):
                setattr(module, name, want)


def pytest_collection_modifyitems(config, items):
    """The key's short form (spec "first_only", Grader.check_key): the first check of each
    task alone."""
    if State.spec is None or not State.spec.get("first_only"):
        return
    seen, keep = set(), []
    for item in items:
        if task_of(item.name) not in seen:
            seen.add(task_of(item.name))
            keep.append(item)
    config.hook.pytest_deselected(items=[i for i in items if i not in keep])
    items[:] = keep


def pytest_collection_finish(session):
    State.collected = [item.name for item in session.items]
    State.hidden = {item.name for item in session.items if reads_seed(item)}


def reads_seed(item):
    """Whether a check's test draws its inputs from SEED (then its numbers are hidden)."""
    code = getattr(getattr(item, "function", None), "__code__", None)
    return code is None or "SEED" in code.co_names


def pytest_runtest_setup(item):
    if State.spec is None:
        return
    tid = task_of(item.name)
    if tid != State.current:
        if State.current in State.links:
            State.links[State.current].stop()  # one worker at a time: its task is done
        show_copy(tid)
        put_in_place(tid)
        State.current = tid
    item.module.SEED = State.spec["tasks"][tid]["seed"]


def why(report, call):
    """The first line of what went wrong, plain and short (report.plain)."""
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        return plain("skipped, so not passed: " + reason.removeprefix("Skipped: "))
    exc = call.excinfo.value if call.excinfo is not None else None
    if exc is None:
        return "failed"
    try:
        lines = str(exc).strip().splitlines()
    except Exception:  # noqa: BLE001  (an exception whose str() fails)
        lines = []
    text = plain(lines[0]) if lines else ""
    if isinstance(exc, remote.StudentError):
        return text
    if isinstance(exc, AssertionError):
        return text or "a check failed"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if State.spec is not None and (report.when == "call" or not report.passed):
        old = State.checks.get(item.name)
        if old is None or old["ok"]:  # the first failure of a check is its reason
            exc = call.excinfo.value if call.excinfo is not None else None
            State.checks[item.name] = {
                "ok": report.passed and report.when == "call",
                "why": "" if report.passed else why(report, call),
                "seconds": round(report.duration, 2),
                "hidden": item.name in State.hidden,
                # the grader's own failures are the machine's: the task is graded again (a
                # test's set-up, the judge's memory bound, a failed allocation of PyTorch's)
                "machine": not report.passed and (
                    getattr(exc, "machine", False) or report.when == "setup"
                    or isinstance(exc, MemoryError)
                    or (isinstance(exc, RuntimeError) and "DefaultCPUAllocator" in str(exc))),
            }


def pytest_sessionfinish(session):
    for link in State.links.values():
        link.stop()
    if State.spec is None:
        return
    State.pool.kill()
    sandbox.kill_below()
    show_copy("")  # no copy left in the worker's view
    out = Path(State.spec["results"])
    tmp = out.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(
            {
                "collected": State.collected,
                "checks": State.checks,
                "calls": {t: link.calls for t, link in State.links.items()},
                "usage": {t: link.usage() for t, link in State.links.items() if link.calls},
            }
        ),
        encoding="utf-8",
    )
    os.replace(tmp, out)
