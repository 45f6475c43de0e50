"""
The wall between a task's tests and a student's code (python -m classroom grade).

The tests (tests/test_paper.py) run in the judge, a pytest process of the teacher's that never
runs a line a student wrote. There each graded function is a StandIn: calling it sends the
arguments to the worker, a process inside the sandbox (classroom/sandbox.py) in a copy of the
project holding the student's functions; the worker makes the call and sends back data only
(classroom/wire.py). So the verdict, the expected values and the tests' frames stay where the
student's code cannot reach them. After each call the judge also finds out:
  - what the function did to its arguments: the worker sends back every tensor, array, list
    and dict it was given, and a call that changed one in place fails (no graded function of
    the project changes its inputs);
  - what it did to a model: a model crosses as its config, weights, gradients, requires_grad
    flags and train/eval mode; the worker builds its own, and the judge's model takes the
    worker's state back after the call (and its mode and flags before each item an iterator
    gives), so a test sees what the function did to it, while it ran too.
An iterator (batches) is asked for each item in the judge; torch.autocast and
contextlib.nullcontext are made again in the worker. The judge's grad mode and CPU autocast
state hold in the worker during the call.

observe(fn, ...) makes a call under an Observer (the largest floating-point tensor made, and
whether an SDPA kernel ran) in the process that runs fn. Such checks of how a function
computes, and the arguments and states the worker reports, come from beside the student's code,
so a determined student could forge them (classroom/README.md says so); results are compared
in the judge.

    python -m classroom.remote      the worker (started by the judge; its messages on stdin/stdout)
"""

import contextlib
import inspect
import io
import os
import shutil
import struct
import sys
import threading
import time

from classroom.report import plain
from classroom.source import resolve
from classroom.wire import (Budget, Reader, WireError, context, from_wire, load_model_state,
                            model_state, models_of, modes, receive, send, to_wire, under)


class StudentError(Exception):
    """In the judge: what the student's function raised, or why it gave nothing back."""

    machine = False  # True: the machine's failure, not the student's (the grader retries it)


class MachineError(StudentError):
    """In the judge: a task ended by something its own use of the machine did not cause (the
    backstop with CPU time to spare, a kill the grader did not send)."""

    machine = True


class TaskEnded(Exception):
    """In the judge: the task's process ended (its exit status) and the worker said so."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code if isinstance(code, int) else None


# -----------------------------------------------------------------------------
# How a function computes: seen from inside the process that runs it

SDPA_NAMES = ("scaled_dot_product", "flash_attention", "efficient_attention")


def make_observer():
    """A context manager recording what a call made: `largest`, the most elements of any
    floating-point tensor an operation returned, `shape` its shape, and `sdpa`, whether a fused
    attention kernel (scaled_dot_product_attention, by any of its names) ran."""
    import torch  # the worker sets its bounds before PyTorch loads (main)
    # the worker sets its bounds before PyTorch loads (main)
    from torch.overrides import TorchFunctionMode
    # the worker sets its bounds before PyTorch loads (main)
    from torch.utils._python_dispatch import TorchDispatchMode

    class Observer(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.largest, self.shape, self.sdpa = 0, (), False
            observer = self

            class Functions(TorchFunctionMode):  # F.scaled_dot_product_attention, before dispatch
                def __torch_function__(self, func, types, args=(), kwargs=None):
                    observer.sdpa |= any(s in getattr(func, "__name__", "") for s in SDPA_NAMES)
                    return func(*args, **(kwargs or {}))

            self.functions = Functions()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.sdpa |= any(s in str(func) for s in SDPA_NAMES)
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if (isinstance(t, torch.Tensor) and t.is_floating_point()
                        and t.numel() > self.largest):
                    self.largest, self.shape = t.numel(), tuple(t.shape)
            return out

        def __enter__(self):
            self.functions.__enter__()
            return super().__enter__()

        def __exit__(self, *exc):
            super().__exit__(*exc)
            self.functions.__exit__(*exc)

        def seen(self):
            return {"largest": self.largest, "shape": list(self.shape), "sdpa": self.sdpa}

    return Observer()


def observe(fn, *args, bound=None, **kwargs):
    """(fn(*args, **kwargs), what the call made: {"largest", "shape", "sdpa", "bound"}),
    observed in the process that runs fn: here for the project's own function, in the worker
    for a student's. bound: the most values the test allows a tensor (kept for the student
    copy's replay, which checks the same bound)."""
    if hasattr(fn, "observe"):  # a StandIn (the grader) or a Recorder (classroom/snapshots.py)
        out, seen = fn.observe(args, kwargs, bound)
    else:
        with make_observer() as observer:
            out = fn(*args, **kwargs)
        seen = observer.seen()
    return out, seen | {"bound": bound}


def project_version(fn):
    """The project's own version of a graded function, kept beside its StandIn in the judge
    (the tests that compare with the project's results need it); None outside the grader."""
    return getattr(fn, "project_version", None)


# -----------------------------------------------------------------------------
# The judge's side


class Refs:
    """The models and iterators of one call, by number."""

    def __init__(self):
        self.items = []

    def add(self, obj, kind):
        for n, (o, _) in enumerate(self.items):
            if o is obj:
                return n
        self.items.append((obj, kind))
        return len(self.items) - 1

    def models(self):
        return {n: model_state(o) for n, (o, kind) in enumerate(self.items) if kind == "model"}

    def take_flags(self, flags):
        """The judge's models take the worker's train/eval mode and requires_grad flags."""
        for n, (o, kind) in enumerate(self.items):
            if kind == "model":
                params = list(o.parameters())
                if len(flags[n]["requires_grad"]) != len(params):
                    raise WireError("flags that do not fit the model")
                o.train(bool(flags[n]["training"]))
                for p, flag in zip(params, flags[n]["requires_grad"]):
                    p.requires_grad_(bool(flag))

    def take_back(self, states):
        """The judge's models take the worker's state."""
        if not isinstance(states, dict):
            raise WireError("models' states that are not a table")
        for n, (o, kind) in enumerate(self.items):
            if kind == "model":
                if n not in states:
                    raise WireError("a model's state is missing")
                load_model_state(o, states[n])


def data_of(obj):
    """obj's data (tensors, arrays, numbers, strings, and containers of them); None for the
    rest (a model, an iterator, a context)."""
    import numpy as np  # the worker sets its bounds before PyTorch loads (main)
    import torch  # the worker sets its bounds before PyTorch loads (main)

    if isinstance(obj, (list, tuple)):
        return type(obj)(data_of(x) for x in obj) if isinstance(obj, list) else tuple(
            data_of(x) for x in obj)
    if isinstance(obj, dict):
        return {k: data_of(v) for k, v in obj.items() if isinstance(k, (str, int, float))}
    if obj is None or isinstance(obj, (bool, int, float, str, torch.Tensor, np.ndarray,
                                       np.generic)):
        return obj
    return None


def same(a, b):
    """Whether b is a as the judge passed it: the same types and values, bit for bit."""
    import numpy as np  # the worker sets its bounds before PyTorch loads (main)
    import torch  # the worker sets its bounds before PyTorch loads (main)

    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and bool((a.eq(b) | (a.isnan() & b.isnan()) if a.is_floating_point()
                          else a.eq(b)).all()))
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f")))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if a is None or isinstance(a, (bool, int, float, str, np.generic)):
        return type(a) is type(b) and (a == b or a != a and b != b)
    return True  # not data: a model (its state is mirrored) or an iterator


class StandIn:
    """Stands for a student's function in the judge: each call runs in the worker."""

    def __init__(self, link, spec, project_version):
        self.link, self.spec, self.project_version = link, spec, project_version
        self.__name__ = spec.rpartition(":")[2].rpartition(".")[2]
        self.__doc__ = getattr(project_version, "__doc__", None)

    def __call__(self, *args, **kwargs):
        return self.link.call(self, args, kwargs)[0]

    def observe(self, args, kwargs, bound=None):
        return self.link.call(self, args, kwargs, observe=True)

    def changed(self, args, kwargs, after):
        """The names of the arguments the call changed in place."""

        try:
            bound = inspect.signature(self.project_version).bind(*args, **kwargs).arguments
            names = list(bound)
        except (TypeError, ValueError):
            names = [f"argument {i + 1}" for i in range(len(args))] + list(kwargs)
        given = list(args) + list(kwargs.values())
        back = list(after[0]) + [after[1].get(k) for k in kwargs]
        return [n for n, a, b in zip(names, given, back) if not same(data_of(a), b)]


class Pool:
    """The judge's one worker process for a submission: started at its first task, it forks a
    fresh process for each task (Server below), so PyTorch is imported once a submission, not
    once a task. A task that ends well gives the worker back; a failure that leaves it in doubt
    (a crash mid-message, a timeout, a broken message) kills it, and the next task starts
    another."""

    def __init__(self, start):
        self.start = start  # () -> (Popen, read fd, write fd, a function giving why it ended)
        self.proc = None

    def acquire(self):
        if self.proc is None or self.proc.poll() is not None:
            self.kill()
            self.proc, rfd, self.wfd, self.ended = self.start()
            self.reader, self.ready = Reader(rfd), False
        return self

    def wait_ready(self, deadline):
        """Wait for the worker's "ready" (PyTorch imported), so that what a task is charged
        starts after the import."""
        if not self.ready:
            kind, _ = receive(self.reader, deadline)
            if kind != "ready":
                raise WireError(f"a worker that began with {plain(kind, 40)!r}")
            self.ready = True

    def release(self, deadline):
        """End the task's process; keep the worker if it answers in time, else kill it."""
        if self.proc is None:
            return
        try:
            send(self.wfd, ("end", None))
            while True:
                kind, _ = receive(self.reader, deadline)
                if kind == "free":
                    return
        except (OSError, EOFError, TimeoutError, WireError, ValueError, TypeError):
            self.kill()

    def kill(self):
        if self.proc is not None:
            from classroom.sandbox import kill_tree  # the teacher's: not in a student copy

            kill_tree(self.proc.pid)  # the sandbox's first process and all it holds
            self.proc.wait()
            self.reader.close()  # its thread ends, even one holding a chunk for a full queue
            for f in (self.proc.stdin, self.proc.stdout):
                with contextlib.suppress(OSError):
                    f.close()
            self.proc = None


def oom_kills():
    """How many processes the host's out-of-memory killer has killed (Linux), else None."""
    try:
        with open("/proc/vmstat", encoding="ascii") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("oom_kill ")),
                        None)
    except OSError:
        return None


WATCH_S = 0.2  # how often the watchdog reads the worker's processes while a call waits on them


class Link:
    """The judge's end of one task's process in the worker: opened at the task's first call,
    closed at its last; stopped at the first failure that leaves it in doubt, after which later
    calls fail at once with "not run: ...".

    What decides a task is the student's own use, read from outside while a call waits on the
    worker (a watchdog thread, every WATCH_S; sandbox.tree_usage): the CPU seconds of all the
    worker's processes since the task began (limit_s), and the memory they hold, private and
    shared, beyond what the worker held before it (memory_mb). Reaching either ends the task
    and is the student's: the reason names the bound and the use. The backstop, for code that
    waits, is the wall-clock time the judge waited on the worker for this task (backstop_s; the
    judge's own computation between calls does not count). It fires only with CPU time to
    spare, so it is the machine's failure (a loaded host), not the student's: MachineError, and
    the grader grades the task again. So is a kill of the worker the grader did not send (the
    host's out-of-memory killer)."""

    def __init__(self, pool, tid, limit_s, memory_mb=1 << 20, backstop_s=None):
        self.pool, self.tid, self.limit_s, self.memory_mb = pool, tid, limit_s, memory_mb
        self.backstop_s = backstop_s or 3 * limit_s
        self.open = False
        self.dead = None  # the error that stopped the task: later calls raise its kind
        self.calls = 0
        self.waited = 0.0  # seconds the judge waited on the worker in this task's calls
        self.cpu = self.peak = 0  # the task's CPU seconds and most memory (bytes) seen so far
        self.base = None  # the worker's (CPU, memory) when the task began
        self.ended_by = None  # the error the watchdog ended the worker with
        self.ooms = None  # the host's out-of-memory kills when the task began (oom_kills)
        self.read_at = 0.0

    def usage(self, waited=None):
        """What the student's processes used of the task's bounds, in words (waited: the
        seconds waited so far, the call under way included)."""
        waited = self.waited if waited is None else waited
        return (f"{self.cpu:.1f} of {self.limit_s} s CPU, {self.peak / 2**20:.0f} of "
                f"{self.memory_mb} MB, {waited:.0f} of {self.backstop_s} s waited")

    def _open(self):
        w = self.pool.acquire()
        self.reader, self.wfd, self.ended = w.reader, w.wfd, w.ended
        try:
            w.wait_ready(time.monotonic() + self.backstop_s)
        except (OSError, EOFError, TimeoutError, WireError, ValueError, TypeError):
            w.kill()
            self._fail(MachineError(f"the worker did not start: {self.ended(None)}; the "
                                    "machine's failure (or the grader's settings): the task "
                                    "will be graded again"))
        if self.base is None:
            from classroom.sandbox import tree_usage  # the teacher's: not in a student copy

            self.base, self.ooms = tree_usage(w.proc.pid), oom_kills()
        send(self.wfd, ("task", self.tid))
        self.open = True

    def stop(self, reason=None):
        if self.open:
            if reason:
                self.pool.kill()
            else:
                self.pool.release(time.monotonic() + 15)
            self.open = False
        if reason and not self.dead:
            self.dead = reason if isinstance(reason, StudentError) else StudentError(reason)

    def _fail(self, error):
        error = error if isinstance(error, StudentError) else StudentError(error)
        self.stop(error)
        raise error

    def bound_reached(self, waited):
        """The error that ends the task now, or None: the watchdog's reading of the worker."""
        from classroom.sandbox import tree_usage  # the teacher's: not in a student copy

        proc = self.pool.proc
        if proc is None or self.base is None:
            return None
        cpu, memory = tree_usage(proc.pid)
        self.cpu = max(self.cpu, cpu - self.base[0])
        self.peak = max(self.peak, memory - self.base[1])
        self.read_at = time.monotonic()
        if self.cpu > self.limit_s:
            return StudentError(f"past its CPU limit of {self.limit_s} s (its processes used "
                                f"{self.usage(waited)}): the worker was stopped")
        if self.peak > self.memory_mb << 20:
            return StudentError(f"past its memory bound of {self.memory_mb} MB, private and "
                                f"shared (its processes used {self.usage(waited)}): the worker "
                                "was stopped")
        if waited > self.backstop_s:
            return MachineError(f"the machine's failure, not yours: {self.backstop_s} s waited "
                                f"with CPU time to spare ({self.usage(waited)}): the worker was "
                                "stopped and the task will be graded again")
        return None

    def _watch(self, done, since):
        """While a call waits on the worker (until done is set): stop the worker at the first
        bound reached, keeping why in ended_by."""
        from classroom.sandbox import kill_tree  # the teacher's: not in a student copy

        while not done.wait(WATCH_S):
            error = self.bound_reached(self.waited + time.monotonic() - since)
            if error is not None:
                self.ended_by = error
                proc = self.pool.proc
                if proc is not None:
                    kill_tree(proc.pid)
                return

    def call(self, stand_in, args, kwargs, observe=False):
        if self.dead:
            raise type(self.dead)(f"not run: {self.dead}")
        if not self.open:
            self._open()
        self.calls += 1
        refs = Refs()
        try:
            request = {
                "fn": stand_in.spec,
                "args": to_wire(list(args), refs),
                "kwargs": to_wire(kwargs, refs),
                "observe": observe,
                **modes(),
            }
            request["models"] = refs.models()
        except WireError as e:
            raise TypeError(str(e)) from None  # the test's own arguments: the grader's mistake
        pending = []  # an exception an iterator of the test's raised: it wins
        since, done = time.monotonic(), threading.Event()
        watch = threading.Thread(target=self._watch, args=(done, since), daemon=True)
        watch.start()
        try:
            try:
                kind, value, after, seen = self._exchange(
                    request, refs, pending, since + self.backstop_s - self.waited + 30)
            finally:  # the watchdog stopped before anything else looks at the worker
                done.set()
                watch.join()
                self.waited += time.monotonic() - since
            if self.ended_by:  # a bound ended the worker as the answer came: the bound wins
                raise EOFError
        except TimeoutError:  # the watchdog did not end it: the last resort, the machine's
            self._fail(self.ended_by or MachineError(
                f"the machine's failure, not yours: no answer in {self.backstop_s} s "
                f"({self.usage()}): the task will be graded again"))
        except (EOFError, BrokenPipeError):
            self.pool.proc.wait()
            self._fail(self.ended_by or self.killed(self.pool.proc.returncode))
        except TaskEnded as e:  # the task's process died between messages: the worker lives on
            self.open = False
            self.dead = self.ended_by or self.killed(e.code)
            raise type(self.dead)(str(self.dead)) from None
        except (WireError, ValueError, RuntimeError, KeyError, TypeError, IndexError) as e:
            self._fail(f"the worker sent something the grader does not take: {plain(e)}")
        if time.monotonic() - self.read_at > 1:  # short calls: the bounds read once a second
            error = self.bound_reached(self.waited)
            if error is not None:
                self._fail(error)
        if pending:
            raise pending[0]
        if kind == "error":
            if value.startswith("MemoryError"):
                value += f" (a process's data bound: the worker's memory of {self.memory_mb} MB)"
            raise StudentError(value)
        changed = stand_in.changed(args, kwargs, after)
        if changed:
            raise StudentError(
                f"{stand_in.__name__} changed its input {', '.join(changed)} in place: the "
                "caller's values must be left as they were (work on a copy)"
            )
        return value, seen

    def killed(self, code):
        """The error for a worker or task process that ended with code, the watchdog silent: a
        SIGKILL the grader did not send is the machine's when the host's out-of-memory killer
        struck meanwhile (Linux counts its kills), else the student's code's own."""
        text = self.ended(code)
        if code is not None and code > 128:  # bwrap reports its child's signal N as 128 + N
            code = 128 - code
        if code == -9 and oom_kills() != self.ooms:
            return MachineError(f"{text} by the host's out-of-memory killer, not by a bound of "
                                f"the grader's ({self.usage()}): the task will be graded again")
        if code == -9:
            return StudentError(f"{text}, by no bound of the grader's and not by the host: by "
                                f"its own code ({self.usage()})")
        return StudentError(f"{text} ({self.usage()})")


    def _exchange(self, request, refs, pending, deadline):
        """Send the call, answer the worker's requests for items, and return ("result", value,
        the arguments after the call, what was observed) or ("error", what the student's code
        raised, None, None). Everything that comes back is counted (wire.Budget)."""
        send(self.wfd, ("call", request))
        while True:
            message = receive(self.reader, deadline)
            if not isinstance(message, tuple) or not message:
                raise WireError("a message that is not a tuple")
            kind, *body = message
            if kind == "result":
                value, after, states, seen = body
                budget = Budget()
                refs.take_back(from_wire(states, budget=budget))
                after = from_wire(after, budget=budget)
                if not (isinstance(after, tuple) and len(after) == 2
                        and isinstance(after[1], dict)):
                    raise WireError("arguments that are not (args, kwargs)")
                seen = from_wire(seen, budget=budget)
                return "result", from_wire(value, budget=budget), after, seen
            if kind == "free":  # the task's process ended while the judge waited for it
                raise TaskEnded(body[0])
            if kind == "error":
                name, message, states = body
                refs.take_back(from_wire(states))
                text = plain(f"{name}: {message}" if message else name)
                return "error", text, None, None
            if kind != "next":
                raise WireError(f"a message of kind {plain(kind, 40)!r}")
            number, states = body
            obj, what = refs.items[number]
            if what != "iterator":
                raise WireError("an item asked of something that is not an iterator")
            refs.take_flags(from_wire(states))  # the test's iterator sees the model's mode now
            try:
                reply = ("value", to_wire(next(obj), refs))
            except StopIteration:
                reply = ("stop", None)
            # the test's own iterator raised: raised after the call
            except Exception as e:  # noqa: BLE001
                pending.append(e)
                reply = ("raise", f"{type(e).__name__}: {e}")
            send(self.wfd, reply)


# -----------------------------------------------------------------------------
# The worker's side


class _Iterator:
    def __init__(self, worker, number):
        self.worker, self.number = worker, number

    def __iter__(self):
        return self

    def __next__(self):
        return self.worker.next_item(self.number)


class JudgeRaised(Exception):
    """An iterator of the test's raised in the judge."""


class Worker:
    def __init__(self, rfd, wfd):
        self.reader, self.wfd = Reader(rfd), wfd
        self.models = {}

    def states(self):
        return {n: model_state(m) for n, m in self.models.items()}

    def next_item(self, number):
        """The next item of an iterator of the test's; the models' mode and requires_grad flags
        go with the request (their weights come back with the result)."""
        flags = {n: {"training": m.training,
                     "requires_grad": [p.requires_grad for p in m.parameters()]}
                 for n, m in self.models.items()}
        send(self.wfd, ("next", number, flags))
        answer, value = receive(self.reader)
        if answer == "stop":
            raise StopIteration
        if answer == "raise":
            raise JudgeRaised(value)
        return from_wire(value, self.make)

    def make(self, kind, payload):
        if kind == "model":
            return self.models[payload]
        if kind == "iterator":
            return _Iterator(self, payload)
        return context(kind, payload)

    def run(self, request):
        self.models = models_of(request["models"])
        fn = resolve(request["fn"])
        args, kwargs = (from_wire(request["args"], self.make),
                        from_wire(request["kwargs"], self.make))
        observer = make_observer() if request["observe"] else contextlib.nullcontext()
        with under(request), observer:
            value = fn(*args, **kwargs)
        seen = observer.seen() if request["observe"] else None
        return value, (data_of(args), data_of(kwargs)), seen

    def serve(self):
        while True:
            try:
                kind, request = receive(self.reader)
            except EOFError:
                return
            if kind == "end":
                return
            try:
                value, after, seen = self.run(request)
                reply = ("result", to_wire(value), to_wire(after), self.states(), seen)
            # a skip, an exit, anything: the judge decides
            except BaseException as e:  # noqa: BLE001
                lines = str(e).strip().splitlines()
                reply = ("error", type(e).__name__, lines[0][:500] if lines else "", self.states())
            send(self.wfd, reply)


class Server:
    """The worker's first process: PyTorch imported, nothing of the project's. For each task the
    judge names it forks a process that enters the task's copy (TASKS/<id>), imports the
    project's modules from there and serves the calls (Worker); when that process ends, every
    process it left behind is killed (this process is their subreaper) and the judge is told
    ("free", its exit status). No thread runs here: a fork must copy a single thread, and the
    pipe must be read by the task's process alone while it runs."""

    def __init__(self, rfd, wfd):
        self.rfd, self.wfd = rfd, wfd

    def read(self, n):
        out = b""
        while len(out) < n:
            chunk = os.read(self.rfd, n - len(out))
            if not chunk:
                raise EOFError
            out += chunk
        return out

    def next_command(self):

        import torch  # the worker sets its bounds before PyTorch loads (main)

        (n,) = struct.unpack("<Q", self.read(8))
        return torch.load(io.BytesIO(self.read(n)), weights_only=True)

    def serve(self, tasks):
        from classroom.sandbox import become_subreaper, kill_below  # not in a student copy

        become_subreaper()
        send(self.wfd, ("ready", None))  # PyTorch imported: a task's use is counted from here
        while True:
            try:
                kind, tid = self.next_command()
            except EOFError:
                return
            if kind == "end":  # no task running: nothing to end
                send(self.wfd, ("free", 0))
                continue
            if not hasattr(os, "fork"):  # Windows: this process serves one task, then exits
                return run_task(tasks, tid, self.rfd, self.wfd)
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    run_task(tasks, tid, self.rfd, self.wfd)
                    code = 0
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            kill_below()  # what the task's process left behind: it does not outlive its task
            empty(os.environ.get("TMPDIR", "/tmp"))  # nor what it wrote: the next task's own
            send(self.wfd, ("free", os.waitstatus_to_exitcode(status)))


def empty(folder):
    """Remove what is in folder (the worker's temporary folder, between tasks), but the
    folders mounted there (a Python installed under /tmp is bound in). Folders a task made
    unwritable are opened first; whatever still cannot go ends the worker (SystemExit), so the
    next task starts in a fresh one with a fresh /tmp."""
    left = []
    for entry in os.scandir(folder):
        if os.path.ismount(entry.path):
            continue
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                for dirpath, _, _ in os.walk(entry.path):
                    with contextlib.suppress(OSError):
                        os.chmod(dirpath, 0o700)
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
        if os.path.lexists(entry.path):
            left.append(entry.name)
    if left:
        raise SystemExit(f"could not empty {folder} after a task: {left[:3]}")


def run_task(tasks, tid, rfd, wfd):
    """In the task's process: the task's copy first on the path, then the calls until "end"."""
    import torch  # the worker sets its bounds before PyTorch loads (main)

    here = os.path.join(tasks, os.path.basename(str(tid)))
    os.chdir(here)
    sys.path.insert(0, here)
    torch.set_num_threads(1)
    Worker(rfd, wfd).serve()


def main():
    """The worker: its bounds set first (sandbox.apply_limits), then its messages on stdin and
    stdout, taken aside at once, so what the student's code prints (fd 1) goes to the log
    (fd 2) and what it reads from stdin is empty. It starts in _worker, a copy with every task
    function blank (grade.worker_copy); each task's copy appears beside it while the task runs
    (judge.show_copy)."""
    from classroom.sandbox import apply_limits  # the teacher's: not in a student copy

    if os.environ.get("NANONOPE_LIMITS"):
        apply_limits(os.environ["NANONOPE_LIMITS"])
    rfd, wfd = os.dup(0), os.dup(1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)
    import numpy  # noqa: F401  (imported once, before any fork)
    import torch  # the worker sets its bounds before PyTorch loads (main)

    torch.set_num_threads(1)
    Server(rfd, wfd).serve(os.path.dirname(os.getcwd()))


if __name__ == "__main__":
    main()
