"""The classroom kit's parts; tools/classroom.py is its one command.

source.py    the project's snapshot, and its task functions found, blanked, taken by ast
student.py   the student copy (student)
grade.py     the grader (grade, grade-all): the snapshot, the worker's copy, the verdict
judge.py     the pytest plugin that runs a task's tests against stand-ins
remote.py    the stand-ins and the worker: only data crosses between them
sandbox.py   where the worker runs (bwrap, unshare, another user) and nothing outliving it
lab.py       the lab's numbers and their expected ranges (ranges)
"""
