"""Host-wide admission for the host's cores and memory, shared by every ktree process on the host
(as the GPU's is, by its lock: engine.evaluate.host.hostlock).

- **Builds** (the compile pool's subprocesses: a Python with torch, a compiler) take one of the
  host's build slots (`BuildSlots`: `default_compile_workers()` for the whole host, whatever the
  number of ktree processes): fifteen `ktree eval` processes no longer start fifteen pools at once.
- **The cpu timer's quiet** (`CpuQuiet`): on the cpu backend, a process about to check and time
  holds the cores exclusively; the heavy work of every other ktree process (its builds, its worker's
  start) holds them shared. The timer first declares its intent, so no new heavy work starts while
  it waits for the running work to end; that work ends on its own (it waits for nothing else while
  it holds the cores), so there is no deadlock.
- **Memory**: heavy work waits (up to MEMORY_WAIT_S, then goes on and says so) while the host's
  available memory is under `memory_floor_bytes()`.

Everything a process waits for is said (`on_wait(text)`): whose timing, how many builds, how much
memory. Locks are `flock`s on files in `runtime_dir()`: a process that dies lets go of them.

Standard library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from engine import settings
from engine.evaluate.harness.memory import proc_kib_field
from engine.evaluate.host.hostlock import runtime_dir

POLL_S = 0.1
GiB = 2**30
MEMORY_WAIT_S = 600.0  # heavy work waits this long at most for memory, then goes on (and says so)

Waiter = Callable[[str], None] | None


def _try_flock(path: Path, mode: int) -> int | None:
    """An fd holding `mode` (LOCK_SH / LOCK_EX) on `path` taken without blocking, else None."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _unlock(fd: int | None) -> None:
    if fd is None:
        return
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    with contextlib.suppress(OSError):
        os.close(fd)


def _record(fd: int, what: str) -> None:
    data = json.dumps({"pid": os.getpid(), "what": what, "since": time.time()}).encode()
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _say(on_wait: Waiter, said: list[str], text: str) -> None:
    """`text` to `on_wait`, once per change of what is waited for."""
    if on_wait is not None and (not said or said[-1] != text):
        said.append(text)
        on_wait(text)


def host_build_slots() -> int:
    """Builds at once on this host, every ktree process together: KTREE_HOST_BUILDS, else the
    compile pool's default (cores minus two, or every core on a small machine)."""
    raw = settings.get("KTREE_HOST_BUILDS")
    if raw:
        with contextlib.suppress(ValueError):
            return max(1, int(raw))
    cores = os.cpu_count() or 1
    return cores - 2 if cores > 4 else cores


def memory_available_bytes() -> int | None:
    return proc_kib_field("/proc/meminfo", "MemAvailable")


def memory_floor_bytes() -> int:
    """Heavy work starts only with this much of the host's memory available: KTREE_ADMIT_MEMORY_MB,
    else 1 GiB (a build or a worker's start takes about that)."""
    raw = settings.get("KTREE_ADMIT_MEMORY_MB")
    if raw:
        with contextlib.suppress(ValueError):
            return max(0, int(float(raw) * 2**20))
    return GiB


async def wait_for_memory(on_wait: Waiter = None, said: list[str] | None = None) -> None:
    """Wait (at most MEMORY_WAIT_S) until the host has `memory_floor_bytes()` available."""
    said = [] if said is None else said
    floor, start = memory_floor_bytes(), time.monotonic()
    while True:
        free = memory_available_bytes()
        if free is None or free >= floor:
            return
        if time.monotonic() - start > MEMORY_WAIT_S:
            _say(on_wait, said, f"memory still short after {MEMORY_WAIT_S:g} s"
                                f" ({free / GiB:.1f} GiB available): going on")
            return
        _say(on_wait, said, f"waiting for memory: {free / GiB:.1f} GiB available on the host,"
                            f" {floor / GiB:.1f} GiB wanted")
        await asyncio.sleep(POLL_S * 5)


class BuildSlots:
    """The host's build slots: `count` lock files, one held per build."""

    def __init__(self, count: int | None = None, directory: Path | None = None):
        self.count = count or host_build_slots()
        self.dir = directory or runtime_dir()

    def _path(self, i: int) -> Path:
        return self.dir / f"build-slot-{i}.lock"

    @contextlib.asynccontextmanager
    async def slot(self, what: str = "build", on_wait: Waiter = None) -> AsyncIterator[None]:
        said: list[str] = []
        fd = None
        while fd is None:
            for i in range(self.count):
                fd = _try_flock(self._path(i), fcntl.LOCK_EX)
                if fd is not None:
                    _record(fd, what)
                    break
            if fd is None:
                pids = sorted({str(_read(self._path(i)).get("pid", "?")) for i in range(self.count)})
                _say(on_wait, said, f"waiting for a build slot (all {self.count} of the host's in use,"
                                    f" by pid {', '.join(pids)})")
                await asyncio.sleep(POLL_S)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            _unlock(fd)


class CpuQuiet:
    """The cpu timer's cores, host-wide: `quiet()` (the timer, exclusive) against `busy()` (heavy
    work of any ktree process, shared). The timer's intent goes first: no new heavy work starts
    while a timer waits."""

    def __init__(self, directory: Path | None = None):
        where = directory or runtime_dir()
        self.intent = where / "cpu-timer-intent.lock"
        self.cores = where / "cpu-cores.lock"

    @contextlib.asynccontextmanager
    async def busy(self, what: str, on_wait: Waiter = None) -> AsyncIterator[None]:
        """Hold the cores shared for heavy work (`what`: said to a timer that waits for it), once no
        timer wants them and the host's memory allows (wait_for_memory)."""
        said: list[str] = []
        await wait_for_memory(on_wait, said)
        held = None
        while held is None:
            gate = _try_flock(self.intent, fcntl.LOCK_SH)  # (a timer holds it exclusively)
            if gate is not None:
                held = _try_flock(self.cores, fcntl.LOCK_SH)
                _unlock(gate)
            if held is None:
                timer = _read(self.intent)
                who = f"pid {timer['pid']}" if timer.get("pid") else "another ktree process"
                _say(on_wait, said, f"waiting for the cores: a cpu timing of {who} has them")
                await asyncio.sleep(POLL_S)
        try:
            yield
        finally:
            _unlock(held)

    @contextlib.asynccontextmanager
    async def quiet(self, what: str = "cpu timing", on_wait: Waiter = None) -> AsyncIterator[None]:
        """Hold the cores exclusively: no heavy work of any ktree process runs until it ends."""
        said: list[str] = []
        intent = None
        while intent is None:
            intent = _try_flock(self.intent, fcntl.LOCK_EX)
            if intent is None:
                _say(on_wait, said, "waiting for another cpu timing to end")
                await asyncio.sleep(POLL_S)
        _record(intent, what)
        cores = None
        try:
            while cores is None:
                cores = _try_flock(self.cores, fcntl.LOCK_EX)
                if cores is None:
                    _say(on_wait, said, "waiting for the cores: builds or worker starts of ktree"
                                        " processes are running")
                    await asyncio.sleep(POLL_S)
            yield
        finally:
            _unlock(cores)
            with contextlib.suppress(OSError):
                os.ftruncate(intent, 0)
            _unlock(intent)


class HostAdmission:
    """One evaluator's way into the host's admission: builds take a build slot (and, with `cpu`, the
    cores shared); `busy` is other heavy work (a worker's start); `quiet` the cpu timer's cores.
    Without `cpu` (the cuda backend, or no host lock) only the build slots apply."""

    def __init__(self, cpu: bool, directory: Path | None = None):
        self.slots = BuildSlots(directory=directory)
        self.cores = CpuQuiet(directory) if cpu else None

    @contextlib.asynccontextmanager
    async def build(self, on_wait: Waiter = None) -> AsyncIterator[None]:
        async with self.slots.slot("a build", on_wait), self.busy("a build", on_wait):
            yield

    @contextlib.asynccontextmanager
    async def busy(self, what: str, on_wait: Waiter = None) -> AsyncIterator[None]:
        if self.cores is None:
            yield
            return
        async with self.cores.busy(what, on_wait):
            yield

    @contextlib.asynccontextmanager
    async def quiet(self, on_wait: Waiter = None) -> AsyncIterator[None]:
        if self.cores is None:
            yield
            return
        async with self.cores.quiet(f"cpu timing of pid {os.getpid()}", on_wait):
            yield
