"""The grade under load and attack (issue 57): what decides a task is the student's own use.

The worker's CPU seconds and private-and-shared memory are read from outside
(sandbox.tree_usage); the wall-clock backstop counts only time waited on the worker and, with
CPU to spare, is the machine's failure (graded again, then NOT GRADED, exit 3); the sandbox
bounds shared memory, /tmp's file count and IPC; a task's code sees no copy but its own, in
which no other task's solution is; and the key (the project's own functions) is checked in the
sandbox before any student.
"""

import ast
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from classroom import sandbox
from classroom.command import ClassroomConfig, grade
from classroom.grade import MachineFailure, worker_copy
from classroom.source import find_function, parse_text, split_spec
from common import UserError
from test_classroom import body_of, import_mb, project, sandboxed, tasks_of  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}:\n    pass\n"


def test_tree_usage_counts_cpu_of_the_dead_and_shared_memory_once():
    """CPU: a grandchild that spun 0.6 s and was reaped still counts. Memory: 64 MB of shared
    anonymous memory (not counted by RLIMIT_DATA) are counted, once, though two processes map
    them (a fork)."""
    code = ("import mmap, os, sys, time\n" + SPIN.format(s=0.0) +
            "pid = os.fork()\nif pid == 0:\n" +
            "".join("    " + line + "\n" for line in SPIN.format(s=0.6).splitlines()) +
            "    os._exit(0)\nos.waitpid(pid, 0)\n"
            "m = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)\n"
            "for i in range(0, 64 << 20, 4096):\n    m[i] = 1\n"
            "if os.fork() == 0:\n    time.sleep(30)\n"
            "print('ready', flush=True)\nsys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, "-S", "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        cpu, memory = sandbox.tree_usage(proc.pid)
        assert cpu >= 0.55, cpu
        if sys.platform.startswith("linux"):
            assert 60 << 20 <= memory < 100 << 20, memory >> 20
    finally:
        sandbox.kill_tree(proc.pid)


def test_each_tasks_copy_holds_no_other_tasks_solution():
    """A task's worker copy: its own functions, the project's for the tasks it `uses`, every
    other task's blank, and what tasks.toml says computes its answer another way blank too
    (ALiBi's written-out softmax for T2); no test, no study code."""
    tasks = tasks_of(ROOT)

    def body(folder, spec):
        path, qualname = split_spec(spec)
        node = find_function(parse_text((folder / path).read_text(encoding="utf-8")), qualname)
        return node.body[-1]

    def blank(folder, spec):
        last = body(folder, spec)
        return isinstance(last, ast.Raise)

    with tempfile.TemporaryDirectory() as tmp:
        for tid in tasks:
            out = Path(tmp) / tid
            worker_copy(ROOT, out, tasks, tid)
            keep = {tid, *tasks[tid].get("uses", [])}
            for t, task in tasks.items():
                for spec in task["functions"]:
                    assert blank(out, spec) == (t not in keep), (tid, spec)
            for spec in tasks[tid].get("also_blank", []):
                assert blank(out, spec), (tid, spec)
            assert not (out / "tests").exists() and not (out / "study").exists()
        assert "families.py:alibi_attention" in tasks["T2"]["also_blank"]


ATTACKS = {  # issue 57's effects 4 and 6, one task each
    "T1": ("model.py", "query_scale",
           "    import os\n    raise RuntimeError('seen=%s' % sorted(os.listdir('/task')))\n"),
    "T2": ("model.py", "written_out_attention",
           "    import ctypes, os\n    libc = ctypes.CDLL(None)\n"
           "    shm = libc.shmget(0, 1 << 20, 0o1000 | 0o600)\n"
           "    try:\n        import families\n        families.alibi_attention(q, k, v, lam, lam)\n"
           "        alibi = 'ran'\n    except NotImplementedError:\n        alibi = 'blank'\n"
           "    n, many = 0, os.path.join(os.environ['TMPDIR'], 'many')\n    try:\n        os.mkdir(many)\n"
           "        while n < 100000:\n            open(os.path.join(many, str(n)), 'w').close()\n"
           "            n += 1\n"
           "    except OSError:\n        pass\n"
           "    raise RuntimeError('shm=%d alibi=%s files=%d' % (shm, alibi, n))\n"),
    "T3": ("search_scales.py", "uniform_scale",
           "    import mmap\n    m = mmap.mmap(-1, HOLD_MB << 20, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)\n"
           "    for i in range(0, HOLD_MB << 20, 4096):\n        m[i] = 1\n"
           "    import time\n    time.sleep(5)  # held, as effect 4's 3 GB were\n    return None\n"),
    "T4": ("search_scales.py", "fit_log_law",
           "    import os\n    raise RuntimeError('tmp=%s' % sorted(os.listdir(os.environ['TMPDIR'])))\n"),
}


@sandboxed
@pytest.mark.slow
def test_shared_memory_tmp_files_ipc_and_sibling_copies_are_bounded(project, tmp_path):  # noqa: F811  (the fixture)
    """One grading, in the sandbox (about 15 s): T1 sees only its own copy and the blank one the
    worker starts in; T2 gets no SysV shared memory, finds ALiBi's softmax blank, and makes at
    most /tmp's file count (unshare); T3's shared anonymous memory, which RLIMIT_DATA does not
    count, is stopped at the memory bound, named; T4, the next task, finds /tmp empty."""
    tasks = {t: v for t, v in tasks_of(project).items() if t in ATTACKS}
    sub, texts = tmp_path / "sub", {}
    sub.mkdir()
    memory_mb = max(300, import_mb() + 180)  # PyPI's CUDA build imports about 750 MB of data
    for tid, (path, qualname, body) in ATTACKS.items():
        body = body.replace("HOLD_MB", str(memory_mb + 400))
        texts[path] = body_of(path, qualname, body, texts.get(path))
    for path, text in texts.items():
        (sub / path).write_text(text, encoding="utf-8")
    method = "unshare" if sandbox.unavailable("unshare") is None else "auto"
    cfg = ClassroomConfig(memory_mb=memory_mb, timeout=20,
                          sandbox=method, check_key=False)
    results = {r["id"]: r for r in grade(sub, list(tasks), tasks, cfg, root=project, quiet=True)}
    why = {t: r["checks"][0]["why"] for t, r in results.items()}
    assert all(r["score"] == 0 for r in results.values()), why
    assert "seen=['T1', '_worker']" in why["T1"], why["T1"]
    assert "shm=-1" in why["T2"] and "alibi=blank" in why["T2"], why["T2"]
    if cfg.sandbox == "unshare":
        files = int(why["T2"].split("files=")[1].split()[0])
        assert files < sandbox.Limits.tmp_files, why["T2"]
    assert "past its memory bound" in why["T3"] and "MB" in why["T3"], why["T3"]
    assert "tmp=" in why["T4"] and "many" not in why["T4"], why["T4"]  # (a Python bound there)


def test_a_task_past_the_backstop_is_the_machines_graded_twice_then_not_graded(project, tmp_path):  # noqa: F811  (the fixture)
    """A task that waits past the backstop (3 x --timeout seconds waited on the worker) with CPU
    time to spare is the machine's failure: graded again, and failed again its result says NOT
    GRADED, no points, and grade exits 3 naming it. (Sleeping is no attack: sandbox none.)"""
    tasks = {t: v for t, v in tasks_of(project).items() if t == "T3"}
    sub = tmp_path / "sub"
    sub.mkdir()
    text = body_of("search_scales.py", "uniform_scale", "    import time\n    time.sleep(60)\n")
    (sub / "search_scales.py").write_text(text, encoding="utf-8")
    cfg = ClassroomConfig(timeout=1, sandbox="none", check_key=False,
                          json=str(tmp_path / "results.json"))
    t0 = time.time()
    with pytest.raises(MachineFailure) as e:
        grade(sub, ["T3"], tasks, cfg, root=project)
    assert e.value.code == 3 and "T3 not graded" in str(e.value)
    assert time.time() - t0 < 40  # twice the backstop of 3 s, and the judges' start-up
    text = (tmp_path / "results.json").read_text(encoding="utf-8")
    assert "NOT GRADED: the machine failed it twice" in text and "CPU time to spare" in text


@sandboxed
def test_an_environment_that_fails_the_key_stops_grading_before_any_student(project, tmp_path):  # noqa: F811  (the fixture)
    """The key: the project's own functions graded first, in the same sandbox and environment.
    A worker that cannot import PyTorch (here its memory bound is too small to; on a teacher's
    server, a PyTorch found only in a user site the sandbox did not carry) stops grading with
    one line, before any student; the key passes as the project stands."""
    tasks = tasks_of(project)
    cfg = ClassroomConfig(memory_mb=20, sandbox="auto")
    with pytest.raises(UserError) as e:
        grade(project, ["T3"], tasks, cfg, root=project, quiet=True)
    assert "the project's own functions fail in this grader" in str(e.value)
    assert "no student was graded" in str(e.value)
    done = subprocess.run([sys.executable, "-m", "classroom", "key", "--tasks=T3,T4"], cwd=project,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "the key passes" in done.stdout, done.stderr


def test_the_unshare_script_caps_files_ipc_and_the_root():
    """What the unshare sandbox adds to bwrap's: a file count on /tmp, no SysV shared memory or
    message queues in its IPC namespace, a read-only root; and the open-file bound for all."""
    script = sandbox.UNSHARE_SCRIPT
    assert "nr_inodes=$TMP_FILES" in script and "mount -o remount,ro /" in script
    assert all("kernel/$k" in script and k in script for k in ("shmmax", "shmall", "shmmni"))
    assert 'echo "0 0 0 0" > /proc/sys/kernel/sem' in script  # no SysV semaphores either
    env = sandbox.command("unshare", Path("/x/task"), ["true"], sandbox.Limits())["env"]
    assert env["TMP_FILES"] == str(sandbox.Limits.tmp_files)
    assert env["NANONOPE_LIMITS"].split(",")[-1] == str(sandbox.Limits.open_files)
