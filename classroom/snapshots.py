"""
The student copy's tests: the project's own outputs at the public seeds, stored (as CS336's
snapshots are) and replayed against the student's functions, so no reference code ships.

record (python -m classroom student runs it): the project's tests/test_paper.py at the public
seeds, each handed-out function wrapped in a Recorder (this file as a pytest plugin, with
NANONOPE_RECORD naming the tasks and a folder). Every call a task's tests make to its own
functions is kept: the arguments (a model as its state, an iterator as the items it gave),
the precision and grad mode, the models' state after the call, what the function returned,
and, for a call made through observe(), how it computed. One file a task: T3.pt.xz.

replay (the copy's tests/test_paper.py calls replay()): each of the project's checks becomes
one check of the same name, whose stored calls are made again on the student's function. Its
result must equal the stored one (floats within 2e-4, or 1e-4 relative), the models must be
left as stored, and an observed call must run no fused attention and make no tensor larger
than the project's did. The grade of record is still python -m classroom grade, with the
project's full checks and the teacher's seeds.
"""

import contextlib
import copy
import io
import json
import lzma
import math
import os
from pathlib import Path

from classroom.remote import Refs, data_of, make_observer, same
from classroom.source import owner, resolve, task_of
from classroom.wire import TAG, context, from_wire, model_state, models_of, modes, to_wire, under

RECORD = "NANONOPE_RECORD"
ATOL, RTOL = 2e-4, 1e-4


# -----------------------------------------------------------------------------
# record: a pytest plugin (python -m pytest tests/test_paper.py -p classroom.snapshots)


class _Recording:
    spec = None
    current = None  # the check running now
    calls = {}  # check name -> [call, ...]
    outcomes = {}  # check name -> passed


class _Iterator:
    def __init__(self, source, items):
        self.source, self.items = iter(source), items

    def __iter__(self):
        return self

    def __next__(self):
        try:
            item = next(self.source)
        except StopIteration:
            raise
        except Exception as e:  # the test's iterator failed: replayed as the same failure
            self.items.append((TAG, "raise", f"{type(e).__name__}: {e}"))
            raise
        self.items.append(to_wire(item))
        return item


class Recorder:
    """Stands for a handed-out function while the project's tests run: keeps each call a test
    of its own task makes, and passes every call on to the project's function."""

    def __init__(self, tid, name, fn):
        self.tid, self.name, self.fn = tid, name, fn
        self.project_version = fn  # the check that compares with the project's own fit runs too
        self.__name__, self.__doc__ = fn.__name__, fn.__doc__

    def __call__(self, *args, **kwargs):
        return self.call(args, kwargs, False)[0]

    def observe(self, args, kwargs, bound=None):
        out, seen = self.call(args, kwargs, True, bound)
        return out, seen

    def call(self, args, kwargs, observe, bound=None):
        if _Recording.current is None or task_of(_Recording.current) != self.tid:
            return self.run(args, kwargs, observe)
        refs = Refs()
        wire_args, wire_kwargs = to_wire(list(args), refs), to_wire(kwargs, refs)
        call = {
            "fn": self.name,
            "args": wire_args,
            "kwargs": wire_kwargs,
            "models": refs.models(),
            **modes(),
            "items": {},
        }

        def make(kind, n):
            if kind in ("nullcontext", "autocast"):
                return context(kind, n)
            obj = refs.items[n][0]
            if kind == "iterator":
                return _Iterator(obj, call["items"].setdefault(n, []))
            return obj

        args, kwargs = from_wire(wire_args, make), from_wire(wire_kwargs, make)
        try:
            out, seen = self.run(args, kwargs, observe)
        except Exception as e:
            call.update(raised=type(e).__name__, output=None, after=refs.models(), seen=None)
            _Recording.calls.setdefault(_Recording.current, []).append(call)
            raise
        call.update(output=to_wire(out), after=refs.models(),
                    seen=None if seen is None else seen | {"bound": bound})
        _Recording.calls.setdefault(_Recording.current, []).append(call)
        return out, seen

    def run(self, args, kwargs, observe):
        if not observe:
            return self.fn(*args, **kwargs), None
        with make_observer() as observer:
            out = self.fn(*args, **kwargs)
        return out, observer.seen()


def pytest_configure(config):
    if not os.environ.get(RECORD):
        return
    spec = _Recording.spec = json.loads(Path(os.environ[RECORD]).read_text(encoding="utf-8"))
    for tid, functions in spec["tasks"].items():
        for name in functions:
            holder, attribute = owner(name)
            setattr(holder, attribute, Recorder(tid, name, resolve(name)))


def pytest_runtest_setup(item):
    _Recording.current = item.name


def pytest_runtest_logreport(report):
    if _Recording.spec is not None and (report.when == "call" or not report.passed):
        name = report.nodeid.rpartition("::")[2]
        _Recording.outcomes[name] = (
            _Recording.outcomes.get(name, True) and report.passed and not report.skipped
        )


def pytest_sessionfinish(session):
    if _Recording.spec is None:
        return
    out = Path(_Recording.spec["out"])
    out.mkdir(parents=True, exist_ok=True)
    for tid in _Recording.spec["tasks"]:
        checks = {
            n: _Recording.calls.get(n, [])
            for n, ok in _Recording.outcomes.items()
            if task_of(n) == tid
        }
        failed = [n for n, ok in _Recording.outcomes.items() if task_of(n) == tid and not ok]
        write(out / f"{tid}.pt.xz", {"task": tid, "checks": checks, "failed": failed})


def write(path, obj):
    """torch.save's bytes, xz-compressed (token rows compress 20x)."""

    import torch  # python -m classroom runs without PyTorch; recording and replay load it

    buf = io.BytesIO()
    torch.save(obj, buf)
    Path(path).write_bytes(lzma.compress(buf.getvalue()))


def read(path):
    """What write() wrote, read with torch.load(weights_only=True): data only."""

    import torch  # python -m classroom runs without PyTorch; recording and replay load it

    return torch.load(io.BytesIO(lzma.decompress(Path(path).read_bytes())), weights_only=True)


# -----------------------------------------------------------------------------
# replay: the student copy's checks


def load(folder):
    """{check name: stored calls} of every task's file in folder, in the tests' order."""
    checks = {}
    for f in sorted(Path(folder).glob("T*.pt.xz")):
        checks.update(read(f)["checks"])
    return checks


def replay(name, calls):
    """Make each stored call of one check on the student's function; AssertionError (one line)
    at the first result that differs from the project's."""

    if not calls:
        raise AssertionError(f"{name}: no stored call (make the student copy again)")
    for k, call in enumerate(calls):
        where = f"call {k + 1} of {len(calls)}"
        fn = resolve(call["fn"])
        models = models_of(call["models"])

        def make(kind, n):
            if kind == "model":
                return models[n]
            if kind == "iterator":
                return _replayed(call["items"].get(n, []))
            return context(kind, n)

        wire = copy.deepcopy((call["args"], call["kwargs"]))
        args, kwargs = from_wire(wire[0], make), from_wire(wire[1], make)
        observer = make_observer() if call["seen"] is not None else contextlib.nullcontext()
        raised = None
        try:
            with under(call), observer:
                out = fn(*args, **kwargs)
        except NotImplementedError as e:
            other = str(e).split(":")[0]
            raise AssertionError(
                f"{where}: not written yet ({e})"
                + (f"; this task's checks run {other}, which waits for you too"
                   if other != task_of(name) else "")
            ) from None
        except Exception as e:  # noqa: BLE001  (compared with what the project did)
            if not call.get("raised"):
                raise
            raised = e
        if call.get("raised") and raised is None:
            raise AssertionError(f"{where}: the project's function raised {call['raised']} here "
                                 "(its batches failed): let the error through")
        if raised is None:
            why = differs(to_wire(out), call["output"], "the result")
            if why:
                raise AssertionError(f"{where}: {why}, against the project's output at the "
                                     "public seed")
        pristine = from_wire(call["args"], lambda kind, n: None), from_wire(
            call["kwargs"], lambda kind, n: None)
        if not same(pristine, (data_of(args), data_of(kwargs))):
            raise AssertionError(f"{where}: an input was changed in place: leave the caller's "
                                 "values as they were (work on a copy)")
        for n, m in models.items():
            why = differs(model_state(m), call["after"][n], "the model afterwards")
            if why:
                raise AssertionError(
                    f"{where}: {why} (the model must be left as the project leaves it)"
                )
        if call["seen"] is not None:
            seen, want = observer.seen(), call["seen"]
            if seen["sdpa"] and not want["sdpa"]:  # the project's ran none here (T2)
                raise AssertionError(
                    f"{where}: scaled_dot_product_attention ran inside: write the softmax out"
                )
            bound = want.get("bound") or want["largest"]
            if seen["largest"] > bound:
                raise AssertionError(
                    f"{where}: a tensor of shape {tuple(seen['shape'])} ({seen['largest']} "
                    f"values) was made; the check allows {bound} (go through the queries or "
                    "rows a chunk or a batch at a time)"
                )


def _replayed(items):
    """An iterator giving the stored items, and failing where the test's iterator failed."""
    for item in items:
        if isinstance(item, tuple) and len(item) == 3 and item[0] == TAG and item[1] == "raise":
            raise RuntimeError(item[2])
        yield from_wire(item)


def differs(got, want, what):
    """Where got (to_wire's form) differs from want, in words, or None."""
    import torch  # python -m classroom runs without PyTorch; recording and replay load it

    if isinstance(want, tuple) and len(want) == 3 and want[0] == TAG:
        if not (isinstance(got, tuple) and len(got) == 3 and got[0] == TAG and got[1] == want[1]):
            return f"{what} is a {type(got).__name__}, the project's a {want[1]}"
        return differs(got[2], want[2], what)
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{what} is a {type(got).__name__}, not a tensor"
        if got.shape != want.shape or got.dtype != want.dtype:
            return (
                f"{what} is a {got.dtype} tensor of shape {tuple(got.shape)}, "
                f"the project's {want.dtype} {tuple(want.shape)}"
            )
        if want.is_floating_point():
            g, w = got.double(), want.double()
            # bfloat16 and float16: a few steps of the dtype either way (rounding the weights
            # first, or the output at the end, both as the handout allows)
            low = want.dtype in (torch.bfloat16, torch.float16)
            eps = torch.finfo(want.dtype).eps if low else 0.0
            rtol, atol = (max(RTOL, 4 * eps),
                          max(ATOL, 4 * eps * float(w.abs().max()) if low and w.numel() else ATOL))
            bad = ~(torch.isclose(g, w, rtol=rtol, atol=atol) | (torch.isnan(g) & torch.isnan(w)))
            if bad.any():
                i = tuple(int(x) for x in bad.nonzero()[0])
                return (
                    f"{what} differs at {list(i)}: {g[i].item():.6g}, "
                    f"the project's {w[i].item():.6g}"
                )
        elif not torch.equal(got, want):
            return f"{what} differs: {got.tolist()[:8]}, the project's {want.tolist()[:8]}"
        return None
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return (
                f"{what} has keys "
                f"{sorted(map(str, got)) if isinstance(got, dict) else type(got).__name__}, "
                f"the project's {sorted(map(str, want))}"
            )
        for key in want:
            why = differs(got[key], want[key], f"{what}[{key!r}]")
            if why:
                return why
        return None
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return (
                f"{what} has "
                f"{len(got) if isinstance(got, (list, tuple)) else type(got).__name__} items, "
                f"the project's {len(want)}"
            )
        for i, (g, w) in enumerate(zip(got, want)):
            why = differs(g, w, f"{what}[{i}]")
            if why:
                return why
        return None
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        if (math.isnan(want) and math.isnan(got)) or math.isclose(
            got, want, rel_tol=RTOL, abs_tol=ATOL
        ):
            return None
        return f"{what} is {got:.6g}, the project's {want:.6g}"
    return None if got == want else f"{what} is {got!r}, the project's {want!r}"
