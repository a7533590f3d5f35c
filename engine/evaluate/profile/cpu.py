"""The cpu backend's profile: no counters; the host's measured peaks (copy bandwidth, FP32 matmul
rate), against which the diagnosis puts a kernel's achieved bandwidth and FLOP rate.

The peaks are measured as the kernel is timed: on the timer's cores with its thread count
(engine.evaluate.harness.timing.fix_threads), and the bandwidth also at the problem's own working set. The
cpu timer flushes no cache and the cpu sizes are small (a few MiB), so between timed calls a
kernel's bytes stay in the caches: against a copy far beyond them (the DRAM's bandwidth) its rate
read 171 % and 214 % of the "peak". A copy of the same working set, as warm, is the
bandwidth it can be held to.
"""

from __future__ import annotations

import time
from typing import Any

DRAM_FOOTPRINT = 2**28  # bytes a copy moves through (source + destination): beyond any cache
MIN_FOOTPRINT = 2**16


def working_set_bytes(nbytes: float | None) -> int | None:
    """The footprint (source + destination) a copy is measured at for a problem that moves
    `nbytes` (its inputs and outputs), whole float32s; None where unknown or beyond the caches
    (there the DRAM copy is the peak)."""
    if not nbytes or nbytes <= 0:
        return None
    footprint = max(MIN_FOOTPRINT, int(nbytes) // 8 * 8)
    return footprint if footprint < DRAM_FOOTPRINT else None


def cpu_peaks(nbytes: float | None = None) -> dict[str, Any]:
    """This host's copy bandwidth beyond the caches (`bandwidth`) and at the working set of a
    problem moving `nbytes` (`bandwidth_working_set`, `working_set_bytes`; where known), and its
    FP32 matmul rate, each the best of several runs, on the timer's cores with its threads."""
    import torch

    from engine.evaluate.child.evaluation import pin_cores
    from engine.evaluate.harness import timing

    pin_cores()  # KTREE_CPU_CORES: the pinned timer's cores, where the kernel was timed
    threads = timing.fix_threads()

    def best(fn: Any, reps: int = 5) -> float:
        fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    def copy_rate(footprint: int, reps: int = 5) -> float:
        src = torch.ones(max(1, footprint // 8))  # float32: source and destination, half each
        dst = torch.empty_like(src)
        return 2 * src.numel() * 4 / best(lambda: dst.copy_(src), reps)

    peaks: dict[str, Any] = {"bandwidth": copy_rate(DRAM_FOOTPRINT)}
    footprint = working_set_bytes(nbytes)
    if footprint is not None:  # (a small copy takes microseconds: more runs)
        peaks["bandwidth_working_set"] = copy_rate(footprint, max(5, min(200, DRAM_FOOTPRINT // footprint)))
        peaks["working_set_bytes"] = footprint
    n = 1024
    a, b = torch.randn(n, n), torch.randn(n, n)
    peaks["fp32"] = 2 * n**3 / best(lambda: a @ b)
    peaks["threads"] = threads
    return {"peaks": peaks}
