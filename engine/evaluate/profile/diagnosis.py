"""Why a kernel is slow, in words: the diagnosis (memory / compute / latency-or-occupancy /
launch bound, with the numbers that show it) from a profile's per-kernel metrics, or from achieved
rates against measured peaks where no counters were read; and the compact summary prompts and
logs carry. Pure: no tool runs here (engine.evaluate.profile.profiler takes the profiles).
"""

from __future__ import annotations

import re
from typing import Any

TOP_KERNELS = 3

# Diagnosis thresholds (% of peak).
BUSY_PCT = 60.0  # a unit this busy is the bound
LAUNCH_MEAN_US = 10.0  # kernels this short on average, several per call: launch overhead rules
LAUNCH_MIN_KERNELS = 4
ABOVE_PEAK_PCT = 100.5  # a rate above the measured peak (as rounded) is labelled so
IDLE_FRACTION = 0.5  # the device busy less than this share of a call: launches/host work rule


def _weighted(kernels: list[dict[str, Any]], key: str) -> float | None:
    """The time-weighted mean of a metric over the kernels that report it."""
    pairs = [(k.get("time_us") or 0.0, k[key]) for k in kernels if k.get(key) is not None]
    total = sum(w for w, _ in pairs)
    if not pairs:
        return None
    if total <= 0:
        return sum(v for _, v in pairs) / len(pairs)
    return sum(w * v for w, v in pairs) / total


def _launch_bound(profile: dict[str, Any]) -> str | None:
    """The evidence that launches, not kernels, take the time (None when they do not)."""
    count = profile.get("kernels_per_call")
    device_us = profile.get("device_us_per_call")
    wall_us = profile.get("wall_us_per_call")
    if count and device_us is not None and count >= LAUNCH_MIN_KERNELS:
        mean = device_us / count
        if mean < LAUNCH_MEAN_US:
            return f"{count:g} kernels per call averaging {mean:.1f} us each"
    if device_us is not None and wall_us and device_us / wall_us < IDLE_FRACTION and (count or 0) >= 2:
        return (f"the GPU is busy {device_us / wall_us:.0%} of each call"
                f" ({count:g} kernels, {device_us:.0f} of {wall_us:.0f} us)")
    return None


def diagnose(profile: dict[str, Any]) -> dict[str, Any]:
    """memory / compute / latency-or-occupancy / launch bound, with the numbers that show it.

    `profile`: {"tool": "ncu"|"torch"|"cpu", "kernels": [per-kernel metrics], kernels_per_call,
    device_us_per_call, wall_us_per_call, "achieved": {"bandwidth_pct", "flops_pct"} (achieved
    rate against measured peaks, from the problem's bytes and FLOPs and the median time)}.
    Returns {"bound": ..., "evidence": "...", "numbers": {...}}; bound "unknown" where nothing
    speaks."""
    kernels = [k for k in profile.get("kernels") or [] if isinstance(k, dict)]
    top = kernels[:TOP_KERNELS]
    launch = _launch_bound(profile)
    if launch:
        return {"bound": "launch", "evidence": launch,
                "numbers": {"kernels_per_call": profile.get("kernels_per_call"),
                            "device_us_per_call": profile.get("device_us_per_call"),
                            "wall_us_per_call": profile.get("wall_us_per_call")}}
    memory = [_weighted(top, "dram_pct"), _weighted(top, "l2_pct")]
    compute = [_weighted(top, "sm_pct"), _weighted(top, "fma_pct"), _weighted(top, "tensor_pct")]
    if any(m is not None for m in memory + compute):  # counters (ncu)
        dram, l2 = memory
        mem = max((m for m in memory if m is not None), default=0.0)
        comp = max((c for c in compute if c is not None), default=0.0)
        numbers = {"dram_pct": dram, "l2_pct": l2, "sm_pct": compute[0], "fma_pct": compute[1],
                   "tensor_pct": compute[2]}
        where = f" in {_short(top[0]['name'])}" if len(top) == 1 else ""
        if mem >= BUSY_PCT and mem >= comp:
            which = "DRAM" if (dram or 0) >= (l2 or 0) else "L2"
            return {"bound": "memory", "numbers": numbers,
                    "evidence": f"{which} throughput {mem:.0f}% of peak{where} (SM {comp:.0f}%)"}
        if comp >= BUSY_PCT:
            unit = ["SM", "FMA pipe", "tensor pipe"][max(range(3), key=lambda i: compute[i] or 0)]
            return {"bound": "compute", "numbers": numbers,
                    "evidence": f"{unit} {comp:.0f}% of peak{where} (memory {mem:.0f}%)"}
        return _latency(top, numbers, f"memory {mem:.0f}% and SM {comp:.0f}% of peak")
    achieved = profile.get("achieved") or {}
    bw, fl = achieved.get("bandwidth_pct"), achieved.get("flops_pct")
    if bw is None and fl is None:
        if top:
            return _latency(top, {}, "no counters and no cost model for this problem")
        return {"bound": "unknown", "evidence": "no counters and no cost model", "numbers": {}}
    numbers = {"bandwidth_pct": bw, "flops_pct": fl}
    note = f" {profile['peak_note']}" if profile.get("peak_note") else ""  # which peak (cpu: the working set's)
    if (bw or 0) >= BUSY_PCT and (bw or 0) >= (fl or 0):
        return {"bound": "memory", "numbers": numbers,
                "evidence": f"achieved bandwidth {_of_peak(bw or 0, note)} (FLOP rate {_pct(fl or 0)})"}
    if (fl or 0) >= BUSY_PCT:
        return {"bound": "compute", "numbers": numbers,
                "evidence": f"achieved FLOP rate {_of_peak(fl or 0)} (bandwidth {_pct(bw or 0)})"}
    return _latency(top, numbers, f"only {bw or 0:.0f}% of peak bandwidth and {fl or 0:.0f}% of"
                                  " peak FLOP rate")


def _pct(value: float) -> str:
    """A share of a measured peak; one above it says so (a measured peak is what a copy or a
    matmul did here, not a bound: a kernel may pass it, and is not 171 % "of" it)."""
    return f"{value:.0f}%" + (" — above the measured peak" if value > ABOVE_PEAK_PCT else "")


def _of_peak(value: float, note: str = "") -> str:
    if value > ABOVE_PEAK_PCT:
        return f"{value:.0f}% of the measured peak{note} — above it: the peak was measured, not a bound"
    return f"{value:.0f}% of the measured peak{note}"


def _latency(top: list[dict[str, Any]], numbers: dict[str, Any], far: str) -> dict[str, Any]:
    """Neither unit is busy: latency or occupancy bound; say occupancy and the top stall."""
    achieved = _weighted(top, "occupancy_pct")
    theory = _weighted(top, "theoretical_occupancy_pct")
    parts = [far]
    if achieved is not None:
        occ = f"occupancy {achieved:.0f}%"
        if theory is not None:
            occ += f" of {theory:.0f}% theoretical"
        limiter = top[0].get("occupancy_limiter") if top else None
        if limiter and theory is not None and theory < 100:
            occ += f" (limited by {limiter})"
        parts.append(occ)
        numbers = {**numbers, "occupancy_pct": achieved, "theoretical_occupancy_pct": theory}
    stalls = top[0].get("stalls") if top else None
    if stalls:
        parts.append(f"top stall {stalls[0][0]}")
    if top and top[0].get("grid") and not top[0].get("occupancy_pct"):
        grid = top[0]["grid"]
        blocks = grid[0] * grid[1] * grid[2] if isinstance(grid, list) and len(grid) == 3 else None
        if blocks is not None:
            parts.append(f"grid of {blocks} blocks")
    return {"bound": "latency", "evidence": "; ".join(parts), "numbers": numbers}


def _short(name: str, width: int = 40) -> str:
    """A kernel's name without its argument list, cut to `width`."""
    base = re.sub(r"\(.*$", "", name).strip() or name
    base = re.sub(r"^void ", "", base)
    return base if len(base) <= width else base[: width - 1] + "…"


BOUND_LABELS = {"memory": "memory-bound", "compute": "compute-bound",
                "latency": "latency/occupancy-bound", "launch": "launch-bound", "unknown": "unknown"}


def summary_lines(profile: dict[str, Any], limit: int = TOP_KERNELS) -> list[str]:
    """A compact profile (a few lines) for prompts and logs."""
    if not profile or profile.get("tool") in (None, "off"):
        return []
    if profile.get("error"):
        return [f"profile ({profile.get('tool')}): not taken: {profile['error']}"]
    d = profile.get("diagnosis") or {}
    lines = [f"diagnosis ({profile.get('tool')}): {BOUND_LABELS.get(d.get('bound'), d.get('bound'))}"
             f" — {d.get('evidence', '')}"]
    for k in (profile.get("kernels") or [])[:limit]:
        bits = [f"{k.get('share', 0):.0%} of device time", f"{k.get('time_us', 0):.1f} us"]
        for key, label in (("dram_pct", "DRAM"), ("l2_pct", "L2"), ("sm_pct", "SM"),
                           ("fma_pct", "FMA"), ("tensor_pct", "tensor")):
            if k.get(key) is not None:
                bits.append(f"{label} {k[key]:.0f}%")
        if k.get("occupancy_pct") is not None:
            occ = f"occupancy {k['occupancy_pct']:.0f}%"
            if k.get("theoretical_occupancy_pct") is not None:
                occ += f"/{k['theoretical_occupancy_pct']:.0f}%"
            bits.append(occ)
        if k.get("block") or k.get("block_size"):
            bits.append(f"block {_dims(k.get('block') or k.get('block_size'))}")
        if k.get("grid") or k.get("grid_size"):
            bits.append(f"grid {_dims(k.get('grid') or k.get('grid_size'))}")
        if k.get("registers") is not None:
            bits.append(f"{k['registers']:g} regs")
        if k.get("smem_bytes"):
            bits.append(f"{k['smem_bytes']:g} B smem")
        if k.get("stalls"):
            bits.append("stalls " + ", ".join(s for s, _ in k["stalls"][:2]))
        lines.append(f"  {_short(k.get('name', '?'))}: " + ", ".join(bits))
    return lines


def _dims(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "x".join(str(int(v)) for v in value)
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def achieved(flops: float | None, nbytes: float | None, time_ms: float | None,
             peaks: dict[str, float] | None, half: bool = False) -> dict[str, float]:
    """Achieved bandwidth and FLOP rate as % of measured peaks (keys absent where unknown)."""
    out: dict[str, float] = {}
    if not time_ms or time_ms <= 0 or not peaks:
        return out
    seconds = time_ms / 1e3
    if nbytes and peaks.get("bandwidth"):
        out["bandwidth_pct"] = 100.0 * nbytes / seconds / peaks["bandwidth"]
    rate = peaks.get("bf16") if half else max(peaks.get("fp32") or 0.0, peaks.get("tf32") or 0.0)
    if flops and rate:
        out["flops_pct"] = 100.0 * flops / seconds / rate
    return out


def is_half(out: Any) -> bool:
    """Whether a forward's output is 16-bit (fp16, bf16): its FLOP rate is put against the BF16 peak."""
    import torch

    t = out[0] if isinstance(out, (list, tuple)) and out else out
    return isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16)
