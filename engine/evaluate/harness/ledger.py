"""One host-wide memory budget for what ktree processes cache (the check trials' inputs and fp64
answers, engine.evaluate.harness.expected_cache), shared by every ktree process on the host.

A directory (`KTREE_LEDGER_DIR`: the evaluator sets it to `<cache>/peaks/memory`, the one dir of
the build cache an evaluation process may write) holds one small JSON file per live process:
`{"host": bytes, "device": {gpu: bytes}}`. Its owner holds an exclusive `flock` on it for as long
as it lives, so a file whose lock can be taken belongs to a dead process (SIGKILLed ones included,
whatever pid namespace the sandbox gave it) and is removed by whoever finds it. A claim is made
under the directory's own lock: the live entries' sum plus the claim must stay within the budget.

Budgets: host `KTREE_CHECK_CACHE_HOST_MB`, else a quarter of the host's memory, for all processes
together, and per process at most 40 % of its own resident-memory limit (`KTREE_MEMORY_LIMIT`, the
sandbox's, set by the engine); device (per GPU) `KTREE_CHECK_CACHE_DEVICE_MB`, else a quarter of
the GPU's memory, for all processes together. Without a ledger dir every process gets the whole
budget divided by nothing: the per-process caps still hold.

Unreadable or hostile entries (a candidate runs in the process that owns one) count as what they
say, clamped at zero; they can make others recompute live, never cache more. Stdlib only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from pathlib import Path
from typing import Any

from engine import settings

MiB = 2**20
HOST_SHARE = 0.25  # of the host's memory, for every ktree process's cached sets together
PROCESS_SHARE = 0.4  # of one process's resident-memory limit
DEVICE_SHARE = 0.25  # of a GPU's memory, for every process's device-resident sets together
DEVICE_FLOOR_MB = 2048.0


def host_total_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 * 2**30


def _mb_env(name: str) -> int | None:
    raw = settings.get(name)
    if not raw:
        return None
    try:
        return max(0, int(float(raw) * MiB))
    except ValueError:
        return None


def host_budget_bytes() -> int:
    """For every process's host-side sets together."""
    given = _mb_env("KTREE_CHECK_CACHE_HOST_MB")
    return given if given is not None else int(host_total_bytes() * HOST_SHARE)


def process_host_cap_bytes() -> int | None:
    """One process's host-side sets at most: a share of its own memory limit (None: no limit known)."""
    raw = settings.get("KTREE_MEMORY_LIMIT")
    try:
        return int(int(raw) * PROCESS_SHARE) if raw else None
    except ValueError:
        return None


def device_budget_bytes(total_device_bytes: int) -> int:
    """For every process's device-resident sets on one GPU together."""
    given = _mb_env("KTREE_CHECK_CACHE_DEVICE_MB")
    if given is not None:
        return given
    return max(int(DEVICE_FLOOR_MB * MiB), int(total_device_bytes * DEVICE_SHARE))


class Ledger:
    """This process's entry in the host-wide ledger (made on first use)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None):
        where = directory if directory is not None else settings.get("KTREE_LEDGER_DIR")
        self.dir = Path(where) if where else None
        self._fd: int | None = None
        self._path: Path | None = None
        self.host = 0
        self.device: dict[str, int] = {}

    # -- entries ---------------------------------------------------------------------------

    def _open(self) -> bool:
        if self.dir is None:
            return False
        if self._fd is not None:
            return True
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            path = self.dir / f"{os.getpid()}-{secrets.token_hex(6)}.json"
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.dir = None  # not writable here: per-process caps only
            return False
        self._fd, self._path = fd, path
        return True

    def _write(self) -> None:
        if self._fd is None:
            return
        data = json.dumps({"host": self.host, "device": self.device}).encode()
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)

    def others(self) -> list[dict[str, Any]]:
        """The other live processes' entries; dead ones are removed on the way."""
        if self.dir is None:
            return []
        out = []
        for path in self.dir.glob("*.json"):
            if path == self._path:
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except OSError:  # held: its owner lives
                    with contextlib.suppress(OSError, ValueError):
                        data = json.loads(os.pread(fd, 65536, 0) or b"{}")
                        if isinstance(data, dict):
                            out.append(data)
                    continue
                with contextlib.suppress(OSError):
                    path.unlink()  # its owner is gone
            finally:
                os.close(fd)
        return out

    @contextlib.contextmanager
    def _locked(self):  # type: ignore[no-untyped-def]
        fd = None
        if self.dir is not None:
            with contextlib.suppress(OSError):
                fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)

    # -- claims ----------------------------------------------------------------------------

    def used_by_others(self, gpu: str | None = None) -> int:
        """Bytes the other live processes hold on the host (gpu None) or on GPU `gpu`."""
        total = 0
        for entry in self.others():
            try:
                if gpu is None:
                    total += max(0, int(entry.get("host") or 0))
                else:
                    total += max(0, int((entry.get("device") or {}).get(gpu) or 0))
            except (TypeError, ValueError, AttributeError):
                continue
        return total

    def claim_host(self, nbytes: int) -> bool:
        """Hold `nbytes` more on the host if the budget allows; False (nothing held) if not."""
        cap = process_host_cap_bytes()
        if cap is not None and self.host + nbytes > cap:
            return False
        self._open()
        with self._locked():
            if self.used_by_others() + self.host + nbytes > host_budget_bytes():
                return False
            self.host += nbytes
            self._write()
        return True

    def claim_device(self, gpu: str, nbytes: int, total_device_bytes: int) -> bool:
        self._open()
        with self._locked():
            mine = self.device.get(gpu, 0)
            if self.used_by_others(gpu) + mine + nbytes > device_budget_bytes(total_device_bytes):
                return False
            self.device[gpu] = mine + nbytes
            self._write()
        return True

    def release(self, host: int = 0, gpu: str | None = None, device: int = 0) -> None:
        self.host = max(0, self.host - host)
        if gpu is not None and gpu in self.device:
            self.device[gpu] = max(0, self.device[gpu] - device)
        if self._fd is not None:
            with self._locked():
                self._write()

    def close(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            if self._path is not None:
                self._path.unlink()
        os.close(self._fd)
        self._fd = None


_LEDGER: Ledger | None = None


def ledger() -> Ledger:
    """This process's ledger entry (one per process)."""
    global _LEDGER
    if _LEDGER is None:
        _LEDGER = Ledger()
    return _LEDGER


def reset(directory: str | os.PathLike[str] | None = None) -> Ledger:
    """A fresh entry (tests; a worker after a fork)."""
    global _LEDGER
    if _LEDGER is not None:
        _LEDGER.close()
    _LEDGER = Ledger(directory)
    return _LEDGER
