"""
A study's stages (reproduce.py, study/sweep.py): each a run of one of the project's scripts,
skipped when it finished before with the same inputs. A stage's stamp, OUT/stages/NAME.json,
records what decides its result:
  - the command, with paths inside the study folder written relative to it (a moved study is
    the same study, not a new one)
  - the preset section the script reads (a teacher who edits config/cpu.py reruns what it changes)
  - a fingerprint of the project's .py files the script imports (a student who edits model.py
    reruns every stage that runs it); not the README, not the tests
  - the measurement protocol (evaluate.PROTOCOL)
A stage that runs again says which of these changed. Once one stage runs, every later stage runs
too: its inputs may have changed.
On Linux without a CUDA card a stage is a fork of the study's process, which has imported
PyTorch (and torch._dynamo, which an optimizer imports) already, instead of a new interpreter:
the same script and arguments, ~4 s sooner (a study runs 10 to 60 stages). Elsewhere, and with
NANONOPE_NO_FORK=1, a new interpreter.
"""

import ast
import hashlib
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import traceback

from common import ROOT, UserError, format_seconds, load_preset, read_json, write_json
from evaluate import PROTOCOL

# the preset section each script reads (config/NAME.py)
SECTIONS = {"train.py": "train", "search_scales.py": "search_scales", "evaluate.py": "evaluate",
            "study/passkey.py": "passkey", "study/rope_grid.py": "rope_grid"}


def project_sources(script):
    """The project's .py files `script` (relative to the repository) imports, itself included,
    found by reading their import statements (lazy imports inside functions too)."""
    seen, todo = set(), [ROOT / script]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # each name may be a module too: `from study import plot`
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                base = ROOT.joinpath(*name.split("."))
                todo += [base.with_suffix(".py"), base / "__init__.py"]
    return sorted(str(p.relative_to(ROOT).as_posix()) for p in seen)


def fingerprint(cmd, study):
    """What decides a stage's result (module docstring), as a JSON-ready dict."""
    script = cmd[0] if cmd and cmd[0].endswith(".py") else None
    code = {f: hashlib.sha256((ROOT / f).read_bytes()).hexdigest()[:16]
            for f in project_sources(script)} if script else {}
    preset = next((a.partition("=")[2] for a in cmd if a.startswith("--preset=")), "")
    section = load_preset(preset, SECTIONS[script]) if preset and script in SECTIONS else {}
    # how a run starts is not what it is
    same = [c for c in cmd if c not in ("--resume", "--overwrite")]
    same = [c.replace(study, "$STUDY") for c in same]
    return {"cmd": same, "preset": {"name": preset, "section": section}, "code": code,
            "protocol": PROTOCOL}


def what_changed(done, now):
    if done is None:
        return "first run"
    if done.get("protocol") != now["protocol"]:
        return f"the measurement protocol changed ({done.get('protocol')} -> {now['protocol']})"
    if done.get("cmd") != now["cmd"]:
        return "the command changed"
    if done.get("preset") != now["preset"]:
        name = now["preset"]["name"]
        return f"{name if name.endswith('.py') else f'config/{name}.py'} changed"
    code = done.get("code") or {}
    changed = sorted(f for f in set(code) | set(now["code"]) if code.get(f) != now["code"].get(f))
    return f"{', '.join(changed)} changed" if changed else None


class Stages:
    """Runs `python cmd...` per stage unless it finished before with the same inputs and its
    outputs exist."""

    def __init__(self, out_dir, force, device="auto"):
        self.study = os.path.abspath(out_dir)
        self.dir, self.seconds = os.path.join(self.study, "stages"), {}
        self.rerun = "--force" if force else None  # why every later stage runs
        self.device = device  # given to every script that takes --device, when not auto

    def run(self, name, cmd, outputs, before=None):
        if self.device != "auto" and cmd[0] in SECTIONS:
            cmd = [*cmd, f"--device={self.device}"]
        stamp = os.path.join(self.dir, f"{name}.json")
        done = read_json(stamp) if os.path.exists(stamp) else None
        now = fingerprint(cmd, self.study)
        why = (self.rerun or what_changed(done, now)
               or (None if all(os.path.exists(p) for p in outputs) else "an output is missing"))
        if why is None:
            print(f"[{name}] done before, skipped ({format_seconds(done['seconds'])})")
            self.seconds[name] = done["seconds"]
            return
        self.rerun = self.rerun or f"an earlier stage ({name}) ran"
        if before:
            cmd = before(done, cmd)
        print(f"[{name}] runs ({why}): python {' '.join(cmd)}", flush=True)
        t0 = time.time()
        rc = run_script(cmd)
        if rc != 0:
            raise UserError(f"stage {name!r} failed (exit {rc}); fix the cause and "
                            "rerun: finished stages are kept")
        self.seconds[name] = round(time.time() - t0, 1)
        write_json(stamp, now | {"seconds": self.seconds[name]})


def forks():
    """Whether a stage is a fork of this process (module docstring): on Linux (macOS's system
    frameworks do not survive a fork) with PyTorch imported and no CUDA (nor does a CUDA
    context), unless NANONOPE_NO_FORK is set."""
    torch = sys.modules.get("torch")
    return (sys.platform == "linux" and torch is not None and not torch.cuda.is_available()
            and not os.environ.get("NANONOPE_NO_FORK"))


def run_script(cmd, capture=False, timeout=None):
    """`python cmd...` from the repository, forked where forks() says so: its exit status, or
    with capture a CompletedProcess holding its stdout and stderr (text). Past timeout seconds
    it is killed and subprocess.TimeoutExpired raised."""
    if not (forks() and cmd[0].endswith(".py")):
        done = subprocess.run([sys.executable, *cmd], cwd=ROOT, capture_output=capture,
                              text=capture, encoding="utf-8" if capture else None, timeout=timeout)
        return done if capture else done.returncode
    preload()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()  # what is buffered here would otherwise be printed twice
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child ends here, without the parent's cleanup
            if capture:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                sys.stdout = open(1, "w", encoding="utf-8", buffering=1, closefd=False)
                sys.stderr = open(2, "w", encoding="utf-8", buffering=1, closefd=False)
                sys.stdin = open(os.devnull, encoding="utf-8")
            os._exit(run_here(cmd))
        code = wait(pid, cmd, timeout)
        if not capture:
            return code
        text = []
        for f in (out, err):
            f.seek(0)
            text.append(f.read().decode("utf-8", errors="replace"))
    return subprocess.CompletedProcess(cmd, code, *text)


def wait(pid, cmd, timeout=None):
    """The exit status of the fork pid; killed past timeout seconds, or when this is interrupted
    (a stage ends with the study)."""
    deadline = None if timeout is None else time.time() + timeout
    try:
        while not (done := os.waitpid(pid, 0 if deadline is None else os.WNOHANG))[0]:
            if time.time() > deadline:
                raise subprocess.TimeoutExpired(cmd, timeout)
            time.sleep(0.02)
        return os.waitstatus_to_exitcode(done[1])
    except BaseException:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise


def preload():
    """Import, before forking, what each stage would import on its own: torch._dynamo, which
    torch.optim's first optimizer imports (1.8 s of a tiny stage's 2 s on 2 cores, 2026-12-07).
    It starts no thread, so forks stay safe."""
    import torch._dynamo  # noqa: F401


def run_here(cmd):
    """Run the script cmd[0] with arguments cmd[1:] in this process as `python cmd...` would (its
    folder first on sys.path, the repository the working folder); returns its exit status."""
    code = 1
    try:
        os.chdir(ROOT)
        sys.argv, sys.path[0] = list(cmd), str((ROOT / cmd[0]).parent)
        runpy.run_path(cmd[0], run_name="__main__")
        code = 0
    except SystemExit as e:
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    except BaseException:  # noqa: BLE001  (a crash prints its traceback, exit status 1)
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def resume_or_restart(run_dir, force=False):
    """A Stages `before` hook for a train.py stage: an interrupted run of the same command
    continues (--resume); a finished run of another command starts over (--overwrite)."""
    def before(done, cmd):
        if not os.path.exists(os.path.join(run_dir, "ckpt.pt")):
            return cmd
        return cmd + (["--resume"] if done is None and not force else ["--overwrite"])
    return before
