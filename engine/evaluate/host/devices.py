"""Which devices an evaluator may use and how it shares this host's cores: the visible GPUs and
a check of a choice of them, the compile pool's default size, the pinned cpu timer's cores; a
device as the evaluator holds it (`Device`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from engine import settings
from engine.evaluate.host.hostlock import DeviceLock
from engine.evaluate.host.worker import Worker

DOWN_REST_S = 60.0  # a device whose worker could not start gets no job for this long (if another can)


def default_compile_workers() -> int:
    """Cores minus two (for the engine and the timer), or every core on a small machine."""
    cores = os.cpu_count() or 1
    return cores - 2 if cores > 4 else cores


def visible_gpus() -> dict[int, str]:
    """The GPUs this process may use: physical index -> the CUDA_VISIBLE_DEVICES entry that shows
    a worker that GPU alone. With CUDA_VISIBLE_DEVICES set, the indices it names (entries that are
    not numbers, UUIDs or MIG names, are numbered by their place in it); else 0..count-1."""
    import torch

    count = torch.cuda.device_count()
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return {i: str(i) for i in range(count)}
    entries = [e.strip() for e in spec.split(",") if e.strip()][:count]
    if all(e.isdigit() for e in entries):
        return {int(e): e for e in entries}
    return dict(enumerate(entries))


def split_cores(cores: list[int]) -> tuple[list[int], list[int]] | None:
    """(the timer's cores, the builds') for a pinned cpu timer: the upper half for the timer (at
    least one), the rest for the builds; None with a single core (nothing to split)."""
    if len(cores) < 2:
        return None
    timer = cores[len(cores) // 2:] if len(cores) % 2 == 0 else cores[len(cores) // 2 + 1:]
    return timer, cores[:len(cores) - len(timer)]


CPU_TIMERS = ("pause", "pin")


def cpu_timer_cores(wanted: str | None, backend: str, devices: int,
                    cores: list[int]) -> tuple[str, list[int] | None, list[int] | None]:
    """(how the cpu timer gets its cores, the timer's cores, the builds'): `wanted` (else
    KTREE_CPU_TIMER, else `pause`); `pin` only on the cpu backend with one device and `cores` to
    split (split_cores), else `pause` with no cores of its own. ValueError for an unknown one."""
    wanted = wanted or settings.get("KTREE_CPU_TIMER") or "pause"
    if wanted not in CPU_TIMERS:
        raise ValueError(f"unknown cpu timer {wanted!r} (choose from {', '.join(CPU_TIMERS)})")
    split = split_cores(cores) if wanted == "pin" and backend == "cpu" and devices <= 1 else None
    return ("pin", *split) if split is not None else ("pause", None, None)


def check_gpus(chosen: list[int], visible: dict[int, str]) -> None:
    """ValueError, in words, for a choice of GPUs this process cannot use."""
    shown = ",".join(map(str, visible)) or "none"
    if not visible:
        raise ValueError("no CUDA GPU is visible")
    if not chosen:
        raise ValueError("no GPU chosen")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"GPU {next(g for g in chosen if chosen.count(g) > 1)} is chosen twice")
    for g in chosen:
        if g not in visible:
            raise ValueError(f"GPU {g} is not visible (visible: {shown})")


def bounded_seconds(reported: float | None, wall_s: float) -> float | None:
    """A duration an evaluation process reported, checked against the engine's own clock around
    that process: never negative, never longer than the process ran (else the engine's wall)."""
    if reported is None:
        return None
    try:
        value = float(reported)
    except (TypeError, ValueError):
        return round(wall_s, 4)
    return value if 0.0 <= value <= wall_s + 0.05 else round(wall_s, 4)


@dataclass
class Device:
    """One place evaluations run: a GPU (its worker sees only that GPU) or, on the cpu backend, a
    slot on the cores. Its counters feed the progress display and `ktree bench pipeline`."""

    name: str  # "gpu1", "cpu0"
    index: int  # the physical GPU index (cpu: the slot)
    env: dict[str, str]  # for its evaluation processes: CUDA_VISIBLE_DEVICES, KTREE_DEVICE_INDEX
    worker: Worker | None
    busy: bool = False
    jobs: int = 0  # evaluations finished here
    busy_s: float = 0.0  # time held for an evaluation (or a reference timing)
    resting: bool = False  # its worker could not start: out of the queue for DOWN_REST_S
    info: dict[str, Any] = field(default_factory=dict)  # the last verdict's `gpu`
    lock_key: str | None = None  # its host-wide lock (engine.evaluate.host.hostlock); None: no lock
    lock: DeviceLock | None = None  # made on first use
    waiting_for: str | None = None  # "gpu0 (held by pid N, session M)" while the host lock is taken
    stage: str = ""  # set by staged(): what it does for the variant it was handed, before it is held
    # The evaluator's: cleared while a cpu timing (on its one device) waits for the cores.
    builds_allowed: asyncio.Event | None = None

    def host_lock(self) -> DeviceLock | None:
        if self.lock is None and self.lock_key is not None:
            self.lock = DeviceLock(self.lock_key)
        return self.lock

    @property
    def alive(self) -> bool:
        """False while its worker could not be started (the last try failed)."""
        return self.worker is None or self.worker.started_ok

    @contextlib.contextmanager
    def staged(self, stage: str) -> Iterator[None]:
        """`stage` in state() while the block runs (the device handed a variant, not held yet)."""
        self.stage = stage
        try:
            yield
        finally:
            self.stage = ""

    def _stage(self) -> str:
        """What the device does while it is not held (`ktree bench pipeline`'s idle causes):
        "start" (its worker starts: Python, torch, the CUDA context), "reference" (the reference's
        timing process sets up), "prewarm" (its worker compiles a Triton solution's kernels),
        "quiet" (the cpu timing it was handed waits for the running builds); "" when held or free."""
        worker = self.worker
        if self.busy:
            return ""
        if self.stage:
            return self.stage
        if worker is not None and (worker.starting or worker.warming):
            return "start" if worker.starting else "prewarm"
        return "quiet" if self.builds_allowed is not None and not self.builds_allowed.is_set() else ""

    def state(self) -> dict[str, Any]:
        return {"name": self.name, "busy": self.busy, "jobs": self.jobs,
                "busy_s": round(self.busy_s, 3), "queue": 0, "alive": self.alive,
                "waiting_for": self.waiting_for, "stage": self._stage()}

    def describe(self) -> dict[str, Any]:
        """What a verdict's `gpu` says when no evaluation process reported it (a crash)."""
        return self.info or {"slot": self.name, "index": self.index, "host": platform.node()}
