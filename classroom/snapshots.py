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
than the project's did. A check that fails says so in one block: the call, its arguments,
what differs and by how much, what the check tests and the handout.

The grade's own rule first (Copy.refusal): before a task's checks run, its functions are taken
from the student's file by classroom/source.py's take, the function python -m classroom grade
takes them with, against the task file as handed out (tests/snapshots/graded.json): a def line
not the handout's, a decorator, or a name the file defines outside the function (a helper, an
import at the top) fails every check of the task with the grade's reason. On Classroom 50 the
checks run in a pristine copy (classroom/verify.py) whose task files are made by taken(): the
handed-out files with each function the grade takes put in, as the grade makes its copies.
The grade of record is still python -m classroom grade, with the project's full checks and the
teacher's seeds.
"""

import contextlib
import copy
import inspect
import io
import json
import lzma
import math
import os
import traceback
from pathlib import Path

from classroom.remote import Refs, data_of, make_observer, same
from classroom.source import Refused, owner, resolve, split_spec, take, task_of
from classroom.upload import UploadError, read_upload
from classroom.wire import TAG, context, from_wire, model_state, models_of, modes, to_wire, under

RECORD = "NANONOPE_RECORD"
ATOL, RTOL = 2e-4, 1e-4
GRADED = "graded.json"  # tests/snapshots/: the tasks' functions, handouts and files as handed out
SUBMITTED = "NANONOPE_SUBMITTED"  # the student's task files, where not in the copy (Classroom 50)
ROOT = Path(__file__).resolve().parents[1]


# -----------------------------------------------------------------------------
# record: a pytest plugin (python -m pytest tests/test_paper.py -p classroom.snapshots)


class _Recording:
    spec = None
    current = None  # the check running now
    calls = {}  # check name -> [call, ...]
    outcomes = {}  # check name -> passed
    about = {}  # check name -> the first paragraph of its docstring (what it tests)
    uses = {}  # task -> the other tasks whose functions its checks call (T5's run T1)


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
            if _Recording.current is not None:
                _Recording.uses.setdefault(task_of(_Recording.current), set()).add(self.tid)
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
    _Recording.about[item.name] = about(getattr(getattr(item, "obj", None), "__doc__", None))


def about(doc, most=300):
    """What a check tests, for its failure message: its docstring's first paragraph, cut at the
    last full stop within `most` characters."""
    text = " ".join((doc or "").strip().split("\n\n")[0].split())
    if len(text) <= most:
        return text
    end = text.rfind(". ", 0, most)
    return text[:end + 1] if end > 0 else text[:most] + " ..."


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
        write(out / f"{tid}.pt.xz", {"task": tid, "checks": checks, "failed": failed,
                                     "about": {n: _Recording.about.get(n, "") for n in checks},
                                     "uses": sorted(_Recording.uses.get(tid, ()))})


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


def stored(folder):
    """{"checks": {check name: stored calls}, "about": {check name: what it tests}, "uses":
    {task: the other tasks its checks run}} of every task's file in folder, in the tests'
    order."""
    out = {"checks": {}, "about": {}, "uses": {}}
    for f in sorted(Path(folder).glob("T*.pt.xz")):
        data = read(f)
        out["checks"].update(data["checks"])
        out["about"].update(data.get("about", {}))
        out["uses"][data["task"]] = data.get("uses", [])
    return out


def load(folder):
    """{check name: stored calls} of every task's file in folder, in the tests' order."""
    return stored(folder)["checks"]


class Copy:
    """A student copy's checks (its tests/test_paper.py): the calls stored in tests/snapshots/,
    what each check tests, and the task files as handed out, for the grade's own rule."""

    def __init__(self, root):
        self.root = Path(root)
        folder = self.root / "tests" / "snapshots"
        kept = stored(folder)
        self.checks, self.about = kept["checks"], kept["about"]
        self.graded = json.loads((folder / GRADED).read_text(encoding="utf-8"))
        self.refusals = {}

    def refusal(self, tid):
        """The grade's reason for taking none of task tid's functions from the student's file
        as it is, or None (read once a run)."""
        if tid not in self.refusals:
            folder = Path(os.environ.get(SUBMITTED) or self.root)
            self.refusals[tid] = refused(self.graded, tid, folder)
        return self.refusals[tid]

    def failure(self, name):
        """Why check `name` fails, as one block for the student, or None when it passes."""
        tid = task_of(name)
        handout = f"classroom/{self.graded['tasks'][tid]['handout']}"
        why = self.refusal(tid)
        if why is not None:
            return (f"the grade takes nothing of {tid} from your file as it is: {why}\n"
                    f"  every check of {tid} fails until it does (your teacher's grade applies "
                    f"this same rule; the handout: {handout})")
        try:
            replay(name, self.checks[name])
            return None
        except AssertionError as e:
            why = str(e)
        if "not written yet" in why.split("\n")[0]:
            return why
        about = self.about.get(name)
        return why + (f"\n  the check: {about}" if about else "") + (
            f"\n  against the project's output at the public seed; the handout: {handout}")


def refused(graded, tid, folder):
    """The grade's reason (one line) for not taking task tid's functions from folder's files,
    or None: classroom/upload.py's read_upload and classroom/source.py's take, the grade's own
    reading and rule, against the task file as handed out (graded["files"]), with the grade's
    words for a file it cannot read."""
    for spec in graded["tasks"][tid]["functions"]:
        path, qualname = split_spec(spec)
        try:
            take(read_upload(folder, path), graded["files"][path], qualname)
        except (Refused, UploadError) as e:
            return str(e)
        except FileNotFoundError:
            return f"{path} is missing"
        except Exception as e:  # noqa: BLE001  (RecursionError, MemoryError ...: as the grade)
            return f"{path} could not be read as Python ({type(e).__name__}: {e})"
    return None


def taken(root, submitted):
    """{path: text} of each task file of the copy at root as the grade would run it: the file
    as handed out (tests/snapshots/graded.json) with every task function that take() accepts
    from submitted's file of that name put in. A function it refuses, or a file it cannot
    read, leaves the handed-out version: the checks then say why (Copy.refusal)."""
    graded = json.loads((Path(root) / "tests" / "snapshots" / GRADED).read_text(encoding="utf-8"))
    out = {}
    for path, text in graded["files"].items():
        try:
            mine = read_upload(submitted, path)
        except (UploadError, OSError, ValueError):
            out[path] = text
            continue
        for task in graded["tasks"].values():
            for spec in task["functions"]:
                where, qualname = split_spec(spec)
                if where == path:
                    try:
                        text = take(mine, text, qualname)
                    except Exception:  # noqa: BLE001  (refused: the checks say why)
                        pass
        out[path] = text
    return out


def replay(name, calls):
    """Make each stored call of one check on the student's function; AssertionError (one
    block: what differs, and the call) at the first result that differs from the project's."""

    if not calls:
        raise AssertionError(f"{name}: no stored call (make the student copy again)")
    for k, call in enumerate(calls):
        fn_name = split_spec(call["fn"])[1].split(".")[-1]
        where = f"call {k + 1} of {len(calls)} to {fn_name}"
        fn = resolve(call["fn"])
        models = models_of(call["models"])
        sizes = {}

        def make(kind, n):
            if kind == "model":
                return models[n]
            if kind == "iterator":
                items = call["items"].get(n, [])
                it = _replayed(items)
                sizes[id(it)] = len(items)
                return it
            return context(kind, n)

        wire = copy.deepcopy((call["args"], call["kwargs"]))
        args, kwargs = from_wire(wire[0], make), from_wire(wire[1], make)
        shown = f"\n  the call: {called(fn, fn_name, args, kwargs, call, sizes)}"
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
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001  (compared with what the project did)
            if not call.get("raised") or not isinstance(e, Exception):
                # pytest.skip, pytest.exit and sys.exit from the function fail the check too
                raise AssertionError(f"{where}: your function raised {type(e).__name__}: "
                                     f"{str(e)[:300]}{frames(e)}{shown}") from None
            raised = e
        if call.get("raised") and raised is None:
            raise AssertionError(f"{where}: the project's function raised {call['raised']} here "
                                 f"(its batches failed): let the error through{shown}")
        if raised is None:
            why = differs(to_wire(out), call["output"], "the result")
            if why:
                raise AssertionError(f"{where}: {why}{shown}")
        pristine = from_wire(call["args"], lambda kind, n: None), from_wire(
            call["kwargs"], lambda kind, n: None)
        if not same(pristine, (data_of(args), data_of(kwargs))):
            raise AssertionError(f"{where}: an input was changed in place: leave the caller's "
                                 f"values as they were (work on a copy){shown}")
        for n, m in models.items():
            why = differs(model_state(m), call["after"][n], "the model afterwards")
            if why:
                raise AssertionError(
                    f"{where}: {why} (the model must be left as the project leaves it){shown}"
                )
        if call["seen"] is not None:
            seen, want = observer.seen(), call["seen"]
            if seen["sdpa"] and not want["sdpa"]:  # the project's ran none here (T2)
                raise AssertionError(
                    f"{where}: scaled_dot_product_attention ran inside: write the softmax "
                    f"out{shown}"
                )
            bound = want.get("bound") or want["largest"]
            if seen["largest"] > bound:
                raise AssertionError(
                    f"{where}: a tensor of shape {tuple(seen['shape'])} ({seen['largest']} "
                    f"values) was made; the check allows {bound} (go through the queries or "
                    f"rows a chunk or a batch at a time){shown}"
                )


def _replayed(items):
    """An iterator giving the stored items, and failing where the test's iterator failed."""
    for item in items:
        if isinstance(item, tuple) and len(item) == 3 and item[0] == TAG and item[1] == "raise":
            raise RuntimeError(item[2])
        yield from_wire(item)


def called(fn, name, args, kwargs, call, sizes):
    """A call as the student reads it: each argument named, a tensor or array by its dtype and
    shape, a model by its size, numbers as they are; and the modes it ran under."""
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs).arguments.items()
        parts = [f"{k}={described(v, sizes)}" for k, v in bound]
    except (TypeError, ValueError):
        parts = [described(v, sizes) for v in args] + [f"{k}={described(v, sizes)}"
                                                       for k, v in kwargs.items()]
    modes_ = []
    if not call.get("grad", True):
        modes_.append("torch.no_grad()")
    enabled, dtype = call.get("autocast", (False, ""))
    if enabled:
        modes_.append(f"torch.autocast('cpu', {dtype})")
    return f"{name}({', '.join(parts)})" + (f" under {' and '.join(modes_)}" if modes_ else "")


def described(value, sizes=None):
    """One argument in a few words (public data: the copy's inputs are the public seeds')."""
    import numpy as np  # python -m classroom runs without PyTorch; recording and replay load it
    import torch  # python -m classroom runs without PyTorch; recording and replay load it

    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        if value.dim() == 0:
            return f"tensor({value.item():.6g}, {dtype})"
        return f"a {dtype} tensor {tuple(value.shape)}"
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array {value.shape}"
    if isinstance(value, torch.nn.Module):
        config = getattr(value, "config", None)
        size = ", ".join(f"{k}={getattr(config, k)}" for k in
                         ("n_layer", "n_head", "n_embd", "block_size") if hasattr(config, k))
        return f"a {type(value).__name__} ({size}; {'train' if value.training else 'eval'} mode)"
    if isinstance(value, float):
        return f"{value:.6g}"
    if value is None or isinstance(value, (bool, int)):
        return repr(value)
    if isinstance(value, str):
        return repr(value[:40])
    if isinstance(value, (list, tuple)):
        if len(value) <= 6 and all(v is None or isinstance(v, (bool, int, float, str))
                                   for v in value):
            inner = ", ".join(described(v) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner})"
        return f"a {type(value).__name__} of {len(value)}"
    if isinstance(value, dict):
        return f"a dict ({', '.join(map(str, list(value)[:6]))})"
    if sizes is not None and id(value) in sizes:
        return f"an iterator of {sizes[id(value)]} items"
    if isinstance(value, torch.autocast):
        return f"torch.autocast('{value.device}', {str(value.fast_dtype).removeprefix('torch.')})"
    if isinstance(value, contextlib.nullcontext):
        return "contextlib.nullcontext()"
    return f"a {type(value).__name__}"


def frames(error, most=5):
    """The lines of the copy's own files (the student's code and what it called of the
    project's) where `error` passed, innermost last: the useful part of a traceback, without
    the replay's and pytest's frames."""
    kit = (ROOT / "classroom", ROOT / "tests")
    shown = []
    for f in traceback.extract_tb(error.__traceback__):
        path = Path(f.filename).resolve()
        if path.is_relative_to(ROOT) and not any(path.is_relative_to(k) for k in kit):
            shown.append(f"\n    {path.relative_to(ROOT).as_posix()}:{f.lineno} in {f.name}: "
                         f"{(f.line or '').strip()[:120]}")
    return "".join(shown[-most:])


def differs(got, want, what):
    """Where got (to_wire's form) differs from want, in words (what, where, by how much, and
    what passes), or None."""
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
                gap = torch.where(bad, (g - w).abs().nan_to_num(math.inf), torch.zeros_like(g))
                j = tuple(int(x) for x in (gap == gap.max()).nonzero()[0])
                return (
                    f"{what} differs in {int(bad.sum())} of {w.numel()} values: at {list(i)} "
                    f"{g[i].item():.6g}, the project's {w[i].item():.6g}; the largest difference "
                    f"{gap[j].item():.3g} at {list(j)} (within {atol:.2g} + {rtol:.2g} x the "
                    "project's passes)"
                )
        elif not torch.equal(got, want):
            bad = got != want
            i = tuple(int(x) for x in bad.nonzero()[0]) if got.dim() else ()
            return (f"{what} differs in {int(bad.sum())} of {want.numel()} values: at {list(i)} "
                    f"{got[i].tolist()}, the project's {want[i].tolist()}")
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
        off = f"{got - want:+.3g}" + (f", {100 * (got - want) / abs(want):+.3g}%" if want else "")
        return (f"{what} is {got:.6g}, the project's {want:.6g} (off by {off}; within {ATOL:g} "
                f"or {100 * RTOL:g}% passes)")
    return None if got == want else f"{what} is {got!r}, the project's {want!r}"
