"""A gate between an engine and a subprocess it starts before taking a GPU's host lock: the
subprocess does its setup (Python, torch, the CUDA context, the model, torch.compile's compile and
autotuning, the candidate's import under ncu) while another process may hold the GPU, says
`ready`, and waits for `go`; the engine takes the lock, opens the gate, and holds the GPU only for
the part that needs it quiet (a timing, a profiled launch).

Files in a fresh dir (`KTREE_GATE`, under the build cache's writable dir, so a sandboxed process
reaches it): the subprocess writes `ready`, the engine writes `go`. A subprocess that waits longer
than KTREE_GATE_WAIT_S (default 900 s) for `go` gives up with an error (never hangs); an engine
whose subprocess died before `ready` hears it from the process's own end. Without KTREE_GATE the
subprocess does not wait (a run outside the engine, a test). Stdlib only.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from engine import settings

POLL_S = 0.005
WAIT_S = 900.0


class GateTimeout(Exception):
    pass


def wait_for_go(name: str = "") -> float:
    """The subprocess side: say ready, wait for go (none without KTREE_GATE). Seconds waited."""
    where = settings.get("KTREE_GATE")
    if not where:
        return 0.0
    gate = Path(where)
    (gate / "ready").write_text(name or str(os.getpid()))
    limit = float(settings.get("KTREE_GATE_WAIT_S") or WAIT_S)
    t0 = time.monotonic()
    while not (gate / "go").exists():
        if time.monotonic() - t0 > limit:
            raise GateTimeout(f"waited {limit:g} s for the GPU's lock ({name or 'gate'}): gave up")
        time.sleep(POLL_S)
    return time.monotonic() - t0


class Gate:
    """The engine side: a fresh gate dir under `root` (made now, removed by close())."""

    def __init__(self, root: str | os.PathLike[str]):
        self.dir = Path(root) / f"{os.getpid()}-{secrets.token_hex(6)}"
        self.dir.mkdir(parents=True, exist_ok=True)

    @property
    def env(self) -> dict[str, str]:
        return {"KTREE_GATE": str(self.dir)}

    @property
    def is_ready(self) -> bool:
        return (self.dir / "ready").exists()

    async def ready(self, task: asyncio.Future[Any], limit_s: float | None = None) -> bool:
        """Wait until the subprocess is ready (True) or `task` (its run) ended first, or `limit_s`
        passed (False)."""
        t0 = time.monotonic()
        while not self.is_ready:
            if task.done() or (limit_s is not None and time.monotonic() - t0 > limit_s):
                return False
            await asyncio.sleep(0.02)
        return True

    def open(self) -> None:
        (self.dir / "go").write_text("go")

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
