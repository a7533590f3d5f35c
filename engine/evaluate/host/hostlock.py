"""One timer per device across the host: a `fcntl.flock` lock file per device that every ktree
process on the host finds, held by whichever process checks and times on that device.

- Where: `$KTREE_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/ktree`, else `/tmp/ktree-<uid>` (created 0700).
  The files are `<dir>/device-<key>.lock`.
- Key: a GPU's UUID ("GPU-8a3c…"), read through NVML (ctypes, libnvidia-ml.so.1) from the physical
  index, so the engine process creates no CUDA context; a CUDA_VISIBLE_DEVICES entry that is
  a UUID or a MIG name already is the key. Without NVML the key is the physical index ("gpu3"):
  every process on one host sees the same NVML (or none), so they all agree. (NVML numbers GPUs in
  PCI bus order, like CUDA with CUDA_DEVICE_ORDER=PCI_BUS_ID; on a host mixing GPU models without
  that setting, CUDA's default order can differ from NVML's.) The cpu backend's single device is
  "cpu": its timer needs the cores to itself, across ktree processes too.
- The kernel drops a flock when its holder dies (SIGKILL included): no stale lock survives.
- The file records its holder (pid, session, since) so a waiter can say who it waits for.

Taken without blocking the event loop: a non-blocking try, then retries every POLL_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import functools
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from engine import settings

POLL_S = 0.1


def runtime_dir() -> Path:
    """The directory every ktree process on this host uses for device locks (created, 0700)."""
    given = settings.get("KTREE_RUNTIME_DIR")
    if given:
        path = Path(given)
    elif os.environ.get("XDG_RUNTIME_DIR"):
        path = Path(os.environ["XDG_RUNTIME_DIR"]) / "ktree"
    else:
        path = Path(f"/tmp/ktree-{os.getuid()}")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _nvml_string(index: int, query: str) -> str | None:
    """One NVML string of the GPU at NVML (PCI bus order) index `index` (`query`: the NVML call,
    nvmlDeviceGetUUID or nvmlDeviceGetName), or None without NVML."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        if nvml.nvmlInit_v2() != 0:
            return None
    except AttributeError:
        return None
    try:
        handle = ctypes.c_void_p()
        if nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)) != 0:
            return None
        buf = ctypes.create_string_buffer(96)
        if getattr(nvml, query)(handle, buf, ctypes.c_uint(96)) != 0:
            return None
        return buf.value.decode() or None
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


@functools.cache
def nvml_uuid(index: int) -> str | None:
    """The UUID of the GPU at NVML (PCI bus order) index `index`, or None without NVML."""
    return _nvml_string(index, "nvmlDeviceGetUUID")


@functools.cache
def nvml_name(index: int) -> str | None:
    """The model name of the GPU at NVML index `index` ("NVIDIA H100 80GB HBM3"), or None."""
    return _nvml_string(index, "nvmlDeviceGetName")


def gpu_name(index: int, visible_entry: str = "") -> str | None:
    """A GPU's model name without a CUDA context in this process: NVML by its physical index
    (`visible_entry`, a CUDA_VISIBLE_DEVICES entry, where it is a number; else `index`), or None."""
    entry = visible_entry.strip()
    return nvml_name(int(entry) if entry.isdigit() else index)


def gpu_key(index: int, visible_entry: str) -> str:
    """The lock key of a GPU: its UUID where it can be had, else "gpu<physical index>"."""
    entry = visible_entry.strip()
    if entry.startswith(("GPU-", "MIG-")):
        return entry
    if entry.isdigit():
        uuid = nvml_uuid(int(entry))
        if uuid:
            return uuid
    return f"gpu{index}"


def _safe(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", key)


def describe_holder(holder: dict[str, Any] | None) -> str:
    """ "held by pid N, session M of DB" (what is known of it: a search records its session's id
    and database, so a waiter of another database is not sent looking in its own)."""
    if not holder:
        return "held by another process"
    parts = [f"pid {holder.get('pid')}"] if holder.get("pid") else []
    session = holder.get("session")
    if isinstance(session, dict):  # a search's: its id and the database it is in
        where = f" of {session['db']}" if session.get("db") else ""
        parts.append(f"session {session.get('id')}{where}")
    elif session not in (None, ""):
        parts.append(f"session {session}")
    ahead = holder.get("ahead")
    queued = f"; {ahead} waiting before this one" if ahead else ""
    if not holder.get("pid") and not session:
        return f"held by another process{queued}"
    return "held by " + (", ".join(parts) or "another process") + queued


class DeviceLock:
    """The host-wide lock of one device. `acquire()` waits (asynchronously) until this process
    holds it; `release()` lets it go. `holder()` reads who holds it now (for a waiter)."""

    def __init__(self, key: str, directory: Path | None = None):
        self.key = key
        self.path = (directory or runtime_dir()) / f"device-{_safe(key)}.lock"
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self, session: Any = None) -> bool:
        """Take the lock if it is free (never blocks); record this process as its holder."""
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._fd = fd
        record = json.dumps({"pid": os.getpid(), "session": session, "since": time.time(),
                             "key": self.key}).encode()
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)
        return True

    async def acquire(self, session: Any = None, on_wait: Any = None) -> None:
        """Wait until held, in the order the waiters came (first come, first served across the
        host's processes: a ticket file per waiter, held by its flock, so a dead waiter's is
        passed over). `on_wait(holder)` hears the holder (a dict: pid, session, since, and
        `ahead`, the waiters before this one; or None when unreadable) each time it must wait."""
        if not self._waiters() and self.try_acquire(session):
            return
        queue = self.path.with_name(self.path.name + ".queue")
        queue.mkdir(mode=0o700, exist_ok=True)
        ticket = queue / f"{time.time_ns():020d}-{os.getpid()}-{id(self):x}"
        fd = os.open(ticket, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            while True:
                ahead = self._waiters(before=ticket.name)
                if not ahead and self.try_acquire(session):
                    return
                if on_wait is not None:
                    holder = self.holder()
                    on_wait({**holder, "ahead": len(ahead)} if holder else
                            ({"ahead": len(ahead)} if ahead else None))
                await asyncio.sleep(POLL_S)
        finally:
            with contextlib.suppress(OSError):
                ticket.unlink()
            with contextlib.suppress(OSError):
                os.close(fd)

    def _waiters(self, before: str | None = None) -> list[str]:
        """The live waiters' tickets (before `before`, where given), oldest first; a dead one's is
        removed (its flock can be taken)."""
        queue = self.path.with_name(self.path.name + ".queue")
        try:
            names = sorted(os.listdir(queue))
        except OSError:
            return []
        live = []
        for name in names:
            if before is not None and name >= before:
                break
            try:
                fd = os.open(queue / name, os.O_RDWR)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                live.append(name)  # held: its waiter lives
            else:
                with contextlib.suppress(OSError):
                    (queue / name).unlink()
            finally:
                os.close(fd)
        return live

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # no stale holder left behind for the next waiter to read
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def holder(self) -> dict[str, Any] | None:
        """Who holds the lock, as it recorded itself (None where nothing readable is there)."""
        try:
            text = self.path.read_text()
            data = json.loads(text) if text.strip() else None
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None
