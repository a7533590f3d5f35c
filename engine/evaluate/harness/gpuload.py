"""Foreign load on the GPU being timed, from the driver (NVML through nvidia-ml-py, optional).

Before and after each timing pass the probe asks which processes hold a compute context on the
GPU and how busy it is, and after the pass which processes the driver sampled running kernels
(SM utilization > 0) since the pass began (nvmlDeviceGetProcessUtilization). A process other
than this one that ran kernels in that window shared the GPU with the timer: the pass is
*contended* (engine.evaluate.harness.noise re-times it, and marks the verdict if it stays so).

Where the driver's PIDs are not this process's (a container with its own PID namespace: this
process's PID is not among those the driver lists) no PID can be told apart; then two or more
processes seen running kernels in the window means someone besides the timer did.

Without nvidia-ml-py, or an NVML that cannot answer, the probe says nothing (and says so once in
the verdict's timing record). `judge` is pure: it is what the tests drive with fake snapshots.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Snapshot:
    """What the driver said at one moment: processes holding a compute context (pid -> bytes of
    GPU memory, None where unknown) and the GPU's utilization (%, over its last sample period)."""

    processes: dict[int, int | None]
    util: int | None
    at_us: int  # host clock, microseconds (the driver's sample timestamps use it)


@dataclass(frozen=True)
class Window:
    """One timed pass as the driver saw it: before, after, and per process the highest SM
    utilization sampled in between (None: the driver keeps no per-process samples here)."""

    before: Snapshot
    after: Snapshot
    active: dict[int, int] | None


def judge(window: Window, own: set[int]) -> str | None:
    """Why the pass is contended (another process ran kernels on the GPU while it was timed),
    or None. `own`: the PIDs of this timer (the process that ran the kernels being timed)."""
    if window.active is None:
        return None  # no per-process samples: holding a context is not running kernels
    running = {pid: sm for pid, sm in window.active.items() if sm > 0}
    seen = set(window.before.processes) | set(window.after.processes) | set(window.active)
    if own & seen:
        foreign = {pid: sm for pid, sm in running.items() if pid not in own}
        if foreign:
            listed = ", ".join(f"pid {pid} (SM {sm}%)" for pid, sm in sorted(foreign.items()))
            return f"another process ran kernels on this GPU while it was timed: {listed}"
        return None
    if len(running) >= 2:  # the driver's PIDs are another namespace's: count instead
        listed = ", ".join(f"pid {pid} (SM {sm}%)" for pid, sm in sorted(running.items()))
        return (f"{len(running)} processes ran kernels on this GPU while it was timed: {listed}"
                " (the driver's PIDs are another namespace's; only one of them is this timer)")
    return None


def describe(window: Window) -> str:
    """A short line for the verdict's timing record."""
    procs = sorted(set(window.before.processes) | set(window.after.processes))
    util = f"util {window.before.util}% -> {window.after.util}%"
    active = ("no per-process samples" if window.active is None else
              ", ".join(f"{pid}:{sm}%" for pid, sm in sorted(window.active.items())) or "none sampled")
    return f"compute processes {procs}; {util}; SM by pid in the pass: {active}"


class Probe:
    """The NVML probe of one GPU (by UUID, else NVML index). `available` is False (and every
    pass goes unjudged) where nvidia-ml-py or the driver cannot answer; `why` says why."""

    def __init__(self, uuid: str | None = None, index: int | None = None):
        self.own = {os.getpid()}
        self.handle: Any = None
        self.why = ""
        try:
            import pynvml
        except ImportError:
            self.why = "nvidia-ml-py is not installed: foreign GPU load not checked"
            return
        self.nvml = pynvml
        try:
            pynvml.nvmlInit()
            handle = None
            if uuid:
                for key in (uuid, f"GPU-{uuid}"):
                    with contextlib.suppress(pynvml.NVMLError):
                        handle = pynvml.nvmlDeviceGetHandleByUUID(key)
                        break
            if handle is None and index is not None:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.handle = handle
            if handle is None:
                self.why = "NVML found no GPU with this UUID or index: foreign GPU load not checked"
        except pynvml.NVMLError as exc:
            self.why = f"NVML cannot answer ({exc}): foreign GPU load not checked"

    @property
    def available(self) -> bool:
        return self.handle is not None

    def snapshot(self) -> Snapshot:
        nvml, at = self.nvml, int(time.time() * 1e6)
        processes: dict[int, int | None] = {}
        with contextlib.suppress(nvml.NVMLError):
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(self.handle):
                processes[int(p.pid)] = getattr(p, "usedGpuMemory", None)
        util = None
        with contextlib.suppress(nvml.NVMLError):
            util = int(nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)
        return Snapshot(processes, util, at)

    def active_since(self, since_us: int) -> dict[int, int] | None:
        nvml = self.nvml
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(self.handle, since_us)
        except nvml.NVMLError_NotFound:
            return {}  # no process sampled since then
        except nvml.NVMLError:
            return None  # not supported here
        active: dict[int, int] = {}
        for s in samples:
            if int(s.timeStamp) >= since_us:
                active[int(s.pid)] = max(active.get(int(s.pid), 0), int(s.smUtil))
        return active

    def start(self) -> Snapshot | None:
        return self.snapshot() if self.available else None

    def finish(self, before: Snapshot | None) -> tuple[str | None, str]:
        """(why the pass is contended or None, a note for the record)."""
        if before is None:
            return None, self.why
        window = Window(before, self.snapshot(), self.active_since(before.at_us))
        return judge(window, self.own), describe(window)


def probe_for(info: dict[str, Any]) -> Probe:
    """The probe of the GPU a verdict's `gpu` record names (engine.evaluate.harness.timing.device_info)."""
    return Probe(info.get("uuid"), info.get("index"))
