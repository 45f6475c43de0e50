"""The classroom kit (classroom/command.py, classroom/) as a teacher, a student and a hostile
student would try it.

Each defence is tested where it is decided, in this process or with a tiny child: extraction by
ast and the upload read as data, the wire and its budget, what people read (report.plain), the
worker's environment, the sandbox seen from inside (privilege, /proc/sys, bounds), killing what
a task started, the checkout and snapshot left as they were, the verdict. Every wrong answer in
WRONG and every independent implementation in tests/independent/ (three a task, written from the
handouts alone) runs through its task's checks in process, with the grader's check that inputs
are left alone. End to end, with the bounds set small: the project (full), a blank copy (0), an
attack on every task, a submission probing every bound, honest odd formatting and wrong answers,
the Gradescope zip, Classroom 50's tests and a class.

No test here runs an attack outside a sandbox: the payloads aim at canaries inside the test's
own temp folder, the gradings that run them skip (with the reason) where no sandbox works, and
under CI (the environment variable CI) a missing sandbox fails instead. "Without the defence"
checks show only what the kit's own defence stops, never by writing a kernel setting."""

import ast
import copy
import functools
import importlib.util
import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from classroom import command as classroom
from classroom.command import ClassroomConfig, copy_project, grade, read_tasks
from classroom import copyflag, remote, report, sandbox, snapshots, wire
from classroom.grade import Grader, choose_submission, score_checks, seed_of
from classroom.source import Refused, blank, find_function, fingerprint, segment, take, take_snapshot
from classroom.upload import UploadError, read_upload

ROOT = Path(__file__).resolve().parents[1]
INDEPENDENT = ROOT / "tests" / "independent"
CI = bool(os.environ.get("CI"))

# Each: (task, the mistake, file, [(the project's text, the wrong text), ...]). Every one must
# fail a check of its task. The texts must sit inside the task's functions (checked below).
WRONG = [
    ("T1", "ln(i / L) without max(i, L)", "model.py", [("torch.log(i.clamp(min=L) / L)", "torch.log(i / L)")]),
    ("T1", "the slopes changed in place (the model's buffers drift)", "model.py",
     [("    return lam * (1 + slope.view(1, -1, 1, 1) * torch.log(i.clamp(min=L) / L))",
       "    out = lam * (1 + slope.view(1, -1, 1, 1) * torch.log(i.clamp(min=L) / L))\n"
       "    slope.mul_(1.001)\n    return out")]),
    ("T1", "lambda returned in float64", "model.py",
     [("    return lam * (1 + slope.view(1, -1, 1, 1) * torch.log(i.clamp(min=L) / L))",
       "    return lam.double() * (1 + slope.view(1, -1, 1, 1).double() * torch.log(i.clamp(min=L) / L).double())")]),
    ("T2", "lambda applied to q and k alike (lambda^2)", "model.py",
     [("att = att * lam_i / math.sqrt(hs)", "att = att * lam_i * lam_i / math.sqrt(hs)")]),
    ("T2", "lambda after the softmax", "model.py",
     [("att = att * lam_i / math.sqrt(hs)", "att = att / math.sqrt(hs)"),
      ("att = F.softmax(att, dim=-1)", "att = F.softmax(att, dim=-1) * lam_i")]),
    ("T2", "lambda after the mask", "model.py",
     [("        att = att * lam_i / math.sqrt(hs)                                 # lam_i q_i.k_j / sqrt(d)\n", ""),
      ('att = att.masked_fill(~allowed, float("-inf"))',
       'att = att.masked_fill(~allowed, float("-inf")) * lam_i / math.sqrt(hs)')]),
    ("T2", "entropy in nats", "model.py", [(".sum(-1) / math.log(2)", ".sum(-1)")]),
    ("T2", "SDPA called inside the written-out path", "model.py",
     [("y[:, :, s:e] = att.to(v.dtype) @ v[:, :, lo:e]",
       "y[:, :, s:e] = F.scaled_dot_product_attention((q.float() * lam).to(q.dtype), k, v, "
       "is_causal=True)[:, :, s:e]")]),
    ("T2", "chunk ignored (the whole T x T at once)", "model.py",
     [("for s in range(0, T, chunk):", "for s in range(0, T, T):"), ("e = min(s + chunk, T)", "e = T")]),
    ("T2", "y returned in float32", "model.py", [("y = torch.empty_like(q)", "y = torch.empty_like(q, dtype=torch.float32)"),
                                                ("att.to(v.dtype) @ v[:, :, lo:e]", "att @ v[:, :, lo:e].float()")]),
    ("T2", "a sink without a window refused (TypeError)", "model.py",
     [("    B, nh, T, hs = q.shape\n", "    B, nh, T, hs = q.shape\n    if sink and window is None:\n"
       "        raise TypeError('a sink needs a window')\n")]),
    ("T3", "lists returned where the project returns numpy arrays", "search_scales.py",
     [('"positions": centers, "best_lam_per_position": lams[per_bin.argmin(0)]}',
       '"positions": centers.tolist(), "best_lam_per_position": lams[per_bin.argmin(0)].tolist()}')]),
    ("T3", "the best lambda per bin wrong for bins of width 1", "search_scales.py",
     [("centers, per_bin = binned(loss, width)", "centers, per_bin = binned(loss, max(2, width)) if width > 1 else "
       "(np.arange(1.0, loss.shape[1] + 1), loss[::-1])")]),
    ("T4", "the law fitted with an intercept", "search_scales.py",
     [("a = float((x * y).sum() / (x ** 2).sum())", "a = float(np.polyfit(x, y, 1)[0])")]),
    ("T4", "i > L kept instead of i >= L", "search_scales.py", [("keep = x >= 0", "keep = x > 0")]),
    ("T4", "a value with a single position >= L", "search_scales.py",
     [("if len(x) < 2 or (x ** 2).sum() == 0:", "if len(x) < 1 or (x ** 2).sum() == 0:")]),
    ("T4", "1 subtracted from the caller's array in place", "search_scales.py",
     [("y = np.asarray(lam, dtype=np.float64) - 1.0", "y = np.asarray(lam, dtype=np.float64)\n    y -= 1.0")]),
    ("T5", "the clamp applied once, at the end", "search_scales.py",
     [("                lam.clamp_(min=min_scale)  # the focus constraint, after every step\n", "                pass\n"),
      ("    return lam.detach(), log", "    with torch.no_grad():\n        lam.clamp_(min=min_scale)\n    return lam.detach(), log")]),
    ("T5", "a weight other than lambda gets a gradient", "search_scales.py",
     [("model.requires_grad_(False)", "model.requires_grad_(True)")]),
    ("T5", "AdamW's default weight decay left on", "search_scales.py", [("weight_decay=0.0)", "weight_decay=0.01)")]),
    ("T5", "the model left in train mode with every weight trainable", "search_scales.py",
     [("        model.train(saved[1])\n", "        model.train(True)\n"),
      ("            p.requires_grad_(g)\n", "            p.requires_grad_(True)\n")]),
    ("T5", "nothing restored when the batches fail", "search_scales.py",
     [("    finally:  # the model as it was\n", "    except BaseException:\n        raise\n    if True:\n")]),
    ("T6", "the last-L reference without the start token", "evaluate.py",
     [('if getattr(model.config, "bos", False):', "if False:")]),
    ("T6", "the entropy from the wrong end of each sub-window", "evaluate.py",
     [("ents.append(sub_ent[k][..., context - (e - prev):])", "ents.append(sub_ent[k][..., :e - prev])")]),
    ("T6", "the start token written into the caller's x", "evaluate.py",
     [("        xs = torch.cat([torch.cat([x[:, :1], x[:, a + 1:e]], 1) for a, e in zip(starts, ends)])\n",
       "        xs = []\n        for a, e in zip(starts, ends):\n            x[:, a] = x[:, 0]\n"
       "            xs.append(x[:, a:e].clone())\n        xs = torch.cat(xs)\n")]),
    ("T6", "batch_size ignored (every sub-window at once)", "evaluate.py",
     [("for i in range(0, xs.size(0), batch_size)]", "for i in range(0, xs.size(0), xs.size(0))]"),
      ("xs[i:i + batch_size], ys[i:i + batch_size]", "xs, ys")]),
    ("T6", "the stride context // 8 without max(1, ...)", "evaluate.py",
     [("s = max(1, context // 8)", "s = context // 8")]),
    ("T6", "excess paired by place in the list", "evaluate.py",
     [("    by_ref = dict(zip(ref[\"lengths\"], ref[key]))\n    return {n: v - by_ref[n] for n, v in zip(m[\"lengths\"], m[key]) if n in by_ref}",
       "    return {n: v - r for n, v, r in zip(m[\"lengths\"], m[key], ref[key])}")]),
    ("T6", "excess finding the reference by the name NAME_window_L", "evaluate.py",
     [("ref = reference_of(results, name)", "ref = name + '_window_L' if name + '_window_L' in results['methods'] else None")]),
]


def cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "classroom", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, encoding="utf-8")


def function_source(path, qualname, root=ROOT):
    source = (root / path).read_text(encoding="utf-8")
    return segment(source, find_function(ast.parse(source), qualname))


def edited(path, edits, text=None):
    text = (ROOT / path).read_text(encoding="utf-8") if text is None else text
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def body_of(path, qualname, body, text=None):
    """path's text with qualname's body (after its docstring) replaced by `body`."""
    text = (ROOT / path).read_text(encoding="utf-8") if text is None else text
    text = blank(text, [qualname], lambda name: "BODY")
    return text.replace("    raise NotImplementedError('BODY')\n", body)


def scores(results):
    return {r["id"]: r["score"] for r in results}


def tasks_of(root):
    from classroom.grade import read_tasks as read
    return read(Path(root) / "classroom" / "tasks.toml")


@pytest.fixture(scope="session")
def project(tmp_path_factory):
    """A copy of the project as it is on disk (outside git: the snapshot is its files), so the
    gradings below see uncommitted work too and never touch this checkout. (Session-scoped, as
    `kit`: under pytest -n, a worker's tests of several modules interleave, and a module's
    fixtures would be built again each time it came back to this one.)"""
    root = tmp_path_factory.mktemp("project") / "nanoNoPE"
    copy_project(root, leave_out=("docs", "out"))
    return root


@pytest.fixture(scope="session")
def kit(project, tmp_path_factory, worker_id):
    """A student copy of every task, made from `project` (about 15 s: the project's checks run
    once at the public seeds to store their outputs), once a run: under pytest -n the first
    worker to ask builds it in the run's folder and the others wait for it. Read only: a test
    that writes into a copy copies it first."""
    from filelock import FileLock  # a dependency of PyTorch's
    shared = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        shared = shared.parent  # the run's folder, above each worker's own
    out, built = shared / "kit" / "assignment", shared / "kit.built"
    with FileLock(str(shared / "kit.lock")):
        if not built.exists():
            shutil.rmtree(out.parent, ignore_errors=True)  # a worker that failed half way
            done = subprocess.run([sys.executable, "-m", "classroom", "student", str(out)],
                                  cwd=project, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            built.touch()
    return out


METHODS = [m for m in ("bwrap", "unshare") if sandbox.unavailable(m) is None]
WHY_NONE = "; ".join(sandbox.unavailable(m) or "" for m in ("bwrap", "unshare"))
sandboxed = pytest.mark.skipif(not METHODS and not CI, reason=f"no sandbox works here ({WHY_NONE})")


def test_ci_has_a_sandbox():
    """Under CI the attack gradings must run: a machine with no sandbox fails here instead of
    skipping them."""
    if not CI:
        pytest.skip("outside CI the sandboxed gradings skip where no sandbox works")
    assert METHODS, f"no sandbox works on this CI machine: {WHY_NONE}"


# -----------------------------------------------------------------------------
# The tasks and the student copy

def test_every_task_names_functions_the_project_defines_and_a_handout():
    tasks = read_tasks()
    assert list(tasks) == ["T1", "T2", "T3", "T4", "T5", "T6"]
    assert sum(t["points"] for t in tasks.values()) == 100
    for t in tasks.values():
        assert (ROOT / "classroom" / t["handout"]).exists(), t["handout"]
        for spec in t["functions"]:
            path, qualname = spec.split(":")
            assert find_function(ast.parse((ROOT / path).read_text(encoding="utf-8")), qualname), spec
            assert f"Piece {t['id']}" in function_source(path, qualname), f"{spec}'s docstring names its piece"


def test_fit_head_scales_is_the_papers_recipe_with_at_most_nine_parameters():
    """T5 asks for the paper's method alone: no precision, progress or plumbing parameter."""
    node = find_function(ast.parse((ROOT / "search_scales.py").read_text("utf-8")), "fit_head_scales")
    names = [a.arg for a in node.args.args]
    assert len(names) <= 9 and not {"put", "ctx", "scaler", "on_step"} & set(names), names


def test_blank_keeps_signature_and_docstring_and_take_puts_a_function_back():
    source = (ROOT / "search_scales.py").read_text(encoding="utf-8")
    blanked = blank(source, ["fit_log_law"], lambda name: f"T4: write {name}")
    node = find_function(ast.parse(blanked), "fit_log_law")
    assert ast.get_docstring(node) == ast.get_docstring(find_function(ast.parse(source), "fit_log_law"))
    assert len(node.body) == 2 and isinstance(node.body[1], ast.Raise)
    assert take(source, blanked, "fit_log_law") == source  # and back, byte for byte
    assert blanked.count("\n") < source.count("\n")


def test_the_wrong_versions_edit_their_task_functions_only():
    tasks = read_tasks()
    for tid, what, path, edits in WRONG:
        inside = "".join(function_source(*spec.split(":")) for spec in tasks[tid]["functions"]
                         if spec.startswith(path + ":"))
        for old, _ in edits:
            assert inside.count(old) == 1, f"{what}: {old!r} must occur once in {tid}'s functions"


# -----------------------------------------------------------------------------
# Every check of a task, in process: the project, the wrong versions, the independent ones

def guarded(fn):
    """fn, failing as the grader's stand-in does when a call changes an input in place
    (remote.StandIn.changed: the same data_of and same)."""
    def call(*args, **kwargs):
        before = copy.deepcopy((remote.data_of(list(args)), remote.data_of(kwargs)))
        out = fn(*args, **kwargs)
        if not remote.same(before, (remote.data_of(list(args)), remote.data_of(kwargs))):
            raise AssertionError(f"{fn.__name__} changed an input in place")
        return out
    call.__name__, call.__wrapped__ = fn.__name__, fn
    return call


def task_checks(tid, functions, tmp_path):
    """{check: None or why it failed} of task tid (tests/test_paper.py's test_{tid}_*, each case
    as pytest names it), run by pytest itself in this process with the task's functions replaced
    by `functions` {qualname: function} (guarded). The project's own version stays reachable
    (remote.project_version)."""
    import evaluate
    import model
    import search_scales
    import test_paper
    modules = {"model.py": model, "search_scales.py": search_scales, "evaluate.py": evaluate}
    spec = {q: p for s in read_tasks()[tid]["functions"] for p, q in [s.split(":")]}
    saved = []
    for qualname, fn in functions.items():
        module = modules[spec[qualname]]
        stand_in = guarded(fn)
        stand_in.project_version = getattr(module, qualname)
        for owner in (module, test_paper):
            saved.append((owner, qualname, getattr(owner, qualname)))
            setattr(owner, qualname, stand_in)

    class Outcomes:  # a plugin of the run below: each check's outcome
        def __init__(self):
            self.out = {}

        def pytest_runtest_logreport(self, report):
            if report.when == "call" or not report.passed:
                name = report.nodeid.rpartition("::")[2]
                self.out[name] = None if report.passed else report.longreprtext or "skipped"

    outcomes = Outcomes()

    # the checks alone, as the grader runs them: no conftest, no third-party plugin; and no
    # unraisableexception plugin, whose garbage collections at the end cost 0.4 s of 0.47 a call
    autoload = os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    try:
        code = pytest.main([str(ROOT / "tests" / "test_paper.py"), "-q", "-k", f"test_{tid}_",
                            "--noconftest", "-p", "classroom.fixtures", "-p", "no:cacheprovider",
                            "-p", "no:unraisableexception",
                            "-o", "addopts=", f"--basetemp={tmp_path / 'checks'}"], plugins=[outcomes])
    finally:
        if autoload is None:
            del os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"]
        else:
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = autoload
        for owner, qualname, old in saved:
            setattr(owner, qualname, old)
    assert outcomes.out and code in (0, 1), f"pytest ended with {code} on the checks of {tid}"
    return outcomes.out


@functools.lru_cache(maxsize=None)
def stored_calls(folder, tid):
    """The student copy's stored calls of task tid, read once a worker (xz and torch.load: ~0.5 s
    a read, and some sixty tests replay them); each replay gets a deep copy of its own."""
    return snapshots.read(Path(folder) / f"{tid}.pt.xz")["checks"]


def copy_checks(kit, tid, functions):
    """Every replayed check of task tid in the student copy `kit` (its stored calls), made here
    on `functions` {qualname: function}: {check: None or the exception}."""
    import evaluate
    import model
    import search_scales
    modules = {"model.py": model, "search_scales.py": search_scales, "evaluate.py": evaluate}
    spec = {q: p for s in read_tasks()[tid]["functions"] for p, q in [s.split(":")]}
    saved, out = [], {}
    for qualname, fn in functions.items():
        module = modules[spec[qualname]]
        saved.append((module, qualname, getattr(module, qualname)))
        setattr(module, qualname, fn)
    try:
        stored = copy.deepcopy(stored_calls(str(kit / "tests" / "snapshots"), tid))
        for name, calls in stored.items():
            try:
                snapshots.replay(name, calls)
                out[name] = None
            except Exception as e:  # noqa: BLE001
                out[name] = e
    finally:
        for module, qualname, old in saved:
            setattr(module, qualname, old)
    return out


def load_function(tmp_path, path, text, qualname):
    """qualname from `text`, a version of the project's file `path`, imported from tmp_path."""
    f = tmp_path / f"v_{abs(hash(text))}_{Path(path).name}"
    f.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f.stem, f)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, qualname)


def functions_of(tmp_path, tid, texts):
    """{qualname: function} of task tid, each from texts[path] (a whole file's text)."""
    out = {}
    for spec in read_tasks()[tid]["functions"]:
        path, qualname = spec.split(":")
        out[qualname] = load_function(tmp_path, path, texts[path], qualname)
    return out


@pytest.mark.slow  # the student copy built, or a grading run
@pytest.mark.parametrize("tid", ["T1", "T2", "T3", "T4", "T5", "T6"])
def test_the_projects_own_functions_pass_every_check_of_their_task(tid, tmp_path, kit):
    """Both ways: the grader's checks and the student copy's replayed ones."""
    texts = {p: (ROOT / p).read_text("utf-8") for p in ("model.py", "search_scales.py", "evaluate.py")}
    functions = functions_of(tmp_path, tid, texts)
    failed = {n: e for n, e in task_checks(tid, functions, tmp_path).items() if e is not None}
    assert not failed, f"{tid}, the project's own functions: {failed}"
    failed = {n: e for n, e in copy_checks(kit, tid, functions).items() if e is not None}
    assert not failed, f"{tid}, the project's own functions, replayed in the copy: {failed}"


@pytest.mark.slow  # the student copy built, or a grading run
@pytest.mark.parametrize("tid, what, path, edits", WRONG, ids=[w[1] for w in WRONG])
def test_a_wrong_version_fails_a_check_of_its_task(tid, what, path, edits, tmp_path, kit):
    """It fails a grader's check and a check of the student copy: the task scores 0 both ways,
    and no check passes in the copy that fails in the grader at the same seeds (the copy
    compares every value a check's calls return, so it may fail more of them, never fewer)."""
    functions = functions_of(tmp_path, tid, {path: edited(path, edits)} | {
        p: (ROOT / p).read_text("utf-8") for p in ("model.py", "search_scales.py", "evaluate.py") if p != path})
    graded = {n: e is None for n, e in task_checks(tid, functions, tmp_path).items()}
    assert not all(graded.values()), f"{what}: passes every check of {tid}"
    replayed = {n: e is None for n, e in copy_checks(kit, tid, functions).items()}
    assert not all(replayed.values()), f"{what}: passes every replayed check of {tid} in the student copy"
    lenient = [n for n, ok in replayed.items() if ok and not graded[n]]
    assert not lenient, f"{what}: the copy passes {lenient}, which the grader fails at the same seeds"


INDEPENDENT_VERSIONS = sorted(f.stem for f in INDEPENDENT.glob("T*_*.py"))


@pytest.mark.slow  # the student copy built, or a grading run
@pytest.mark.parametrize("version", INDEPENDENT_VERSIONS)
def test_an_independent_implementation_passes_every_check_and_is_not_flagged(version, tmp_path, kit):
    """Written from the handout alone (tests/independent/README.md): taken by the grader's own
    rules (source.take), every check passes, the grader's and the student copy's replayed ones
    alike (the copy's feedback equals the grade), and the copy flag does not call it the
    project's."""
    tid = version.split("_")[0]
    text = (INDEPENDENT / f"{version}.py").read_text("utf-8")
    texts, nodes = {}, {}
    for spec in read_tasks()[tid]["functions"]:
        path, qualname = spec.split(":")
        texts[path] = take(text, texts.get(path) or (ROOT / path).read_text("utf-8"), qualname)
        nodes[spec] = find_function(ast.parse(text), qualname)
    functions = functions_of(tmp_path, tid, texts)
    failed = {n: e for n, e in task_checks(tid, functions, tmp_path).items() if e is not None}
    assert not failed, f"{version}: {failed}"
    failed = {n: e for n, e in copy_checks(kit, tid, functions).items() if e is not None}
    assert not failed, f"{version}, replayed in the student copy: {failed}"
    own = {s: find_function(ast.parse((ROOT / s.split(':')[0]).read_text('utf-8')), s.split(":")[1]) for s in nodes}
    share = copyflag.similarity(Grader.task_prints(nodes), Grader.task_prints(own))
    assert share < copyflag.FLAG, f"{version} flagged as the project's ({share:.2f})"


def test_each_handouts_worked_example_is_what_the_project_computes(monkeypatch):
    """The >>> lines of every handout run as doctests on the project's own functions, and T6's
    table of sub-windows is what last_L_losses reads (its passes recorded)."""
    import doctest
    import math

    import torch

    import evaluate
    from evaluate import excess
    from model import query_scale, written_out_attention
    from search_scales import fit_log_law, uniform_scale
    from train import cosine_lr
    globs = dict(torch=torch, math=math, query_scale=query_scale, written_out_attention=written_out_attention,
                 uniform_scale=uniform_scale, fit_log_law=fit_log_law, cosine_lr=cosine_lr, excess=excess)
    for t in read_tasks().values():
        f = ROOT / "classroom" / t["handout"]
        assert "## A worked example" in f.read_text(encoding="utf-8"), t["handout"]
        failed, tried = doctest.testfile(str(f), module_relative=False, globs=dict(globs), encoding="utf-8",
                                         optionflags=doctest.NORMALIZE_WHITESPACE)
        assert failed == 0 and (tried > 0 or t["id"] == "T6"), f"{t['handout']}: {failed} of {tried} examples fail"
    read = []  # T6: the passes last_L_losses makes, with x = its own positions

    def record(model, x, y, ctx, mask, entropy, chunk):
        read.extend(x.tolist())
        return torch.zeros(x.shape), None
    monkeypatch.setattr(evaluate, "_losses", record)

    class Model:
        config = type("Config", (), {"bos": True})()
    x = torch.arange(21).view(1, 21)
    evaluate.last_L_losses(Model(), x, x, 16, batch_size=8)
    ends = [16, 18, 20, 21]
    lines = []
    for k, row in enumerate(read):
        what = "first pass  " if k == 0 else f"sub-window {k}"
        rest = f"x0 … x{row[-1]}" if k == 0 else f"x{row[0]}, x{row[1]} … x{row[-1]}"
        scored = list(range(ends[k - 1] if k else 0, ends[k]))
        lines.append(f"{what}    reads {rest:<22} scores " +
                     (f"{scored[0]} … {scored[-1]}" if len(scored) > 2 else ", ".join(map(str, scored))))
    flat = [" ".join(line.split()) for line in (ROOT / "classroom" / "T6.md").read_text("utf-8").splitlines()]
    assert all(" ".join(line.split()) in flat for line in lines), lines


# -----------------------------------------------------------------------------
# The function as Python would import it: odd formatting, a BOM, the last def, a helper

def test_odd_formatting_is_taken_exactly_as_python_reads_it():
    project = (ROOT / "model.py").read_text(encoding="utf-8")
    ours = function_source("model.py", "query_scale")
    # a lone form feed line above the def, a form feed and U+2028 inside comments, tabs in the body
    odd = ours.replace("    lam = head_scale.view", "    # a comment \f with \u2028 in it\n    lam = head_scale.view")
    submitted = project.replace(ours, "\f\n" + odd)
    put = take(submitted, project, "query_scale")
    assert segment(put, find_function(ast.parse(put), "query_scale")) == odd  # whole, the return line too
    assert put.replace(odd, ours) == project  # nothing outside the function changed
    # str.splitlines breaks at U+2028 where Python does not: a line above the def stays out
    sneaky = project.replace(ours, "x = 1  # \u2028import os; os.system('echo pwned')\n" + ours)
    assert take(sneaky, project, "query_scale") == project
    # CRLF and tabs
    tabbed = "def fit_log_law(positions, lam, L):\r\n\t\"\"\"doc\"\"\"\r\n\treturn 1.0, 1.0\r\n"
    text = (ROOT / "search_scales.py").read_text(encoding="utf-8")
    node = find_function(ast.parse(tabbed), "fit_log_law")
    put = take(tabbed, text, "fit_log_law")
    assert ast.dump(find_function(ast.parse(put), "fit_log_law")) == ast.dump(node)


def test_a_decorator_another_def_line_or_a_helper_outside_is_refused_in_one_line():
    project = (ROOT / "search_scales.py").read_text(encoding="utf-8")
    ours = function_source("search_scales.py", "fit_log_law")
    helper = ours.replace("    x = np.log(", "    x = helper_log(").replace(
        "def fit_log_law(", "def helper_log(p):\n    return np.log(p)\n\n\ndef fit_log_law(")
    cases = {"@staticmethod\n" + ours: "has a decorator",
             ours.replace("def fit_log_law(positions, lam, L):", "def fit_log_law(positions, lam, L=8):"): "def line differs",
             ours.replace("def fit_log_law(positions, lam, L):", "def fit_log_law(positions, lam, L: int = 8) -> float:"):
                 "def line differs",
             ours.replace("def fit_log_law(positions, lam, L):", "def fit_log_law(positions, lam, L, k=print('hi')):"):
                 "def line differs",
             helper: "uses `helper_log`, which your file defines outside it"}
    for text, why in cases.items():
        with pytest.raises(Refused) as e:
            take(project.replace(ours, text), project, "fit_log_law")
        assert why in str(e.value) and "\n" not in str(e.value), str(e.value)
        if "def line" in why or "decorator" in why:
            assert "def fit_log_law(positions, lam, L):" in str(e.value)


@pytest.mark.slow  # the student copy built, or a grading run
def test_what_python_would_import_is_graded(project, tmp_path):
    """A file with a UTF-8 byte-order mark, a blank stub left above a written version (Python
    binds the last def) and a body holding a sum of 500 terms (a deep syntax tree): each taken.
    One of 30,000 terms, past what this reading of Python takes: a 0 with the reason, no crash."""
    grader = Grader(project, method="none")
    try:
        tasks = grader.tasks
        ours = function_source("search_scales.py", "fit_log_law")
        stub = blank(ours, ["fit_log_law"], lambda name: "T4: write it")
        text = (project / "search_scales.py").read_text("utf-8")
        cases = {"bom": b"\xef\xbb\xbf" + text.encode("utf-8"),
                 "last def": text.replace(ours, stub + "\n\n" + ours).encode("utf-8"),
                 "deep": text.replace(ours, ours.replace("    x = np.log(", "    z = " + "+".join(["0"] * 500) +
                                                         "\n    x = np.log(")).encode("utf-8"),
                 "deeper": text.replace(ours, ours.replace("    x = np.log(", "    z = " + "+".join(["0"] * 30000) +
                                                           "\n    x = np.log(")).encode("utf-8")}
        got = {}
        for name, data in cases.items():
            sub = tmp_path / name.replace(" ", "_")
            sub.mkdir()
            (sub / "search_scales.py").write_bytes(data)
            got[name] = grader.prepare(tasks["T4"], sub, tmp_path / f"copies_{sub.name}")
        assert "_job" in got["bom"] and "_job" in got["last def"], [got[k]["output"] for k in ("bom", "last def")]
        copy = tmp_path / "copies_last_def" / "T4"
        assert "T4: write it" not in (copy / "search_scales.py").read_text("utf-8")
        assert "_job" in got["deep"], got["deep"]["output"]
        deeper = got["deeper"]
        assert "_job" in deeper or (deeper["score"] == 0 and deeper["output"] and "\n" not in deeper["output"])
    finally:
        grader.__exit__()


# -----------------------------------------------------------------------------
# The upload read as data

def test_the_upload_is_read_as_data_links_devices_and_sizes_refused(tmp_path):
    outside = tmp_path / "a_classmates" / "model.py"
    outside.parent.mkdir()
    outside.write_text("x = 1\n", encoding="utf-8")
    up = tmp_path / "upload"
    up.mkdir()
    (up / "model.py").symlink_to(outside)
    (up / "sub").symlink_to(outside.parent, target_is_directory=True)
    os.mkfifo(up / "evaluate.py")
    (up / "search_scales.py").write_bytes(b"x = 1\n" + b"#" * (2 << 20))
    (up / "train.py").write_bytes(b"\xff\xfe not utf-8")
    for name, why in (("model.py", "symbolic link"), ("sub/model.py", "symbolic link"), ("evaluate.py", "fifo"),
                      ("search_scales.py", "over 1024 KB"), ("train.py", "not UTF-8")):
        with pytest.raises(UploadError, match=why):
            read_upload(up, name)
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # a device: /dev/zero's numbers, in the temp folder
        os.mknod(up / "data.py", 0o644 | 0o020000, os.makedev(1, 5))
        with pytest.raises(UploadError, match="device"):
            read_upload(up, "data.py")
    with pytest.raises(FileNotFoundError):
        read_upload(up, "sample.py")
    # the task files found: a link counts as there (then refused), a linked folder is not entered
    tasks = read_tasks()
    nested = tmp_path / "nested"
    (nested / "a" / "b").mkdir(parents=True)
    (nested / "a" / "b" / "model.py").write_text("x = 1\n", encoding="utf-8")
    (nested / "link").symlink_to(outside.parent, target_is_directory=True)
    assert choose_submission(nested, tasks)[0] == nested / "a" / "b"
    assert choose_submission(up, tasks) == (up, "")


def test_the_folder_graded_is_the_one_the_student_worked_in(tmp_path):
    """An old blank model.py one level up and the complete work in a folder below: the folder
    with the written functions is graded, and the line says which and names the other."""
    up = tmp_path / "upload"
    (up / "nope-assignment").mkdir(parents=True)
    ours = (ROOT / "model.py").read_text("utf-8")
    (up / "model.py").write_text(blank(ours, ["query_scale", "written_out_attention"], lambda n: "T: write it"),
                                 encoding="utf-8")
    (up / "model.py~").write_text(ours, encoding="utf-8")  # an editor's backup: not a task file
    for f in ("model.py", "search_scales.py", "evaluate.py"):
        shutil.copy2(ROOT / f, up / "nope-assignment" / f)
    folder, line = choose_submission(up, read_tasks())
    assert folder == up / "nope-assignment", line
    assert line.startswith("graded the folder nope-assignment: 7 task functions written there") and \
        "also found . (0 written)" in line


@pytest.mark.slow  # the student copy built, or a grading run
def test_a_symlinked_upload_scores_zero_with_its_reason(project, tmp_path):
    """A folder holding only links to a classmate's files: no task taken, each says why."""
    grader = Grader(project, method="none")
    try:
        up = tmp_path / "thief"
        up.mkdir()
        for f in ("model.py", "search_scales.py", "evaluate.py"):
            (up / f).symlink_to(project / f)
        for tid, task in grader.tasks.items():
            r = grader.prepare(task, up, tmp_path / "copies")
            assert "_job" not in r and r["score"] == 0 and "symbolic link" in r["output"], r["output"]
    finally:
        grader.__exit__()


# -----------------------------------------------------------------------------
# The copy flag

def disguised(node):
    """A function's text with the edits a student hiding a copy makes: every local renamed,
    the operands of + and * swapped, a < b written b > a, adjacent independent assignments
    swapped, constants respelled (1.0 as 1., 0.5 as 5e-1), a new docstring."""
    node = ast.parse(ast.unparse(node)).body[0]
    params = {a.arg for a in ast.walk(node) if isinstance(a, ast.arg)}
    names = {n: f"my_{i}" for i, n in enumerate(sorted(copyflag.bound_names(node) - params))}
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in names:
            n.id = names[n.id]
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Mult)):
            n.left, n.right = n.right, n.left
        if isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], ast.Lt):
            n.ops, n.left, n.comparators = [ast.Gt()], n.comparators[0], [n.left]
        body = getattr(n, "body", None)
        for i in range(len(body) - 1 if isinstance(body, list) else 0):
            a, b = body[i], body[i + 1]
            if isinstance(a, ast.Assign) and isinstance(b, ast.Assign):
                written = lambda s: {t.id for t in ast.walk(s) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}  # noqa: E731
                read = lambda s: {t.id for t in ast.walk(s) if isinstance(t, ast.Name)}  # noqa: E731
                if not (written(a) & read(b)) and not (written(b) & read(a)):
                    body[i], body[i + 1] = b, a
    node.body[0] = ast.Expr(ast.Constant("My own work."))
    return ast.unparse(node).replace("1.0", "1.").replace("0.5", "5e-1")


def test_the_copy_flag_sees_a_disguised_copy_and_not_an_independent_version():
    """Its two error rates on this project (classroom/README.md says them): every disguised
    copy of the project's seven functions is flagged (no miss), no independent implementation
    of tests/independent/ is (measured at the end of the independent versions' test)."""
    for t in read_tasks().values():
        for spec in t["functions"]:
            path, qualname = spec.split(":")
            ours = find_function(ast.parse((ROOT / path).read_text("utf-8")), qualname)
            text = disguised(ours)
            theirs = ast.parse(text).body[0]
            assert ast.unparse(theirs) != ast.unparse(ours)
            share = copyflag.similarity(copyflag.fingerprints(theirs), copyflag.fingerprints(ours))
            assert share >= copyflag.FLAG, f"a disguised copy of {spec}: similarity {share:.2f}"
    # a too-deep function has no fingerprint and is never flagged (nor does it crash)
    deep = ast.parse("def f(x):\n    return " + "+".join(["x"] * 400) + "\n").body[0]
    assert copyflag.fingerprints(deep) == set()


# -----------------------------------------------------------------------------
# What crosses between the judge and the worker: data only, bounded

def test_the_wire_takes_data_only_and_counts_what_it_builds():
    import torch
    r, w = os.pipe()
    try:
        value = {"a": (1, 2.5, None, "x"), 3: [torch.ones(2, dtype=torch.bfloat16)], "n": np.arange(3.0),
                 "s": np.float32(1.5)}
        reader = wire.Reader(r)
        wire.send(w, ("result", wire.to_wire(value), {}, None))
        got = wire.from_wire(wire.receive(reader)[1])
        assert got["a"] == (1, 2.5, None, "x") and got[3][0].dtype == torch.bfloat16 and got["n"].tolist() == [0, 1, 2]
        assert type(got["s"]) is np.float32

        class Evil:  # a pickle that would run a command when unpickled
            def __reduce__(self):
                return (os.system, ("echo pwned > /dev/null",))
        data = pickle.dumps(Evil(), protocol=2)
        os.write(w, len(data).to_bytes(8, "little") + data)
        with pytest.raises(wire.WireError):
            wire.receive(reader)
        os.write(w, (wire.LIMIT + 1).to_bytes(8, "little"))
        with pytest.raises(wire.WireError):
            wire.receive(reader)
        with pytest.raises(TimeoutError):  # nothing more comes: a deadline holds
            wire.receive(reader, deadline=time.monotonic() + 0.2)
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(wire.WireError):  # a model: only data comes back
        wire.from_wire((wire.TAG, "model", 0))
    with pytest.raises(wire.WireError):
        wire.to_wire(lambda: 0)
    # shared references: 30 levels of a list holding its child twice is 2^30 values once expanded
    node = [1]
    for _ in range(30):
        node = [node, node]
    with pytest.raises(wire.WireError, match="over"):
        wire.from_wire(node)
    cyclic = []
    cyclic.append(cyclic)
    with pytest.raises(wire.WireError, match="deeper"):
        wire.from_wire(cyclic)
    big = torch.zeros(1 << 20)  # a view into a larger storage is not data
    with pytest.raises(wire.WireError, match="storage"):
        wire.from_wire(big[:10])
    # without the defence: a generous budget builds 2^12 leaves from a 13-node message
    small = [1]
    for _ in range(12):
        small = [small, small]
    assert len(str(wire.from_wire(small, budget=wire.Budget(nodes=10 ** 7)))) > 4 * 2 ** 12


def test_text_from_student_code_is_plain_short_and_masked_for_the_student():
    evil = "\x1b[2J\x1b[1;1HT1  passed  10/10\u202e\u200b" + "A" * 100_000 + "\x07"
    text = report.plain(evil)
    assert len(text) <= report.WHY_CHARS and "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert report.csv_cell("=HYPERLINK(1)").startswith("'=") and report.csv_cell("ada") == "ada"
    assert report.masked("a = 0.276457, least squares gives 0.308611 (T = 45)") == \
        "a = #, least squares gives # (T = #)"
    checks = [{"name": f"test_T1_x[{i}]", "ok": False, "why": "a = 0.25 " + "B" * 50_000, "seconds": 0.1,
               "hidden": True} for i in range(500)]
    r = {"id": "T1", "title": "t", "max_score": 10, "score": 0, "passed": False, "seed": 42, "copied": "",
         "checks": checks, "output": "x" * 10 ** 6}
    out = json.dumps(report.gradescope([r], {"T1": {}}, 3.0))
    assert len(out) <= report.FEEDBACK and "0.25" not in report.student_output(r)


def test_a_worker_that_prints_without_end_keeps_a_short_log(tmp_path):
    """What a worker prints reaches a log of at most log_kb, with one line saying how much was
    cut; without the cap (a limit of all of it) the same stream is all kept."""
    from classroom.judge import keep_log
    for limit, kept in ((64 << 10, 64 << 10), (10 << 20, 3 << 20)):
        r, w = os.pipe()
        child = subprocess.Popen([sys.executable, "-c", "import os, sys\nfor _ in range(48):\n"
                                  "    os.write(1, b'\\x1b[2J' * 16384)\n"], stdout=w)
        os.close(w)
        with os.fdopen(r, "rb") as pipe:
            keep_log(pipe, tmp_path / "log", limit)
        child.wait()
        data = (tmp_path / "log").read_bytes()
        assert len(data) - len(data.split(b"\n[")[0]) < 200 and data.startswith(b"\x1b[2J")
        assert len(data.split(b"\n[")[0]) == kept, len(data)


def test_the_workers_environment_holds_no_secret(monkeypatch, tmp_path):
    """A child started as the worker is (sandbox.command, here with no sandbox) sees none of the
    teacher's variables; started as the old grader started it ({**os.environ, ...}), it did."""
    for name in ("NANONOPE_SECRET", "NANONOPE_REFERENCE", "PWD", "NANONOPE_SEED"):
        monkeypatch.setenv(name, str(ROOT))
    show = [sys.executable, "-S", "-c", "import json, os; print(json.dumps(dict(os.environ)))"]
    (tmp_path / "task").mkdir()
    seen = json.loads(subprocess.run(**sandbox.command("none", tmp_path / "task", show), capture_output=True,
                                     text=True, timeout=60).stdout)
    assert not {"NANONOPE_SECRET", "NANONOPE_REFERENCE", "NANONOPE_SEED"} & set(seen)
    assert str(ROOT) not in json.dumps(seen)
    old = json.loads(subprocess.run(show, env={**os.environ, "NANONOPE_SEED": "7"}, capture_output=True,
                                    text=True, timeout=60).stdout)
    assert old["NANONOPE_SECRET"] == str(ROOT)  # without the defence: the secret reached the child


# -----------------------------------------------------------------------------
# The sandbox, seen from inside

PROBE = r"""
import json, os, resource, socket, sys
sys.path.insert(0, "kit")
from sandbox import apply_limits
checkout, copy, canary = sys.argv[1:4]
out = {}
for name, path in (("copy", os.path.join(copy, "x")), ("canary", canary)):
    try:
        with open(path, "a") as f:
            f.write("x")
        out[name] = "written"
    except OSError as e:
        out[name] = type(e).__name__
try:
    socket.create_connection(("10.255.255.1", 80), timeout=2)
    out["net"] = "connected"
except OSError as e:
    out["net"] = type(e).__name__
cmds = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            cmds.append(open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace"))
        except OSError:
            pass
out["ancestors"] = [c for c in cmds if ("pytest" in c or "xdist" in c) and "probe.py" not in c]
out["checkout"] = os.path.exists(checkout)
out["sys_writable"] = os.access("/proc/sys/kernel/core_pattern", os.W_OK)  # asked, never opened
out["uid"] = os.getuid()
if os.environ.get("NANONOPE_LIMITS"):
    apply_limits(os.environ["NANONOPE_LIMITS"])
out["limits"] = [resource.getrlimit(r)[0] for r in (resource.RLIMIT_DATA, resource.RLIMIT_NPROC,
                                                     resource.RLIMIT_FSIZE, resource.RLIMIT_CPU, resource.RLIMIT_CORE)]
print(json.dumps(out))
"""


def run_probe(method, tmp_path, limits):
    copy = tmp_path / method / "task"
    (copy / "kit").mkdir(parents=True)
    (tmp_path / method / "root").mkdir()
    shutil.copy2(ROOT / "classroom" / "sandbox.py", copy / "kit" / "sandbox.py")
    (copy / "probe.py").write_text(PROBE, encoding="utf-8")
    canary = tmp_path / "canary.txt"
    canary.write_text("", encoding="utf-8")
    sandbox.make_readable(tmp_path / method)
    inside = sandbox.TASK if method in ("bwrap", "unshare") else str(copy)
    kw = sandbox.command(method, copy, [sys.executable, "-S", "probe.py", str(ROOT), inside, str(canary)], limits)
    done = subprocess.run(**kw, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), canary


@sandboxed
@pytest.mark.parametrize("method", METHODS or ["bwrap"])
def test_the_sandbox_seen_from_inside(method, tmp_path):
    """From inside the worker's sandbox: its copy read-only, a canary outside it unreachable,
    the network unreachable, no process of the grader's (pytest) visible, /proc/sys read-only,
    graded as root another uid, and the bounds set. Under --sandbox=none the same child writes
    its copy and the canary and sees the checkout and pytest (only the canary in this test's
    folder is written; the kernel setting is only asked about, with access())."""
    limits = sandbox.Limits(memory_mb=700, processes=40, file_mb=3, cpu_s=50)
    seen, canary = run_probe(method, tmp_path, limits)
    assert seen["copy"] != "written" and seen["canary"] != "written" and seen["net"] != "connected", seen
    assert not seen["ancestors"] and not seen["checkout"] and not seen["sys_writable"], seen
    if sandbox.as_root():
        assert seen["uid"] != 0, f"graded as root, the worker is uid {seen['uid']}"
    assert seen["limits"] == [700 << 20, 40, 3 << 20, 50, 0], seen["limits"]
    assert canary.read_text(encoding="utf-8") == ""
    plain, canary = run_probe("none", tmp_path, limits)  # without the defence
    assert plain["copy"] == plain["canary"] == "written" and plain["checkout"] and plain["ancestors"], plain
    assert plain["limits"][1] != 40  # no process limit outside a sandbox: it would count the teacher's
    if sandbox.as_root():
        assert plain["uid"] == 0  # the teacher's root, with every kernel setting root may write


def test_auto_never_falls_back_to_none_as_root_and_names_each_reason(monkeypatch):
    monkeypatch.setattr(sandbox, "unavailable", lambda m: None if m == "none" else f"{m} is not here")
    with pytest.raises(classroom.UserError) as e:
        sandbox.choose("bwrap")
    assert "--sandbox=bwrap is not available here: bwrap is not here" in str(e.value)
    monkeypatch.setattr(sandbox, "as_root", lambda: True)
    with pytest.raises(classroom.UserError) as e:
        sandbox.choose("auto")
    assert "unshare is not here; bwrap is not here; user is not here" in str(e.value) and "--sandbox=none" in str(e.value)
    assert sandbox.choose("none")[0] == "none"  # when asked for
    monkeypatch.setattr(sandbox, "as_root", lambda: False)
    method, warning = sandbox.choose("auto")
    assert method == "none" and "bwrap is not here" in warning


def test_the_user_method_needs_its_own_account(monkeypatch):
    monkeypatch.setattr(sandbox, "as_root", lambda: True)
    monkeypatch.setattr(sandbox, "student_account", lambda: None)
    sandbox.unavailable.cache_clear()
    try:
        if sys.platform.startswith("linux"):
            assert "dedicated account nanonope-student" in sandbox.unavailable("user")
    finally:
        sandbox.unavailable.cache_clear()


def test_python_anywhere_is_bound_and_nothing_else_of_sys_path():
    paths = sandbox.python_paths()
    prefix = str(Path(sys.prefix).resolve())
    assert any(prefix == p or prefix.startswith(p + os.sep) for p in paths), (prefix, paths)
    assert not any(str(ROOT) == p or str(ROOT).startswith(p + os.sep) for p in paths if p != "/"), paths
    # a Python under the temp folder is bound after /tmp is made, so it stays visible
    args = sandbox.bwrap_args(Path("/x/task"), sandbox.Limits())
    assert args.index("/tmp") < min(i for i, a in enumerate(args) if a in paths)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's subreaper")
def test_a_detached_process_is_killed_and_only_what_the_grader_started():
    sandbox.become_subreaper()
    code = ("import os, subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-S', '-c', 'import os, time; os.setsid(); time.sleep(60)'],\n"
            "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "print(p.pid, flush=True)\n")
    keep = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(60)"])
    child = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=30)
    pid = int(child.stdout)
    time.sleep(0.2)
    assert alive(pid)  # without the defence: its parent is gone, it lives on
    assert sandbox.kill_below(keep={keep.pid}) >= 1
    assert not alive(pid) and keep.poll() is None  # the one kept (another grading's judge) lives
    keep.kill()
    keep.wait()


def alive(pid):
    import psutil
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# -----------------------------------------------------------------------------
# The verdict, the seeds, what the student sees

def test_a_check_counts_only_if_it_ran_and_passed():
    task = {"id": "T9", "points": 10}
    checks = [{"name": f"test_T9_x[{i}]", "ok": True} for i in range(3)]
    assert score_checks(task, checks) == 10
    assert score_checks(task, checks[:2] + [{"name": "test_T9_x[2]", "ok": False}]) == 0
    assert score_checks(task, []) == 0
    partial = {"id": "T9", "points": 10, "partial_credit": True, "weights": {"test_T9_y": 2}}
    parts = checks + [{"name": "test_T9_y", "ok": True}]
    assert score_checks(partial, parts) == 10  # 2 + 2 + 2 + 4 (the last takes the remainder)
    thirds = {"id": "T9", "points": 10, "partial_credit": True}
    assert score_checks(thirds, checks) == 10 and score_checks(thirds, checks[:2] + [{"name": "c", "ok": False}]) == 6.66


def test_seeds_cover_the_whole_text_and_the_student_sees_none():
    assert seed_of("", "T1", ["def f(): pass"]) == 0  # no secret: the public seeds
    a, b = seed_of("s", "T1", ["def f(): pass"]), seed_of("s", "T1", ["def f():  pass"])
    assert a != b and a == seed_of("s", "T1", ["def f(): pass"]) != seed_of("t", "T1", ["def f(): pass"])
    r = {"id": "T1", "title": "t", "max_score": 10, "score": 0, "passed": False, "seed": 123456789,
         "copied": "the project's (1.00)", "output": "x",
         "checks": [{"name": "test_T1_a[0]", "ok": False, "why": "wrong at 0.125", "seconds": 0.1, "hidden": True},
                    {"name": "test_T1_edges", "ok": False, "why": "T = 3 <= L = 8", "seconds": 0.1, "hidden": False}]}
    out = report.gradescope([r], {"T1": {}}, 3.2)
    seen = [t for t in out["tests"] if t["visibility"] != "hidden"]
    assert "123456789" not in json.dumps(seen) and "123456789" in json.dumps(out)
    assert "0.125" not in json.dumps(seen) and "0.125" in json.dumps(out) and "T = 3 <= L = 8" in seen[0]["output"]
    assert out["execution_time"] == 4 and report.student_output(r).startswith("0 of 2 checks passed")


def test_the_edge_cases_run_the_same_in_every_grading():
    """The checks each handout's edge cases live in read no SEED (the judge marks the others
    hidden): a wrong function fails them whatever its text."""
    import test_paper
    fixed = [n for n, f in vars(test_paper).items() if n.startswith("test_T") and "SEED" not in f.__code__.co_names]
    for tid in ("T1", "T2", "T3", "T4", "T6"):
        assert any(n.startswith(f"test_{tid}_") and ("edge" in n or "exact" in n) for n in fixed), tid


def test_the_snapshot_is_what_grading_reads_and_a_changed_checkout_stops_it(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("x = 1\n", encoding="utf-8")
    (repo / ".gitignore").write_text("out/\n", encoding="utf-8")
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], capture_output=True, check=True)  # noqa: E731
    git("init", "-q")
    git("-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one")
    (repo / "a.py").write_text("x = 2\n", encoding="utf-8")  # an uncommitted edit: not graded, named
    (repo / "b.py").write_text("untracked\n", encoding="utf-8")
    info = take_snapshot(repo, tmp_path / "snap")
    assert (tmp_path / "snap" / "a.py").read_text() == "x = 1\n" and not (tmp_path / "snap" / "b.py").exists()
    assert info["edited"] == ["a.py"] and info["source"].startswith("git HEAD")
    before = fingerprint(repo)
    (repo / "out").mkdir()
    (repo / "out" / "x").write_text("ignored", encoding="utf-8")
    assert fingerprint(repo) == before  # what .gitignore names may change
    (repo / "tests").mkdir()
    (repo / "tests" / "conftest.py").write_text("# poisoned\n", encoding="utf-8")
    assert fingerprint(repo) != before
    # the grader stops when its checkout changes while a submission is graded
    root = tmp_path / "plain"
    copy_project(root, leave_out=("docs", "out", "tests", "data"))
    monkeypatch.setattr(sandbox, "become_subreaper", lambda: None)
    with Grader(root, method="none") as grader:
        monkeypatch.setattr(grader, "prepare", lambda task, sub, copies: (root / "model.py").write_text("# poisoned\n") and {})
        with pytest.raises(classroom.UserError) as e:
            grader.grade(root, ["T1"])
        assert "changed while" in str(e.value) and "\n" not in str(e.value)


def test_bad_input_is_refused_in_one_line_before_any_work(tmp_path, monkeypatch):
    cases = (["grade", ROOT, "--tasks=T1,T9"], ["student", tmp_path / "new", "--tasks=T7"], ["teach", tmp_path],
             ["grade", ROOT, "--color=red"], ["grade", ROOT, "--sandbox=jail"], ["grade", ROOT, "--memory_mb=0"], [])
    for args in cases:  # in this process (each command line would start Python again)
        monkeypatch.setattr(sys, "argv", ["classroom", *map(str, args)])
        with pytest.raises(classroom.UserError) as e:
            classroom.main()
        assert "\n" not in str(e.value), args
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine", encoding="utf-8")
    out = cli("student", tmp_path / "full")  # and once as a user runs it: one line, exit 2
    assert out.returncode == 2 and out.stdout == "" and out.stderr.startswith("error: ") and \
        len(out.stderr.strip().splitlines()) == 1 and "not empty" in out.stderr
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["notes.txt"]  # nothing lost, nothing written
    assert not (tmp_path / "new").exists()
    # an empty upload: exit 2 in one line, and results.json lists every task at 0 with that line
    (tmp_path / "empty" / "deep").mkdir(parents=True)
    out = cli("grade", tmp_path / "empty", "--tasks=T1,T3", f"--json={tmp_path / 'r.json'}", "--sandbox=none")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    report_ = json.loads((tmp_path / "r.json").read_text("utf-8"))
    assert report_["score"] == 0 and [t["name"][:2] for t in report_["tests"] if t["visibility"] == "visible"] == \
        ["T1", "T3"] and "holds none of the task files" in report_["tests"][0]["output"]
    assert choose_submission(tmp_path / "empty", read_tasks()) == (None, "")


# -----------------------------------------------------------------------------
# A class: one student never stops it

@pytest.mark.slow  # the student copy built, or a grading run
def test_grade_all_never_stops_for_one_student_and_writes_as_it_goes(project, tmp_path, monkeypatch):
    """Five students, graded by a stand-in for Grader.grade: one whose grading crashes gets a
    row with its reason; the gradebook is on disk after each row, and a feedback file a student;
    two students with the same functions are paired; the roster's columns ride along and a late
    submission (by the roster's submitted_at, the platform's time) is marked; --only regrades
    one row; a changed checkout stops the class and keeps the rows written."""
    from classroom import gradebook
    from classroom import grade as grade_module
    tasks = tasks_of(project)
    klass = tmp_path / "class"
    for name in ("ada", "bob", "cy", "dee", "=cmd"):  # the last, a name a spreadsheet would run
        (klass / name).mkdir(parents=True)
        (klass / name / "search_scales.py").write_text("x = 1\n", encoding="utf-8")
    (klass / "link").symlink_to(klass / "ada", target_is_directory=True)
    roster = tmp_path / "roster.csv"
    roster.write_text("folder,id,email,submitted_at\nada,s1,ada@uni.edu,2027-03-01T20:00:00Z\n"
                      "bob,s2,bob@uni.edu,2027-03-02T01:30:00+00:00\ncy,s3,cy@uni.edu,\nzed,s9,,\n", encoding="utf-8")
    book = tmp_path / "book.csv"
    seen_rows, score = [], {"value": 10}

    def fake(self, sub, ids, slot=0):
        seen_rows.append(book.read_text("utf-8").count("\n") if book.exists() else 0)
        if sub.name == "bob":
            raise RecursionError("a deep expression")
        own = {"ada": 0, "cy": 0, "dee": 100, "=cmd": 200}[sub.name]
        return [report.result(tasks["T3"]) | {"score": score["value"], "passed": True, "output": "ok",
                                              "_prints": {("s", own + i) for i in range(10)}}]
    monkeypatch.setattr(grade_module.Grader, "grade", fake)
    cfg = ClassroomConfig(check_key=False, csv=str(book), tasks="T3", sandbox="none", jobs=1, roster=str(roster),
                          deadline="2027-03-01T23:59:00+00:00")
    gradebook.grade_all(klass, ["T3"], tasks, cfg, project)
    import csv
    rows = {r["student"]: r for r in csv.DictReader(book.read_text("utf-8").splitlines())}
    assert sorted(rows) == ["'=cmd", "ada", "bob", "cy", "dee"] and "link" not in rows
    assert rows["bob"]["total"] == "0" and "RecursionError" in rows["bob"]["problems"]
    assert rows["ada"]["same_as"] == "T3 cy 1.00" and rows["cy"]["same_as"] == "T3 ada 1.00" and not rows["dee"]["same_as"]
    assert seen_rows[1:] == sorted(seen_rows[1:]) and seen_rows[-1] >= 4  # written after every row
    assert rows["ada"]["id"] == "s1" and rows["ada"]["email"] == "ada@uni.edu" and rows["ada"]["late"] == ""
    assert rows["bob"]["late"] == "late 1 h 31 m" and rows["dee"]["id"] == ""
    feedback = tmp_path / "book_feedback"
    assert sorted(f.name for f in feedback.iterdir()) == sorted(
        [gradebook.feedback_name("=cmd"), "ada.md", "bob.md", "cy.md", "dee.md"])
    assert "10/10" in (feedback / "ada.md").read_text("utf-8") and "RecursionError" in (feedback / "bob.md").read_text("utf-8")
    score["value"] = 0  # --only: ada graded again, her row alone changes
    gradebook.grade_all(klass, ["T3"], tasks, ClassroomConfig(check_key=False, csv=str(book), tasks="T3", sandbox="none",
                                                              only="ada", roster=str(roster)), project)
    again = {r["student"]: r for r in csv.DictReader(book.read_text("utf-8").splitlines())}
    assert again["ada"]["total"] == "0" and again["ada"]["same_as"] == "T3 cy 1.00"
    assert {k: v for k, v in again.items() if k != "ada"} == {k: v for k, v in rows.items() if k != "ada"}
    with pytest.raises(classroom.UserError, match="no folder of that name"):
        gradebook.grade_all(klass, ["T3"], tasks, ClassroomConfig(check_key=False, csv=str(book), sandbox="none", only="zed"), project)
    with pytest.raises(classroom.UserError, match="ISO 8601"):
        gradebook.grade_all(klass, ["T3"], tasks, ClassroomConfig(check_key=False, csv=str(book), sandbox="none", deadline="friday"),
                            project)

    def stop(self, sub, ids, slot=0):
        if sub.name == "cy":
            raise classroom.UserError(f"{self.root} changed while {sub} was graded: grading stopped")
        return fake(self, sub, ids, slot)
    monkeypatch.setattr(grade_module.Grader, "grade", stop)
    book.unlink()
    cfg = ClassroomConfig(check_key=False, csv=str(book), tasks="T3", sandbox="none", jobs=1)
    with pytest.raises(classroom.UserError, match="changed while"):
        gradebook.grade_all(klass, ["T3"], tasks, cfg, project)
    rows = {r["student"] for r in csv.DictReader(book.read_text("utf-8").splitlines())}
    assert {"ada", "bob"} <= rows and "cy" not in rows  # the rows written before the stop stay


# -----------------------------------------------------------------------------
# End to end

@pytest.mark.slow
def test_the_project_scores_full(project, tmp_path):
    """One grading of every task (about 30 s on 2 cores), with the default bounds."""
    tasks = tasks_of(project)
    cfg = ClassroomConfig(check_key=False, secret="a teacher's secret", json=str(tmp_path / "full.json"),
                          sandbox="auto" if METHODS else "none")
    full = grade(project, list(tasks), tasks, cfg, root=project, quiet=True)
    assert scores(full) == {t: tasks[t]["points"] for t in tasks}, [r["output"] for r in full if not r["passed"]]
    assert all(r["copied"] for r in full)  # the copy flag: these are the project's own functions
    out = json.loads((tmp_path / "full.json").read_text("utf-8"))
    assert out["score"] == 100 and all("checks passed" in t["output"] for t in out["tests"]
                                       if t["visibility"] == "visible")


@pytest.mark.slow  # the student copy built, or a grading run
def test_the_student_copy_holds_no_answer_and_no_teacher_file(project, kit, tmp_path):
    from classroom.student import answer_lines, leaks
    tasks = tasks_of(project)
    for teacher in ("tests/test_classroom.py", "tests/test_model.py", "tests/conftest.py", "classroom/README.md",
                    "classroom/lab_key.md", "classroom/lab_ranges.json", ".ci/run", "classroom/grade.py", "classroom/judge.py",
                    "classroom/sandbox.py", "classroom/student.py", "classroom/platforms.py", "tests/independent",
                    ".github"):
        assert not (kit / teacher).exists(), teacher
    assert (kit / "classroom" / "lab.md").exists() and (kit / "classroom" / "T5.md").exists()
    assert sorted(p.name for p in (kit / "tests").iterdir()) == ["snapshots", "test_paper.py"]
    lines = answer_lines(project, tasks, list(tasks))
    assert len(lines) > 40 and "a = float((x * y).sum() / (x ** 2).sum())" in lines
    assert leaks(kit, lines) == []
    assert "dense_reference" not in (kit / "tests" / "test_paper.py").read_text("utf-8")  # no reference code
    mine = tmp_path / "copy"  # the kit is shared by the suite's workers: written only in a copy
    shutil.copytree(kit, mine)
    (mine / "notes.md").write_text("a hint: `a = float((x * y).sum() / (x ** 2).sum())`\n", encoding="utf-8")
    assert leaks(mine, lines) == [("notes.md", "a = float((x * y).sum() / (x ** 2).sum())")]
    out = cli("grade", kit, cwd=kit)  # a student copy has no grader
    assert out.returncode == 2 and "the teacher's" in out.stderr
    import re
    readme = (kit / "README.md").read_text("utf-8")
    assert readme.startswith("# Your assignment") and "Windows" in readme and "-k test_T3_" in readme
    for f in kit.rglob("*.md"):  # no link to a file the copy does not hold (the teacher's)
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", f.read_text("utf-8")):
            assert "://" in target or (f.parent / target).exists(), f"{f.relative_to(kit)} links {target}"


@pytest.mark.slow  # the student copy built, or a grading run
def test_the_student_copys_replay_holds_the_graders_bound_and_no_more(kit, tmp_path, monkeypatch):
    """The copy's stored T2 chunk check, replayed here: the project's function passes, the
    chunk-ignoring one fails naming the shape it made, and the bound is the grader's
    B*nh*chunk*T, not the project's own largest tensor (the Classroom 50 test replays an
    independent T2 that makes exactly that many values)."""
    import model
    checks = snapshots.load(kit / "tests" / "snapshots")
    name = next(n for n in checks if n.startswith("test_T2_holds_one_chunk"))
    observed = [c["seen"] for c in checks[name] if c["seen"] is not None]
    assert observed and observed[0]["bound"] == 2 * 2 * 3 * 40 > observed[0]["largest"]
    snapshots.replay(name, checks[name])
    wrong = load_function(tmp_path, "model.py", edited("model.py", next(
        w[3] for w in WRONG if w[1].startswith("chunk ignored"))), "written_out_attention")
    monkeypatch.setattr(model, "written_out_attention", wrong)
    with pytest.raises(AssertionError, match=r"a tensor of shape \(\d+, 40, 40\)"):
        snapshots.replay(name, checks[name])


@pytest.mark.slow
def test_the_gradescope_zip_as_gradescope_runs_it(project, kit, tmp_path):
    """The zip for T1, T3 and T4, unpacked into a fake /autograder, run_autograder run on two
    uploads (about 20 s): the project nested in one folder (full), and a model.py that does not
    parse (T1 0, the others full). (A blank copy's 0: the Classroom 50 test.)"""
    from classroom.platforms import unpack
    zip_path = tmp_path / "autograder.zip"
    done = subprocess.run([sys.executable, "-m", "classroom", "gradescope", str(zip_path), "--tasks=T1,T3,T4",
                           "--secret=zip secret", "--timeout=60"], cwd=project, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    import zipfile
    with zipfile.ZipFile(zip_path) as z:
        names = z.namelist()
        for script in ("setup.sh", "run_autograder"):
            info = z.getinfo(script)
            assert (info.external_attr >> 16) & 0o111 and z.read(script).startswith(b"#!/usr/bin/env bash\n")
        assert "torch==" in z.read("setup.sh").decode() and b"zip secret" == z.read("secret.txt")
    assert "nanoNoPE/model.py" in names and not any(n.startswith("nanoNoPE/docs/") for n in names)
    assert cli("gradescope", tmp_path / "x.zip", cwd=project).returncode == 2  # no secret: refused

    def run(upload):
        root = tmp_path / f"root_{upload.name}"
        unpack(zip_path, root)
        shutil.copytree(upload, root / "submission", symlinks=True)
        env = {**os.environ, "AUTOGRADER_ROOT": str(root)}
        done = subprocess.run(["bash", str(root / "source" / "run_autograder")], capture_output=True, text=True,
                              env=env, timeout=600)
        assert done.returncode == 0, done.stderr
        out = json.loads((root / "results" / "results.json").read_text("utf-8"))
        assert out["execution_time"] >= 1 and out["tests"], out
        return {t["name"][:2]: t["score"] for t in out["tests"] if t["visibility"] != "hidden"}

    nested = tmp_path / "nested"
    shutil.copytree(project, nested / "nanoNoPE-main", ignore=shutil.ignore_patterns("tests", "docs", "data"))
    assert run(nested) == {"T1": 10, "T3": 10, "T4": 10}
    broken = tmp_path / "broken"
    shutil.copytree(project, broken, ignore=shutil.ignore_patterns("tests", "docs", "data"))
    (broken / "model.py").write_text("def query_scale(:\n", encoding="utf-8")
    assert run(broken) == {"T1": 0, "T3": 10, "T4": 10}
    # grade with the zip's secret gives the same points for the same code (hidden checks too)
    cfg = ClassroomConfig(check_key=False, secret="zip secret", sandbox="auto" if METHODS else "none")
    graded = grade(broken, ["T1", "T3", "T4"], tasks_of(project), cfg, root=project, quiet=True)
    assert scores(graded) == {"T1": 0, "T3": 10, "T4": 10}


@pytest.mark.slow
def test_grade_all_grades_a_varied_class_to_the_expected_gradebook(project, kit, tmp_path):
    """Twenty-one students on T3 and T4 (about 60 s, two at a time), each row's expected total
    written here before grading: independent work, copies (of the project, disguised; of a
    classmate, disguised), typical mistakes, broken and hostile uploads, stray files and nested
    folders; with a feedback file a student and both copy flags."""
    ss = (ROOT / "search_scales.py").read_text(encoding="utf-8")
    law, scale = function_source("search_scales.py", "fit_log_law"), function_source("search_scales.py", "uniform_scale")
    indep = {(t, v): (INDEPENDENT / f"T{t}_{v}.py").read_text("utf-8") for t in (3, 4) for v in "abc"}

    def with_(t3=None, t4=None, base=ss):
        text = base
        if t3 is not None:
            text = take(t3, text, "uniform_scale")
        if t4 is not None:
            text = take(t4, text, "fit_log_law")
        return text
    wrong = {w[1]: w[3] for w in WRONG}
    cy = with_(indep[3, "c"], base=edited("search_scales.py", wrong["the law fitted with an intercept"]))
    helper = ss.replace(scale, "def my_argmin(v):\n    return int(np.argmin(v))\n\n\n" +
                        scale.replace("mean.argmin()", "my_argmin(mean)"))
    class_ = {  # name: (what its search_scales.py is, or a callable making the folder; expected total)
        "ada": (ss.replace(scale, disguised(ast.parse(scale).body[0])).replace(law, disguised(ast.parse(law).body[0])), 20),
        "bob": ((kit / "search_scales.py").read_text("utf-8"), 0),
        "cy": (cy, 10),
        "dan": (with_(disguised(find_function(ast.parse(indep[3, "c"]), "uniform_scale"))), 20),
        "fay": (with_(indep[3, "a"], indep[4, "a"]), 20),
        "gus": (with_(indep[3, "b"], indep[4, "b"]), 20),
        "hal": (edited("search_scales.py", wrong["the best lambda per bin wrong for bins of width 1"] +
                       wrong["i > L kept instead of i >= L"]), 0),
        "ivy": ("def uniform_scale(:\n", 0),
        "lee": ("\ufeff" + ss.replace("\n", "\r\n"), 20),
        "max": (helper, 10),
        "ned": (with_(None, indep[4, "c"], edited("search_scales.py", wrong["lists returned where the project returns numpy arrays"])), 10),
        "oli": (edited("search_scales.py", wrong["1 subtracted from the caller's array in place"]), 10),
        "pam": (edited("search_scales.py", wrong["a value with a single position >= L"]), 10),
        "quin": (ss.replace(law, law.replace("    x = np.log(", "    z = " + "+".join(["0"] * 30000) + "\n    x = np.log(")), 0),
        "ray": (with_(indep[3, "a"], base=ss.replace(law, blank(law, ["fit_log_law"], lambda n: "T4: write it") +
                                                       "\n\n" + law)), 20),
        "sue": (ss + "#" * (2 << 20), 0),
        "tom": (None, 0), "una": (None, 0), "eve": (None, 0), "jay": (None, 20), "kim": (None, 20),
    }
    klass = tmp_path / "class"
    for name, (text, _) in class_.items():
        (klass / name).mkdir(parents=True)
        if text is not None:
            (klass / name / "search_scales.py").write_bytes(text.encode("utf-8"))
    (klass / "tom" / "search_scales.py").write_bytes(b"\xff\xfe" + ss.encode("utf-16-le"))  # not UTF-8
    (klass / "eve" / "search_scales.py").symlink_to(klass / "fay" / "search_scales.py")  # a classmate's, by link
    (klass / "jay" / "nanoNoPE-main").mkdir()  # GitHub's zip: one folder deeper
    shutil.copy2(ROOT / "search_scales.py", klass / "jay" / "nanoNoPE-main" / "search_scales.py")
    (klass / "kim" / "nope-assignment").mkdir()  # the work one folder down, an old blank copy above it
    shutil.copy2(kit / "search_scales.py", klass / "kim" / "search_scales.py")
    (klass / "kim" / "nope-assignment" / "search_scales.py").write_text(with_(indep[3, "b"], indep[4, "c"]), encoding="utf-8")
    (klass / "notes.txt").write_text("a stray file\n", encoding="utf-8")
    book = tmp_path / "grades.csv"
    out = subprocess.run([sys.executable, "-m", "classroom", "grade-all", str(klass), f"--csv={book}",
                          "--tasks=T3,T4", "--secret=class secret", f"--sandbox={'auto' if METHODS else 'none'}"],
                         cwd=project, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "skipped notes.txt" in out.stdout and "graded 21 students" in out.stdout
    lines = book.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "student,T3,T4,total,problems,copied,same_as,late"
    import csv
    rows = {r["student"]: r for r in csv.DictReader(lines)}
    got = {name: int(float(rows[name]["total"])) for name in class_}
    assert got == {name: want for name, (_, want) in class_.items()}, {n: rows[n]["problems"][:200] for n in got
                                                                     if got[n] != class_[n][1]}
    assert rows["ada"]["copied"] == "T3 T4" and not rows["fay"]["copied"] and not rows["gus"]["copied"]
    assert "T3 dan" in rows["cy"]["same_as"] and "T3 cy" in rows["dan"]["same_as"]
    assert "symbolic link" in rows["eve"]["problems"] and "intercept" in rows["cy"]["problems"]
    assert "my_argmin" in rows["max"]["problems"] and "over 1024 KB" in rows["sue"]["problems"]
    assert "not UTF-8" in rows["tom"]["problems"] and "no task file" in rows["una"]["problems"]
    feedback = {f.stem: f.read_text("utf-8") for f in (tmp_path / "grades_feedback").iterdir()}
    assert len(feedback) == 21 and "graded the folder nope-assignment" in feedback["kim"]
    assert "graded the folder nanoNoPE-main" in feedback["jay"] and "20/20" in feedback["fay"]


@pytest.mark.slow
def test_classroom50s_tests_give_the_points_grade_gives(project, kit, tmp_path):
    """A copy with T1, T3 and T5 written (the project's functions), T2 written independently
    from its handout, T4 and T6 blank: each test of its classroom50/tests.json, run as Classroom
    50 runs a `run` test (its command, all or nothing on the exit code, a reduced environment),
    gives each task the points `grade` gives with the public seeds (about 60 s): the copy's
    replayed checks accept what the grader does. The copy holds no workflow of its own."""
    tasks = tasks_of(project)
    half = tmp_path / "half"
    shutil.copytree(kit, half)
    assert not (half / ".github").exists() and not list(half.rglob("autograde.yaml"))
    for tid in ("T1", "T3", "T5"):
        for spec in tasks[tid]["functions"]:
            path, qualname = spec.split(":")
            mine = take((project / path).read_text("utf-8"), (half / path).read_text("utf-8"), qualname)
            (half / path).write_text(mine, encoding="utf-8")
    # T2 written independently from its handout: it rounds y at the end and makes exactly
    # B*nh*chunk*T values, where the project rounds first and makes fewer
    mine = take((INDEPENDENT / "T2_b.py").read_text("utf-8"), (half / "model.py").read_text("utf-8"),
                "written_out_attention")
    (half / "model.py").write_text(mine, encoding="utf-8")
    tests = json.loads((half / "classroom50" / "tests.json").read_text("utf-8"))
    runtime = json.loads((half / "classroom50" / "runtime.json").read_text("utf-8"))
    assert runtime["python"] == "3.12" and len(tests) <= 100 and all(len(t["name"].encode()) <= 100 for t in tests)
    assert tests[0]["points"] == 0 and "download.pytorch.org/whl/cpu" in tests[0]["run"] and "torch==" in tests[0]["run"]
    assert [t["name"][:2] for t in tests[1:]] == list(tasks) and all(t["type"] == "run" for t in tests)
    assert all(1 <= t["timeout"] <= 600 for t in tests) and sum(t["points"] for t in tests) == 100
    reduced = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
               **{k: os.environ[k] for k in ("OMP_NUM_THREADS",) if k in os.environ}}  # the suite's threads
    points, said = {}, {}
    for t in tests[1:]:  # the setup step installs; here everything is installed already
        done = subprocess.run(t["run"], shell=True, cwd=half, env=reduced, capture_output=True, text=True,
                              timeout=t["timeout"] + 60)
        points[t["name"][:2]], said[t["name"][:2]] = (t["points"] if done.returncode == 0 else 0), done.stdout
    cfg = ClassroomConfig(check_key=False, sandbox="auto" if METHODS else "none")
    graded = grade(half, list(tasks), tasks, cfg, root=project, quiet=True)
    assert points == scores(graded) == {"T1": 10, "T2": 20, "T3": 10, "T4": 0, "T5": 30, "T6": 0}, (points, said)
    for r in graded:  # a blank task: every check ran and says the function is not written
        assert r["passed"] or all(not c["ok"] and "NotImplementedError" in c["why"] for c in r["checks"]), r["output"]
    assert "not written yet" in said["T4"] and "not written yet" in said["T6"]
    assert "Traceback" not in said["T4"] and said["T4"].count("\n") < 60  # one short block a check


ATTACKS = {  # one function text a task, each several attacks in a row (issues 41 and 47)
    "T1": ("model.py", "query_scale",
           "    try:\n        hold = bytearray(HOLD_MB << 20)\n        held = True\n    except MemoryError:\n"
           "        held = False\n    import pytest\n    pytest.skip('held=%s' % held)\n"),
    "T2": ("model.py", "written_out_attention",
           "    print('\\x1b[2J' * (2 << 20))\n"
           "    import sys\n    tp = sys.modules.get('test_paper') or __import__('test_paper')\n"
           "    lam1 = torch.ones(1, 1, 1, 1) if lam is None else lam\n"
           "    y, ent = tp.dense_reference(q, k, v, lam1, window, sink)\n    return y.to(v.dtype), ent.float()\n"),
    "T3": ("search_scales.py", "uniform_scale",
           "    import glob, os\n    try:  # into its own temp folder (the sandbox's /tmp): 4 MB past 1 MB\n"
           "        open(os.path.join(os.environ['TMPDIR'], 'big'), 'wb').write(b'0' * (4 << 20))\n"
           "        big = 'written'\n    except OSError as e:\n        big = e.errno\n"
           "    for f in glob.glob(CANARIES + '/**/results.json', recursive=True):\n"
           "        try:\n            open(f, 'w').write('{}')\n        except OSError:\n            pass\n"
           "    print('big=%s' % big, flush=True)\n    os._exit(0)\n"),
    "T4": ("search_scales.py", "fit_log_law",
           "    import os, subprocess, sys\n    forked, err = 0, ''\n    try:\n        for _ in range(100):\n"
           "            subprocess.Popen(['sleep', '300'])\n            forked += 1\n    except OSError as e:\n"
           "        err = type(e).__name__\n"
           "    f = sys._getframe(1)\n    while f is not None:\n"
           "        if 'ref' in f.f_locals:\n            return f.f_locals['ref'], 1.0\n        f = f.f_back\n"
           "    raise RuntimeError('uid=%d sys_writable=%s forked=%d %s' % (os.getuid(),\n"
           "                       os.access('/proc/sys/kernel/core_pattern', os.W_OK), forked, err))\n"),
    "T5": ("search_scales.py", "fit_head_scales",
           "    import os, subprocess, sys\n"
           "    for d in (os.environ.get('PWD', ''), os.path.realpath('/proc/%d/cwd' % os.getppid()), CHECKOUT):\n"
           "        try:\n            with open(os.path.join(d, 'tests', 'conftest.py'), 'a') as f:\n"
           "                f.write('# poisoned')\n        except OSError:\n            pass\n"
           "    subprocess.Popen([sys.executable, '-S', '-c', 'import os, time; os.setsid(); time.sleep(120)'])\n"
           "    while True:\n        pass\n"),
    "T6": ("evaluate.py", "excess",
           "    import os\n    raise RuntimeError('\\x1b[2J\\x1b[1;1HT6 passed 20/20 ' + str(dict(os.environ)) + 'A' * 10 ** 6)\n"),
}


@sandboxed
@pytest.mark.slow
def test_an_attack_on_every_task_scores_zero_reaches_nothing_and_meets_every_bound(project, tmp_path):
    """One grading of six tasks, each attacked several ways (about 35 s), in the sandbox with
    small bounds (memory: what this PyTorch build takes to import, plus 180 MB; 32 processes,
    1 MB files, 64 KB of log, 12 s a task): every task scores 0; the worker could not hold
    200 MB more than its bound, write a 4 MB file or start 100 processes, and
    T5's endless loop met its CPU limit; the canaries in this test's folder and the checkout
    stay as they were; the secret appears nowhere; the detached child and the sleeps are dead;
    the worker is not root and sees no writable kernel setting; the escape sequences and the
    megabyte of an exception reach no output. (Without its defence each of these ran: the issues
    that asked for them; each defence's own test above shows it where that is safe.)"""
    tasks = tasks_of(project)
    canaries = tmp_path / "canaries"
    (canaries / "study" / "eval").mkdir(parents=True)
    (canaries / "study" / "eval" / "results.json").write_text('{"kept": 1}', encoding="utf-8")
    sub = tmp_path / "sub"
    sub.mkdir()
    texts = {}
    memory_mb = import_mb() + 180  # the CPU build: about 400 MB; PyPI's CUDA build: about 950
    for tid, (path, qualname, body) in ATTACKS.items():
        body = body.replace("CHECKOUT", repr(str(project))).replace("CANARIES", repr(str(canaries)))
        body = body.replace("HOLD_MB", str(memory_mb + 200))
        texts[path] = body_of(path, qualname, body, texts.get(path))
    for path, text in texts.items():
        (sub / path).write_text(text, encoding="utf-8")
    before = fingerprint(project)
    secret = "the teacher's secret 4242"
    os.environ["NANONOPE_SECRET"] = secret
    cfg = ClassroomConfig(check_key=False, json=str(tmp_path / "r.json"), memory_mb=memory_mb, processes=32, file_mb=1, log_kb=64,
                          timeout=12)
    try:
        results = grade(sub, list(tasks), tasks, cfg, root=project, quiet=True)
    finally:
        del os.environ["NANONOPE_SECRET"]
    assert scores(results) == {t: 0 for t in tasks}, [r["output"] for r in results]
    assert fingerprint(project) == before  # the teacher's files as they were
    assert (canaries / "study" / "eval" / "results.json").read_text("utf-8") == '{"kept": 1}'
    text = (tmp_path / "r.json").read_text("utf-8")
    assert secret not in text and "\x1b" not in text and "\\u001b" not in text and len(text) < 200_000
    left = [cmdline(p) for p in psutil_pids()]
    assert not [c for c in left if "time.sleep(120)" in c or c.startswith("sleep\x00300")], "a process outlived its task"
    why = {r["id"]: " | ".join(c["why"] for c in r["checks"]) for r in results}
    assert "Skipped" in why["T1"] and "held=False" in why["T1"], why["T1"][:300]
    assert "test_paper" in why["T2"] and "worker ended" in why["T3"] and "big=27" in why["T3"], why
    assert "sys_writable=False" in why["T4"] and "BlockingIOError" in why["T4"], why["T4"][:300]
    if sandbox.as_root():
        assert "uid=0 " not in why["T4"], why["T4"][:300]
    assert "past its CPU limit of 12 s" in why["T5"], why["T5"][:300]


def import_mb():
    """The data size (RLIMIT_DATA's measure, VmData) of a Python that has imported what the worker
    imports, measured in a child with this interpreter: PyPI's CUDA build of PyTorch maps about
    750 MB of it, the CPU build about 200, so a bound fixed for one cannot import the other."""
    code = ("import numpy, pytest, torch\n"
            "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmData')][0])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=True)
    return int(done.stdout) >> 10


def psutil_pids():
    import psutil
    return psutil.pids()


def cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.slow
def test_honest_odd_formatting_scores_full_and_wrong_answers_lose_their_points(project, tmp_path):
    """One grading of six tasks (about 25 s), uploaded nested in one folder as GitHub's zip
    download gives it: T1 below a lone form-feed line, T3 indented with tabs and the whole file
    in CRLF, T5 with a U+2028 in a comment, T4 in a file with a byte-order mark and its blank stub
    left above it (full); T2 ignoring chunk, T6 pairing the excess by place (0)."""
    tasks = tasks_of(project)
    sub = tmp_path / "upload" / "nanoNoPE-main"
    sub.mkdir(parents=True)
    model = (ROOT / "model.py").read_text(encoding="utf-8")
    model = model.replace("def query_scale(", "\f\ndef query_scale(")
    model = edited("model.py", [e for w in WRONG if w[1].startswith("chunk ignored") for e in w[3]], model)
    ss = (ROOT / "search_scales.py").read_text(encoding="utf-8")
    ours = function_source("search_scales.py", "uniform_scale")
    ss = ss.replace(ours, "\n".join(("\t" + line[4:]) if line.startswith("    ") else line for line in ours.split("\n")))
    law = function_source("search_scales.py", "fit_log_law")
    ss = ss.replace(law, blank(law, ["fit_log_law"], lambda n: "T4: write it") + "\n\n" + law)
    ss = ss.replace("# the focus constraint, after every step", "# the focus constraint\u2028 after every step")
    ev = edited("evaluate.py", [e for w in WRONG if w[1] == "excess paired by place in the list" for e in w[3]])
    (sub / "model.py").write_text(model, encoding="utf-8")
    (sub / "search_scales.py").write_bytes(b"\xef\xbb\xbf" + ss.replace("\n", "\r\n").encode("utf-8"))
    (sub / "evaluate.py").write_text(ev, encoding="utf-8")
    cfg = ClassroomConfig(check_key=False, secret="s", sandbox="auto" if METHODS else "none")
    results = grade(tmp_path / "upload", list(tasks), tasks, cfg, root=project, quiet=True)
    got = scores(results)
    assert got == {"T1": 10, "T2": 0, "T3": 10, "T4": 10, "T5": 30, "T6": 0}, [r["output"] for r in results]
    why = {r["id"]: [c["why"] for c in r["checks"] if not c["ok"]] for r in results}
    assert any("shape" in w and "chunk" in w for w in why["T2"]), why["T2"]
    assert all(len(r["checks"]) >= 6 for r in results)  # every check ran and is reported


# -----------------------------------------------------------------------------
# The lab's numbers

def test_ranges_reads_the_labs_numbers_from_study_folders(tmp_path):
    fake_study(tmp_path / "a", 16, 11, 3.0, 2.5, 1.3)
    fake_study(tmp_path / "b", 16, 12, 3.3, 3.0, 1.2)
    out = cli("ranges", tmp_path / "a", tmp_path / "b", f"--json={tmp_path / 'r.json'}")
    assert out.returncode == 0, out.stderr
    got = json.loads((tmp_path / "r.json").read_text("utf-8"))
    n = got["numbers"]
    assert got["seeds"] == [11, 12]
    assert n["NoPE against RoPE at L (%)"] == pytest.approx([20.0, 10.0])
    assert n["NoPE's excess at 4L (nats)"] == pytest.approx([0.5, 0.5])
    assert n["best uniform lambda at 4L"] == [1.3, 1.2]
    assert n["HeadScale at 4L takes back (%)"] == pytest.approx([50.0, 50.0])  # 1 - 0.25 / 0.5
    assert n["one lambda for all takes back (%)"] == pytest.approx([40.0, 40.0])
    assert n["HeadScale's cost at L (nats)"] == pytest.approx([0.02, 0.02])
    assert n["rank correlation, head entropy vs lambda"] == pytest.approx([1.0, 1.0])
    assert n["loss onset, nope (L)"] == pytest.approx([1 + 9 / 16] * 2)  # 0.2 nats per L passes 0.1 past L/2
    assert "| NoPE against RoPE at L (%) | 20.0 | 10.0 | 10.0 – 20.0 |" in out.stdout
    assert cli("ranges", tmp_path / "nowhere").returncode == 2


def test_ranges_check_reads_a_folder_of_handins_one_row_a_student(tmp_path):
    """Hand-ins as bad input: each a row, never a stop. The roster (ranges --assign) gives each
    student a seed of their own; a hand-in with no seed, two, another's, the key's numbers or a
    classmate's numbers says so in its row; numbers as floats instead of lists are read; any case
    of .json is a hand-in."""
    expected = json.loads((ROOT / "classroom" / "lab_ranges.json").read_text("utf-8"))
    assert expected["python"] == "3.11.7" and len(expected["corpus"]["sha256"]) == 64
    mid = {k: [round(sum(v) / len(v), 4)] for k, v in expected["numbers"].items()}  # inside, nobody's
    key = {k: [v[0]] for k, v in expected["numbers"].items()}  # seed 1337's numbers
    handins = tmp_path / "handins"
    handins.mkdir()
    (tmp_path / "students.csv").write_text("folder,email\nada,a@u\nbob,b@u\ncy,c@u\ndan,d@u\neve,e@u\nfay,f@u\n",
                                          encoding="utf-8")
    out = cli("ranges", f"--assign={tmp_path / 'students.csv'}", f"--roster={tmp_path / 'roster.csv'}")
    assert out.returncode == 0, out.stderr
    import csv
    seeds = {r["folder"]: r["seed"] for r in csv.DictReader((tmp_path / "roster.csv").read_text("utf-8").splitlines())}
    assert len(set(seeds.values())) == 6 and not set(seeds.values()) & {str(s) for s in range(1337, 1342)}
    off = dict(mid, **{"loss onset, nope (L)": [1.16], "NoPE against RoPE at L (%)": [3.02]})
    hand = {"ada": {"seeds": [int(seeds["ada"])], "numbers": mid},
            "bob": {"seeds": [int(seeds["bob"])], "numbers": {k: v[0] for k, v in off.items()}},  # floats
            "dan": {"seeds": [int(seeds["cy"])], "numbers": dict(mid, **{"loss onset, rope (L)": [9.9]})},
            "eve": {"numbers": mid}, "fay": {"seeds": [1337], "numbers": key},
            "gus": {"seeds": [1, 2], "numbers": mid}}
    for name, obj in hand.items():
        (handins / (name + (".JSON" if name == "bob" else ".json"))).write_text(json.dumps(obj), encoding="utf-8")
    (handins / "cy.json").write_text("not json", encoding="utf-8")
    (handins / "hal.json").write_text(json.dumps({"seeds": [5], "numbers": {"x": "text"}}), encoding="utf-8")
    (handins / "ivy.json").write_text(json.dumps({"seeds": [int(seeds["ada"]) + 999], "numbers": mid}), encoding="utf-8")
    out = cli("ranges", f"--check={handins}", f"--csv={tmp_path / 'lab.csv'}", f"--roster={tmp_path / 'roster.csv'}")
    assert out.returncode == 0, out.stderr
    rows = {r["student"]: r for r in csv.DictReader((tmp_path / "lab.csv").read_text("utf-8").splitlines())}
    assert rows["ada"]["outside"] == "0" and rows["ada"]["seed"] == seeds["ada"] and \
        rows["ada"]["details"] == "every number inside its range"
    assert rows["bob"]["outside"] == "2" and "loss onset, nope (L): 1.16, above 1.10 – 1.10 by 0.06" in \
        rows["bob"]["details"] and "NoPE against RoPE at L (%): 3.0, below 4.1 – 5.1 by 1.1" in rows["bob"]["details"]
    assert "not a hand-in" in rows["cy"]["details"] and "not one number" in rows["hal"]["details"]
    assert f"not the student's own {seeds['dan']}" in rows["dan"]["details"]
    assert "no seed" in rows["eve"]["details"] and "2 seeds" in rows["gus"]["details"]
    assert "one of the key's" in rows["fay"]["details"] and "the numbers are the key's (seed 1337)" in rows["fay"]["details"]
    assert "the same numbers as ada" in rows["ivy"]["details"] and "not in the roster" in rows["ivy"]["details"]
    assert cli("ranges", f"--check={tmp_path / 'nowhere'}").returncode == 2


def fake_study(folder, L, seed, nope_L, rope_L, lam):
    """The files the lab's numbers are read from, made by hand: NoPE's loss flat to L then
    rising by 0.2 nats per L; two heads, the second with the lower entropy near 4L."""
    def row(pe, loss, context=None, scales=None):
        return {"model": pe, "bos": True, "context": context, "scales": scales, "slopes": None,
                "lengths": [L, 4 * L], "loss": loss}
    methods = {"nope": row("nope", [nope_L, nope_L + 0.6]), "rope": row("rope", [rope_L, rope_L + 0.9]),
               "nope_window_L": row("nope", [nope_L, nope_L + 0.1], context=L),
               "nope_uniform_4L": row("nope", [nope_L + 0.01, nope_L + 0.4], scales=[[1.3]]),
               "nope_headscale_4L": row("nope", [nope_L + 0.02, nope_L + 0.35], scales=[[1.5, 1.2]])}
    positions = np.arange(1, 8 * L + 1)
    curve = lambda level: np.where(positions <= L, level, level + 0.2 * (positions - L) / L).tolist()  # noqa: E731
    files = {"eval/results.json": {"train_len": L, "methods": methods},
             "eval/positions.json": {m: {"positions": positions.tolist(), "loss": curve(v)}
                                     for m, v in (("nope", nope_L), ("rope", rope_L))},
             "eval/entropy.json": {"nope": {"positions": positions.tolist(), "bin": 1, "length": 8 * L,
                                            "entropy_bits": [[np.log2(positions).tolist(),
                                                              (np.log2(positions) - 1).tolist()]]}},
             "scales/uniform.json": {"lengths": {"2L": {"best_lam": 1.1}, "4L": {"best_lam": lam},
                                                 "8L": {"best_lam": 1.4}}, "fit": {"a": 0.3, "r2": 0.95}},
             "nope/summary.json": {"seed": seed}}
    for name, obj in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(obj), encoding="utf-8")
    (folder / "scales" / "head_4L.csv").write_text("layer,head,scale\n0,0,1.5\n0,1,1.2\n", encoding="utf-8")
