"""
Your tasks' checks (this file is tests/test_paper.py in a student copy of nanoNoPE).

Each check is one of the project's own checks, replayed: the calls it made to the project's
function at the public seeds, and the results the project gave, are stored in
tests/snapshots/; your function must give the same results (within 2e-4), leave the model as
the project leaves it, and, where the check looks at how it computes, run no fused attention
and make no tensor larger than the project's. The handouts (classroom/T1.md ...) say what to
write, in words and equations.

    python -m pytest tests/test_paper.py -k test_T3_        one task's checks

Your teacher grades with the project's full checks, seeds of their own and the likely
mistakes named (python -m classroom grade): passing here is the first step, not the grade.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from classroom.snapshots import load, replay  # noqa: E402

CHECKS = load(Path(__file__).parent / "snapshots")


@pytest.mark.parametrize("check", list(CHECKS), ids=list(CHECKS))
def test_task(check):
    try:
        replay(check, CHECKS[check])
    except AssertionError as e:  # one short block: what differs, not the replay's own frames
        pytest.fail(str(e), pytrace=False)
