"""Noise measured, not assumed: how sure a timing is, and what to do when it is not.

Every timing pass yields, for candidate and reference alike, the median, its p10/p90 and a 95 %
confidence interval of the median by order statistics (distribution-free: the interval between
the j-th and k-th smallest samples, j, k = n/2 -/+ 1.96 sqrt(n)/2). On the CPU it also yields how
long the timer's threads sat runnable but waiting for a core (/proc/self/task/*/schedstat): the
direct sign of other work on the timing cores. On a GPU a probe (engine.evaluate.harness.gpuload) says
whether another process ran kernels on the GPU while it was timed.

A pass is *noisy* when either median's interval is wider than NOISE_REL of it, or the CPU timer
waited for a core more than CPU_WAIT_MAX of the time; *contended* when the probe saw foreign
kernels. Either re-times, at most MAX_RETIMES more passes; the quietest pass is kept, and if even
that is noisy or contended the verdict carries the flag `noisy` or `contended` (and stays
`correct`: it is marked, not rejected).

Standard library only.
"""

from __future__ import annotations

import glob
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

NOISE_REL = 0.10  # a median's 95 % interval wider than this fraction of it: noisy
CPU_WAIT_MAX = 0.10  # the CPU timer waited for a core longer than this fraction of its wall time
MIN_WAIT_WALL_S = 0.02  # shorter passes are not judged by their wait (one time slice is most of it)
MAX_RETIMES = 2  # re-timing passes after the first, at most
# The timing's counts, here (standard library) so that what reads them without torch (the
# evaluation's time limit, engine.evaluate.host.eval_limit; the benches) reads these very numbers.
WARMUP = 3  # untimed calls before a pass (engine.evaluate.harness.timing)
MIN_REPS = 5  # timed reps of a pass, at least
ESCAPE_REPS = 7  # calls of the escaping-work check (engine.evaluate.harness.timing.check_escaping_work)
SAMPLES = 4  # sampled (checked) candidate reps per timing pass, at most (engine.evaluate.harness.rotation)
Z95 = 1.96


def median_ci(samples: list[float], z: float = Z95) -> tuple[float, float]:
    """The ~95 % confidence interval of the median by order statistics (the whole range for
    fewer than 6 samples, where no narrower one holds that confidence)."""
    s = sorted(samples)
    n = len(s)
    if n == 0:
        raise ValueError("no samples")
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half) - 1)  # 0-based index of the j-th smallest
    hi = min(n - 1, math.ceil(n / 2 + half))  # ... and of the k-th (1-based k = index + 1)
    return s[lo], s[hi]


def rel_width(median: float, lo: float, hi: float) -> float:
    return (hi - lo) / median if median > 0 else math.inf


def speedup_interval(ref: tuple[float, float], new: tuple[float, float]) -> tuple[float, float] | None:
    """The speedup's interval from the two medians' intervals: (ref lo / new hi, ref hi / new lo)."""
    if new[0] <= 0 or new[1] <= 0:
        return None
    return ref[0] / new[1], ref[1] / new[0]


def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


# -- the CPU timer's wait for a core ----------------------------------------------------------


def cpu_waited_s() -> float | None:
    """Seconds this process's threads have spent runnable but not running (summed over threads),
    from /proc/self/task/*/schedstat (field 2, nanoseconds); None where the kernel does not say."""
    total, seen = 0, False
    for path in glob.glob("/proc/self/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[1])
            seen = True
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9 if seen else None


# -- a pass and the choice between passes -----------------------------------------------------


@dataclass(frozen=True)
class Pass:
    """One timing pass: its stats (engine.evaluate.harness.timing.PairStats), the CPU wait fraction (None
    on the GPU), and what the GPU probe found (None: nothing foreign, or no probe)."""

    stats: Any
    cpu_wait: float | None = None
    contention: str | None = None
    probe_note: str = ""

    def noise(self) -> list[str]:
        """Why this pass is noisy (empty: it is not)."""
        reasons = []
        for who, s in (("candidate", self.stats.new), ("reference", self.stats.ref)):
            width = rel_width(s.median, s.lo, s.hi)
            if width > NOISE_REL:
                reasons.append(f"the {who}'s median {s.median:.4g} ms has a 95% interval"
                               f" {s.lo:.4g}-{s.hi:.4g} ms ({width:.0%} of it > {NOISE_REL:.0%})")
        if self.cpu_wait is not None and self.cpu_wait > CPU_WAIT_MAX:
            reasons.append(f"the timer's threads waited for a core {self.cpu_wait:.0%} of the time"
                           f" (> {CPU_WAIT_MAX:.0%}): other work ran on the timing cores")
        return reasons

    def score(self) -> tuple[int, float]:
        """Lower is quieter: not contended first, then the widest relative interval plus the wait."""
        s = self.stats
        width = max(rel_width(s.new.median, s.new.lo, s.new.hi), rel_width(s.ref.median, s.ref.lo, s.ref.hi))
        return (1 if self.contention else 0, width + (self.cpu_wait or 0.0))


@dataclass(frozen=True)
class Settled:
    """The pass kept, how many were run, the flags it earns, and a line for the log."""

    kept: Pass
    passes: list[Pass] = field(default_factory=list)
    flags: tuple[str, ...] = ()
    log: str = ""


def settle(time_once: Callable[[], Pass], max_retimes: int = MAX_RETIMES) -> Settled:
    """Time once; while the pass is noisy or contended, time again (at most `max_retimes` more);
    keep the quietest pass. `time_once` runs one pass (timing, CPU wait, GPU probe included)."""
    passes = [time_once()]
    while (passes[-1].noise() or passes[-1].contention) and len(passes) <= max_retimes:
        passes.append(time_once())
    kept = min(passes, key=Pass.score)
    flags, lines = [], []
    if len(passes) > 1:
        why = "; ".join(passes[0].noise() + ([passes[0].contention] if passes[0].contention else []))
        lines.append(f"re-timed {len(passes) - 1}x (first pass: {why}); kept pass"
                     f" {passes.index(kept) + 1} of {len(passes)}")
    if kept.contention:
        flags.append("contended")
        lines.append(f"contended: {kept.contention}")
    if kept.noise():
        flags.append("noisy")
        lines.append("noisy: " + "; ".join(kept.noise()))
    return Settled(kept, passes, tuple(flags), "\n".join(lines))


def summary(settled: Settled, threads: int | None = None, cores: list[int] | None = None) -> dict[str, Any]:
    """What the verdict's `timing` record says of the timing: passes, intervals, waits, probe."""
    k = settled.kept
    s = k.stats
    out: dict[str, Any] = {
        "passes": len(settled.passes),
        "kept_pass": settled.passes.index(k) + 1 if k in settled.passes else 1,
        "time_ci_ms": [s.new.lo, s.new.hi],
        "ref_ci_ms": [s.ref.lo, s.ref.hi],
        "noise_rel_max": NOISE_REL,
    }
    if k.cpu_wait is not None:
        out["cpu_wait"] = round(k.cpu_wait, 4)
    if k.contention:
        out["contention"] = k.contention
    if k.probe_note:
        out["gpu_probe"] = k.probe_note
    if threads is not None:
        out["threads"] = threads
    if cores is not None:
        out["cores"] = cores
    return out


def timer_cores() -> list[int]:
    """The cores this process may run on (its affinity), sorted."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))
