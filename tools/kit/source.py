"""
The project's source as the classroom kit reads it: a snapshot of the project, and its task
functions found, blanked and replaced with Python's `ast`.

Python, not str.splitlines, decides where a line ends (\\n, \\r\\n or \\r; a form feed or U+2028
inside a line is part of it), so a function is exactly the text `ast` says it is. A submitted
function is taken only when its `def` line is the project's (no decorator; the same arguments,
defaults, annotations and return annotation, compared with ast.dump): nothing a student wrote
runs when its module is imported, and the tests call it as the project's.
"""

import ast
import fnmatch
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path


class Refused(ValueError):
    """A submitted function the grader does not take, and why (one line)."""


# -----------------------------------------------------------------------------
# Functions by ast


def find_function(tree, qualname):
    """The def of `qualname` ("f" or "Class.method") in a parsed module, or None."""
    body, node = tree.body, None
    for part in qualname.split("."):
        node = next(
            (
                n
                for n in body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.name == part
            ),
            None,
        )
        if node is None:
            return None
        body = node.body
    return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def tests_command(plugin, ids):
    """The command line that runs the tests of tasks `ids` (tests/test_paper.py, test_T3_...)
    under a plugin of the kit's, with no third-party plugin, cache or addopts of the project's."""
    import sys
    return [sys.executable, "-m", "pytest", "tests/test_paper.py", "-q", "-p", plugin,
            "-k", " or ".join(f"test_{t}_" for t in ids), "-p", "no:cacheprovider", "-o", "addopts="]


def task_of(check):
    """A check's task: test_T3_random_tables_against_loops[2] -> T3."""
    return check.split("_")[1]


def split_spec(spec):
    """ "model.py:query_scale" -> ("model.py", "query_scale")."""
    path, _, qualname = spec.partition(":")
    return path, qualname


def line_starts(source):
    """Offsets at which each line begins, lines ending where Python's tokenizer ends them."""
    starts, i, n = [0], 0, len(source)
    while i < n:
        c = source[i]
        if c == "\r" or c == "\n":
            i += 2 if source.startswith("\r\n", i) else 1
            starts.append(i)
        else:
            i += 1
    return starts


def offset(source, starts, lineno, col):
    """The string offset of ast's (lineno, col_offset); col counts UTF-8 bytes."""
    begin = starts[lineno - 1]
    end = starts[lineno] if lineno < len(starts) else len(source)
    return begin + len(source[begin:end].encode("utf-8")[:col].decode("utf-8", errors="ignore"))


def span(source, node, starts=None):
    starts = starts or line_starts(source)
    return (
        offset(source, starts, node.lineno, node.col_offset),
        offset(source, starts, node.end_lineno, node.end_col_offset),
    )


def segment(source, node):
    """The exact text of a def, from `def` to the end of its body."""
    a, b = span(source, node)
    return source[a:b]


def def_line(source, node):
    """The `def ...:` header of a function as the project writes it."""
    starts = line_starts(source)
    a, _ = span(source, node, starts)
    b = offset(source, starts, node.body[0].lineno, node.body[0].col_offset)
    return " ".join(source[a:b].split())


def same_signature(theirs, ours):
    dump = lambda n: ast.dump(n, include_attributes=False)  # noqa: E731
    return (
        type(theirs) is type(ours)
        and dump(theirs.args) == dump(ours.args)
        and (theirs.returns is None) == (ours.returns is None)
        and (ours.returns is None or dump(theirs.returns) == dump(ours.returns))
    )


def submitted_function(source, qualname, project_source):
    """The exact text of `qualname` in a submitted file, checked against the project's
    version; Refused with the reason (one line) where it cannot be taken."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise Refused(f"does not parse: line {e.lineno}: {e.msg}") from None
    except ValueError as e:  # a NUL byte
        raise Refused(f"does not parse: {e}") from None
    node = find_function(tree, qualname)
    if node is None:
        raise Refused(f"has no function {qualname}")
    ours = find_function(ast.parse(project_source), qualname)
    expected = def_line(project_source, ours)
    if node.decorator_list:
        raise Refused(
            f"{qualname} has a decorator: the graded function is `{expected}` and its body, "
            "nothing above it"
        )
    if not same_signature(node, ours):
        raise Refused(f"{qualname}'s def line differs from the project's: write `{expected}`")
    return segment(source, node), node


def take(submitted, project, qualname):
    """project's source with `qualname` replaced by the submission's version of it (exactly
    its text as `ast` reads it, re-indented where the project nests it differently), checked
    to read back as the same function. Refused where it cannot be."""
    text, theirs = submitted_function(submitted, qualname, project)
    ours = find_function(ast.parse(project), qualname)
    shift = ours.col_offset - theirs.col_offset
    if shift:
        starts = line_starts(text)
        lines = [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]
        lines[1:] = [
            (" " * shift + s if shift > 0 else s[min(-shift, len(s) - len(s.lstrip(" \t"))) :])
            if s.strip()
            else s
            for s in lines[1:]
        ]
        text = "".join(lines)
    a, b = span(project, ours)
    out = project[:a] + text + project[b:]
    try:
        back = find_function(ast.parse(out), qualname)
    except SyntaxError:
        back = None
    if back is None or ast.dump(back) != ast.dump(theirs):
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
    starts = line_starts(source)
    for node in sorted(nodes, key=lambda n: -n.lineno):  # from the bottom: offsets above hold
        first = node.body[0]
        has_doc = (
            isinstance(first, ast.Expr)
            and isinstance(getattr(first, "value", None), ast.Constant)
            and isinstance(first.value.value, str)
        )
        # from the line after the docstring
        a = starts[first.end_lineno] if has_doc else starts[first.lineno - 1]
        b = starts[node.end_lineno] if node.end_lineno < len(starts) else len(source)
        indent = " " * first.col_offset
        source = (
            source[:a] + f"{indent}raise NotImplementedError({message(node.name)!r})\n" + source[b:]
        )
    return source


def normalised(node):
    """A function's shape for the copy flag: its ast without docstrings, the parameters and
    every name it assigns renamed v0, v1, ... in order (parameters first). The project's own
    function with locals renamed, comments and docstrings changed gives the same."""
    node = ast.parse(ast.unparse(node)).body[0]
    args = node.args
    names = {}
    for a in (
        args.posonlyargs + args.args + args.kwonlyargs + [x for x in (args.vararg, args.kwarg) if x]
    ):
        names.setdefault(a.arg, f"v{len(names)}")
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.setdefault(n.id, f"v{len(names)}")
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in names:
            n.id = names[n.id]
        elif isinstance(n, ast.arg) and n.arg in names:
            n.arg = names[n.arg]
        body = getattr(n, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            n.body = body[1:] or [ast.Pass()]
    return ast.dump(node)


# -----------------------------------------------------------------------------
# The project's files: one snapshot


def in_git(root):
    try:
        top = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return top.returncode == 0 and Path(top.stdout.strip()).resolve() == Path(root).resolve()


def ignore_rules(root):
    """.gitignore's patterns where it exists (an export or a zip may lack it)."""
    f = Path(root) / ".gitignore"
    if not f.exists():
        return []
    return [
        p.strip()
        for p in f.read_text(encoding="utf-8").splitlines()
        if p.strip() and not p.startswith("#")
    ]


def ignored(rel, is_dir, patterns):
    for p in patterns:
        if p.endswith("/"):
            if is_dir and fnmatch.fnmatch(rel.name, p[:-1]):
                return True
        elif fnmatch.fnmatch(rel.as_posix() if "/" in p else rel.name, p):
            return True
    return False


def project_files(root):
    """The project's files outside git: relative paths, .git and what .gitignore names left out."""
    root, patterns, out = Path(root), ignore_rules(root), []
    for folder, dirs, files in os.walk(root):
        here = Path(folder).relative_to(root)
        dirs[:] = sorted(d for d in dirs if d != ".git" and not ignored(here / d, True, patterns))
        out += [here / f for f in sorted(files) if not ignored(here / f, False, patterns)]
    return out


def take_snapshot(root, dst):
    """The project as grading sees it, written to dst: in a git checkout the tracked files at
    HEAD, else the files as they are (.gitignore applied if present). Returns
    {"source": "git HEAD <sha>" or "files", "edited": tracked files edited since HEAD}."""
    root, dst = Path(root), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    if in_git(root):
        tar = subprocess.run(
            ["git", "-C", str(root), "archive", "--format=tar", "HEAD"],
            capture_output=True,
            check=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as t:
            t.extractall(dst, filter="data")
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
        ).stdout
        return {
            "source": f"git HEAD {head.strip()[:12]}",
            "edited": [s[3:] for s in status.splitlines()],
        }
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
    """What must not change while grading: in a git checkout its HEAD and `git status`
    (untracked files included), else a hash of every file's path and bytes."""
    folder = Path(folder)
    if in_git(folder):
        head = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout
        status = subprocess.run(
            ["git", "-C", str(folder), "status", "--porcelain"], capture_output=True, text=True
        ).stdout
        diff = subprocess.run(
            ["git", "-C", str(folder), "diff", "HEAD"], capture_output=True
        ).stdout
        return hashlib.sha256((head + status).encode() + diff).hexdigest()
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(folder):
        dirs.sort()
        for f in sorted(files):
            p = Path(dirpath) / f
            h.update(str(p.relative_to(folder)).encode() + b"\0")
            h.update(p.read_bytes() if not p.is_symlink() else os.readlink(p).encode())
    return h.hexdigest()
