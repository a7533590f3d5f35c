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

from engine.evaluate import clocks, noise


@dataclass(frozen=True)
class Stats:
    """Median, p10, p90 and the median's ~95 % interval (lo, hi: engine.evaluate.noise)."""

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
        index = int(os.environ.get("KTREE_DEVICE_INDEX") or 0)
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


def time_pass(ref: Callable[[], object], new: Callable[[], object], device: str, budget_s: float = 2.0,
              max_reps: int = 100, probe: Any = None) -> noise.Pass:
    """One timing pass as engine.evaluate.noise judges it: the pair's stats, on the CPU the
    fraction of the wall time the timer's threads waited for a core, on a GPU what `probe`
    (engine.evaluate.gpuload.Probe, or None) saw other processes do while it timed."""
    window = probe.start() if probe is not None else None
    waited = noise.cpu_waited_s() if device != "cuda" else None
    t0 = clocks.perf_counter()
    stats = time_pair(ref, new, device, budget_s, max_reps)
    wall = clocks.perf_counter() - t0
    cpu_wait = None
    if waited is not None and wall >= noise.MIN_WAIT_WALL_S:  # (a millisecond's wait is no signal)
        after = noise.cpu_waited_s()
        cpu_wait = (after - waited) / wall if after is not None and wall > 0 else None
    contention, note = probe.finish(window) if probe is not None else (None, "")
    return noise.Pass(stats, cpu_wait, contention, note)


def fix_threads() -> int:
    """Fix this process's intra-op thread count (KTREE_THREADS, else one per core it may run
    on) so that every timing on this host uses the same; returns it, for the verdict."""
    import torch

    try:
        threads = int(os.environ.get("KTREE_THREADS") or 0)
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


def _time_cpu(ref: Callable, new: Callable, budget_s: float, max_reps: int) -> PairStats:
    t0 = clocks.perf_counter()
    for _ in range(WARMUP):
        ref()
        new()
    reps = _reps_for((clocks.perf_counter() - t0) / WARMUP, budget_s, max_reps)
    samples: dict[str, list[float]] = {"ref": [], "new": []}
    for i in range(reps):
        order = (("ref", ref), ("new", new)) if i % 2 == 0 else (("new", new), ("ref", ref))
        for name, fn in order:
            start = clocks.perf_counter()
            fn()
            samples[name].append((clocks.perf_counter() - start) * 1e3)
    return PairStats(Stats.of(samples["ref"]), Stats.of(samples["new"]), reps)


def flush_bytes() -> int:
    """What is rewritten before every timed call: twice the L2, and at least 256 MiB."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2_bytes = int(getattr(props, "L2_cache_size", 0) or 64 * 2**20)
    return max(2 * l2_bytes, 256 * 2**20)


def check_escaping_work(fn: Callable[[], object], event_median_ms: float, reps: int = 5) -> list[str]:
    """Work that escapes the CUDA events (side streams, host-side waits hidden from the current
    stream): time the call again from the host, device-synchronized, and compare."""

    walls = []
    for _ in range(reps):
        clocks.cuda_synchronize()
        t0 = clocks.perf_counter()
        fn()
        clocks.cuda_synchronize()
        walls.append((clocks.perf_counter() - t0) * 1e3)
    wall = statistics.median(walls)
    # Launch and synchronize overheads are tens of microseconds; anything beyond that and
    # beyond half the wall time ran outside the timed window.
    if wall - event_median_ms > max(ESCAPE_SLACK_MS, 0.5 * wall):
        return [f"escaping work: CUDA events time {event_median_ms:.4g} ms, but the call takes"
                f" {wall:.4g} ms device-synchronized (side stream or host work outside the events)"]
    return []


ESCAPE_SLACK_MS = 0.1


def device_peaks(cache_dir: str | None = None) -> dict[str, float]:
    """Measured peaks of this GPU, once per GPU (cached in the build cache): copy bandwidth
    (bytes/s) and dense matmul rates (FLOP/s) in FP32, TF32 and BF16."""
    import json
    import os

    import torch

    name = torch.cuda.get_device_name(0)
    key = f"peaks-{name}-torch{torch.__version__}".replace(" ", "_").replace("/", "_")
    # (The one dir of the cache an evaluation may write: sandbox.WRITABLE_IN_CACHE.)
    path = os.path.join(cache_dir, "peaks", f"{key}.json") if cache_dir else None
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
    if path:
        with contextlib.suppress(OSError):  # not kept: measured again next time
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(peaks, f)
            os.replace(tmp, path)
    return peaks


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


def speed_of_light_ms(flops: float | None, nbytes: float | None, dtype: object, device: str,
                      cache_dir: str | None = None) -> float | None:
    """The least time the problem's work can take here: max(FLOPs / peak rate, bytes / peak
    bandwidth), from measured peaks; the rate is the fastest this dtype may use (FP32 problems:
    FP32 or TF32; 16-bit: BF16). None on the CPU or without a declared or counted cost."""
    import torch

    if device != "cuda" or not (flops or nbytes):
        return None
    peaks = device_peaks(cache_dir)
    rate = peaks["bf16"] if dtype in (torch.float16, torch.bfloat16) else max(peaks["fp32"], peaks["tf32"])
    return 1e3 * max((flops or 0) / rate, (nbytes or 0) / peaks["bandwidth"])


def _time_cuda(ref: Callable, new: Callable, budget_s: float, max_reps: int) -> PairStats:
    import torch

    flush = torch.empty(flush_bytes() // 4, dtype=torch.float32, device="cuda")

    clocks.cuda_synchronize()
    t0 = clocks.perf_counter()
    for _ in range(WARMUP):
        flush.zero_()
        ref()
        flush.zero_()
        new()
    clocks.cuda_synchronize()
    reps = _reps_for((clocks.perf_counter() - t0) / WARMUP, budget_s, max_reps)

    events: dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]] = {"ref": [], "new": []}
    for i in range(reps):
        order = (("ref", ref), ("new", new)) if i % 2 == 0 else (("new", new), ("ref", ref))
        for name, fn in order:
            flush.zero_()
            start, end = clocks.timed_event(), clocks.timed_event()
            clocks.event_record(start)
            fn()
            clocks.event_record(end)
            events[name].append((start, end))
    clocks.cuda_synchronize()
    samples = {k: [clocks.event_elapsed_ms(s, e) for s, e in v] for k, v in events.items()}
    return PairStats(Stats.of(samples["ref"]), Stats.of(samples["new"]), reps)
