"""Timing a candidate against its reference, interleaved, in the same process.

GPU: CUDA events around each call, the L2 cache flushed (a buffer twice its size rewritten)
before every call, warm-up first, the order of the two alternating. CPU: perf_counter.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Stats:
    median: float
    p10: float
    p90: float

    @classmethod
    def of(cls, samples_ms: list[float]) -> Stats:
        s = sorted(samples_ms)
        if len(s) == 1:
            return cls(s[0], s[0], s[0])
        q = statistics.quantiles(s, n=10, method="inclusive")
        return cls(statistics.median(s), q[0], q[-1])


@dataclass(frozen=True)
class PairStats:
    ref: Stats
    new: Stats
    reps: int


def device_name(backend: str) -> str:
    """The name timings are filed under: the GPU's, or the CPU's on the cpu backend."""
    import platform

    import torch

    if backend == "cuda":
        return torch.cuda.get_device_name(0)
    return platform.processor() or platform.machine() or "cpu"


WARMUP = 3
MIN_REPS = 5


def time_pair(
    ref: Callable[[], object],
    new: Callable[[], object],
    device: str,
    budget_s: float = 2.0,
    max_reps: int = 100,
) -> PairStats:
    if device == "cuda":
        return _time_cuda(ref, new, budget_s, max_reps)
    return _time_cpu(ref, new, budget_s, max_reps)


def _reps_for(one_pair_s: float, budget_s: float, max_reps: int) -> int:
    if one_pair_s <= 0:
        return max_reps
    return max(MIN_REPS, min(max_reps, int(budget_s / one_pair_s)))


def _time_cpu(ref: Callable, new: Callable, budget_s: float, max_reps: int) -> PairStats:
    t0 = time.perf_counter()
    for _ in range(WARMUP):
        ref()
        new()
    reps = _reps_for((time.perf_counter() - t0) / WARMUP, budget_s, max_reps)
    samples: dict[str, list[float]] = {"ref": [], "new": []}
    for i in range(reps):
        order = (("ref", ref), ("new", new)) if i % 2 == 0 else (("new", new), ("ref", ref))
        for name, fn in order:
            start = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - start) * 1e3)
    return PairStats(Stats.of(samples["ref"]), Stats.of(samples["new"]), reps)


def _time_cuda(ref: Callable, new: Callable, budget_s: float, max_reps: int) -> PairStats:
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2_bytes = int(getattr(props, "L2_cache_size", 0) or 64 * 2**20)
    flush = torch.empty(2 * l2_bytes // 4, dtype=torch.float32, device="cuda")

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(WARMUP):
        flush.zero_()
        ref()
        flush.zero_()
        new()
    torch.cuda.synchronize()
    reps = _reps_for((time.perf_counter() - t0) / WARMUP, budget_s, max_reps)

    events: dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]] = {"ref": [], "new": []}
    for i in range(reps):
        order = (("ref", ref), ("new", new)) if i % 2 == 0 else (("new", new), ("ref", ref))
        for name, fn in order:
            flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            events[name].append((start, end))
    torch.cuda.synchronize()
    samples = {k: [s.elapsed_time(e) for s, e in v] for k, v in events.items()}
    return PairStats(Stats.of(samples["ref"]), Stats.of(samples["new"]), reps)
