"""
Your tasks' checks (this file is tests/test_paper.py in a student copy of nanoNoPE).

Each check is one of the project's own checks, replayed: the calls it made to the project's
function at the public seeds, and the results the project gave, are stored in
tests/snapshots/; your function must give the same results (within 2e-4), leave the model as
the project leaves it, and, where the check looks at how it computes, run no fused attention
and make no tensor larger than the project's. The handouts (classroom/T1.md ...) say what to
write, in words and equations.

    python -m pytest tests/test_paper.py -k test_T3_        one task's checks

First the grade's own rule: only each task function's own text is graded, so a def line that
is not the handout's, a decorator, or a name your file defines outside the function (a helper,
an import at the top) fails every check of its task, with the grade's reason. A failing check
prints one block: the call, its arguments, what differs and by how much, what the check tests.

Your teacher grades with the project's full checks, seeds of their own and the likely
mistakes named (python -m classroom grade): passing here is the first step, not the grade.
"""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from classroom.snapshots import Copy  # noqa: E402

COPY = Copy(ROOT)


@pytest.mark.parametrize("check", list(COPY.checks), ids=list(COPY.checks))
def test_task(check):
    why = COPY.failure(check)
    if why:  # failed here, outside any `except`: one block, with no chained exception below it
        pytest.fail(why, pytrace=False)
