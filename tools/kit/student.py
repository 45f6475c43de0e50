"""
The student copy (python tools/classroom.py student OUT): the project's snapshot with each
handed-out task's functions blanked by `ast` (signature and docstring kept, the body replaced
by raise NotImplementedError("T3: write uniform_scale (classroom/T3.md)")). Nothing marks the
solution in the project's code and no second copy of it is kept: the blanks are cut from the
code itself. It also writes .github/workflows/classroom.yml (GitHub Classroom's feedback) and
.classroom.json (which tasks are blank).
"""

import json
import tempfile
from pathlib import Path

from tools.cli import UserError
from tools.kit.source import blank, copy_tree, split_spec, take_snapshot

MARK = ".classroom.json"  # written into a student copy: which tasks are blank


def student(out, ids, tasks, root):
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not empty: name a new folder (nothing was written)")
    with tempfile.TemporaryDirectory(prefix="nanonope_student_") as tmp:
        snap = Path(tmp) / "snapshot"
        take_snapshot(root, snap)
        by_file = {}
        for tid in ids:
            for spec in tasks[tid]["functions"]:
                path, qualname = split_spec(spec)
                by_file.setdefault(path, []).append((tid, qualname))
        blanked = {}
        for path, items in by_file.items():  # every blank made before anything is written
            names = {q.split(".")[-1]: t for t, q in items}
            try:
                blanked[path] = blank((snap / path).read_text(encoding="utf-8"), [q for _, q in items],
                                      lambda name: f"{names[name]}: write {name} "
                                                   f"(classroom/{tasks[names[name]]['handout']})")
            except ValueError as e:
                raise UserError(str(e)) from None
        copy_tree(snap, out)
    for path, source in blanked.items():
        (out / path).write_text(source, encoding="utf-8", newline="\n")
    (out / MARK).write_text(json.dumps({"blank": ids}, indent=1) + "\n", encoding="utf-8")
    workflow = out / ".github" / "workflows" / "classroom.yml"
    workflow.parent.mkdir(parents=True, exist_ok=True)
    workflow.write_text(github_workflow([tasks[t] for t in ids]), encoding="utf-8")
    print(f"wrote the student copy {out}: {', '.join(ids)} blank "
          f"({', '.join(f'{p}:{q}' for p, items in by_file.items() for _, q in items)}); "
          f"its GitHub Classroom workflow: {workflow.relative_to(out).as_posix()}")


def github_workflow(tasks):
    """GitHub Classroom's autograding: each task's public tests with its points and a timeout.
    Feedback only: students can edit their repository, so the grade of record is `grade`."""
    steps = [f"""    - name: {json.dumps(t['id'] + ' ' + t['title'])}
      id: {t['id'].lower()}
      uses: classroom-resources/autograding-command-grader@v1
      with:
        test-name: {t['id']}
        command: python -m pytest tests/test_paper.py -q -k test_{t['id']}_
        timeout: 5
        max-score: {t['points']}
""" for t in tasks]
    env = "".join(f"        {t['id']}_RESULTS: \"${{{{steps.{t['id'].lower()}.outputs.result}}}}\"\n" for t in tasks)
    return f"""# Written by tools/classroom.py student: the public tests of each task, for feedback.
name: Autograding Tests
'on':
- push
- repository_dispatch
permissions:
  checks: write
  actions: read
  contents: read
jobs:
  run-autograding-tests:
    runs-on: ubuntu-latest
    if: github.actor != 'github-classroom[bot]'
    steps:
    - name: Checkout code
      uses: actions/checkout@v4
    - name: Set up Python
      uses: actions/setup-python@v5
      with:
        python-version: '3.11'
    - name: Install the CPU build of torch, then the rest
      run: |
        python -m pip install torch --index-url https://download.pytorch.org/whl/cpu
        python -m pip install -r requirements.txt
{''.join(steps)}    - name: Autograding Reporter
      uses: classroom-resources/autograding-grading-reporter@v1
      env:
{env}      with:
        runners: {','.join(t['id'].lower() for t in tasks)}
"""
