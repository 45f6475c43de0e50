"""The classroom kit (tools/classroom.py, tools/kit/) as a teacher and as a student would try it.

Each defence is tested where it is decided, in this process or with a tiny child without
PyTorch: extraction by ast, the def line, the wire (data only), the worker's environment, the
sandbox, killing what a task started, the checkout and snapshot left as they were, the verdict
(a skip or a missing check fails). The attacks of the grader issue (41) are each rebuilt and
shown to work without the defence. Four end-to-end gradings: the project (full), a blank student
copy (0), one submission carrying an attack per task (0, nothing outside touched), one with
honest odd formatting (full) and wrong answers (0). Every known wrong version is shown to fail a
check of its task, in process (WRONG below)."""

import ast
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

from tools import classroom
from tools.classroom import ClassroomConfig, copy_project, grade, read_tasks
from tools.kit import remote, sandbox
from tools.kit.grade import Grader, find_submission, gradescope, score_checks, seed_of, student_output
from tools.kit.source import Refused, blank, find_function, fingerprint, normalised, segment, take, take_snapshot

ROOT = Path(__file__).resolve().parents[1]

# Each: (task, the mistake, file, [(the project's text, the wrong text), ...]). Every one must
# fail a check of its task. The texts must sit inside the task's functions (checked below).
WRONG = [
    ("T1", "ln(i / L) without max(i, L)", "model.py", [("torch.log(i.clamp(min=L) / L)", "torch.log(i / L)")]),
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
    ("T4", "the law fitted with an intercept", "search_scales.py",
     [("a = float((x * y).sum() / (x ** 2).sum())", "a = float(np.polyfit(x, y, 1)[0])")]),
    ("T4", "i > L kept instead of i >= L", "search_scales.py", [("keep = x >= 0", "keep = x > 0")]),
    ("T4", "a value with a single position >= L", "search_scales.py",
     [("if len(x) < 2 or (x ** 2).sum() == 0:", "if len(x) < 1 or (x ** 2).sum() == 0:")]),
    ("T5", "the clamp applied once, at the end", "search_scales.py",
     [("                lam.clamp_(min=min_scale)  # the focus constraint, after every step\n", "                pass\n"),
      ("    return lam.detach(), log", "    with torch.no_grad():\n        lam.clamp_(min=min_scale)\n    return lam.detach(), log")]),
    ("T5", "a weight other than lambda gets a gradient", "search_scales.py",
     [("model.requires_grad_(False)", "model.requires_grad_(True)")]),
    ("T5", "AdamW's default weight decay left on", "search_scales.py", [("weight_decay=0.0)", "weight_decay=0.01)")]),
    ("T6", "the last-L reference without the start token", "evaluate.py",
     [('if getattr(model.config, "bos", False):', "if False:")]),
    ("T6", "the entropy from the wrong end of each sub-window", "evaluate.py",
     [("ents.append(sub_ent[k][..., context - (e - prev):])", "ents.append(sub_ent[k][..., :e - prev])")]),
    ("T6", "excess paired by place in the list", "evaluate.py",
     [("    by_ref = dict(zip(ref[\"lengths\"], ref[key]))\n    return {n: v - by_ref[n] for n, v in zip(m[\"lengths\"], m[key]) if n in by_ref}",
       "    return {n: v - r for n, v, r in zip(m[\"lengths\"], m[key], ref[key])}")]),
    ("T6", "excess finding the reference by the name NAME_window_L", "evaluate.py",
     [("ref = reference_of(results, name)", "ref = name + '_window_L' if name + '_window_L' in results['methods'] else None")]),
]


def cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "tools/classroom.py", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, encoding="utf-8")


def function_source(path, qualname):
    source = (ROOT / path).read_text(encoding="utf-8")
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


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A copy of the project as it is on disk (outside git: the snapshot is its files), so the
    gradings below see uncommitted work too and never touch this checkout."""
    root = tmp_path_factory.mktemp("project") / "nanoNoPE"
    copy_project(root, leave_out=("docs", "out"))
    return root


@pytest.fixture(scope="module")
def kit(project, tmp_path_factory):
    """A student copy of every task, made from `project` (about 12 s: the project's checks run
    once at the public seeds to store their outputs)."""
    out = tmp_path_factory.mktemp("kit") / "assignment"
    done = subprocess.run([sys.executable, "tools/classroom.py", "student", str(out)], cwd=project,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


def tasks_of(root):
    from tools.kit.grade import read_tasks as read
    return read(Path(root) / "classroom" / "tasks.toml")


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


def task_checks(tid, functions):
    """Every check of task tid (tests/test_paper.py), called here with the task's functions
    replaced by `functions` {qualname: function}: [(check, None or the exception)]. The
    project's own version stays reachable (remote.project_version), as under the grader."""
    import evaluate
    import model
    import search_scales
    import test_paper
    modules = {"model.py": model, "search_scales.py": search_scales, "evaluate.py": evaluate}
    spec = {q: p for s in read_tasks()[tid]["functions"] for p, q in [s.split(":")]}
    saved = []
    for qualname, fn in functions.items():
        module = modules[spec[qualname]]
        fn.project_version = getattr(module, qualname)
        for owner in (module, test_paper):
            saved.append((owner, qualname, getattr(owner, qualname)))
            setattr(owner, qualname, fn)
    out = []
    try:
        for name, test in vars(test_paper).items():
            if not name.startswith(f"test_{tid}_"):
                continue
            marks = [m for m in getattr(test, "pytestmark", []) if m.name == "parametrize"]
            names = [n.strip() for n in marks[0].args[0].split(",")] if marks else []
            for values in (marks[0].args[1] if marks else [()]):
                values = values if isinstance(values, tuple) else (values,)
                try:
                    test(**dict(zip(names, values)))
                    out.append((name, None))
                except (Exception, pytest.skip.Exception) as e:  # noqa: BLE001
                    out.append((name, e))
    finally:
        for owner, qualname, old in saved:
            setattr(owner, qualname, old)
    return out


def load_function(tmp_path, path, text, qualname):
    """qualname from `text`, a version of the project's file `path`, imported from tmp_path."""
    f = tmp_path / f"wrong_{abs(hash(text))}_{Path(path).name}"
    f.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f.stem, f)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, qualname)


def test_each_wrong_version_fails_a_check_of_its_task(tmp_path):
    tasks = read_tasks()
    for tid in tasks:  # the harness itself: the project's own functions pass every check
        own = {s.split(":")[1]: load_function(tmp_path, s.split(":")[0], (ROOT / s.split(":")[0]).read_text("utf-8"),
                                              s.split(":")[1]) for s in tasks[tid]["functions"]}
        failed = [(n, e) for n, e in task_checks(tid, own) if e is not None]
        assert not failed, f"{tid}, the project's own functions: {failed[:1]}"
    kept = []
    for tid, what, path, edits in WRONG:
        text = edited(path, edits)
        wrong = {s.split(":")[1]: load_function(tmp_path, path, text, s.split(":")[1])
                 for s in tasks[tid]["functions"] if s.startswith(path + ":")}
        if all(e is None for _, e in task_checks(tid, wrong)):
            kept.append(what)
    assert not kept, f"wrong versions that pass every check of their task: {kept}"


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
# Extraction as Python reads it, and the def line

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


def test_a_decorator_or_another_def_line_is_refused_with_the_expected_one():
    project = (ROOT / "search_scales.py").read_text(encoding="utf-8")
    ours = function_source("search_scales.py", "fit_log_law")
    cases = {"@staticmethod\n" + ours: "has a decorator",
             ours.replace("def fit_log_law(positions, lam, L):", "def fit_log_law(positions, lam, L=8):"): "def line differs",
             ours.replace("def fit_log_law(positions, lam, L):", "def fit_log_law(positions, lam, L) -> float:"):
                 "def line differs",
             ours.replace("def fit_log_law(positions, lam, L):", "def fit_log_law(positions, lam, L, k=print('hi')):"):
                 "def line differs"}
    for text, why in cases.items():
        with pytest.raises(Refused) as e:
            take(project.replace(ours, text), project, "fit_log_law")
        assert why in str(e.value) and "def fit_log_law(positions, lam, L):" in str(e.value), str(e.value)
        assert "\n" not in str(e.value)
    # without the defence: a decorator runs when the module is imported
    ran = []
    namespace = {"mark": lambda f: ran.append(1) or f}
    exec(compile("@mark\ndef f():\n    pass\n", "<attack>", "exec"), namespace)  # noqa: S102
    assert ran == [1]


def renamed(source, names):
    """A function's source with its local names renamed and its docstring rewritten, as a
    student hiding a copy would (ast.unparse also drops the comments)."""
    node = ast.parse(source).body[0]
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            n.id = names.get(n.id, n.id)
    node.body[0].value.value = "My own work."
    return ast.unparse(node)


def test_the_copy_flag_sees_the_projects_function_through_renamed_locals():
    first = lambda text: ast.parse(text).body[0]  # noqa: E731
    ours = first(function_source("search_scales.py", "fit_log_law"))
    theirs = first(renamed(function_source("search_scales.py", "fit_log_law"),
                           {"x": "logs", "y": "excess", "keep": "mask", "a": "slope"}))
    assert ast.unparse(theirs) != ast.unparse(ours) and normalised(theirs) == normalised(ours)
    own = first('def fit_log_law(positions, lam, L):\n    """From the handout."""\n'
                '    p = np.asarray(positions, float)\n    m = p >= L\n    if m.sum() < 2:\n'
                '        return float("nan"), float("nan")\n    u = np.log(p[m] / L)\n'
                '    v = np.asarray(lam, float)[m] - 1\n    a = (u @ v) / (u @ u)\n'
                '    return float(a), float(1 - ((v - a * u) ** 2).sum() / ((v - v.mean()) ** 2).sum())\n')
    assert normalised(own) != normalised(ours)  # written from the handout alone: not flagged


# -----------------------------------------------------------------------------
# What crosses between the judge and the worker: data only

def test_the_wire_takes_data_only():
    import torch
    r, w = os.pipe()
    try:
        value = {"a": (1, 2.5, None, "x"), 3: [torch.ones(2, dtype=torch.bfloat16)], "n": np.arange(3.0)}
        reader = remote.Reader(r)
        remote.send(w, ("result", remote.to_wire(value), {}, None))
        got = remote.from_wire(remote.receive(reader)[1])
        assert got["a"] == (1, 2.5, None, "x") and got[3][0].dtype == torch.bfloat16 and got["n"].tolist() == [0, 1, 2]

        class Evil:  # a pickle that would run a command when unpickled
            def __reduce__(self):
                return (os.system, ("echo pwned > /dev/null",))
        data = pickle.dumps(Evil(), protocol=2)
        os.write(w, len(data).to_bytes(8, "little") + data)
        with pytest.raises(remote.WireError):
            remote.receive(reader)
        os.write(w, (remote.LIMIT + 1).to_bytes(8, "little"))
        with pytest.raises(remote.WireError):
            remote.receive(reader)
        with pytest.raises(TimeoutError):  # nothing more comes: a deadline holds
            remote.receive(reader, deadline=time.monotonic() + 0.2)
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(remote.WireError):  # a model, a callable: only data comes back
        remote.from_wire((remote.TAG, "model", 0))
    with pytest.raises(remote.WireError):
        remote.to_wire(lambda: 0)
    assert pickle.loads(data) == 0  # without the defence: unpickling ran the command


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


METHODS = [m for m in ("bwrap", "unshare") if sandbox.unavailable(m) is None]
PROBE = r"""
import json, os, socket, sys
checkout, copy, outside = sys.argv[1:4]
out = {}
for name, path in (("copy", os.path.join(copy, "x")), ("outside", outside)):
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
out["ancestors"] = [c for c in cmds if ("pytest" in c or "xdist" in c) and not c.startswith("bwrap") and "probe.py" not in c]
out["checkout"] = os.path.exists(checkout)
print(json.dumps(out))
"""


@pytest.mark.skipif(not METHODS, reason="neither bwrap nor unshare works here (sandbox.unavailable says why)")
@pytest.mark.parametrize("method", METHODS or ["bwrap"])
def test_the_sandbox_seen_from_inside(method, tmp_path):
    """From inside the worker's sandbox: its copy is read-only, nothing outside it can be
    written or seen (the checkout, a teacher's file), the network is unreachable, no process of
    the grader's (pytest here) is visible in /proc (bwrap's own first process is, inside the
    namespace). Under --sandbox=none all of it is reachable."""
    copy = tmp_path / "task"
    copy.mkdir()
    (tmp_path / "root").mkdir()
    (copy / "probe.py").write_text(PROBE, encoding="utf-8")
    outside = tmp_path / "teachers_file.txt"
    outside.write_text("", encoding="utf-8")
    sandbox.make_readable(tmp_path)
    kw = sandbox.command(method, copy, [sys.executable, "-S", "probe.py", str(ROOT), sandbox.TASK, str(outside)])
    done = subprocess.run(**kw, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["copy"] != "written" and seen["outside"] != "written" and seen["net"] != "connected", seen
    assert not seen["ancestors"] and not seen["checkout"], seen
    assert outside.read_text(encoding="utf-8") == ""
    # without the defence: the same child writes its copy and the teacher's file, sees the checkout and pytest
    kw = sandbox.command("none", copy, [sys.executable, "-S", "probe.py", str(ROOT), str(copy), str(outside)])
    plain = json.loads(subprocess.run(**kw, capture_output=True, text=True, timeout=60).stdout)
    assert plain["copy"] == plain["outside"] == "written" and plain["checkout"] and plain["ancestors"], plain


def test_an_unavailable_sandbox_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(sandbox, "unavailable", lambda m: None if m == "none" else "not here")
    with pytest.raises(classroom.UserError) as e:
        sandbox.choose("bwrap")
    assert "--sandbox=bwrap is not available here: not here" in str(e.value)
    assert sandbox.choose("auto") == ("none", sandbox.UNSAFE + " (no bwrap, unshare or root here)")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's /proc and subreaper")
def test_a_detached_process_is_killed_before_results():
    sandbox.become_subreaper()
    code = ("import os, subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-S', '-c', 'import os, time; os.setsid(); time.sleep(60)'],\n"
            "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "print(p.pid, flush=True)\n")
    child = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=30)
    pid = int(child.stdout)
    time.sleep(0.2)
    assert alive(pid)  # without the defence: its parent is gone, it lives on
    assert sandbox.kill_descendants() >= 1
    assert not alive(pid)


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


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
    assert score_checks(thirds, checks) == 10 and score_checks(thirds, checks[:2] + [{"name": "c", "ok": False}]) == 6.66  # 3.33 + 3.33; the last would take 3.34


def test_seeds_cover_the_whole_text_and_the_student_sees_none():
    assert seed_of("", "T1", ["def f(): pass"]) == 0  # no secret: the public seeds
    a, b = seed_of("s", "T1", ["def f(): pass"]), seed_of("s", "T1", ["def f():  pass"])
    assert a != b and a == seed_of("s", "T1", ["def f(): pass"]) != seed_of("t", "T1", ["def f(): pass"])
    r = {"id": "T1", "title": "t", "max_score": 10, "score": 0, "passed": False, "seed": 123456789, "copied": True,
         "checks": [{"name": "test_T1_a[0]", "ok": False, "why": "wrong", "seconds": 0.1}], "output": "x"}
    report = gradescope([r], {"T1": {}}, 3.2)
    seen = [t for t in report["tests"] if t["visibility"] != "hidden"]
    assert "123456789" not in json.dumps(seen) and "123456789" in json.dumps(report)
    assert report["execution_time"] == 4 and student_output(r).startswith("0 of 1 checks passed")


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
        monkeypatch.setattr(grader, "prepare", lambda task, sub: (root / "model.py").write_text("# poisoned\n") and {})
        with pytest.raises(classroom.UserError) as e:
            grader.grade(root, ["T1"])
        assert "changed while" in str(e.value) and "\n" not in str(e.value)


def test_bad_input_is_refused_in_one_line_before_any_work(tmp_path, monkeypatch):
    cases = (["grade", ROOT, "--tasks=T1,T9"], ["student", tmp_path / "new", "--tasks=T7"], ["teach", tmp_path],
             ["grade", ROOT, "--color=red"], ["grade", ROOT, "--sandbox=jail"], [])
    for args in cases:  # in this process (each command line would start Python again)
        monkeypatch.setattr(sys, "argv", ["tools/classroom.py", *map(str, args)])
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
    out = cli("grade", tmp_path / "empty", "--tasks=T1,T3", f"--json={tmp_path / 'r.json'}")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    report = json.loads((tmp_path / "r.json").read_text("utf-8"))
    assert report["score"] == 0 and [t["name"][:2] for t in report["tests"] if t["visibility"] == "visible"] == \
        ["T1", "T3"] and "holds none of the task files" in report["tests"][0]["output"]
    assert find_submission(tmp_path / "empty", read_tasks()) is None


# -----------------------------------------------------------------------------
# End to end: four gradings

def scores(results):
    return {r["id"]: r["score"] for r in results}


@pytest.mark.slow
def test_the_project_scores_full(project, tmp_path):
    """One grading of every task (about 20 s on 2 free cores). A blank copy's 0: the Gradescope
    and workflow tests below."""
    tasks = tasks_of(project)
    cfg = ClassroomConfig(secret="a teacher's secret", json=str(tmp_path / "full.json"))
    full = grade(project, list(tasks), tasks, cfg, root=project, quiet=True)
    assert scores(full) == {t: tasks[t]["points"] for t in tasks}, [r["output"] for r in full if not r["passed"]]
    assert all(r["copied"] for r in full)  # the copy flag: these are the project's own functions
    report = json.loads((tmp_path / "full.json").read_text("utf-8"))
    assert report["score"] == 100 and all("checks passed" in t["output"] for t in report["tests"]
                                          if t["visibility"] == "visible")


def test_the_student_copy_holds_no_answer_and_no_teacher_file(project, kit):
    from tools.kit.student import answer_lines, leaks
    tasks = tasks_of(project)
    for teacher in ("tests/test_classroom.py", "tests/test_model.py", "tests/conftest.py", "classroom/README.md",
                    "classroom/lab_key.md", "classroom/lab_ranges.json", ".ci/run", "tools/kit/grade.py", "tools/kit/judge.py",
                    "tools/kit/sandbox.py", "tools/kit/student.py", "tools/kit/platforms.py"):
        assert not (kit / teacher).exists(), teacher
    assert (kit / "classroom" / "lab.md").exists() and (kit / "classroom" / "T5.md").exists()
    assert sorted(p.name for p in (kit / "tests").iterdir()) == ["snapshots", "test_paper.py"]
    lines = answer_lines(project, tasks, list(tasks))
    assert len(lines) > 40 and "a = float((x * y).sum() / (x ** 2).sum())" in lines
    assert leaks(kit, lines) == []
    assert "dense_reference" not in (kit / "tests" / "test_paper.py").read_text("utf-8")  # no reference code
    # the check sees a quoted line, in prose too
    (kit / "notes.md").write_text("a hint: `a = float((x * y).sum() / (x ** 2).sum())`\n", encoding="utf-8")
    try:
        assert leaks(kit, lines) == [("notes.md", "a = float((x * y).sum() / (x ** 2).sum())")]
    finally:
        (kit / "notes.md").unlink()
    out = cli("grade", kit, cwd=kit)  # a student copy has no grader
    assert out.returncode == 2 and "the teacher's" in out.stderr


@pytest.mark.slow
def test_the_gradescope_zip_as_gradescope_runs_it(project, kit, tmp_path):
    """The zip for T1, T3 and T4, unpacked into a fake /autograder, run_autograder run on three
    uploads (about 15 s): the project nested in one folder (full), a blank copy (0), and a
    model.py that does not parse (T1 0, the others full)."""
    from tools.kit.platforms import unpack
    zip_path = tmp_path / "autograder.zip"
    done = subprocess.run([sys.executable, "tools/classroom.py", "gradescope", str(zip_path), "--tasks=T1,T3,T4",
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
        shutil.copytree(upload, root / "submission")
        done = subprocess.run(["bash", str(root / "source" / "run_autograder")], capture_output=True, text=True,
                              env={**os.environ, "AUTOGRADER_ROOT": str(root)}, timeout=600)
        assert done.returncode == 0, done.stderr
        report = json.loads((root / "results" / "results.json").read_text("utf-8"))
        assert report["execution_time"] >= 1 and report["tests"], report
        return {t["name"][:2]: t["score"] for t in report["tests"] if t["visibility"] != "hidden"}

    nested = tmp_path / "nested"
    shutil.copytree(project, nested / "nanoNoPE-main", ignore=shutil.ignore_patterns("tests", "docs", "data"))
    assert run(nested) == {"T1": 10, "T3": 10, "T4": 10}
    assert run(kit) == {"T1": 0, "T3": 0, "T4": 0}
    broken = tmp_path / "broken"
    shutil.copytree(project, broken, ignore=shutil.ignore_patterns("tests", "docs", "data"))
    (broken / "model.py").write_text("def query_scale(:\n", encoding="utf-8")
    assert run(broken) == {"T1": 0, "T3": 10, "T4": 10}


@pytest.mark.slow
def test_grade_all_writes_the_gradebook_with_the_copy_flag(project, kit, tmp_path):
    """Three students on T3 and T4 (about 10 s): the project's functions with locals renamed
    (full, flagged as copied), a blank copy (0), T4 fitted with an intercept (10)."""
    klass = tmp_path / "class"
    for name in ("ada", "bob", "cy"):
        (klass / name).mkdir(parents=True)
    text = (ROOT / "search_scales.py").read_text(encoding="utf-8")
    ours = function_source("search_scales.py", "uniform_scale")
    theirs = renamed(ours, {"tail_loss": "end_loss", "centers": "mids", "per_bin": "bins"})
    (klass / "ada" / "search_scales.py").write_text(text.replace(ours, theirs), encoding="utf-8")
    shutil.copy2(kit / "search_scales.py", klass / "bob" / "search_scales.py")
    (klass / "cy" / "search_scales.py").write_text(edited("search_scales.py", next(w[3] for w in WRONG if "intercept" in w[1])), encoding="utf-8")
    (klass / "roster.txt").write_text("ada bob cy\n", encoding="utf-8")
    book = tmp_path / "grades.csv"
    out = subprocess.run([sys.executable, "tools/classroom.py", "grade-all", str(klass), f"--csv={book}",
                          "--tasks=T3,T4", "--secret=class secret"], cwd=project, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "skipped roster.txt" in out.stdout and "student 3 of 3" in out.stdout and "graded 3 students" in out.stdout
    lines = book.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "student,T3,T4,total,problems,copied"
    import csv
    rows = {r["student"]: r for r in csv.DictReader(lines)}
    assert [rows[s]["total"] for s in ("ada", "bob", "cy")] == ["20", "0", "10"]
    assert rows["ada"]["copied"] == "T3 T4" and rows["bob"]["copied"] == "" and rows["cy"]["copied"] == "T3"
    assert "T4" in rows["cy"]["problems"] and "intercept" in rows["cy"]["problems"]


def workflow_steps(text):
    """(task, command, points) of each grading step of a written workflow."""
    try:
        import yaml
        steps = yaml.safe_load(text)["jobs"]["run-autograding-tests"]["steps"]
        return [(s["with"]["test-name"], s["with"]["command"], int(s["with"]["max-score"])) for s in steps
                if "command" in s.get("with", {})]
    except ImportError:  # PyYAML is not a requirement: the three keys read by hand
        import re
        return [(a, b, int(c)) for a, b, c in re.findall(r"test-name: (\S+)\n\s+command: (.+)\n\s+timeout: \d+\n"
                                                           r"\s+max-score: (\d+)", text)]


@pytest.mark.slow
def test_the_classroom_workflow_gives_the_points_grade_gives(project, kit, tmp_path):
    """A copy with T1, T3 and T5 written (the project's functions) and T2, T4 and T6 blank: each
    `command:` of its workflow, run as GitHub Classroom's command grader runs it (a reduced
    environment), gives each task the points `grade` gives with the public seeds (about 40 s)."""
    tasks = tasks_of(project)
    half = tmp_path / "half"
    shutil.copytree(kit, half)
    for tid in ("T1", "T3", "T5"):
        for spec in tasks[tid]["functions"]:
            path, qualname = spec.split(":")
            mine = take((project / path).read_text("utf-8"), (half / path).read_text("utf-8"), qualname)
            (half / path).write_text(mine, encoding="utf-8")
    text = (half / ".github" / "workflows" / "classroom.yml").read_text("utf-8")
    assert "cache: pip" in text and "torch==" in text and "download.pytorch.org/whl/cpu" in text
    steps = workflow_steps(text)
    assert [t for t, _, _ in steps] == list(tasks)
    reduced = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    points, said = {}, {}
    for tid, command, most in steps:
        done = subprocess.run(command, shell=True, cwd=half, env=reduced, capture_output=True, text=True, timeout=300)
        points[tid], said[tid] = (most if done.returncode == 0 else 0), done.stdout
    graded = grade(half, list(tasks), tasks, ClassroomConfig(), root=project, quiet=True)
    assert points == scores(graded) == {"T1": 10, "T2": 0, "T3": 10, "T4": 0, "T5": 30, "T6": 0}, (points, said)
    for r in graded:  # a blank task: every check ran and says the function is not written
        assert r["passed"] or all(not c["ok"] and "NotImplementedError" in c["why"] for c in r["checks"]), r["output"]
    assert "not written yet" in said["T2"] and "not written yet" in said["T6"]


ATTACKS = {  # one attack a task, each only the text of the graded function (issue 41)
    "T1": ("model.py", "query_scale", "    import pytest\n    pytest.skip('nothing to grade here')\n"),
    "T2": ("model.py", "written_out_attention",
           "    import sys\n    tp = sys.modules.get('test_paper') or __import__('test_paper')\n"
           "    lam1 = torch.ones(1, 1, 1, 1) if lam is None else lam\n"
           "    y, ent = tp.dense_reference(q, k, v, lam1, window, sink)\n    return y.to(v.dtype), ent.float()\n"),
    "T3": ("search_scales.py", "uniform_scale",
           "    import glob, os\n"
           "    for f in glob.glob('/tmp/**/results.json', recursive=True):\n"
           "        try:\n            open(f, 'w').write('{}')\n        except OSError:\n            pass\n"
           "    os._exit(0)\n"),
    "T4": ("search_scales.py", "fit_log_law",
           "    import sys\n    f = sys._getframe(1)\n    while f is not None:\n"
           "        if 'ref' in f.f_locals:\n            return f.f_locals['ref'], 1.0\n        f = f.f_back\n"
           "    raise RuntimeError('no frame holds the answer')\n"),
    "T5": ("search_scales.py", "fit_head_scales",
           "    import os, subprocess, sys\n"
           "    for d in (os.environ.get('PWD', ''), os.path.realpath('/proc/%d/cwd' % os.getppid()), CHECKOUT):\n"
           "        try:\n            with open(os.path.join(d, 'tests', 'conftest.py'), 'a') as f:\n"
           "                f.write('# poisoned')\n        except OSError:\n            pass\n"
           "    subprocess.Popen([sys.executable, '-S', '-c', 'import os, time; os.setsid(); time.sleep(120)'])\n"
           "    raise RuntimeError('poisoned')\n"),
    "T6": ("evaluate.py", "excess", "    import os\n    raise RuntimeError(str(dict(os.environ)))\n"),
}


@pytest.mark.slow
def test_an_attack_on_every_task_scores_zero_and_reaches_nothing(project, tmp_path):
    """One grading of six tasks, each attacked (about 12 s); then each attack shown to work
    without the defence, the function called directly."""
    tasks = tasks_of(project)
    sub = tmp_path / "sub"
    sub.mkdir()
    texts = {}
    for tid, (path, qualname, body) in ATTACKS.items():
        texts[path] = body_of(path, qualname, body.replace("CHECKOUT", repr(str(project))), texts.get(path))
    for path, text in texts.items():
        (sub / path).write_text(text, encoding="utf-8")
    before = fingerprint(project)
    secret = "the teacher's secret 4242"
    os.environ["NANONOPE_SECRET"] = secret
    try:
        results = grade(sub, list(tasks), tasks, ClassroomConfig(json=str(tmp_path / "r.json")), root=project,
                        quiet=True)
    finally:
        del os.environ["NANONOPE_SECRET"]
    assert scores(results) == {t: 0 for t in tasks}, [r["output"] for r in results]
    assert fingerprint(project) == before  # the teacher's files as they were
    assert secret not in (tmp_path / "r.json").read_text("utf-8")
    assert not [p for p in sandbox._processes() if "time.sleep(120)" in cmdline(p)]  # the detached child is dead
    why = {r["id"]: r["checks"][0]["why"] for r in results}
    assert "Skipped" in why["T1"] and "test_paper" in why["T2"] and "worker ended" in why["T3"]

    # without the defences: called directly, in the tests' own process, as the old grader ran them
    import torch
    import test_paper
    attacked = {tid: load_function(tmp_path, path, texts[path], qualname)
                for tid, (path, qualname, _) in ATTACKS.items() if tid in ("T1", "T2", "T4", "T6")}
    with pytest.raises(pytest.skip.Exception):  # a skip, which the old grader did not count
        attacked["T1"](torch.ones(2), torch.zeros(2), 4, 2)
    q, k, v = (torch.randn(1, 2, 6, 4) for _ in range(3))
    assert torch.equal(attacked["T2"](q, k, v)[0], test_paper.dense_reference(q, k, v, torch.ones(1, 1, 1, 1),
                                                                              None, False)[0].float())
    ref = 0.25  # noqa: F841  (a test's frame holding the expected value)
    assert attacked["T4"]([1, 2], [1, 1], 1) == (0.25, 1.0)
    os.environ["NANONOPE_SECRET"] = secret
    try:
        with pytest.raises(RuntimeError, match=secret):
            attacked["T6"]({}, "nope")
    finally:
        del os.environ["NANONOPE_SECRET"]
    # (T3's forged report and T5's writes outside the copy: test_the_sandbox_seen_from_inside shows
    # a child writing outside its copy and seeing the grader's processes under --sandbox=none)


def cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.slow
def test_honest_odd_formatting_scores_full_and_wrong_answers_lose_their_points(project, tmp_path):
    """One grading of six tasks (about 15 s), uploaded nested in one folder as GitHub's zip
    download gives it: T1 below a lone form-feed line, T3 indented with tabs and the whole file
    in CRLF, T5 with a U+2028 in a comment (full); T2 ignoring chunk, T4 keeping i > L, T6 pairing
    the excess by place (0)."""
    tasks = tasks_of(project)
    sub = tmp_path / "upload" / "nanoNoPE-main"
    sub.mkdir(parents=True)
    model = (ROOT / "model.py").read_text(encoding="utf-8")
    model = model.replace("def query_scale(", "\f\ndef query_scale(")
    model = edited("model.py", [e for w in WRONG if w[1].startswith("chunk ignored") for e in w[3]], model)
    ss = (ROOT / "search_scales.py").read_text(encoding="utf-8")
    ours = function_source("search_scales.py", "uniform_scale")
    ss = ss.replace(ours, "\n".join(("\t" + line[4:]) if line.startswith("    ") else line for line in ours.split("\n")))
    ss = edited("search_scales.py", [("keep = x >= 0", "keep = x > 0"),
                                     ("# the focus constraint, after every step", "# the focus constraint\u2028 after every step")], ss)
    ev = edited("evaluate.py", [e for w in WRONG if w[1] == "excess paired by place in the list" for e in w[3]])
    (sub / "model.py").write_text(model, encoding="utf-8")
    (sub / "search_scales.py").write_bytes(ss.replace("\n", "\r\n").encode("utf-8"))
    (sub / "evaluate.py").write_text(ev, encoding="utf-8")
    results = grade(tmp_path / "upload", list(tasks), tasks, ClassroomConfig(secret="s"), root=project, quiet=True)
    got = scores(results)
    assert got == {"T1": 10, "T2": 0, "T3": 10, "T4": 0, "T5": 30, "T6": 0}, [r["output"] for r in results]
    why = {r["id"]: [c["why"] for c in r["checks"] if not c["ok"]] for r in results}
    assert any("chunk" in w for w in why["T2"]) and any("i > L" in w for w in why["T4"]), why
    # every check ran and is reported, not only the first failure
    assert all(len(r["checks"]) >= 5 for r in results)


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
    assert n["rank correlation, head entropy vs lambda"] == pytest.approx([1.0, 1.0])  # the higher-entropy head has the larger lambda
    assert n["loss onset, nope (L)"] == pytest.approx([1 + 9 / 16] * 2)  # 0.2 nats per L passes 0.1 past L/2
    assert "| NoPE against RoPE at L (%) | 20.0 | 10.0 | 10.0 – 20.0 |" in out.stdout
    assert cli("ranges", tmp_path / "nowhere").returncode == 2


def test_ranges_check_reads_a_folder_of_handins_one_row_a_student(tmp_path):
    expected = json.loads((ROOT / "classroom" / "lab_ranges.json").read_text("utf-8"))
    assert expected["python"] == "3.11.7" and len(expected["corpus"]["sha256"]) == 64
    numbers = {k: [v[0]] for k, v in expected["numbers"].items()}  # seed 1337's: inside every range
    handins = tmp_path / "handins"
    handins.mkdir()
    (handins / "ada.json").write_text(json.dumps({"seeds": [2001], "numbers": numbers}), encoding="utf-8")
    off = dict(numbers, **{"loss onset, nope (L)": [1.16], "NoPE against RoPE at L (%)": [3.02]})
    (handins / "bob.json").write_text(json.dumps({"seeds": [2002], "numbers": off}), encoding="utf-8")
    (handins / "cy.json").write_text("not json", encoding="utf-8")
    out = cli("ranges", f"--check={handins}", f"--csv={tmp_path / 'lab.csv'}")
    assert out.returncode == 0, out.stderr
    import csv
    rows = {r["student"]: r for r in csv.DictReader((tmp_path / "lab.csv").read_text("utf-8").splitlines())}
    assert rows["ada"]["outside"] == "0" and rows["ada"]["seed"] == "2001"
    assert rows["bob"]["outside"] == "2" and "loss onset, nope (L): 1.16, above 1.10 – 1.10 by 0.06" in \
        rows["bob"]["details"] and "NoPE against RoPE at L (%): 3.0, below 4.1 – 5.1 by 1.1" in rows["bob"]["details"]
    assert "not a hand-in" in rows["cy"]["details"]
    assert cli("ranges", f"--check={tmp_path / 'nowhere'}").returncode == 2


def fake_study(folder, L, seed, nope_L, rope_L, lam):
    """The files the lab's numbers are read from, made by hand: NoPE's loss flat to L then
    rising by 0.2 nats per L; two heads, the second with the lower entropy near 4L."""
    def row(pe, loss, context=None, scales=None):
        return {"pos_encoding": pe, "arch": pe, "bos": True, "context": context, "scales": scales, "slopes": None,
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

