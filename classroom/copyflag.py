"""
The copy flag: how much of a submitted function is another's (the project's own, or a
classmate's), up to the edits that change no meaning. It changes no score; the teacher reads it.

Each statement of a function becomes a list of tokens from its syntax tree, normalised:
docstrings dropped, every name the function binds (its parameters and locals) one token,
numbers by value (1, 1.0 and 1e0 alike), strings one token, the operands of +, *, &, |, ^, ==,
!= in sorted order and a > b read as b < a, keyword arguments sorted; a compound statement's
header is one list, each statement of its body another. Its fingerprints are MOSS's winnowing
(Schleimer, Wilkerson and Aiken, SIGMOD 2003) within each statement: the hash of every K tokens
in a row, and the smallest of every W such hashes in a row (a shorter statement: one hash).
Two functions' similarity is the share of the smaller one's fingerprints the other holds (so
statements added to a copy do not hide it either); closeness() ranks the pairs found (the
share of both functions' fingerprints in common). A submission is flagged as the project's
from FLAG; two students, whose independent solutions of a task spelled out step by step (T5)
share much, only from PAIR: one student's whole function inside the other's, up to this
normalisation. So renamed locals, swapped operands, respelled constants, comments, docstrings
and reordered statements do not hide a copy.

The threshold and its two error rates, measured on the project's functions edited as above and
on independent implementations written from the handouts (tests/independent/): classroom/README.md.
A function too deep to read (over DEEPEST levels) has no fingerprint and is never flagged.
"""

import ast
import hashlib

K = 6  # tokens a fingerprint covers
W = 4  # winnowing window
FLAG = 0.8  # similarity to the project's own function from which a submission is flagged
PAIR = 1.0  # similarity from which two students are flagged: one holds all the other's
SMALLEST = 4  # fingerprints a function needs to be compared at all
DEEPEST = 120  # levels of syntax tree read (deeper: no fingerprint)
COMMUTATIVE = (ast.Add, ast.Mult, ast.BitAnd, ast.BitOr, ast.BitXor)
MIRROR = {ast.Gt: ast.Lt, ast.GtE: ast.LtE}


def depth(node):
    """The depth of a syntax tree, without recursion."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        n, d = stack.pop()
        deepest = max(deepest, d)
        stack += [(c, d + 1) for c in ast.iter_child_nodes(n)]
    return deepest


def bound_names(node):
    names = {a.arg for a in ast.walk(node) if isinstance(a, ast.arg)}
    names |= {n.id for n in ast.walk(node)
              if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    names |= {n.name for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return names


def statements(node):
    """The normalised token lists of a function's statements (see the module's doc), one list
    a statement, a compound statement's header apart from its body; [] if too deep."""
    if depth(node) > DEEPEST:
        return []
    local = bound_names(node)
    out = []

    def body(stmts):
        if stmts and isinstance(stmts[0], ast.Expr) and isinstance(stmts[0].value, ast.Constant) \
                and isinstance(stmts[0].value.value, str):
            stmts = stmts[1:]  # a docstring
        for stmt in stmts:
            out.append(walk(stmt))
        return ["BODY"]

    def operands(n, op):
        if isinstance(n, ast.BinOp) and isinstance(n.op, op):
            return operands(n.left, op) + operands(n.right, op)
        return [walk(n)]

    def walk(n):
        if isinstance(n, ast.Name):
            return ["V" if n.id in local else n.id]
        if isinstance(n, ast.arg):
            return ["V"]
        if isinstance(n, ast.Constant):
            v = n.value
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return [repr(float(v))]
            return ["S" if isinstance(v, (str, bytes)) else repr(v)]
        if isinstance(n, ast.Attribute):
            return walk(n.value) + ["." + n.attr]
        if isinstance(n, ast.BinOp) and isinstance(n.op, COMMUTATIVE):
            parts = sorted(operands(n, type(n.op)), key=lambda t: " ".join(t))
            return [type(n.op).__name__, f"x{len(parts)}"] + [t for p in parts for t in p]
        if isinstance(n, ast.Compare) and len(n.ops) == 1:
            op, left, right = type(n.ops[0]), walk(n.left), walk(n.comparators[0])
            if op in MIRROR:
                op, left, right = MIRROR[op], right, left
            if op in (ast.Eq, ast.NotEq, ast.Is, ast.IsNot):
                left, right = sorted((left, right), key=lambda t: " ".join(t))
            return [op.__name__] + left + right
        if isinstance(n, ast.Call):
            keywords = sorted(n.keywords, key=lambda k: k.arg or "")
            return (["Call"] + walk(n.func) + [t for a in n.args for t in walk(a)]
                    + [t for k in keywords for t in [f"={k.arg}"] + walk(k.value)])
        toks = [type(n).__name__]
        for field, value in ast.iter_fields(n):
            if field in ("body", "orelse", "finalbody", "handlers") and isinstance(value, list):
                toks += body(value) if field != "handlers" else [t for h in value for t in walk(h)]
            elif isinstance(value, list):
                toks += [t for v in value if isinstance(v, ast.AST) for t in walk(v)]
            elif isinstance(value, ast.AST) and not isinstance(value, ast.expr_context):
                toks += walk(value)
            elif isinstance(value, str) and field in ("attr", "module"):
                toks.append(value)
        return toks

    try:
        body(node.body)
    except RecursionError:
        return []
    return out


def fingerprints(node):
    """The winnowed fingerprints of a function, statement by statement: a set of integers."""
    prints = set()
    for toks in statements(node):
        if len(toks) < K:
            prints.add(hash_of(toks))
            continue
        grams = [hash_of(toks[i:i + K]) for i in range(len(toks) - K + 1)]
        prints |= {min(grams[i:i + W]) for i in range(max(1, len(grams) - W + 1))}
    return prints


def hash_of(toks):
    return int.from_bytes(hashlib.blake2b("\x1f".join(toks).encode(), digest_size=8).digest(),
                          "big")


def similarity(a, b):
    """The share of the smaller set of fingerprints that the other holds (0 to 1; 0 when either
    has fewer than SMALLEST)."""
    if min(len(a), len(b)) < SMALLEST:
        return 0.0
    return len(a & b) / min(len(a), len(b))


def closeness(a, b):
    """How close two matching functions are, for ranking a student's pairs: the share of both
    sets of fingerprints that the two hold in common (1 for the same function up to the
    normalisation; less when one lies inside a longer one, which similarity() cannot tell)."""
    return len(a & b) / len(a | b) if a and b else 0.0
