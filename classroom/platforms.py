"""
The kit on the platforms a course runs on: Gradescope's autograder zip (python -m classroom
gradescope), and Classroom 50's tests and runtime files for the student copy (written by
python -m classroom student).

gradescope OUT.zip: Gradescope's autograder. At the zip's root setup.sh and run_autograder
(bash, executable), secret.txt, results_if_broken.json, and nanoNoPE/: the project's snapshot
(in git the tracked files at HEAD) without docs/. Gradescope unpacks it to
/autograder/source, runs setup.sh once when it builds the image and run_autograder for each
submission (the upload in /autograder/submission, results in /autograder/results/results.json).
--try_on=FOLDER runs the zip on FOLDER as Gradescope would, in a temporary root, and prints the
time and the peak memory of the whole process tree.

(grade-all: classroom/gradebook.py.)
"""

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from importlib import metadata
from pathlib import Path

import psutil

from classroom.report import gradescope as results_json, zero_results
from classroom.source import copy_tree, take_snapshot
from common import UserError

SETUP = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu).
# Written by python -m classroom gradescope; the zip was made and tried with PyTorch {torch}.
set -euo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q python3 python3-pip python3-venv bubblewrap
python3 -m venv "$ROOT/venv"
"$ROOT/venv/bin/python" -m pip install -q "torch=={torch}" \
    --index-url https://download.pytorch.org/whl/cpu
"$ROOT/venv/bin/python" -m pip install -q -r "$ROOT/source/nanoNoPE/requirements.txt"
# the student's code runs as this user when the container forbids namespaces (--sandbox=user)
id -u nanonope-student >/dev/null 2>&1 \
    || useradd --system --no-create-home --shell /usr/sbin/nologin nanonope-student
chmod -R go-rwx "$ROOT/source"   # the secret and the project's own functions: root's alone
# the key: the project's own functions graded in this image's sandbox, once (exit 2 if they fail)
cd "$ROOT/source/nanoNoPE" && "$ROOT/venv/bin/python" -m classroom key --tasks={tasks}
"""

RUN = r"""#!/usr/bin/env bash
# Gradescope runs this for each submission. It always writes results/results.json.
# Written by python -m classroom gradescope.
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
PY="$ROOT/venv/bin/python"
[ -x "$PY" ] || PY="$(command -v python3)"
mkdir -p "$ROOT/results"
OUT="$ROOT/results/results.json"
rm -f "$OUT"
cd "$ROOT/source/nanoNoPE" || exit 0
NANONOPE_SECRET="$(cat "$ROOT/source/secret.txt")" "$PY" -m classroom grade \
    "$ROOT/submission" --json="$OUT" --tasks={tasks} --timeout={timeout} --check_key=false
status=$?
if [ ! -s "$OUT" ]; then  # the grader itself failed: every task at 0, and why in the teacher's log
    echo "python -m classroom grade exited with $status and wrote no results" >&2
    cp "$ROOT/source/results_if_broken.json" "$OUT"
fi
exit 0
"""


# the PyTorch the platforms install: the one the kit, its tests and the lab's ranges were
# measured with
TORCH = "2.13.0"


def torch_version():
    """The PyTorch a platform installs (TORCH): a stated, tested version, not whatever build the
    teacher has (a CUDA build, or a newer release, grades the same code but was not measured)."""
    return TORCH


def local_torch():
    """(version, whether it is a CPU build) of the PyTorch here, without importing it, or None."""
    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None
    cuda = (any((f.name or "").startswith("nvidia") for f in metadata.distributions())
            or "+cu" in version)
    return version.split("+")[0], not cuda


def gradescope(out, ids, tasks, secret, root, timeout):
    """Write Gradescope's autograder zip to out."""

    out = Path(out)
    if out.suffix != ".zip":
        raise UserError(f"{out}: name a .zip file")
    if not secret:
        raise UserError(
            "a Gradescope zip needs a secret: --secret=S or NANONOPE_SECRET "
            "(the seeds come from it)"
        )
    version = torch_version()
    broken = results_json(
        zero_results(
            ids,
            tasks,
            "the autograder could not grade this submission: your instructor has the log",
        ),
        tasks,
        0,
    )
    files = {
        "setup.sh": SETUP.format(torch=version, tasks=",".join(ids)),
        "run_autograder": RUN.format(tasks=",".join(ids), timeout=timeout),
        "secret.txt": secret,
        "results_if_broken.json": json.dumps(broken, indent=1) + "\n",
    }
    with tempfile.TemporaryDirectory(prefix="nanonope_zip_") as tmp:
        snap = Path(tmp) / "snapshot"
        take_snapshot(root, snap)
        copy_tree(snap, Path(tmp) / "nanoNoPE", leave_out=("docs",))
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for name, text in files.items():
                info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
                mode = 0o755 if name in ("setup.sh", "run_autograder") else 0o644
                info.external_attr = (stat.S_IFREG | mode) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, text)
            for f in sorted((Path(tmp) / "nanoNoPE").rglob("*")):
                if f.is_file():
                    z.write(f, f.relative_to(tmp).as_posix())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_suffix(".zip.tmp")
    tmp_out.write_bytes(buf.getvalue())
    os.replace(tmp_out, out)
    print(
        f"wrote {out} ({len(buf.getvalue()) >> 10} KB): {', '.join(ids)}, PyTorch {version} "
        f"(CPU build), {timeout} s a task; upload it as the assignment's autograder"
    )


def unpack(zip_path, root):
    """The zip as Gradescope lays it out: its contents in root/source, modes kept."""
    with zipfile.ZipFile(zip_path) as z:
        for info in z.infolist():
            target = Path(root) / "source" / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(info))
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(target, mode)


def try_zip(zip_path, submission, memory_mb=768, cpus=0.5):
    """Run the zip on a submission as Gradescope would (without setup.sh), in a temporary root.
    Where this machine lets cgroups be made (Linux, as root), the run is held to memory_mb and
    to `cpus` of a CPU, as Gradescope's default container is, and its peak anonymous memory
    (sampled every 20 ms) and the cgroup's own peak (page cache included) are reported;
    elsewhere the summed resident memory of the process tree (shared libraries counted in each
    process), on the whole machine."""
    group = memory_group(memory_mb << 20)
    cpu = cpu_group(cpus)
    with tempfile.TemporaryDirectory(prefix="nanonope_autograder_") as root:
        unpack(zip_path, root)
        shutil.copytree(submission, Path(root) / "submission", symlinks=True)
        python_for_zip(Path(root) / "venv", Path(root) / "source" / "nanoNoPE")
        t0, peak = time.time(), 0

        def join():
            for g in (group[0] if group else None, cpu):
                if g is not None:
                    (g / "cgroup.procs").write_text(str(os.getpid()), encoding="ascii")

        proc = subprocess.Popen(
            ["bash", str(Path(root) / "source" / "run_autograder")],
            env={**os.environ, "AUTOGRADER_ROOT": root},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=join if group or cpu else None,
        )
        while proc.poll() is None:
            peak = max(peak, group_anon(group) if group else tree_memory(proc.pid))
            time.sleep(0.02)
        log = proc.stdout.read()
        seconds = time.time() - t0
        results = json.loads((Path(root) / "results" / "results.json").read_text(encoding="utf-8"))
    print(log.rstrip())
    if group:
        usage = group_peak(group)
        memory = (
            f"held to {memory_mb} MB: peak anonymous memory {peak / 2**20:.0f} MB, "
            f"the cgroup's peak {usage / 2**20:.0f} MB with page cache"
        )
        group[0].rmdir()
    else:
        memory = (
            f"peak resident memory of the process tree {peak / 2**20:.0f} MB "
            "(shared pages counted in each)"
        )
    if cpu is not None:
        cpu.rmdir()
    where = f"on {cpus:g} of a CPU" if cpu is not None else "on this machine's CPUs"
    print(
        f"tried {zip_path} on {submission}: score {results['score']}, "
        f"{seconds:.1f} s {where}, {memory}"
    )
    return results, seconds, peak


def python_for_zip(venv, project):
    """What run_autograder will run, at venv/bin/python: this interpreter where its PyTorch is
    the CPU build of TORCH (as setup.sh installs), else a new venv from it with that build and
    the requirements installed, as setup.sh does (pip needs the network then)."""
    here = local_torch()
    python = Path(venv) / "bin" / "python"
    if here == (TORCH, True):
        python.parent.mkdir(parents=True)
        python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n', encoding="utf-8")
        python.chmod(0o755)
        return
    print(f"PyTorch here is {here[0] if here else 'missing'}"
          f"{'' if here and here[1] else ' (not a CPU build)'}: "
          f"installing the zip's {TORCH} CPU build in a venv, as setup.sh does", flush=True)
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(python), "-m", "pip", "install", "-q", f"torch=={TORCH}", "--index-url",
              "https://download.pytorch.org/whl/cpu"],
             [str(python), "-m", "pip", "install", "-q", "-r",
              str(Path(project) / "requirements.txt")]]
    for step in steps:
        if subprocess.run(step).returncode != 0:
            raise UserError(f"--try_on could not install the zip's PyTorch "
                            f"({' '.join(step[-4:])}): check the network, or run it where "
                            f"PyTorch {TORCH}'s CPU build is installed")


def memory_group(limit):
    """(a new memory cgroup held to limit bytes, its version) where one can be made, else None."""
    name = f"nanonope_try_{os.getpid()}"
    try:
        v1 = Path("/sys/fs/cgroup/memory")
        if v1.is_dir():
            path = v1 / name
            path.mkdir()
            (path / "memory.limit_in_bytes").write_text(str(limit), encoding="ascii")
            return path, 1
        v2 = Path("/sys/fs/cgroup")
        if "memory" in (v2 / "cgroup.controllers").read_text(encoding="ascii"):
            path = v2 / name
            path.mkdir()
            (path / "memory.max").write_text(str(limit), encoding="ascii")
            return path, 2
    except OSError:
        return None
    return None


def cpu_group(cpus):
    """A new cgroup v1 CPU group held to `cpus` of a CPU, or None."""
    path = Path("/sys/fs/cgroup/cpu") / f"nanonope_try_{os.getpid()}"
    try:
        path.mkdir()
        (path / "cpu.cfs_period_us").write_text("100000", encoding="ascii")
        (path / "cpu.cfs_quota_us").write_text(str(int(cpus * 100000)), encoding="ascii")
        return path
    except OSError:
        return None


def group_anon(group):
    path, version = group
    key = "total_rss" if version == 1 else "anon"
    try:
        for line in (path / "memory.stat").read_text(encoding="ascii").splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except OSError:
        pass
    return 0


def group_peak(group):
    path, version = group
    f = path / ("memory.max_usage_in_bytes" if version == 1 else "memory.peak")
    try:
        return int(f.read_text(encoding="ascii"))
    except (OSError, ValueError):
        return 0


def tree_memory(pid):
    """Resident bytes of pid and every process below it (psutil; shared pages counted in each)."""

    try:
        procs = [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


# -----------------------------------------------------------------------------
# Classroom 50 (foundation50/classroom50), the GitHub path since GitHub Classroom's end (2026-08-28)

# the runner's Python: one PyTorch has CPU wheels for (its default, 3.14, may not)
CLASSROOM50_PYTHON = "3.12"
VERIFIER = "classroom50/verify.py"  # the copy's guard (classroom/verify.py, filled in)
VERIFY = Path(__file__).resolve().parent / "verify.py"
PYTEST = ["tests/test_paper.py", "-q", "-p", "no:cacheprovider"]


def classroom50_verifier(files, graded, tasks):
    """The text of the copy's classroom50/verify.py: classroom/verify.py with ASSIGNMENT filled
    in: `files` ({path: sha256} of every file the checks may load), the task files `graded`,
    the task ids and the checks' pytest arguments."""
    assignment = {"files": dict(sorted(files.items())), "graded": sorted(graded),
                  "tasks": [t["id"] for t in tasks], "pytest": PYTEST}
    text = VERIFY.read_text(encoding="utf-8")
    line = "ASSIGNMENT = {}  # python -m classroom student fills it in (classroom/platforms.py)\n"
    if text.count(line) != 1:
        raise ValueError(f"{VERIFY} lost its line {line.strip()!r}")
    # JSON of strings and lists is a Python literal too
    return text.replace(line, "ASSIGNMENT = " + json.dumps(assignment, indent=1) + "\n")


def boot(sha256):
    """The inline start of each of Classroom 50's commands: classroom50/verify.py run only when
    its sha256 is the assignment's (python -I: nothing of the repository on sys.path, no
    PYTHONPATH, no user site). One line, double-quoted for the runner's shell: no $, `, \\ or "
    inside."""
    code = (f"import hashlib,pathlib,sys;f=pathlib.Path('{VERIFIER}');"
            "b=f.read_bytes() if f.is_file() else b'';"
            f"sys.exit(str(f)+' is not the assignment one: put it back') "
            f"if hashlib.sha256(b).hexdigest()!='{sha256}' else exec(compile(b,str(f),'exec'))")
    if any(c in code for c in '$`\\"'):
        raise ValueError(f"{VERIFIER}'s path or hash would break the runner's quoting")
    return f'python -I -c "{code}"'


def classroom50_tests(tasks, verifier_sha256):
    """Classroom 50's tests file (schema tests-v1, a bare JSON array) for the student copy: a
    setup step (0 points: requirements.txt checked, then PyTorch's CPU build at the version the
    kit was made with and the requirements installed), then one `run` test a task, all or
    nothing: the copy's files checked, and the task's replayed checks run in a pristine copy
    holding only the task functions of the student's (classroom/verify.py), with the task's
    points. Each command starts by checking classroom50/verify.py's sha256, written here: this
    file stays in the teacher's config repository, where students cannot edit it."""
    start = boot(verifier_sha256)
    # python -I -m pip: from the repository's folder, with none of its files on sys.path
    setup = (f"{start} setup && python -I -m pip install -q torch=={torch_version()} "
             "--index-url https://download.pytorch.org/whl/cpu "
             "&& python -I -m pip install -q -r requirements.txt")
    out = [{"name": "setup: PyTorch's CPU build and the requirements", "type": "run",
            "run": setup, "timeout": 600, "points": 0}]
    for t in tasks:
        out.append({"name": f"{t['id']} {t['title']}"[:100], "type": "run",
                    "run": f"{start} {t['id']}", "timeout": 120, "points": t["points"]})
    return json.dumps(out, indent=1) + "\n"


def classroom50_runtime():
    """Classroom 50's runtime block: the hosted runner and a Python with PyTorch CPU wheels."""
    return json.dumps({"runs-on": "ubuntu-latest", "python": CLASSROOM50_PYTHON}, indent=1) + "\n"
