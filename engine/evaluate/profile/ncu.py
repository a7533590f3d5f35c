"""Nsight Compute: the metric set ncu reads per kernel, its command line, the parser of its CSV
output (shared with the torch.profiler table: kernels merged by name, shares, occupancy limiters,
stalls), and the subprocess side's actions run under it (a probe of whether it can read the
device's counters; one warmed forward bracketed by cudaProfilerStart/Stop).
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

from engine import settings
from engine.evaluate.jobs import EvalJob
from engine.evaluate.profile.diagnosis import is_half

# Nsight Compute metric -> the profile's key (see the Nsight Compute metrics reference and the
# SpeedOfLight, Occupancy, LaunchStats and WarpStateStats sections).
NCU_METRICS = {
    "gpu__time_duration.sum": "time_ns",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "l2_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "fma_pct",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical_occupancy_pct",
    "launch__registers_per_thread": "registers",
    "launch__shared_mem_per_block_static": "smem_static",
    "launch__shared_mem_per_block_dynamic": "smem_dynamic",
    "launch__block_size": "block_size",
    "launch__grid_size": "grid_size",
    "launch__occupancy_limit_registers": "limit_registers",
    "launch__occupancy_limit_shared_mem": "limit_shared_mem",
    "launch__occupancy_limit_warps": "limit_warps",
    "launch__occupancy_limit_blocks": "limit_blocks",
}
# The stall reasons the diagnosis names (the top one, and two in the summary): the usual leaders of a
# slow kernel's warp states. Each ratio is one more counter for ncu to collect (replay passes).
STALLS = ("long_scoreboard", "short_scoreboard", "barrier", "mio_throttle", "lg_throttle",
          "math_pipe_throttle", "wait", "no_instruction")
LAUNCH_COUNT = 32  # kernels profiled: those of one forward, up to this many (KTREE_NCU_LAUNCH_COUNT)
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


def _number(text: str) -> float | None:
    text = (text or "").replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[dict[str, Any]]:
    """Kernels from `ncu --csv --page details --print-metric-name name --print-units base`
    output (one row per kernel and metric), each with the profile's keys, largest time first,
    with its share of the profiled device time."""
    rows = [line for line in text.splitlines() if line.startswith('"')]
    if not rows:
        return []
    by_id: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    for row in csv.DictReader(io.StringIO("\n".join(rows))):
        kid = row.get("ID") or ""
        if not kid or "Metric Name" not in row:
            continue
        if kid not in by_id:
            by_id[kid] = {"name": row.get("Kernel Name", "?"), "stalls_raw": {}}
            order.append(kid)
        kernel = by_id[kid]
        metric, value = row.get("Metric Name") or "", _number(row.get("Metric Value") or "")
        if value is None:
            continue
        if metric in NCU_METRICS:
            kernel[NCU_METRICS[metric]] = value
        m = re.match(r"smsp__average_warps_issue_stalled_(.+)_per_issue_active\.ratio$", metric)
        if m:
            kernel["stalls_raw"][m.group(1)] = value
    return finish_kernels([by_id[k] for k in order])


def finish_kernels(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge launches of one kernel name (summing time), derive shares, limiters and stalls."""
    merged: dict[str, dict[str, Any]] = {}
    for k in raw:
        k = dict(k)
        if "time_ns" in k:
            k["time_us"] = k.pop("time_ns") / 1e3
        name = k["name"]
        if name in merged:
            m = merged[name]
            m["time_us"] = (m.get("time_us") or 0.0) + (k.get("time_us") or 0.0)
            m["calls"] = m.get("calls", 1) + 1
            continue
        k["calls"] = k.get("calls", 1)
        merged[name] = k
    kernels = sorted(merged.values(), key=lambda k: -(k.get("time_us") or 0.0))
    total = sum(k.get("time_us") or 0.0 for k in kernels)
    for k in kernels:
        k["share"] = (k.get("time_us") or 0.0) / total if total > 0 else 0.0
        if "smem_static" in k or "smem_dynamic" in k:
            k["smem_bytes"] = (k.pop("smem_static", 0) or 0) + (k.pop("smem_dynamic", 0) or 0)
        limits = {label: k.pop(key) for key, label in (
            ("limit_registers", "registers per thread"), ("limit_shared_mem", "shared memory per block"),
            ("limit_warps", "block size"), ("limit_blocks", "blocks per SM"))
            if k.get(key) is not None}
        if limits:
            k["occupancy_limiter"] = min(limits, key=lambda label: limits[label])
        stalls = k.pop("stalls_raw", None) or {}
        if stalls:
            k["stalls"] = [[s, round(v, 2)] for s, v in sorted(stalls.items(), key=lambda kv: -kv[1])
                           if s != "selected"][:3]
    return kernels


def ncu_metrics() -> list[str]:
    """Only what the diagnosis reads (engine.evaluate.profile.diagnosis): no section, no other set."""
    return [*NCU_METRICS, *(STALL_METRIC.format(s) for s in STALLS)]


def launch_count() -> int:

    try:
        return max(1, int(settings.get("KTREE_NCU_LAUNCH_COUNT") or LAUNCH_COUNT))
    except ValueError:
        return LAUNCH_COUNT


def ncu_command(ncu: str, log_path: str) -> list[str]:
    """ncu over the profile subprocess: nothing profiled until cudaProfilerStart (the warm-up
    launches before it are skipped), then the first `launch_count()` kernels of the one forward
    between cudaProfilerStart/Stop, each replayed only for the metrics the diagnosis reads."""
    return [ncu, "--csv", "--page", "details", "--print-metric-name", "name", "--print-units", "base",
            "--profile-from-start", "off", "--launch-skip", "0", "--launch-count", str(launch_count()),
            "--metrics", ",".join(ncu_metrics()), "--log-file", log_path]


# -- the subprocess side (under ncu) ----------------------------------------------------------


def probe() -> dict[str, Any]:
    import torch

    from engine.evaluate import gate

    x = torch.ones(1024, device="cuda")
    torch.cuda.synchronize()
    gate.wait_for_go("ncu probe")  # started (under ncu) before the GPU's lock; held from here
    torch.cuda.profiler.start()
    (x * 2).sum().item()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return {"ok": True}


def under_ncu(job: EvalJob) -> dict[str, Any]:
    """One forward, warmed, bracketed by cudaProfilerStart/Stop (ncu profiles only that). ncu's
    start, Python, torch, the CUDA context, the candidate's import and its model and inputs come
    before the gate (engine.evaluate.gate: the engine has not taken the GPU's lock yet); the
    warm-up calls and the profiled one after it."""
    import torch

    from engine.evaluate import gate
    from engine.evaluate.child.load import model_and_inputs
    from engine.evaluate.harness import timing

    model, inputs, _ = model_and_inputs(job)
    peaks = timing.device_peaks(job.cache_dir) if _peaks_cached(job.cache_dir) else None
    torch.cuda.synchronize()
    gate.wait_for_go("ncu profile")
    with torch.no_grad():
        for _ in range(2):
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        out = model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    half = is_half(out)
    return {"peaks": peaks if peaks is not None else timing.device_peaks(job.cache_dir), "half": half}


def _peaks_cached(cache_dir: str) -> bool:
    """Whether the device's measured peaks are on disk already (read before the gate then; where
    they are not, they are measured after it, on the quiet GPU)."""
    import os

    import torch

    key = f"peaks-{torch.cuda.get_device_name(0)}-torch{torch.__version__}".replace(" ", "_").replace("/", "_")
    return bool(cache_dir) and os.path.exists(os.path.join(cache_dir, "peaks", f"{key}.json"))


