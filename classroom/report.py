"""
What the teacher and the student read of a grading: the teacher's console lines, the student's
feedback, Gradescope's results.json, and the one rule for any text a student's code or upload
could have made (plain): cut to a stated length, with every control character gone, before it
reaches a console, a JSON or a CSV.

    WHY_CHARS     a check's reason, the text of what the student's code raised
    NAME_CHARS    a student's folder name
    FEEDBACK      the most a student's results.json may hold

What a student sees holds no value of the hidden cases: a check whose test draws its inputs
from the seed (it reads SEED: the judge marks it hidden) shows its reason with every number
masked; the teacher's console, the hidden entry of results.json and the gradebook keep them.
The edge cases every grading runs, the same in every grading, are public and shown whole.
"""

import math
import re
import unicodedata

WHY_CHARS = 300
NAME_CHARS = 80
FEEDBACK = 1 << 20
SHOWN = 3  # failed checks a task shows on the teacher's console (results.json has them all)
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


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


def masked(text):
    """A random case's reason without its numbers (which come from the hidden inputs)."""
    return NUMBER.sub("#", text)


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
