"""The house imports one way. Every module's imports, function-local ones included, are read with
ast: each goes to a lower layer, or to the module's own package within its layer (study.plot may
import study.findings; train.py may not import search_scales.py). No circle, and no module edits
sys.path when it is imported. The layers, bottom up, are written down here and nowhere else."""

import ast
import functools
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS = [  # (what, modules: a name, or a package's name and .* for every module in it)
    ("the ground floor: options, device, files, schedule, lengths", ["common"]),
    ("the data and the paper's model", ["data", "data.passkey", "model"]),
    ("the data scripts", ["data.*"]),
    ("the families past the paper", ["families"]),
    ("the measurement", ["evaluate"]),
    ("the lesson's scripts", ["train", "search_scales", "sample"]),
    ("the study's machinery", ["study", "study.*"]),
    ("the study", ["reproduce"]),
    ("the classroom kit", ["classroom", "classroom.*"]),
]


@functools.cache
def modules():
    """{module name: path} of every tracked .py file outside tests/ and config/ (and but the
    student copy's tests/test_paper.py, kept as classroom/student_tests.py: a test file)."""
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    out = {}
    for f in files:
        if (f.startswith(("tests/", "config/")) or f == "classroom/student_tests.py"
                or not (ROOT / f).exists()):
            continue
        parts = list(Path(f).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = ROOT / f
    return out


def layer_of(name):
    """The index of a module's layer: its own name's entry, else its package's .* entry."""
    for i, (_, names) in enumerate(LAYERS):
        if name in names:
            return i
    for i, (_, names) in enumerate(LAYERS):
        if any(n.endswith(".*") and name.startswith(n[:-1]) for n in names):
            return i
    raise AssertionError(f"{name} is in no layer: add it to LAYERS")


def imports(path, known):
    """The project's modules `path` imports, anywhere in it: import statements, and
    importlib.import_module("name") with the name written out. A relative import fails (none
    is used, and this reader would not follow it)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        assert not (isinstance(node, ast.ImportFrom) and node.level), (
            f"{path.name}:{node.lineno}: a relative import; write it absolute (from study import x)")
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", ""))
                == "import_module" and node.args and isinstance(node.args[0], ast.Constant)):
            found.add(node.args[0].value)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] in
                      {k.split(".")[0] for k in known}}
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:  # `from study import plot` imports the module study.plot
                full = f"{node.module}.{a.name}"
                found.add(full if full in known else node.module)
    return {m for m in found if m in known}


@functools.cache
def graph():
    known = modules()
    return {name: imports(path, known) - {name} for name, path in known.items()}


def test_every_import_goes_down_or_within_its_own_package():
    up = []
    for name, deps in graph().items():
        for dep in deps:
            same_package = name.split(".")[0] == dep.split(".")[0]
            if layer_of(dep) > layer_of(name) or (layer_of(dep) == layer_of(name)
                                                  and not same_package):
                up.append(f"{name} ({LAYERS[layer_of(name)][0]}) imports {dep} "
                          f"({LAYERS[layer_of(dep)][0]})")
    assert not up, "imports that do not go down:\n" + "\n".join(sorted(up))


def test_no_circle():
    g, state, circles = graph(), {}, []

    def visit(n, path):
        state[n] = "open"
        for d in sorted(g[n]):
            if state.get(d) == "open":
                circles.append(" -> ".join(path[path.index(d):] + [d]))
            elif d not in state:
                visit(d, path + [d])
        state[n] = "done"
    for n in sorted(g):
        if n not in state:
            visit(n, [n])
    assert not circles, "circles:\n" + "\n".join(circles)


def test_importing_a_module_leaves_sys_path_alone():
    """Each module imported in turn in one fresh interpreter (in this one, conftest and the test
    files have imported most of them already: their imports would not run again), sys.path
    compared before and after each; a __main__ is left out (it runs its command)."""
    names = sorted(m for m in modules() if not m.endswith("__main__"))
    code = ("import importlib, sys\n"
            "for name in sys.argv[1:]:\n"
            "    before = list(sys.path)\n"
            "    importlib.import_module(name)\n"
            "    if sys.path != before:\n"
            "        print(name)\n")
    proc = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert not proc.stdout, ("importing these changed sys.path (they, or a module they import "
                             f"first): {proc.stdout.split()}")
