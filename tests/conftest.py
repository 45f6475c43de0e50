"""Shared fixtures: a tiny synthetic corpus (no network, nothing from outside the repo)
and helpers to run the scripts as a user would."""

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from classroom.fixtures import observe, project_version  # noqa: E402,F401  (test_paper's)
from data import CharTokenizer, write_dataset  # noqa: E402
from study import stages  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n auto: one worker a core, so one thread a worker
    import torch
    torch.set_num_threads(1)  # (two workers of two threads each on 2 cores ran some tests 4x slower)
    # and one in every process a test starts (OpenMP's idle threads spin: a copy's T5 run
    # beside the other worker took 18.9 s of CPU for 6 s of work, 2026-12-07)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# -----------------------------------------------------------------------------
# The suite writes nowhere but its own temp folders: every subprocess gets a TMPDIR under
# pytest's basetemp; canaries planted in the system temp folder, and `git status --ignored`
# of the checkout (caches aside), are the same at the end, or the run fails (pytest -n auto:
# checked once, in the process that starts the workers)

CACHES = ("__pycache__", ".pytest_cache", ".pyc")
CANARY = '{"study": "a user\'s results, which no test may touch"}\n'


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    import tempfile
    own = config._tmp_path_factory.getbasetemp() / "tmp"
    own.mkdir(exist_ok=True)
    if not hasattr(config, "workerinput"):
        system = Path(tempfile.gettempdir())
        config.canaries = system / f"nanonope_canary_{os.getpid()}"
        for rel in ("results.json", "study/eval/results.json", "conftest.py"):
            (config.canaries / rel).parent.mkdir(parents=True, exist_ok=True)
            (config.canaries / rel).write_text(CANARY, encoding="utf-8")
        config.git_before = git_status()
    os.environ["TMPDIR"] = str(own)
    tempfile.tempdir = None  # computed again from TMPDIR


def git_status():
    done = subprocess.run(["git", "--no-optional-locks", "-C", str(ROOT), "status", "--porcelain", "--ignored"],
                          capture_output=True, text=True)
    return sorted(line for line in done.stdout.splitlines() if not any(c in line for c in CACHES))


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput") or not hasattr(config, "canaries"):
        return
    import shutil
    touched = [str(f) for f in sorted(config.canaries.rglob("*")) if f.is_file()
               and f.read_text(encoding="utf-8") != CANARY]
    shutil.rmtree(config.canaries, ignore_errors=True)
    changed = sorted(set(git_status()) ^ set(config.git_before))
    if touched or changed:
        print(f"\nthe suite wrote outside its temp folders: canaries changed {touched}, "
              f"git status --ignored changed {changed}")
        session.exitstatus = 1


# The longest tests (docs/tests.md says their times), started first: with `pytest -n auto` each then
# runs on a worker of its own while the rest share out, instead of ending the suite alone.
LONGEST = ("test_reproduce_runs_every_stage_then_skips_them", "test_gpu_check_trial_runs_every_step_on_the_cpu",
           "test_grade_all_grades_a_varied_class_to_the_expected_gradebook",
           "test_classroom50s_tests_give_the_points_grade_gives",
           "test_an_attack_on_every_task_scores_zero_reaches_nothing_and_meets_every_bound")


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.name not in LONGEST)  # stable: the rest keep their order


def make_docs(n_docs, seed, min_len=400, max_len=3000):
    """Python-ish text with a little structure, so a tiny model has something to learn."""
    rng = random.Random(seed)
    words = ["def", "return", "self", "value", "if", "else", "for", "in", "range", "print", "x", "y", "None"]
    docs = []
    for d in range(n_docs):
        lines, size, target = [], 0, rng.randint(min_len, max_len)
        while size < target:
            indent = "    " * rng.randint(0, 2)
            line = indent + " ".join(rng.choice(words) for _ in range(rng.randint(2, 7))) + ":"
            lines.append(line)
            size += len(line) + 1
        docs.append((f"doc{d}.py", "\n".join(lines) + "\n"))
    return docs


@pytest.fixture(scope="session")
def builtin_corpus(tmp_path_factory):
    """The built-in corpus prepared in the session's temp folder (not data/pystdlib/ of the
    checkout: the suite writes nowhere else), for the runs that read the tiny preset's data."""
    out = tmp_path_factory.mktemp("corpus") / "pystdlib"
    run_script("data/pystdlib/prepare.py", f"--out_dir={out}")
    return out


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory):
    """A prepared character-level dataset folder: 40 training and 8 validation documents."""
    out = tmp_path_factory.mktemp("data") / "tiny"
    train, val = make_docs(40, seed=0), make_docs(8, seed=1, min_len=2500, max_len=6000)
    write_dataset(out, train, val, CharTokenizer.from_texts(t for _, t in train + val), {"corpus": "test"})
    return out


def run_script(*args, timeout=300, check=True, env=None):
    """Run `python SCRIPT args...` from the repo root (env: more environment variables); returns the
    CompletedProcess. A script of the project's (SCRIPT.py, no env of its own) runs in a fork of
    this process where study/stages.py forks a study's stages (Linux, no CUDA): PyTorch is
    imported once, not once a run (~4 s each, a hundred runs). The data scripts (which need no
    PyTorch, and whose BPE learner's threads would not survive a fork of a process that used
    it), `-m`, `-c`, and every run under NANONOPE_NO_FORK=1 start a new interpreter."""
    args = [str(a) for a in args]
    if env is None and args[0].endswith(".py") and not args[0].startswith("data/") and stages.forks():
        proc = forked(args, timeout)
    else:
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                   **(env or {}))
        proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def forked(args, timeout):
    """`python args...` as a fork of this process (run_script), with one thread as
    OMP_NUM_THREADS=1 would give a new interpreter (the fork inherits it)."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return stages.run_script(args, capture=True, timeout=timeout)
    finally:
        torch.set_num_threads(threads)


TINY_TRAIN = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=8",
              "--warmup_iters=2", "--val_windows=16", "--log_interval=5"]
