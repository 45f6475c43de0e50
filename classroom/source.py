"""
The project's source as the classroom kit reads it: a snapshot of the project, and its task
functions found, blanked and replaced with Python's `ast`.

A function is the text `ast` says it is (ast.get_source_segment: lines end where Python's
tokenizer ends them, so a form feed or U+2028 inside a line is part of it), and a name is the
last `def` of it, as Python binds it. A submitted function is taken only when its `def` line is
the project's (no decorator; the same arguments and defaults, compared with ast.dump) and it
uses no name that the student's file defines outside it: only the function's own text is
graded, so nothing a student wrote runs when its module is imported, the tests call it as the
project's, and a helper outside it is named in the refusal. Annotations on the `def` line
(type hints, a return annotation) are valid Python the handouts do not forbid: they are taken,
and dropped from the graded text, since Python evaluates them when the `def` runs, that is at
import (`def f(x: open(...).read())` would run in the worker before any check).
"""

import ast
import builtins
import copy
import hashlib
import importlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tokenize
from pathlib import Path

import pathspec

DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


class Refused(ValueError):
    """A submitted function the grader does not take, and why (one line)."""


# -----------------------------------------------------------------------------
# Names of tasks, checks and functions


def split_spec(spec):
    """ "model.py:query_scale" -> ("model.py", "query_scale")."""
    path, _, qualname = spec.partition(":")
    return path, qualname


def owner(spec):
    """(the imported module or class that holds what spec names, the attribute's name)."""

    path, qualname = split_spec(spec)
    obj = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    *outer, name = qualname.split(".")
    for part in outer:
        obj = getattr(obj, part)
    return obj, name


def resolve(spec):
    """The function (or class attribute) "path.py:qualname" names, imported."""
    obj, name = owner(spec)
    return getattr(obj, name)


def task_of(check):
    """A check's task: test_T3_random_tables_against_loops[2] -> T3."""
    return check.split("_")[1]


def tests_command(plugin, ids):
    """The command line that runs the tests of tasks `ids` (tests/test_paper.py, test_T3_...)
    under a plugin of the kit's, with no third-party plugin, cache, addopts or conftest.py of
    the project's (the suite's own hooks: its temp-folder canaries, its git status; the checks
    use no fixture), and no unraisableexception plugin (its garbage collections at the end, with
    PyTorch loaded, cost 0.4 s a run)."""
    return [sys.executable, "-m", "pytest", "tests/test_paper.py", "-q", "-p", plugin,
            "-p", "classroom.fixtures",
            "-k", " or ".join(f"test_{t}_" for t in ids), "-p", "no:cacheprovider",
            "-p", "no:unraisableexception", "-o", "addopts=", "--noconftest"]


# -----------------------------------------------------------------------------
# Functions by ast


def find_function(tree, qualname):
    """The def of `qualname` ("f" or "Class.method") in a parsed module, or None: at each level
    the last statement of that name, as Python binds it."""
    body, node = tree.body, None
    for part in qualname.split("."):
        named = [n for n in body if isinstance(n, (*DEFS, ast.ClassDef)) and n.name == part]
        if not named:
            return None
        node = named[-1]
        body = node.body
    return node if isinstance(node, DEFS) else None


def segment(source, node):
    """The exact text of a def, from `def` to the end of its body."""
    return ast.get_source_segment(source, node)


def def_line(node):
    """A function's `def ...:` line, as ast writes it (for messages)."""
    head = ast.parse(ast.unparse(node)).body[0]
    head.body = [ast.Expr(ast.Constant(...))]
    return ast.unparse(head).splitlines()[0]


def same_signature(theirs, ours):
    """The same kind of def (async or not), arguments and defaults; annotations aside."""
    return type(theirs) is type(ours) and dump(bare(theirs.args)) == dump(bare(ours.args))


def dump(node):
    return ast.dump(node, include_attributes=False)


def annotated(node):
    """A def's arguments that carry an annotation."""
    a = node.args
    return [x for x in (*a.posonlyargs, *a.args, a.vararg, *a.kwonlyargs, a.kwarg)
            if x is not None and x.annotation is not None]


def bare(args):
    """A copy of a def's arguments without their annotations."""
    args = copy.deepcopy(args)
    for x in (*args.posonlyargs, *args.args, args.vararg, *args.kwonlyargs, args.kwarg):
        if x is not None:
            x.annotation = x.type_comment = None
    return args


def unannotated(source, node, qualname):
    """source with the annotations of one def's line removed, nothing else: each argument's
    `: annotation` and the `-> annotation`, found by Python's tokenizer on the def's header (so
    parentheses, comments, line continuations and lambdas inside annotations are read as Python
    reads them). Refused where the result is not the same def without them."""
    lines = lines_of(source)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def at(lineno, col):  # ast's (line, UTF-8 column) as an index into source
        line = lines[lineno - 1]
        return starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", "ignore"))

    a, b = at(node.lineno, node.col_offset), at(node.body[0].lineno, node.body[0].col_offset)
    head = source[a:b]
    rows = [0]
    for line in lines_of(head):
        rows.append(rows[-1] + len(line))
    try:
        tokens = [(a + rows[t.start[0] - 1] + t.start[1], a + rows[t.end[0] - 1] + t.end[1], t)
                  for t in tokenize.generate_tokens(io.StringIO(head, newline=None).readline)]
    except (tokenize.TokenError, SyntaxError, IndexError):
        tokens = None
    cuts = []

    def back(i):  # i, moved back over the spaces and tabs before it
        while i > a and source[i - 1] in " \t":
            i -= 1
        return i

    for x in annotated(node) if tokens is not None else ():
        name, end = at(x.lineno, x.col_offset), at(x.end_lineno, x.end_col_offset)
        colon = next((s for s, _, t in tokens if t.type == tokenize.OP and t.string == ":"
                      and name < s < at(x.annotation.lineno, x.annotation.col_offset)), None)
        if colon is None:
            tokens = None
            break
        cuts.append((back(colon), end))  # the argument's node ends with its annotation
    if node.returns is not None and tokens is not None:
        start, end = (at(node.returns.lineno, node.returns.col_offset),
                      at(node.returns.end_lineno, node.returns.end_col_offset))
        arrow = [s for s, _, t in tokens
                 if t.type == tokenize.OP and t.string == "->" and s < start]
        depth, colon = 0, None
        for s, _, t in tokens:
            if t.type == tokenize.OP and t.string in "([{":
                depth += 1
            elif t.type == tokenize.OP and t.string in ")]}":
                depth -= 1
            elif t.type == tokenize.OP and t.string == ":" and depth == 0 and s >= end:
                colon = s
                break
        if arrow and colon is not None:
            cuts.append((back(arrow[-1]), colon))
        else:
            tokens = None
    out = source
    for i, j in sorted(cuts, reverse=True):
        out = out[:i] + out[j:]
    try:
        tree = ast.parse(out) if tokens is not None else None
        back_node = find_function(tree, qualname) if tree else None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        back_node = None
    if (back_node is None or annotated(back_node) or back_node.returns is not None
            or dump(bare(back_node.args)) != dump(bare(node.args))
            or [dump(s) for s in back_node.body] != [dump(s) for s in node.body]):
        plain_def = copy.deepcopy(node)
        plain_def.args, plain_def.returns = bare(node.args), None
        raise Refused(f"{qualname}'s annotations could not be dropped from its def line: "
                      f"write `{def_line(plain_def)}`")
    return out, back_node


def top_level_names(tree):
    """The names a module binds outside its functions: defs, classes, imports, assignments."""
    names = set()
    for node in tree.body:
        if isinstance(node, (*DEFS, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        else:
            names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
                      and isinstance(n.ctx, ast.Store)}
    return names


def free_names(node):
    """Names a function reads that nothing inside it binds (a coarse reading: a name bound
    anywhere inside counts as its own)."""
    bound, read = set(), set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            (read if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, (*DEFS, ast.ClassDef)) and n is not node:
            bound.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
    return read - bound


def parse_text(source):
    """A submitted file's text parsed; Refused (one line) where Python would not import it.
    Any failure of the parser (a RecursionError, MemoryError ...) is a refusal, not a crash.
    Where this Python is not the students' (python_gap), the reason names both."""
    try:
        return ast.parse(source)
    except SyntaxError as e:
        theirs = students_python()
        both = (f" (with Python {this_python()}, which grades; the course gives Python {theirs})"
                if python_gap() else "")
        raise Refused(f"does not parse: line {e.lineno}: {e.msg}{both}") from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise Refused(f"does not parse ({type(e).__name__})") from None


# Syntax each Python adds that an older one does not parse (for the grader's warning)
NEW_SYNTAX = {
    (3, 12): "f-strings that reuse their quotes or hold a backslash (PEP 701), `type X = ...` "
             "and `def f[T](...)` (PEP 695)",
    (3, 13): "type parameter defaults `def f[T = int](...)` (PEP 696)",
    (3, 14): 't-strings t"..." (PEP 750), `except A, B:` without parentheses (PEP 758)',
}


def this_python():
    return "%d.%d" % tuple(sys.version_info[:2])


def students_python():
    """The Python the students are given, as "3.12": Classroom 50's runtime, the constant
    CLASSROOM50_PYTHON that classroom/platforms.py's classroom50_runtime writes, read from that
    file's text (not imported: platforms.py needs the teacher's packages and imports this
    module); None where the file or the constant is not there (the worker's copy)."""
    try:
        tree = ast.parse((Path(__file__).parent / "platforms.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", "") == "CLASSROOM50_PYTHON"
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    return None


def python_gap():
    """One line saying how this Python differs from the students' (major.minor), and which
    syntax may then fail; "" when they are the same or the students' is not known."""
    ours, theirs = this_python(), students_python()
    if theirs is None or theirs == ours:
        return ""
    mine, given = sys.version_info[:2], tuple(int(x) for x in theirs.split(".")[:2])
    head = (f"this grader runs Python {ours}; the students are given Python {theirs} "
            "(Classroom 50's runtime, classroom/platforms.py)")
    if given > mine:
        new = "; ".join(f"{a}.{b}: {what}" for (a, b), what in sorted(NEW_SYNTAX.items())
                        if mine < (a, b) <= given)
        return (f"{head}: syntax new since {ours} does not parse here and scores 0"
                + (f" ({new})" if new else "") + f"; grade with Python {theirs}")
    return (f"{head}: syntax this Python accepts and {theirs} does not is graded here but fails "
            f"in their Python; grade with Python {theirs}")


def submitted_function(source, qualname, project_source):
    """(the exact text of `qualname` in a submitted file, its node), checked against the
    project's version; Refused with the reason (one line) where it cannot be taken."""
    tree = parse_text(source)
    node = find_function(tree, qualname)
    if node is None:
        raise Refused(f"has no function {qualname}")
    project = ast.parse(project_source)
    ours = find_function(project, qualname)
    expected = def_line(ours)
    if node.decorator_list:
        raise Refused(
            f"{qualname} has a decorator: the graded function is `{expected}` and its body, "
            "nothing above it"
        )
    if not same_signature(node, ours):
        raise Refused(f"{qualname}'s def line differs from the project's: write `{expected}`")
    if annotated(node) or node.returns is not None:  # dropped: they would run at import
        source, node = unannotated(source, node, qualname)  # the names outside stay the same
    outside = sorted((free_names(node) & top_level_names(tree)) - top_level_names(project)
                     - set(dir(builtins)))
    if outside:
        raise Refused(
            f"{qualname} uses {', '.join(f'`{n}`' for n in outside[:3])}, which your file defines "
            "outside it: only the function's own text is graded (put a helper inside it as a "
            "nested def, and an import inside it)"
        )
    return segment(source, node), node


def lines_of(text):
    """text's lines with their ends, split where Python's tokenizer ends a line."""
    parts = re.split(r"(\r\n|\r|\n)", text)
    return ["".join(parts[i:i + 2]) for i in range(0, len(parts), 2) if parts[i:i + 2] != [""]]


def offsets(source, node):
    """(start, end) string offsets of a def in one of the project's own files (its lines end in
    \\n alone: checked), from `def` to the end of its body."""
    if "\r" in source:
        raise ValueError("the project's files end their lines with \\n alone")
    starts = [0]
    for line in source.split("\n"):
        starts.append(starts[-1] + len(line) + 1)

    def at(lineno, col):
        begin = starts[lineno - 1]
        line = source[begin:starts[lineno]]
        return begin + len(line.encode("utf-8")[:col].decode("utf-8", errors="ignore"))

    return at(node.lineno, node.col_offset), at(node.end_lineno, node.end_col_offset)


def take(submitted, project, qualname):
    """project's source with `qualname` replaced by the submission's version of it (exactly
    its text as `ast` reads it, annotations of its def line dropped, re-indented where the
    project nests it differently), checked to read back as the same function. Refused where it
    cannot be. The result is the project's file but for that text, written as UTF-8 by the
    grader: a student's coding line (PEP 263) never comes along, since Python reads one only in
    a file's first two lines and only where they are comments, and the function's text starts
    with `def`."""
    text, theirs = submitted_function(submitted, qualname, project)
    ours = find_function(ast.parse(project), qualname)
    shift = ours.col_offset - theirs.col_offset
    if shift:
        lines = lines_of(text)
        lines[1:] = [
            (" " * shift + s if shift > 0 else s[min(-shift, len(s) - len(s.lstrip(" \t"))):])
            if s.strip() else s
            for s in lines[1:]
        ]
        text = "".join(lines)
    a, b = offsets(project, ours)
    out = project[:a] + text + project[b:]
    try:  # the same text where the project's function was, and nothing around it changed
        tree = ast.parse(out)
        back = find_function(tree, qualname)
        same = (back is not None and segment(out, back) == text
                and len(tree.body) == len(ast.parse(project).body))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        same = False
    if not same:
        raise Refused(
            f"{qualname} does not read back the same once put in the project's file: "
            "indent it as the project does"
        )
    return out


def blank(source, qualnames, message):
    """source with each function's body (after its docstring) replaced by one raise."""
    tree = ast.parse(source)
    nodes = [find_function(tree, q) for q in qualnames]
    for q, node in zip(qualnames, nodes):
        if node is None:
            raise ValueError(f"classroom/tasks.toml names {q}, which the project does not define")
    lines = source.split("\n")
    for node in sorted(nodes, key=lambda n: -n.lineno):  # from the bottom: line numbers above hold
        first = node.body[0]
        has_doc = (
            isinstance(first, ast.Expr)
            and isinstance(getattr(first, "value", None), ast.Constant)
            and isinstance(first.value.value, str)
        )
        a = first.end_lineno if has_doc else first.lineno - 1  # from the line after the docstring
        indent = " " * first.col_offset
        lines[a:node.end_lineno] = [f"{indent}raise NotImplementedError({message(node.name)!r})"]
    return "\n".join(lines)


# -----------------------------------------------------------------------------
# The project's files: one snapshot


def git(root, *args, text=True):
    """A read-only git command in root: its stdout (no optional locks: two gradings at once
    never race on the index)."""
    done = subprocess.run(["git", "--no-optional-locks", "-C", str(root), *args],
                          capture_output=True, text=text, timeout=120)
    return done.stdout if done.returncode == 0 else None


def in_git(root):
    try:
        top = git(root, "rev-parse", "--show-toplevel")
    except (OSError, subprocess.TimeoutExpired):
        return False
    return top is not None and Path(top.strip()).resolve() == Path(root).resolve()


def project_files(root):
    """The project's files outside git: relative paths, .git and what .gitignore names (git's
    own rules, by pathspec) left out."""

    root = Path(root)
    ignore = root / ".gitignore"
    rules = ignore.read_text(encoding="utf-8").splitlines() if ignore.exists() else []
    spec = pathspec.GitIgnoreSpec.from_lines(rules)
    out = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder).relative_to(root)
        dirs[:] = sorted(d for d in dirs if d != ".git"
                         and not spec.match_file((here / d).as_posix() + "/"))
        out += [here / f for f in sorted(files)
                if f != ".git" and not spec.match_file((here / f).as_posix())]  # a worktree's link
    return out


def take_snapshot(root, dst):
    """The project as grading sees it, written to dst: in a git checkout the tracked files at
    HEAD, else the files as they are (.gitignore applied if present). Returns
    {"source": "git HEAD <sha>" or "files", "edited": tracked files edited since HEAD}."""
    root, dst = Path(root), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    if in_git(root):
        tar = git(root, "archive", "--format=tar", "HEAD", text=False)
        with tarfile.open(fileobj=io.BytesIO(tar)) as t:
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4+, 3.10.12+
                t.extractall(dst, filter="data")
            else:  # git archive of our own HEAD: regular files and folders only
                t.extractall(dst, members=[m for m in t.getmembers() if m.isfile() or m.isdir()])
        head = git(root, "rev-parse", "HEAD").strip()
        status = git(root, "status", "--porcelain", "--untracked-files=no")
        return {"source": f"git HEAD {head[:12]}", "edited": [s[3:] for s in status.splitlines()]}
    for rel in project_files(root):
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, dst / rel)
    return {"source": "files", "edited": []}


def copy_tree(src, dst, leave_out=()):
    """Copy a snapshot (or any project folder) to dst, without the files and folders named in
    leave_out (paths relative to src, such as "tests" or "classroom/README.md")."""
    src, dst = Path(src), Path(dst)
    for rel in project_files(src):
        if any(
            rel.as_posix() == x or rel.as_posix().startswith(x.rstrip("/") + "/") for x in leave_out
        ):
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, dst / rel)


def fingerprint(folder):
    """What must not change while grading: in a git checkout its HEAD, `git status` (untracked
    files included) and the diff, else a hash of every file's path and bytes."""
    folder = Path(folder)
    if in_git(folder):
        parts = [git(folder, "rev-parse", "HEAD"), git(folder, "status", "--porcelain")]
        diff = git(folder, "diff", "HEAD", text=False) or b""
        return hashlib.sha256("\0".join(p or "?" for p in parts).encode() + diff).hexdigest()
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(folder):
        dirs.sort()
        for f in sorted(files):
            p = Path(dirpath) / f
            h.update(str(p.relative_to(folder)).encode() + b"\0")
            h.update(p.read_bytes() if not p.is_symlink() else os.readlink(p).encode())
    return h.hexdigest()
