"""Timing a candidate against its reference, interleaved, in the same process.

GPU: CUDA events around each call, the L2 cache flushed (a buffer twice its size rewritten)
before every call, warm-up first, the order of the two alternating. CPU: perf_counter.
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine import settings
from engine.evaluate.harness import clocks, noise
from engine.evaluate.harness.noise import ESCAPE_REPS, MIN_REPS, WARMUP  # (read as timing.WARMUP, ... too)


@dataclass(frozen=True)
class Stats:
    """Median, p10, p90 and the median's ~95 % interval (lo, hi: engine.evaluate.harness.noise)."""

    median: float
    p10: float
    p90: float
    lo: float = 0.0
    hi: float = 0.0

    @classmethod
    def of(cls, samples_ms: list[float]) -> Stats:
        s = sorted(samples_ms)
        if len(s) == 1:
            return cls(s[0], s[0], s[0], s[0], s[0])
        q = statistics.quantiles(s, n=10, method="inclusive")
        lo, hi = noise.median_ci(s)
        return cls(statistics.median(s), q[0], q[-1], lo, hi)


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


def device_info(backend: str) -> dict[str, Any]:
    """Which device this process measures on, for the verdict: the slot and physical index the
    engine gave it (KTREE_DEVICE_INDEX, one worker per GPU), the name, the GPU's UUID and the
    driver where they can be had (else None), torch and CUDA versions, the host."""
    import platform

    import torch

    try:
        index = int(settings.get("KTREE_DEVICE_INDEX") or 0)
    except ValueError:
        index = 0
    cuda = backend == "cuda"
    info: dict[str, Any] = {
        "slot": f"{'gpu' if cuda else 'cpu'}{index}", "index": index, "name": device_name(backend),
        "uuid": None, "driver": None, "torch": torch.__version__, "cuda": torch.version.cuda,
        "host": platform.node(),
    }
    if cuda:
        with contextlib.suppress(Exception):
            uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
            info["uuid"] = str(uuid) if uuid else None
        info["driver"] = driver_version()
    return info


@functools.cache
def driver_version() -> str | None:
    """The NVIDIA driver's version from NVML ("550.54.15"), else the CUDA driver API's
    ("CUDA 12.4"), through ctypes (no nvidia-smi, no pynvml); None where neither loads."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() == 0:
            buf = ctypes.create_string_buffer(96)
            ok = nvml.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96)) == 0
            nvml.nvmlShutdown()
            if ok and buf.value:
                return buf.value.decode(errors="replace")
    with contextlib.suppress(OSError, AttributeError):
        version = ctypes.c_int()
        if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version)) == 0:
            return f"CUDA {version.value // 1000}.{version.value % 1000 // 10}"
    return None



def time_pair(
    ref: Callable[..., object],
    new: Callable[..., object],
    device: str,
    budget_s: float = 2.0,
    max_reps: int = 100,
    feed: Any = None,
) -> PairStats:
    """The reference and the candidate timed interleaved (the order alternating per rep). With
    `feed` (engine.evaluate.harness.rotation.Rotation) each call takes its arguments from it, made outside
    the timed window, and hands it its output afterwards; without, both are called bare."""
    samples, reps = _time(device, [("ref", ref), ("new", new)], budget_s, max_reps, feed)
    return PairStats(Stats.of(samples["ref"]), Stats.of(samples["new"]), reps)


def time_one(fn: Callable[..., object], device: str, budget_s: float = 2.0, max_reps: int = 100,
             feed: Any = None, name: str = "ref") -> Stats:
    """One callee timed alone, as time_pair times each of its two (the reference in a process
    where no candidate ran: engine.evaluate.child.measure.before_candidate)."""
    samples, _ = _time(device, [(name, fn)], budget_s, max_reps, feed)
    return Stats.of(samples[name])


def _time(device: str, callees: list[tuple[str, Callable[..., object]]], budget_s: float, max_reps: int,
          feed: Any) -> tuple[dict[str, list[float]], int]:
    if device == "cuda":
        return _time_cuda(callees, budget_s, max_reps, feed)
    return _time_cpu(callees, budget_s, max_reps, feed)


def time_pass(ref: Callable[..., object], new: Callable[..., object], device: str, budget_s: float = 2.0,
              max_reps: int = 100, probe: Any = None, feed: Any = None) -> noise.Pass:
    """One timing pass as engine.evaluate.harness.noise judges it: the pair's stats, on the CPU the
    fraction of the wall time the timer's threads waited for a core, on a GPU what `probe`
    (engine.evaluate.harness.gpuload.Probe, or None) saw other processes do while it timed."""
    window = probe.start() if probe is not None else None
    waited = noise.cpu_waited_s() if device != "cuda" else None
    t0 = clocks.perf_counter()
    stats = time_pair(ref, new, device, budget_s, max_reps, feed)
    wall = clocks.perf_counter() - t0
    cpu_wait = None
    if waited is not None and wall >= noise.MIN_WAIT_WALL_S:  # (a millisecond's wait is no signal)
        after = noise.cpu_waited_s()
        cpu_wait = (after - waited) / wall if after is not None and wall > 0 else None
    contention, note = probe.finish(window) if probe is not None else (None, "")
    return noise.Pass(stats, cpu_wait, contention, note)


def pin_cores() -> None:
    """Run on the cores the evaluator gave this process (KTREE_CPU_CORES, e.g. "1" or "2,3": the
    cpu backend's pinned timer, engine.evaluate.host.devices.split_cores); whatever it starts
    (compilers, the candidate) inherits them. The evaluation's process and the precompiled header's
    (engine.evaluate.harness.fastbuild) call it first."""
    cores = settings.get("KTREE_CPU_CORES", "")
    if cores and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(ValueError, OSError):
            os.sched_setaffinity(0, {int(c) for c in cores.split(",")})


def fix_threads() -> int:
    """Fix this process's intra-op thread count (KTREE_THREADS, else one per core it may run
    on) so that every timing on this host uses the same; returns it, for the verdict."""
    import torch

    try:
        threads = int(settings.get("KTREE_THREADS") or 0)
    except ValueError:
        threads = 0
    threads = threads if threads > 0 else len(noise.timer_cores())
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def _reps_for(one_pair_s: float, budget_s: float, max_reps: int) -> int:
    if one_pair_s <= 0:
        return max_reps
    return max(MIN_REPS, min(max_reps, int(budget_s / one_pair_s)))


def _time_cpu(callees: list[tuple[str, Callable[..., object]]], budget_s: float, max_reps: int,
              feed: Any) -> tuple[dict[str, list[float]], int]:
    t0 = clocks.perf_counter()
    for _ in range(WARMUP):
        for name, fn in callees:
            args = feed.args(name, -1) if feed is not None else ()
            out = fn(*args)
            if feed is not None:
                feed.done(name, -1, out)
            del out
    reps = _reps_for((clocks.perf_counter() - t0) / WARMUP, budget_s, max_reps)
    if feed is not None:
        feed.start(reps)
    samples: dict[str, list[float]] = {name: [] for name, _ in callees}
    for i in range(reps):
        for name, fn in callees if i % 2 == 0 else callees[::-1]:
            args = feed.args(name, i) if feed is not None else ()
            start = clocks.perf_counter()
            out = fn(*args)
            samples[name].append((clocks.perf_counter() - start) * 1e3)
            if feed is not None:
                feed.done(name, i, out)
            del out
    return samples, reps


def flush_bytes() -> int:
    """What is rewritten before every timed call: twice the L2, and at least 256 MiB."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2_bytes = int(getattr(props, "L2_cache_size", 0) or 64 * 2**20)
    return max(2 * l2_bytes, 256 * 2**20)


ESCAPE_SLACK_MS = 0.05  # what the wait after the return may exceed the events by, at least
ESCAPE_REL = 0.25  # ... and at least this fraction of the events' time


def check_escaping_work(fn: Callable[..., object], event_median_ms: float | None = None,
                        reps: int = ESCAPE_REPS, feed: Any = None) -> list[str]:
    """Device work that escapes the CUDA events (a kernel on a side stream not joined into the
    current stream). Each of `reps` calls, after an L2 flush and a synchronize, is split in two:
    the time until `fn()` returns (host work: Python, launches; the events cannot see it and it is
    not device work) and the time `synchronize()` then waits (device work still running), with
    the events around the call on the current stream. Work on the current stream finishes at the
    end event, so the wait exceeds the events' time only by the synchronize's own latency; a side
    stream's work shows in the wait and not in the events. Flagged when the median excess (wait
    minus events, per call) is over ESCAPE_SLACK_MS and over ESCAPE_REL of the events' median.
    `event_median_ms` (the timed pass's) is shown in the flag. `feed`: the rotation, for the
    call's arguments (engine.evaluate.harness.rotation)."""
    import torch

    flush = torch.empty(flush_bytes() // 4, dtype=torch.float32, device="cuda")
    returns, waits, events = [], [], []
    for _ in range(reps):
        args = feed.args("new", -1) if feed is not None else ()
        flush.zero_()
        clocks.cuda_synchronize()
        start, end = clocks.timed_event(), clocks.timed_event()
        t0 = clocks.perf_counter()
        clocks.event_record(start)
        out = fn(*args)
        clocks.event_record(end)
        t1 = clocks.perf_counter()
        clocks.cuda_synchronize()
        t2 = clocks.perf_counter()
        returns.append((t1 - t0) * 1e3)
        waits.append((t2 - t1) * 1e3)
        events.append(clocks.event_elapsed_ms(start, end))
        del out
    del flush
    return judge_escape(returns, waits, events, event_median_ms)


def judge_escape(returns_ms: list[float], waits_ms: list[float], events_ms: list[float],
                 timed_ms: float | None = None) -> list[str]:
    """The escaping-work rule on one set of split calls (check_escaping_work): flagged when the
    median of (wait after the return - the call's event time) is over ESCAPE_SLACK_MS and over
    ESCAPE_REL of the events' median. Host time before the return is never held against it."""
    if not waits_ms or len(waits_ms) != len(events_ms):
        return []
    event = statistics.median(events_ms)
    excess = statistics.median(w - e for w, e in zip(waits_ms, events_ms, strict=True))
    if excess > max(ESCAPE_SLACK_MS, ESCAPE_REL * event):
        timed = f" (timed: {timed_ms:.4g} ms)" if timed_ms is not None else ""
        return [f"escaping work: CUDA events time the call at {event:.4g} ms{timed}, but after it returns"
                f" ({statistics.median(returns_ms):.4g} ms of host work) the device still runs"
                f" {statistics.median(waits_ms):.4g} ms (work on a stream the events do not see)"]
    return []


def device_peaks(cache_dir: str | None = None) -> dict[str, float]:
    """Measured peaks of this GPU, once per GPU (cached in the build cache): copy bandwidth
    (bytes/s) and dense matmul rates (FLOP/s) in FP32, TF32 and BF16."""
    import json
    import os

    import torch

    name = torch.cuda.get_device_name(0)
    key = f"peaks-{name}-torch{torch.__version__}".replace(" ", "_").replace("/", "_")
    path = os.path.join(cache_dir, *PEAKS_DIR, f"{key}.json") if cache_dir else None
    if path and os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    src = torch.empty(2**28, dtype=torch.float32, device="cuda")  # 1 GiB
    dst = torch.empty_like(src)
    copy_ms = _best_ms(lambda: dst.copy_(src))
    peaks = {"bandwidth": 2 * src.numel() * src.element_size() / (copy_ms / 1e3)}
    src = dst = torch.empty(0)
    n = 8192
    tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for label, dtype, allow_tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                                         ("bf16", torch.bfloat16, False)):
            torch.backends.cuda.matmul.allow_tf32 = allow_tf32
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            peaks[label] = 2 * n**3 / (_best_ms(lambda: a @ b) / 1e3)  # noqa: B023
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    _write_peaks(path, peaks)
    return peaks


# Where the measured peaks are kept, in the build cache: a dir no evaluation process may write (the
# sandbox binds the cache read-only but for its WRITABLE_IN_CACHE dirs). A worker's child measures
# peaks before its candidate is imported and tells the judge (harness.outbox), which writes them here
# (engine.evaluate.host.judge.keep_peaks); a candidate that writes a file of peaks where it can
# misleads nobody (one wrote 100 TB/s into the old, writable, peaks dir: every later floor was 500x too low).
PEAKS_DIR = ("judge", "peaks")


def _write_peaks(path: str | None, peaks: dict[str, Any]) -> None:
    import json

    from engine.evaluate.harness import outbox

    if path and outbox.tell("peaks", {"name": os.path.basename(path), "peaks": peaks}):
        return  # kept by the judge, not by this process
    if path:
        with contextlib.suppress(OSError):  # not kept: measured again next time
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(peaks, f)
            os.replace(tmp, path)


CPU_PEAK_SIZES = (2**18, 2**20, 2**22, 2**24)  # bytes per buffer of the copy and read probes


def cpu_peaks(cache_dir: str | None = None) -> dict[str, Any]:
    """Measured peaks of this host's timing cores with the intra-op thread count the timer uses
    (fix_threads; read when called), once per CPU model, cores, threads and torch (cached in the
    build cache): per buffer size in CPU_PEAK_SIZES the best copy rate (bytes read + written per
    second) and read rate (a sum), `bandwidth` the highest of all (the cache's, for a working set
    that fits: a bound no implementation passes), and the FP32 matmul rate (`fp32`, FLOP/s). A
    measurement during which the timer's threads waited for a core more than noise.CPU_WAIT_MAX
    of the time (other work on the cores: rates too low) is used but not kept."""
    import json

    import torch

    threads = torch.get_num_threads()
    cores = ",".join(map(str, noise.timer_cores()))
    path = cpu_peaks_file(cache_dir, threads, cores) if cache_dir else None
    if path and os.path.exists(path):
        with contextlib.suppress(OSError, ValueError):
            with open(path) as f:
                return json.load(f)
    waited, t0 = noise.cpu_waited_s(), clocks.perf_counter()
    by_size: dict[str, dict[str, float]] = {}
    for size in CPU_PEAK_SIZES:
        src = torch.ones(size // 4, dtype=torch.float32)
        dst = torch.empty_like(src)
        copy_s = _best_cpu_s(lambda: dst.copy_(src))  # noqa: B023
        read_s = _best_cpu_s(lambda: src.sum())  # noqa: B023
        by_size[str(size)] = {"copy": 2 * size / copy_s, "read": size / read_s}
    n = 768
    a = torch.randn(n, n)
    peaks: dict[str, Any] = {
        "bandwidth": max(max(v.values()) for v in by_size.values()),
        "by_size": by_size,
        "fp32": 2 * n**3 / _best_cpu_s(lambda: a @ a, reps=4),
        "threads": threads,
        "cores": cores,
    }
    after, wall = noise.cpu_waited_s(), clocks.perf_counter() - t0
    wait = (after - waited) / wall if waited is not None and after is not None and wall > 0 else None
    peaks["cpu_wait"] = round(wait, 4) if wait is not None else None
    if wait is None or wait <= noise.CPU_WAIT_MAX:
        _write_peaks(path, peaks)
    return peaks


def cpu_peaks_file(cache_dir: str, threads: int, cores: str) -> str:
    """Where cpu_peaks keeps the peaks of this CPU model for `threads` intra-op threads on `cores`
    ("0,1"). (Not keyed by host name: the sandbox has its own.)"""
    import torch

    key = (f"cpu-peaks-{cpu_model()}-n{os.cpu_count()}-cores{cores}-t{threads}"
           f"-torch{torch.__version__}").replace(" ", "_").replace("/", "_")
    return os.path.join(cache_dir, *PEAKS_DIR, f"{key}.json")


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else the platform's."""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return device_name("cpu")


def _best_cpu_s(fn: Callable[[], object], reps: int = 7) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = clocks.perf_counter()
        fn()
        best = min(best, clocks.perf_counter() - t0)
    return max(best, 1e-9)


def _best_ms(fn: Callable[[], object], reps: int = 10) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = clocks.timed_event(), clocks.timed_event()
        clocks.event_record(start)
        fn()
        clocks.event_record(end)
        clocks.event_synchronize(end)
        times.append(clocks.event_elapsed_ms(start, end))
    return min(times)


@dataclass(frozen=True)
class SpeedOfLight:
    """The least time any correct implementation can take here (`floor_ms`: the bytes it must move,
    `nbytes`, at the measured peak `bandwidth`), and the time the reference's FLOPs take at the
    measured peak `rate` (`flops_ms`: not a bound: an algorithm may need fewer operations)."""

    floor_ms: float | None
    flops_ms: float | None = None
    nbytes: float | None = None
    bandwidth: float | None = None
    rate: float | None = None
    # False where the peaks were measured while other work slowed the host (the cpu timer waited
    # for a core: rates too low, a floor too high): the floor is reported, never flagged.
    reliable: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"floor_ms": self.floor_ms, "flops_ms": self.flops_ms, "bytes": self.nbytes,
                "bandwidth": self.bandwidth, "rate": self.rate, "reliable": self.reliable}


NO_SPEED_OF_LIGHT = SpeedOfLight(None)


def speed_of_light(flops: float | None, nbytes: float | None, dtype: object, device: str,
                   cache_dir: str | None = None) -> SpeedOfLight:
    """The byte floor and the FLOP time of a problem on this device, from measured peaks
    (device_peaks on a GPU, cpu_peaks on the cpu). The rate is the fastest this dtype may use
    (GPU FP32 problems: FP32 or TF32; 16-bit: BF16; cpu: FP32)."""
    import torch

    if not (flops or nbytes):
        return NO_SPEED_OF_LIGHT
    if device == "cuda":
        peaks: dict[str, Any] = device_peaks(cache_dir)
        rate = peaks["bf16"] if dtype in (torch.float16, torch.bfloat16) else max(peaks["fp32"], peaks["tf32"])
    else:
        peaks = cpu_peaks(cache_dir)
        rate = peaks["fp32"]
    bandwidth = float(peaks["bandwidth"])
    wait = peaks.get("cpu_wait")
    return SpeedOfLight(floor_ms=1e3 * nbytes / bandwidth if nbytes else None,
                        flops_ms=1e3 * flops / rate if flops else None,
                        nbytes=nbytes, bandwidth=bandwidth, rate=rate,
                        reliable=wait is None or wait <= noise.CPU_WAIT_MAX)


def speed_of_light_ms(flops: float | None, nbytes: float | None, dtype: object, device: str,
                      cache_dir: str | None = None) -> float | None:
    """The byte floor alone (speed_of_light's floor_ms); None without bytes."""
    return speed_of_light(flops, nbytes, dtype, device, cache_dir).floor_ms


def judge_speed_of_light(sol: SpeedOfLight, time_ms: float | None,
                         margin: float) -> tuple[list[str], list[str], float | None]:
    """(flags, notes, sol_fraction) of a candidate's median time against the speed of light:
    flagged when faster than `margin` times the byte floor (no correct implementation moves its
    bytes that fast); a note `algorithmic` when faster than `margin` times the reference's FLOPs
    at peak rate (fewer operations than the reference: allowed). sol_fraction = floor / time."""
    if not time_ms or time_ms <= 0:
        return [], [], None
    flags, notes = [], []
    fraction = sol.floor_ms / time_ms if sol.floor_ms else None
    if fraction is not None and fraction > margin and sol.reliable:
        flags.append(f"speed of light: {time_ms:.4g} ms is below the floor of {sol.floor_ms:.4g} ms for the"
                     f" {sol.nbytes / 1e6:.4g} MB this problem must move at this device's measured"
                     f" {sol.bandwidth / 1e9:.4g} GB/s")
    if sol.flops_ms and sol.flops_ms / time_ms > margin:
        notes.append(f"algorithmic: fewer operations than the reference: {time_ms:.4g} ms is below the"
                     f" {sol.flops_ms:.4g} ms its {(sol.rate and sol.flops_ms * sol.rate / 1e3 or 0) / 1e9:.4g}"
                     f" GFLOP take at this device's measured peak rate")
    return flags, notes, fraction


def _time_cuda(callees: list[tuple[str, Callable[..., object]]], budget_s: float, max_reps: int,
               feed: Any) -> tuple[dict[str, list[float]], int]:
    import torch

    flush = torch.empty(flush_bytes() // 4, dtype=torch.float32, device="cuda")

    clocks.cuda_synchronize()
    t0 = clocks.perf_counter()
    for _ in range(WARMUP):
        for name, fn in callees:
            args = feed.args(name, -1) if feed is not None else ()
            flush.zero_()
            out = fn(*args)
            if feed is not None:
                feed.done(name, -1, out)
            del out
    clocks.cuda_synchronize()
    reps = _reps_for((clocks.perf_counter() - t0) / WARMUP, budget_s, max_reps)
    if feed is not None:
        feed.start(reps)

    events: dict[str, list[tuple[Any, Any]]] = {name: [] for name, _ in callees}
    for i in range(reps):
        for name, fn in callees if i % 2 == 0 else callees[::-1]:
            # The arguments are copied in before the L2 flush, so the call finds them in memory,
            # not in the L2; a sampled output is cloned after the end event (outside the window).
            args = feed.args(name, i) if feed is not None else ()
            flush.zero_()
            start, end = clocks.timed_event(), clocks.timed_event()
            clocks.event_record(start)
            out = fn(*args)
            clocks.event_record(end)
            events[name].append((start, end))
            if feed is not None:
                feed.done(name, i, out)
            del out
    clocks.cuda_synchronize()
    samples = {k: [clocks.event_elapsed_ms(s, e) for s, e in v] for k, v in events.items()}
    return samples, reps
