"""torch.profiler: the kernel table (names, launch configs, device time; CUPTI tracing, no
counters) over a few warmed forwards, with the wall time per call and the device's measured
peaks, so the diagnosis comes from the speed of light; and the parser of its chrome trace.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from engine.evaluate.jobs import EvalJob
from engine.evaluate.profile.diagnosis import is_half
from engine.evaluate.profile.ncu import finish_kernels


def parse_trace_kernels(trace: dict[str, Any], calls: int) -> list[dict[str, Any]]:
    """Kernels from a torch.profiler chrome trace (events of category "kernel"), per call."""
    raw = []
    for ev in trace.get("traceEvents") or []:
        if not isinstance(ev, dict) or ev.get("cat") != "kernel":
            continue
        args = ev.get("args") or {}
        k: dict[str, Any] = {"name": str(ev.get("name", "?")), "time_us": float(ev.get("dur") or 0.0)}
        for src, dst in (("grid", "grid"), ("block", "block"), ("registers per thread", "registers"),
                         ("shared memory", "smem_bytes"),
                         ("est. achieved occupancy %", "occupancy_pct")):
            if args.get(src) is not None:
                k[dst] = args[src]
        raw.append(k)
    kernels = finish_kernels(raw)
    for k in kernels:
        k["time_us"] = (k.get("time_us") or 0.0) / max(1, calls)
        k["calls"] = max(1, round(k.get("calls", 1) / max(1, calls)))
    return kernels


def torch_profile(job: EvalJob, calls: int = 3) -> dict[str, Any]:
    """The torch.profiler kernel table over `calls` warmed forwards, with wall time per call."""
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile

    from engine.evaluate.child.load import model_and_inputs
    from engine.evaluate.harness import timing

    model, inputs, _ = model_and_inputs(job)
    with torch.no_grad():
        for _ in range(2):
            model(*inputs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            for _ in range(calls):
                out = model(*inputs)
            torch.cuda.synchronize()
            wall_us = (time.perf_counter() - t0) * 1e6 / calls
        with tempfile.NamedTemporaryFile("w+", suffix=".json", delete=False) as fh:
            path = fh.name
        prof.export_chrome_trace(path)
        with open(path) as fh:
            trace = json.load(fh)
        os.unlink(path)
    kernels = parse_trace_kernels(trace, calls)
    return {"kernels": kernels, "kernels_per_call": sum(k.get("calls", 1) for k in kernels),
            "device_us_per_call": sum(k.get("time_us") or 0.0 for k in kernels),
            "wall_us_per_call": wall_us, "peaks": timing.device_peaks(job.cache_dir),
            "half": is_half(out)}


