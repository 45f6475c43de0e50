"""The classroom kit's parts, one role a module; classroom/command.py is its one command.

source.py      the project's snapshot, and its task functions found, blanked, taken by ast
upload.py      a student's upload read as data: regular files inside it only, bounded
student.py     the student copy (student)
snapshots.py   the copy's checks: the project's calls stored, and replayed on the student's code
grade.py       the grader (grade): the snapshot, the worker's copies, the verdict
judge.py       the pytest plugin that runs a task's tests against stand-ins
remote.py      the stand-ins (the judge's side) and the worker (the sandbox's side)
wire.py        what crosses between them: data only, counted while it is built
sandbox.py     where the worker runs (bwrap, unshare, another user), its bounds; nothing outlives it
report.py      what the teacher and the student read: console lines, results.json, plain text
copyflag.py    the copy flag: winnowed fingerprints of each statement
gradebook.py   a class at once (grade-all)
platforms.py   the Gradescope zip (gradescope, --try_on) and Classroom 50's tests and runtime
lab.py         the lab's numbers and their expected ranges (ranges)
student_tests.py   the copy's tests/test_paper.py
verify.py      Classroom 50's guard: the copy's files checked, the checks run in a pristine copy
"""
