"""
Where a student's code runs when it is graded: the worker's sandbox and its bounds
(python -m classroom grade --sandbox=auto|bwrap|unshare|user|none).

The worker (classroom/remote.py) must reach nothing but its own copy of the project: not the
teacher's checkout, not the snapshot the tests run from, not another task's copy, not another
process, not the network, no kernel setting; it must hold no privilege on the host, use bounded
memory, processes, files and CPU, and not outlive its task. On Linux:

  bwrap    bubblewrap: new user, PID, mount, network, IPC and UTS namespaces; a root holding only
           /usr, the Python installation and the copy (read-only, at /task), its own /proc with
           /proc/sys read-only, a small /tmp; no capabilities. Graded as root, bwrap itself is
           started as an unprivileged uid (below), so the sandbox's uid is that uid on the host,
           not root: that uid must be able to reach the Python installation.
  unshare  util-linux's unshare makes the same namespaces and a shell script the same root
           (tmpfs, read-only binds, pivot_root), then setpriv drops every capability and, graded
           as root, becomes the unprivileged uid. As root no user namespace is needed, and the
           binds are made before the drop: a Python under a 0700 home (/root) still runs.
  user     no namespaces (a container that forbids them): the worker runs as the dedicated
           account nanonope-student (setup.sh of the Gradescope zip makes it; never a shared
           account such as nobody), in a copy it can read but not write; only when grading as
           root, and safe only where the checkout is not world-readable.
  none     a plain child process with an allow-listed environment: no protection at all. Also
           the only method on macOS and Windows. Only when asked for, with one warning line.
  auto     the first of unshare, bwrap, user that works here, each passed over said with its
           reason; graded as root, nothing else (refused with each method's reason); otherwise
           none, with the warning. unshare comes first because its script also caps what bwrap's
           options cannot: the count of files in /tmp, SysV shared memory and message queues
           (zero in its IPC namespace), and a read-only root.

The unprivileged uid: nanonope-student's where that account exists, else one no account holds,
from WORKER_UID by the grader's process id and the grading's slot (grade-all grades several
students at once), so one student's processes never count against another's limit.

The bounds (Limits) are set by the worker itself, before it imports anything a student wrote
(resource.setrlimit; Linux and macOS): its data size (the heap and private mappings, not the
address space, which a CUDA build of PyTorch reserves by the gigabyte), processes and threads
of its uid, the size of any file it writes, CPU seconds and no core dump. The namespace methods
also give it a /tmp of tmpfs_mb. What it prints is cut by the judge (judge.py).

Nothing outlives its task: when the PID namespace's first process dies, the kernel kills every
process in it, one that called setsid included; the judge and the grader are child subreapers
(Linux), so orphans come back to them, and each kills what is left below it (psutil).
"""

import ctypes
import functools
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

METHODS = ("auto", "bwrap", "unshare", "user", "none")
STUDENT_USER = "nanonope-student"  # the dedicated account of --sandbox=user (and the uid, if any)
WORKER_UID = 64000  # else: this uid + the slot, checked to belong to no account
TASK = "/task"  # where the copy is seen inside bwrap and unshare

UNSAFE = (
    "the student's code is not sandboxed (--sandbox=none): it can read and write what you can; "
    "not safe against a hostile class (classroom/README.md)"
)


@dataclass(frozen=True)
class Limits:
    """The worker's bounds (classroom/command.py's options of the same names)."""

    memory_mb: int = 1024  # data size: heap and private mappings (RLIMIT_DATA)
    processes: int = 64  # processes and threads of the worker's uid (RLIMIT_NPROC)
    file_mb: int = 16  # the largest file it may write (RLIMIT_FSIZE)
    cpu_s: int = 120  # CPU seconds, all its threads together (RLIMIT_CPU)
    tmpfs_mb: int = 64  # its /tmp (bwrap and unshare)
    log_kb: int = 1024  # what it prints, kept by the judge; the rest is cut (judge.py)
    tmp_files: int = 4096  # files and folders in its /tmp (unshare: each costs kernel memory)
    open_files: int = 512  # files it may hold open at once (RLIMIT_NOFILE: memfds count here)

    def env(self, method):
        """The NANONOPE_LIMITS the worker reads. No process limit outside a namespace unless the
        uid is the worker's own: it would count the teacher's processes too."""
        nproc = self.processes if method in ("bwrap", "unshare", "user") else 0
        return f"{self.memory_mb},{nproc},{self.file_mb},{self.cpu_s},{self.open_files}"


def apply_limits(text):
    """In the worker, before anything else: the bounds NANONOPE_LIMITS names (Limits.env)."""
    try:
        import resource  # Unix only: the kit imports on Windows too
    except ImportError:  # Windows: none
        return
    memory_mb, nproc, file_mb, cpu_s, open_files = (int(x) for x in text.split(","))
    pairs = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NOFILE, open_files),
        (resource.RLIMIT_DATA, memory_mb << 20),
        (resource.RLIMIT_FSIZE, file_mb << 20),
        (resource.RLIMIT_CPU, cpu_s),
    ]
    if nproc:
        pairs.append((resource.RLIMIT_NPROC, nproc))
    for what, value in pairs:
        hard = resource.getrlimit(what)[1]  # never above what this process may set
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        # CPU: SIGXCPU at the soft limit (its reason reported), SIGKILL 5 s later
        top = value + 5 if what == resource.RLIMIT_CPU and (
            hard == resource.RLIM_INFINITY or value + 5 <= hard) else value
        resource.setrlimit(what, (value, top))


# -----------------------------------------------------------------------------
# Who the worker is


def student_account():
    """(uid, gid) of STUDENT_USER, or None where it does not exist."""
    try:
        import pwd  # Unix only: the kit imports on Windows too

        entry = pwd.getpwnam(STUDENT_USER)
        return entry.pw_uid, entry.pw_gid
    except (ImportError, KeyError):
        return None


def worker_uid(slot=0):
    """(uid, gid) the worker becomes when the grader runs as root (see the module's doc)."""
    account = student_account()
    if account:
        return account
    import pwd  # Unix only: the kit imports on Windows too

    uid = WORKER_UID + 16 * (os.getpid() % 2048) + slot  # another grader's workers: other uids
    while True:
        try:
            pwd.getpwuid(uid)
            uid += 100
        except KeyError:
            return uid, uid


def as_root():
    return hasattr(os, "geteuid") and os.geteuid() == 0


# -----------------------------------------------------------------------------
# What the worker sees


def environment(home="/tmp", limits=None, method="none"):
    """The only variables a worker gets: no secret, no teacher's PWD or HOME, no path to the
    project's own functions."""
    bindir = str(Path(sys.executable).parent)
    env = {
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
    }
    if extra_paths():
        env["PYTHONPATH"] = os.pathsep.join(extra_paths())
    if limits is not None:
        env["NANONOPE_LIMITS"] = limits.env(method)
    return env


@functools.lru_cache(maxsize=None)
def python_paths():
    """The folders the worker's Python needs, wherever they are (the system temp folder
    included): its prefixes, its executable's folder, its standard library and site-packages.
    Nothing else from sys.path: the checkout and the snapshot are on it, and with them the tests
    and the project's own functions."""
    paths = {sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))}
    paths |= {v for k, v in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib",
                                                                     "purelib", "platlib")}
    try:
        paths |= set(site.getsitepackages())
        if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
            paths.add(site.getusersitepackages())
    except AttributeError:  # an embedded Python without site's functions
        pass
    keep = sorted({Path(p).resolve() for p in paths if p and os.path.isdir(p)},
                  key=lambda p: len(p.parts))
    return [str(p) for i, p in enumerate(keep) if not any(p.is_relative_to(q) for q in keep[:i])]


def extra_paths():
    """Site folders outside the Python installation (a user site): named in PYTHONPATH."""
    prefixes = [Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()]
    return [p for p in python_paths() if not any(Path(p).is_relative_to(q) for q in prefixes)]


def system_paths():
    """/usr and the top-level links or folders a Debian-like system loads programs from."""
    names = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc/ld.so.cache",
             "/etc/alternatives", "/sys/devices/system/cpu")
    return [p for p in names if os.path.lexists(p)]


def bwrap_args(copy, limits, inside=""):
    args = ["bwrap", "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--size", str(limits.tmpfs_mb << 20), "--tmpfs", "/tmp"]
    for p in system_paths():  # /tmp first: a Python installed under it is bound on top
        args += ["--symlink", os.readlink(p), p] if os.path.islink(p) else ["--ro-bind", p, p]
    for p in python_paths():
        args += ["--ro-bind", p, p]
    args += ["--ro-bind", str(copy), TASK, "--chdir", f"{TASK}/{inside}".rstrip("/"),
             "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
    return args  # the environment: Popen's, an allow-list, passed on by bwrap


# Run inside unshare's namespaces: a tmpfs root of read-only binds, pivot_root into it, a
# read-only /proc/sys, every capability dropped (as root: the unprivileged uid too), then the
# worker, killed when unshare dies (a change of uid clears unshare's own --kill-child, so setpriv
# sets it again). $1: an empty folder for the root, $2: the copy; $PATHS, $TMP_MB, $DROP.
UNSHARE_SCRIPT = r"""set -eu
PATH=/usr/sbin:/sbin:$PATH
R=$1; C=$2; shift 2
mount -t tmpfs -o mode=755,size=1m,nr_inodes=1024 nanonope "$R"
mkdir "$R/tmp"; mount -t tmpfs -o "mode=1777,size=${TMP_MB}m,nr_inodes=$TMP_FILES" nanonope "$R/tmp"
for p in $PATHS; do
  if [ -L "$p" ]; then mkdir -p "$R$(dirname "$p")"; ln -s "$(readlink "$p")" "$R$p"
  elif [ -d "$p" ]; then mkdir -p "$R$p"; mount --rbind "$p" "$R$p"; mount -o remount,bind,ro "$R$p"
  else mkdir -p "$R$(dirname "$p")"; touch "$R$p"; mount --bind "$p" "$R$p"
    mount -o remount,bind,ro "$R$p"
  fi
done
mkdir -p "$R/task"; mount --bind "$C" "$R/task"; mount -o remount,bind,ro "$R/task"
mkdir "$R/proc"; mount -t proc proc "$R/proc"
mount --bind "$R/proc/sys" "$R/proc/sys"; mount -o remount,bind,ro "$R/proc/sys"
mkdir "$R/dev"
for d in null zero urandom random; do touch "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"; done
for k in shmmax shmall shmmni msgmnb msgmni; do echo 0 > "/proc/sys/kernel/$k"; done
echo "0 0 0 0" > /proc/sys/kernel/sem
echo 0 > /proc/sys/fs/mqueue/queues_max
mkdir "$R/.old"; cd "$R"; pivot_root . .old; umount -l /.old; rmdir /.old
mount -o remount,ro /
cd "/task/$INSIDE"
unset OLDPWD PATHS TMP_MB TMP_FILES INSIDE
exec setpriv $DROP --pdeathsig KILL --no-new-privs \
    --inh-caps=-all --ambient-caps=-all --bounding-set=-all -- "$@"
"""


def unshare_args(copy, root):
    user = [] if as_root() else ["--user", "--map-root-user"]
    return ["unshare", *user, "--mount", "--pid", "--fork", "--net", "--ipc", "--uts",
            "--kill-child", "--", "sh", "-c", UNSHARE_SCRIPT, "sh", str(root), str(copy)]


def command(method, copy, argv, limits=Limits(), slot=0, inside=""):
    """Popen's keyword arguments to run argv (a Python command line) as the worker in copy
    (the folder it may read; it starts in copy/inside). For bwrap and unshare the copy is seen
    at /task, and copy's sibling folder `root` must exist (unshare builds its root there)."""
    copy = Path(copy)
    env = environment(limits=limits, method=method)
    if method == "bwrap":
        kw = {"args": bwrap_args(copy, limits, inside) + argv, "env": env, "cwd": "/"}
        if as_root():  # bwrap itself unprivileged: the sandbox's uid is that uid on the host
            uid, gid = worker_uid(slot)
            kw |= {"user": uid, "group": gid, "extra_groups": []}
        return kw
    if method == "unshare":
        drop = ("--reuid={0} --regid={1} --clear-groups".format(*worker_uid(slot)) if as_root()
                else "")
        extra = {"PATHS": " ".join(system_paths() + python_paths()), "DROP": drop,
                 "TMP_MB": str(limits.tmpfs_mb), "TMP_FILES": str(limits.tmp_files),
                 "INSIDE": inside}
        return {"args": unshare_args(copy, copy.parent / "root") + argv, "env": env | extra,
                "cwd": "/"}
    scratch = copy.parent / "scratch"
    scratch.mkdir(exist_ok=True)
    env = environment(str(scratch), limits, method)
    kw = {"args": argv, "env": env, "cwd": str(copy / inside), "start_new_session": True}
    if method == "user":
        uid, gid = student_account()
        os.chown(scratch, uid, gid)
        os.chmod(scratch, 0o700)
        kw |= {"user": uid, "group": gid, "extra_groups": []}
    return kw


# Run inside a method when it is probed: the copy readable and read-only, no kernel setting
# writable (access() asks, nothing is opened), and where it can tell, no uid 0.
PROBE = r"""import os, sys
ok = open(sys.argv[1], encoding="utf-8").read() == "ok"
if os.access(sys.argv[1], os.W_OK):
    sys.exit("the copy is writable")
if os.path.exists("/proc/sys/kernel") and os.access("/proc/sys/kernel/core_pattern", os.W_OK):
    sys.exit("/proc/sys is writable")
sys.exit(0 if ok else 1)
"""


@functools.lru_cache(maxsize=None)
def unavailable(method):
    """Why method cannot run here, or None when it can (tried once: a tiny Python in it)."""
    if method == "none":
        return None
    if not sys.platform.startswith("linux"):
        return "sandboxes need Linux"
    if method == "user":
        if not as_root():
            return "it needs the grader to run as root"
        if student_account() is None:
            return (f"it needs the dedicated account {STUDENT_USER} "
                    f"(useradd --system --no-create-home {STUDENT_USER})")
    elif shutil.which(method) is None:
        return f"{method} is not installed" + (
            " (Debian: apt-get install bubblewrap)" if method == "bwrap" else "")
    if method == "unshare" and shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
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
        except (OSError, subprocess.SubprocessError) as e:
            return f"{method} did not start ({e})"
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            who = f" as uid {worker_uid()[0]}" if as_root() and method != "unshare" else ""
            why = f"{method} failed here{who}" + (f" ({lines[-1][:200]})" if lines else "")
            if as_root() and method in ("bwrap", "user") and "ermission denied" in done.stderr:
                where = re.search(r"source path (\S+?):", done.stderr)
                where = where.group(1) if where else sys.executable
                why += (f": that uid cannot reach {where} (a folder on the way is not open to "
                        "others); --sandbox=unshare binds it in before dropping privileges")
            return why
    return None


def choose(requested):
    """(the method to use, a warning line or None); UserError if requested is not available."""
    from common import UserError  # the worker's probe reads this file alone (python -S)

    if requested not in METHODS:
        raise UserError(f"--sandbox={requested}: choose one of {', '.join(METHODS)}")
    if requested != "auto":
        why = unavailable(requested)
        if why:
            raise UserError(
                f"--sandbox={requested} is not available here: {why}; --sandbox=auto picks what is"
            )
        return requested, (UNSAFE if requested == "none" else None)
    reasons = []
    for method in ("unshare", "bwrap", "user"):  # unshare first: it bounds the most (below)
        why = unavailable(method)
        if why is None:
            return method, ("passed over: " + "; ".join(reasons)) if reasons else None
        reasons.append(why)
    if as_root():
        raise UserError(
            "no sandbox works here and you grade as root, where the student's code would be root "
            f"too: {'; '.join(reasons)}. Fix one, or say --sandbox=none to grade unprotected"
        )
    return "none", f"{UNSAFE} ({'; '.join(reasons)})"


def make_readable(folder):
    """The worker's copy: readable by any user, writable by none but its owner."""
    for dirpath, dirs, files in os.walk(folder):
        os.chmod(dirpath, 0o755)
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o644)


# -----------------------------------------------------------------------------
# Nothing outlives its task


def become_subreaper():
    """Orphans of this process's children (a process that called setsid and whose parent died)
    come back to it, so kill_below finds them. Linux only; elsewhere nothing."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def kill_below(keep=()):
    """SIGKILL every process below this one except the processes in `keep` and those below
    them, until none is left (orphans come back to a subreaper as their parents die); returns
    how many were killed."""
    import psutil  # the worker's probe reads this file alone (python -S)

    me, killed = psutil.Process(), 0
    for _ in range(50):
        kept = set()
        for pid in keep:
            try:
                kept |= {pid} | {c.pid for c in psutil.Process(pid).children(recursive=True)}
            except psutil.Error:
                pass
        try:
            victims = [p for p in me.children(recursive=True) if p.pid not in kept]
        except psutil.Error:
            victims = []
        alive = [p for p in victims if _alive(p)]
        for p in victims:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(victims, timeout=1)
        if not alive:
            return killed
        killed += len(alive)
    return killed


def kill_tree(pid):
    """SIGKILL a process and everything below it (a worker's sandbox: killing only its first
    process would leave what it started to the subreaper)."""
    import psutil  # the worker's probe reads this file alone (python -S)

    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True) + [root]
    except psutil.Error:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)


def tree_usage(pid):
    """(CPU seconds, memory bytes) of pid and every process below it, seen from outside (the
    judge's view of a worker). CPU: each process's own time and the time of the children it
    reaped (a zombie's too), so a process that ended still counts. Memory: on Linux the
    proportional share (smaps_rollup's Pss_Anon + Pss_Shmem) of private and shared anonymous
    memory, so a page a fork shares is counted once and a mapped library file not at all, plus
    the size of every memfd held open (its pages need not be mapped); elsewhere resident memory.
    A process that ends while it is read is skipped."""
    import psutil  # the worker's probe reads this file alone (python -S)

    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.Error:
        return 0.0, 0
    cpu = memory = 0
    for p in procs:
        try:
            t = p.cpu_times()
            cpu += t.user + t.system + getattr(t, "children_user", 0) + getattr(
                t, "children_system", 0)
            memory += _linux_memory(p.pid) if sys.platform.startswith("linux") else (
                p.memory_info().rss)
        except (psutil.Error, OSError):
            pass
    return cpu, memory


def _linux_memory(pid):
    """Pss_Anon + Pss_Shmem of one process, and its open memfds' sizes, in bytes (a kernel
    before 5.x lists no Pss_Anon: then all its Pss, mapped files too, which errs against the
    student rather than reading 0)."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.startswith("Pss"):
                fields[name] = int(rest.split()[0]) << 10
    total = (fields["Pss_Anon"] + fields.get("Pss_Shmem", 0) if "Pss_Anon" in fields
             else fields.get("Pss", 0))
    fds = f"/proc/{pid}/fd"
    for fd in os.listdir(fds):
        try:
            if os.readlink(f"{fds}/{fd}").startswith("/memfd:"):
                total += os.stat(f"{fds}/{fd}").st_size
        except OSError:
            pass
    return total


def _alive(p):
    import psutil  # the worker's probe reads this file alone (python -S)

    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
