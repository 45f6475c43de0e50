"""
What the teacher and the student read of a grading: the teacher's console lines, the student's
feedback, Gradescope's results.json, and the one rule for any text a student's code or upload
could have made (plain): cut to a stated length, with every control character gone, before it
reaches a console, a JSON or a CSV.

    WHY_CHARS     a check's reason, the text of what the student's code raised
    NAME_CHARS    a student's folder name
    FEEDBACK      the most a student's results.json may hold

What a student sees holds no value of the hidden cases: a check whose test draws its inputs
from the seed (it reads SEED: the judge marks it hidden) shows its reason with its numbers
masked (masked, below); the teacher's console, the hidden entry of results.json and the
gradebook keep them. The edge cases every grading runs, the same in every grading, are public
and shown whole.
"""

import ast
import functools
import itertools
import math
import re
import unicodedata
from pathlib import Path

WHY_CHARS = 300
NAME_CHARS = 80
FEEDBACK = 1 << 20
SHOWN = 3  # failed checks a task shows on the teacher's console (results.json has them all)
# a number wherever it stands, glued to letters too (L350, p87.5000): its sign with it unless
# it follows a name or a bracket (i-1 keeps its minus)
NUMBER = re.compile(r"(?:(?<![\w)\].])[-+])?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
WORD = re.compile(r"\w+")
# the project's own text that a check's reason may quote (next to this package)
ROOT = Path(__file__).resolve().parents[1]
CHECKS_MODULE = ROOT / "tests" / "test_paper.py"
HANDOUTS = ROOT / "classroom"


def plain(text, limit=WHY_CHARS):
    """text on one line: control and format characters (escape sequences, bidi overrides,
    zero-width marks) each a space or gone, runs of spaces one, cut at limit with '...'."""
    text = str(text)[: limit * 4]
    out = []
    for c in text:
        category = unicodedata.category(c)
        if category == "Cc":
            out.append(" ")
        elif category in ("Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            out.append("")
        else:
            out.append(c)
    text = " ".join("".join(out).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def masked(text, kept=None):
    """A hidden case's reason with every number masked (#) but those the project's own text
    spells, which are the handouts' and the checks' constants, never a hidden input:

      - a piece of the checks' text that holds a digit, where it stands whole (or where plain()
        cut the reason inside it): a string of tests/test_paper.py, or a stretch of one of its
        f-strings whose values are all fixed literals, written out for each of them
        (constants(): "least squares of lambda - 1 on ln(i / L)", "pass weight_decay=0.0",
        "chunk=3, T=40");
      - a word with a digit that the checks' strings or the handouts write (T1, float32, 4L).

    Every other number is masked wherever it stands, glued to letters too ("L350 p87.5000" is
    "L# p#"): the values a message formats, and whatever a student's code put in what it
    raised. The rule fails closed: a message written later masks its values, and shows its
    constants once they are in the checks' text, with no list to keep. (A value a check
    computes is masked even when the seed does not change it: only literals, and arithmetic
    on them, are read as fixed.) kept: (pieces, words), from constants() when None."""
    pieces, words = kept if kept is not None else constants()
    spans = []

    def keep(start, end, piece):
        if (not any(a < end and start < b for a, b in spans)
                and not (piece[0].isdigit() and start and text[start - 1] in "0123456789.")
                and not (end - start == len(piece) and piece[-1].isdigit()
                         and text[end:end + 1] in tuple("0123456789."))):
            spans.append((start, end))

    # a reason plain() cut ends inside a piece: its start, CUT_PIECE characters or more, counts
    cut, tail = text.endswith("..."), len(text) - 3
    for piece in pieces:  # longest first: a piece inside a longer one is covered by it
        start = text.find(piece)
        while start >= 0:
            keep(start, start + len(piece), piece)
            start = text.find(piece, start + 1)
        for start in range(max(0, tail - len(piece) + 1), tail - CUT_PIECE + 1) if cut else ():
            if piece.startswith(text[start:tail]):
                keep(start, tail, piece)
                break
    for m in WORD.finditer(text):
        if m.group() in words and not any(a < m.end() and m.start() < b for a, b in spans):
            spans.append(m.span())
    out, at = [], 0
    for a, b in sorted(spans):
        out += [NUMBER.sub("#", text[at:a]), text[a:b]]
        at = b
    return "".join(out + [NUMBER.sub("#", text[at:])])


# -----------------------------------------------------------------------------
# The checks' constants: what of a hidden check's reason the project's own text spells

COMBOS = 512  # the most texts one stretch of an f-string is written out as (below)
CUT_PIECE = 16  # the shortest start of a piece kept where plain() cut a reason


@functools.lru_cache(maxsize=None)
def constants(module=CHECKS_MODULE, handouts=HANDOUTS):
    """(pieces: the checks' constant texts that hold a digit, longest first, whitespace
    collapsed as plain() does; words: the digit-bearing words of the checks' strings and of the
    handouts T1.md ... T6.md). A piece is a string of tests/test_paper.py, or a stretch of one
    of its f-strings whose values are all fixed (fixed_values: a loop over a literal tuple, a
    parametrize list, a literal assignment), written out for each value: "chunk 3" of
    `for chunk in (3, 256)` is the check's own; "a = 0.2396" of an f-string's {a:.6f} is
    not, and cuts the f-string there. A file that is missing or unreadable adds nothing: more
    is masked."""
    pieces = set()
    try:
        tree = ast.parse(Path(module).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        tree = ast.Module(body=[], type_ignores=[])
    inner = set()
    for scope in [n for n in ast.walk(tree) if isinstance(n, DEFS)] + [tree]:
        fixed = fixed_values(scope)
        for n in ast.walk(scope):
            if isinstance(n, ast.JoinedStr) and id(n) not in inner:
                inner |= {id(c) for c in ast.walk(n)}  # its parts and format specs: done
                pieces |= set(written_out(n, fixed))
    pieces |= {n.value for n in ast.walk(tree)
               if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in inner}
    pieces = {" ".join(p.split()) for p in pieces}
    words = {w for p in pieces for w in WORD.findall(p)}
    for handout in sorted(Path(handouts).glob("T*.md")):
        try:
            words |= set(WORD.findall(handout.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    pieces = {p for p in pieces if has_digit(p) and any(c.isalpha() for c in p)}
    words = {w for w in words if has_digit(w) and not w.isdigit()}
    return tuple(sorted(pieces, key=lambda p: (-len(p), p))), frozenset(words)


DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def has_digit(text):
    return any(c.isdigit() for c in text)


def fixed_values(scope):
    """{name: its possible values} for each name of a function (or module) bound only to
    literals: `B, T = 2, 40`, `for chunk in (3, 256)`, `for i in range(16, 45)` of literals, a
    parametrize list of literals. A name bound any other way anywhere inside is not fixed."""
    values, loose = {}, set()

    def bind(target, options):
        """target (a name, or a tuple of them) takes each of options (None: not fixed)."""
        if isinstance(target, ast.Name):
            if options is None:
                loose.add(target.id)
            else:
                values.setdefault(target.id, []).extend(options)
        elif isinstance(target, (ast.Tuple, ast.List)):
            rows = options if options is not None and all(
                isinstance(o, (tuple, list)) and len(o) == len(target.elts) for o in options
            ) else None
            for i, t in enumerate(target.elts):
                bind(t, None if rows is None else [r[i] for r in rows])
        elif target is not None:
            loose.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))

    for deco in getattr(scope, "decorator_list", []):
        if (isinstance(deco, ast.Call) and getattr(deco.func, "attr", "") == "parametrize"
                and len(deco.args) >= 2 and isinstance(deco.args[0], ast.Constant)):
            names = [x.strip() for x in str(deco.args[0].value).split(",")]
            rows = literal(deco.args[1], iterable=True)
            bind(ast.Tuple([ast.Name(n) for n in names]) if len(names) > 1 else ast.Name(names[0]),
                 rows)
    loose.update(a.arg for a in ast.walk(scope) if isinstance(a, ast.arg) and a.arg not in values)
    derived = []  # name = arithmetic on other names (bound = B * nh * chunk * T)
    for n in ast.walk(scope):
        if isinstance(n, ast.Assign):
            one = literal(n.value)
            if one is None and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                derived.append((n.targets[0].id, n.value))
                continue
            for t in n.targets:
                bind(t, None if one is None else [one])
        elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
            bind(n.target, literal(n.iter, iterable=True))
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
            bind(n.target, None)
        elif isinstance(n, ast.withitem):
            bind(n.optional_vars, None)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            loose.update(n.names)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            loose.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, (*DEFS, ast.ClassDef)) and n is not scope:
            loose.add(n.name)
    fixed = {k: v for k, v in values.items() if k not in loose and v}
    for name, expr in derived:  # in the order written: a name used before it is bound is loose
        names = sorted({n.id for n in ast.walk(expr) if isinstance(n, ast.Name)})
        options = [fixed.get(n, []) for n in names]
        if (name in loose or name in values or not is_fixed(expr, fixed)
                or math.prod(len(o) for o in options) > COMBOS):
            loose.add(name)
            fixed.pop(name, None)
            continue
        try:
            fixed[name] = [evaluated(expr, dict(zip(names, c)))
                           for c in itertools.product(*options)]
        except Exception:  # noqa: BLE001  (a combination that does not compute: not fixed)
            loose.add(name)
    return {k: v for k, v in fixed.items() if k not in loose}


def literal(node, iterable=False):
    """A literal's value (with iterable: the items of a literal tuple or list, or of range()
    of literals, at most COMBOS of them), or None."""
    if (iterable and isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "range" and not node.keywords):
        bounds = [literal(a) for a in node.args]
        if 1 <= len(bounds) <= 3 and all(type(b) is int for b in bounds) and bounds[-1:] != [0]:
            r = range(*bounds)
            return list(r) if len(r) <= COMBOS else None
        return None
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if iterable:
        return list(value) if isinstance(value, (tuple, list)) and len(value) <= COMBOS else None
    return value


def written_out(fstring, fixed):
    """An f-string's stretches between its values that are not fixed, each written out for
    every combination of its fixed values (a stretch of more than COMBOS: its literal text)."""
    stretches = [[]]
    for part in fstring.values:
        if isinstance(part, ast.Constant) or is_fixed(part, fixed):
            stretches[-1].append(part)
        else:
            stretches.append([])
    out = []
    for parts in stretches:
        names = sorted({n.id for p in parts for n in ast.walk(p) if isinstance(n, ast.Name)})
        options = [fixed[n] for n in names]
        out += [p.value for p in parts if isinstance(p, ast.Constant)]  # the literal text alone
        if math.prod(len(o) for o in options) > COMBOS:
            continue
        for combo in itertools.product(*options):
            try:
                out.append("".join(p.value if isinstance(p, ast.Constant)
                                   else shown(p, dict(zip(names, combo))) for p in parts))
            except Exception:  # noqa: BLE001  (a combination that does not format)
                continue
    return [t for t in out if t]


# what a fixed value of an f-string may be made of (no call, no attribute, no power)
SAFE = (ast.FormattedValue, ast.JoinedStr, ast.Constant, ast.Name, ast.Load, ast.BinOp,
        ast.UnaryOp, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Div, ast.Mod, ast.USub,
        ast.UAdd, ast.Not, ast.Tuple, ast.List, ast.IfExp, ast.Compare, ast.cmpop, ast.BoolOp,
        ast.boolop)


def is_fixed(part, fixed):
    """Whether an f-string's value is arithmetic on literals and fixed names alone."""
    return all(isinstance(n, SAFE) and (not isinstance(n, ast.Name) or n.id in fixed)
               for n in ast.walk(part))


def shown(part, env):
    """One fixed value of an f-string as the f-string writes it."""
    return evaluated(ast.JoinedStr([part]), env)


def evaluated(expr, env):
    """The value of an expression that is_fixed: literals, fixed names and arithmetic on them
    only (no call, no attribute, no power), with no builtins."""
    code = compile(ast.fix_missing_locations(ast.Expression(expr)), "<check>", "eval")
    return eval(code, {"__builtins__": {}}, env)  # noqa: S307


def csv_cell(text, limit=2000):
    """A gradebook cell: plain, and never read as a formula by a spreadsheet."""
    text = plain(text, limit)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def fmt(x):
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}"


def console_lines(results):
    """The teacher's log: one line a task (with its seed), then each failed check."""
    lines = []
    for r in results:
        seed = "-" if r["seed"] is None else r["seed"]
        flag = "  COPY: " + r["copied"] if r.get("copied") else ""
        lines.append(
            f"{r['id']}  {'passed' if r['passed'] else 'failed':6}  "
            f"{fmt(r['score']):>5}/{r['max_score']:<3}  seed {seed:<10}  {r['seconds']:5.1f} s  "
            f"{plain(r['output'], 400)}{flag}"
        )
        failed = [c for c in r["checks"] if not c["ok"]]
        lines += [f"      fail  {c['name']}: {plain(c['why'], 160)}" for c in failed[:SHOWN]]
        if len(failed) > SHOWN:
            lines.append(
                f"      ... and {len(failed) - SHOWN} more failed checks "
                "(every one in --json's output)"
            )
    return lines


def seen_by_student(check):
    return masked(check["why"]) if check.get("hidden", True) else check["why"]


def student_output(r):
    """What a student reads for one task: every check, pass or fail and why; no seed and no
    number of a hidden case."""
    head = r.get("where", "")
    if r.get("machine"):  # twice the machine's failure: no score, and the teacher told
        return head + f"NOT GRADED (the machine's failure, not yours; your teacher is told and "\
            f"grades it again): {plain(r['machine'], 300)}"
    if not r["checks"]:
        return head + f"0/{r['max_score']}: {plain(r['output'], 600)}"
    passed = sum(c["ok"] for c in r["checks"])
    head += f"{passed} of {len(r['checks'])} checks passed" + (
        "" if r["passed"] else " (all must pass for the points)" if r["score"] == 0 else ""
    )
    return "\n".join(
        [head]
        + [
            f"{'pass' if c['ok'] else 'FAIL'}  {c['name']}"
            + ("" if c["ok"] else f": {plain(seen_by_student(c))}")
            for c in r["checks"]
        ]
    )


def gradescope(results, tasks, seconds, note=""):
    """Gradescope's results.json: one visible test a task, a hidden one with the seed, the copy
    flag and the unmasked reasons, the total and the time; at most FEEDBACK bytes."""
    tests = []
    for r in results:
        t = tasks.get(r["id"], {})
        failed = [f"{c['name']}: {plain(c['why'])}" for c in r["checks"] if not c["ok"]]
        tests.append(
            {
                "name": f"{r['id']} {r['title']}",
                "score": r["score"],
                "max_score": r["max_score"],
                "output": student_output(r),
                "visibility": t.get("visibility", "visible"),
            }
        )
        tests.append(
            {
                "name": f"{r['id']} for the teacher",
                "score": 0,
                "max_score": 0,
                "visibility": "hidden",
                "output": f"seed {r['seed']}; copied: {r.get('copied') or 'no'}; "
                f"{plain(r['output'], 600)}" + "".join("\n" + f for f in failed[:20]),
            }
        )
    total = sum(r["score"] for r in results)
    most = sum(r["max_score"] for r in results)
    out = {
        "score": round(total, 2),
        "execution_time": math.ceil(seconds),
        "output": (plain(note, 600) + "\n" if note else "") + f"{fmt(total)}/{most}",
        "tests": tests,
    }
    share = FEEDBACK // (2 * max(1, len(tests)))  # by construction far below; a last guard
    for t in tests:
        t["output"] = t["output"][:share]
    return out


def zero_results(ids, tasks, why):
    """Every requested task at 0, with why (a submission that could not be graded at all)."""
    return [result(tasks[t]) | {"output": why, "seconds": 0.0} for t in ids]


def result(task):
    """One task's result before it is graded: 0 points, no check."""
    return {
        "id": task["id"],
        "title": task["title"],
        "max_score": task["points"],
        "score": 0,
        "passed": False,
        "seed": None,
        "copied": "",
        "checks": [],
        "output": "",
    }
