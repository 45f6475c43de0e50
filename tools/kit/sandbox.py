"""
Where a student's code runs when it is graded: the worker's sandbox (tools/classroom.py grade
--sandbox=auto|bwrap|unshare|user|none).

The worker (tools/kit/remote.py) must reach nothing but its own copy of the project: not the
teacher's checkout, not the snapshot the tests run from, not another task's copy, not another
process, not the network, and it must not outlive its task. On Linux:

  bwrap    bubblewrap (Debian's package runs unprivileged): new user, PID, mount, network, IPC
           and UTS namespaces; a root holding only /usr, the Python installation and the copy
           (read-only, at /task), its own /proc, /dev and an empty /tmp; no capabilities; as
           another uid (65534) when the grader runs as root; dies with the judge.
  unshare  util-linux's unshare makes the same namespaces and a shell script the same root
           (tmpfs, read-only binds, pivot_root), then drops every capability (setpriv).
  user     no namespaces (a container that forbids them, as Gradescope's may): the worker runs
           as an unprivileged user, in a copy it can read but not write; only when the grader
           runs as root, and safe only where the checkout is not world-readable (setup.sh of the
           Gradescope zip makes source/ root's alone). Its processes are killed by uid.
  none     a plain child process with an allow-listed environment: no protection at all. Also
           the only method on macOS and Windows. Grading then prints one warning line.
  auto     the first of bwrap, unshare, user that works here, else none (with the warning).

When the PID namespace's first process dies, the kernel kills every process in it, including
one that called setsid; and the grader, a child subreaper, kills whatever else descends from
it before it writes any result (kill_descendants).
"""

import functools
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

METHODS = ("auto", "bwrap", "unshare", "user", "none")
STUDENT_UID = 65534  # nobody; setup.sh of the Gradescope zip makes a user of its own (below)
STUDENT_USER = "nanonope-student"
TASK = "/task"  # where the copy is seen inside bwrap and unshare

UNSAFE = (
    "the student's code is not sandboxed (--sandbox=none): it can read and write what you can; "
    "not safe against a hostile class (classroom/README.md)"
)


def student_ids():
    """(uid, gid) the user method runs as: STUDENT_USER where it exists, else nobody."""
    try:
        import pwd

        entry = pwd.getpwnam(STUDENT_USER)
        return entry.pw_uid, entry.pw_gid
    except (ImportError, KeyError):
        return STUDENT_UID, STUDENT_UID


def environment(home="/tmp"):
    """The only variables a worker gets: no secret, no teacher's PWD or HOME, no path to the
    project's own functions."""
    bindir = str(Path(sys.executable).parent)
    return {
        "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONUNBUFFERED": "1",
        **({"PYTHONPATH": ":".join(extra_paths())} if extra_paths() else {}),
    }


@functools.lru_cache(maxsize=None)
def python_paths():
    """The folders the worker's Python needs: its installation and where torch, numpy and
    tiktoken are installed (found without importing them)."""
    paths = {
        Path(sys.base_prefix).resolve(),
        Path(sys.prefix).resolve(),
        Path(sys.executable).resolve().parent,
    }
    for name in ("torch", "numpy", "tiktoken"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            paths.add(Path(spec.origin).resolve().parents[1])
    keep = sorted(paths, key=lambda p: len(p.parts))
    return [str(p) for i, p in enumerate(keep) if not any(p.is_relative_to(q) for q in keep[:i])]


def extra_paths():
    """Site folders outside the Python installation (a user site): named in PYTHONPATH."""
    prefixes = [Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()]
    return [p for p in python_paths() if not any(Path(p).is_relative_to(q) for q in prefixes)]


def system_paths():
    """/usr and the top-level links or folders a Debian-like system loads programs from."""
    return [
        p
        for p in (
            "/usr",
            "/bin",
            "/sbin",
            "/lib",
            "/lib32",
            "/lib64",
            "/etc/ld.so.cache",
            "/etc/alternatives",
            "/sys/devices/system/cpu",
        )
        if os.path.lexists(p)
    ]


def bwrap_args(copy, uid):
    args = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    for p in system_paths():
        args += ["--symlink", os.readlink(p), p] if os.path.islink(p) else ["--ro-bind", p, p]
    for p in python_paths():
        args += ["--ro-bind", p, p]
    args += [
        "--ro-bind",
        str(copy),
        TASK,
        "--chdir",
        TASK,
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
    ]
    if uid is not None:
        args += ["--unshare-user", "--uid", str(uid), "--gid", str(uid)]
    args += ["--clearenv"]
    for k, v in environment().items():
        args += ["--setenv", k, v]
    return args


# Run inside unshare's namespaces: a tmpfs root of read-only binds, pivot_root into it, every
# capability dropped, then the worker. $1: an empty folder for the root, $2: the copy.
UNSHARE_SCRIPT = r"""set -eu
PATH=/usr/sbin:/sbin:$PATH
R=$1; C=$2; shift 2
mount -t tmpfs -o mode=755 nanonope "$R"
for p in $PATHS; do
  if [ -L "$p" ]; then mkdir -p "$R$(dirname "$p")"; ln -s "$(readlink "$p")" "$R$p"
  elif [ -d "$p" ]; then mkdir -p "$R$p"; mount --rbind "$p" "$R$p"; mount -o remount,bind,ro "$R$p"
  else mkdir -p "$R$(dirname "$p")"; touch "$R$p"; mount --bind "$p" "$R$p"; mount -o remount,bind,ro "$R$p"; fi
done
mkdir -p "$R/task"; mount --bind "$C" "$R/task"; mount -o remount,bind,ro "$R/task"
mkdir "$R/proc"; mount -t proc proc "$R/proc"
mkdir "$R/dev"; for d in null zero urandom random; do touch "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"; done
mkdir "$R/tmp"; mount -t tmpfs -o mode=1777 nanonope "$R/tmp"
mkdir "$R/.old"; cd "$R"; pivot_root . .old; umount -l /.old; rmdir /.old
cd /task
unset OLDPWD PATHS
exec setpriv --no-new-privs --inh-caps=-all --ambient-caps=-all --bounding-set=-all -- "$@"
"""


def unshare_args(copy, root):
    return [
        "unshare",
        "--user",
        "--map-root-user",
        "--mount",
        "--pid",
        "--fork",
        "--net",
        "--ipc",
        "--uts",
        "--kill-child",
        "--",
        "sh",
        "-c",
        UNSHARE_SCRIPT,
        "sh",
        str(root),
        str(copy),
    ]


def _drop_to(uid, gid):
    def preexec():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        os.setsid()

    return preexec


def command(method, copy, argv):
    """Popen's keyword arguments to run argv (a Python command line) as the worker in copy.
    For bwrap and unshare the copy is seen at /task; copy's sibling folder `root` must exist
    (unshare builds its root there)."""
    copy = Path(copy)
    if method == "bwrap":
        uid = STUDENT_UID if os.geteuid() == 0 else None
        return {"args": bwrap_args(copy, uid) + argv, "env": environment(), "cwd": "/"}
    if method == "unshare":
        paths = " ".join(system_paths() + python_paths())
        return {
            "args": unshare_args(copy, copy.parent / "root") + argv,
            "env": {**environment(), "PATHS": paths},
            "cwd": "/",
        }
    scratch = copy.parent / "scratch"
    scratch.mkdir(exist_ok=True)
    if method == "user":
        uid, gid = student_ids()
        os.chown(scratch, uid, gid)
        os.chmod(scratch, 0o700)
        return {
            "args": argv,
            "env": environment(str(scratch)),
            "cwd": str(copy),
            "preexec_fn": _drop_to(uid, gid),
        }
    return {
        "args": argv,
        "env": environment(str(scratch)),
        "cwd": str(copy),
        "start_new_session": True,
    }


PROBE = "import sys; sys.exit(0 if open(sys.argv[1], encoding='utf-8').read() == 'ok' else 1)"


@functools.lru_cache(maxsize=None)
def unavailable(method):
    """Why method cannot run here, or None when it can (tried once: a tiny Python in it)."""
    if method == "none":
        return None
    if not sys.platform.startswith("linux"):
        return "sandboxes need Linux"
    if method == "user" and os.geteuid() != 0:
        return "it needs the grader to run as root"
    if method != "user" and shutil.which(method) is None:
        return f"{method} is not installed" + (
            " (Debian: apt-get install bubblewrap)" if method == "bwrap" else ""
        )
    import tempfile

    with tempfile.TemporaryDirectory(prefix="nanonope_probe_") as tmp:
        copy = Path(tmp) / "task"
        copy.mkdir()
        (Path(tmp) / "root").mkdir()
        (copy / ".probe").write_text("ok", encoding="utf-8")
        make_readable(Path(tmp))
        seen = TASK if method in ("bwrap", "unshare") else str(copy)
        kw = command(method, copy, [sys.executable, "-S", "-c", PROBE, f"{seen}/.probe"])
        try:
            done = subprocess.run(**kw, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"{method} did not start ({e})"
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            return (
                f"{method} failed here"
                + (f" ({lines[-1]})" if lines else "")
                + (": the student's user cannot run this Python" if method == "user" else "")
            )
    return None


def choose(requested):
    """(the method to use, a warning line or None); UserError if requested is not available."""
    from tools.cli import UserError

    if requested not in METHODS:
        raise UserError(f"--sandbox={requested}: choose one of {', '.join(METHODS)}")
    if requested != "auto":
        why = unavailable(requested)
        if why:
            raise UserError(
                f"--sandbox={requested} is not available here: {why}; --sandbox=auto picks what is"
            )
        return requested, (UNSAFE if requested == "none" else None)
    for method in ("bwrap", "unshare", "user"):
        if unavailable(method) is None:
            return method, None
    return "none", UNSAFE + " (no bwrap, unshare or root here)"


def make_readable(folder):
    """The worker's copy: readable by any user (the user method), writable by none but its owner."""
    for dirpath, dirs, files in os.walk(folder):
        os.chmod(dirpath, 0o755)
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o644)


# -----------------------------------------------------------------------------
# Nothing outlives its task


def become_subreaper():
    """Orphans of the grader's children (a process that called setsid and whose parent died)
    come back to the grader, so kill_descendants finds them. Linux only; elsewhere nothing."""
    if sys.platform.startswith("linux"):
        import ctypes

        with_errno = ctypes.CDLL(None, use_errno=True)
        with_errno.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _processes():
    """{pid: (parent pid, uid)} of every process this one can see (Linux /proc)."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        out[int(entry.name)] = (int(fields["PPid"].split()[0]), int(fields["Uid"].split()[0]))
    return out


def kill_descendants(uid=None):
    """SIGKILL every process below this one (and with uid, every process of that user), until
    none is left; returns how many were killed."""
    if not os.path.isdir("/proc"):
        return 0
    me, killed = os.getpid(), 0
    for _ in range(50):
        procs = _processes()
        below, grew = set(), True
        while grew:
            grew = False
            for pid, (ppid, owner) in procs.items():
                if (
                    pid not in below
                    and pid != me
                    and (ppid == me or ppid in below or (uid is not None and owner == uid))
                ):
                    below.add(pid)
                    grew = True
        alive = [p for p in below if not _zombie(p)]
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        while True:  # reap the orphans that came back to this subreaper
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if not alive:
            return killed
        killed += len(alive)
    return killed


def _zombie(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace").rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
