"""Why a kernel is slow, and why a crash crashed: profiles of correct variants, a diagnosis, and
compute-sanitizer reports of illegal memory accesses.

Taken after the verdict, outside the timed window, while the evaluator still holds the device
(its host-wide timing lock), each in its own subprocess with a time budget:

- ``ncu``: the candidate's forward once under Nsight Compute (``--profile-from-start off``; the
  call is bracketed by cudaProfilerStart/Stop), a small metric set per kernel: DRAM and L2
  throughput, SM / FMA / tensor pipe utilisation (% of peak), achieved and theoretical occupancy and
  what limits it (registers per thread, shared memory per block, block size), warp-stall reasons.
- ``torch``: the torch.profiler (CUPTI tracing, no counters) kernel table: names, launch configs,
  device time; plus the device's measured peaks, so the diagnosis comes from the speed of light.
- ``cpu`` (the cpu backend): no counters; achieved bandwidth and FLOP rate against measured peaks.

``auto`` uses ncu where it can read counters (probed once per device), else torch, else off, and
records which ran. Profiles are cached by source, problem, sizes, tool and device, like builds.

Run as ``python -m engine.evaluate.profile JOB.json OUT.json ACTION`` for the subprocess side.
Torch + stdlib only, like all of engine.evaluate.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import json
import os
import platform
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from engine.evaluate.jobs import EvalJob

PROFILE_MODES = ("auto", "ncu", "torch", "off")
DEFAULT_BUDGET_S = 120.0
TOP_KERNELS = 3

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
STALLS = ("long_scoreboard", "short_scoreboard", "barrier", "mio_throttle", "lg_throttle",
          "math_pipe_throttle", "wait", "not_selected", "no_instruction", "membar", "drain",
          "dispatch_stall", "branch_resolving", "imc_miss", "tex_throttle", "sleeping")
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"

# Illegal accesses that compute-sanitizer's memcheck can locate.
# (cudaErrorInvalidAddressSpace: a store far out of bounds, seen on an H100 from the scripted
# layernorm sampleloop_1, lands outside the global window.)
SANITIZE_PATTERNS = ("illegal memory access", "misaligned address", "illegal address",
                     "cudaErrorIllegalAddress", "cudaErrorMisalignedAddress", "out of bounds",
                     "cudaErrorInvalidAddressSpace", "not supported on global/shared address space")

# Diagnosis thresholds (% of peak).
BUSY_PCT = 60.0  # a unit this busy is the bound
LAUNCH_MEAN_US = 10.0  # kernels this short on average, several per call: launch overhead rules
LAUNCH_MIN_KERNELS = 4
IDLE_FRACTION = 0.5  # the device busy less than this share of a call: launches/host work rule


# -- the diagnosis (pure) --------------------------------------------------------------------


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
    if (bw or 0) >= BUSY_PCT and (bw or 0) >= (fl or 0):
        return {"bound": "memory", "numbers": numbers,
                "evidence": f"achieved bandwidth {bw:.0f}% of the measured peak"
                            f" (FLOP rate {fl or 0:.0f}%)"}
    if (fl or 0) >= BUSY_PCT:
        return {"bound": "compute", "numbers": numbers,
                "evidence": f"achieved FLOP rate {fl:.0f}% of the measured peak"
                            f" (bandwidth {bw or 0:.0f}%)"}
    return _latency(top, numbers, f"only {bw or 0:.0f}% of peak bandwidth and {fl or 0:.0f}% of"
                                  " peak FLOP rate")


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


# -- parsing tool output (pure) ------------------------------------------------------------


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
    return _finish_kernels([by_id[k] for k in order])


def _finish_kernels(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
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
    kernels = _finish_kernels(raw)
    for k in kernels:
        k["time_us"] = (k.get("time_us") or 0.0) / max(1, calls)
        k["calls"] = max(1, round(k.get("calls", 1) / max(1, calls)))
    return kernels


_SAN_HEADER = re.compile(r"^(Invalid __\w+__ (?:read|write|atomic)|Misaligned|Out-of-range|"
                         r"Malloc/Free error|Memory leak)", re.IGNORECASE)
_SAN_DETAIL = ("at ", "by thread", "address", "and is", "in ")


def parse_sanitizer(text: str, limit: int = 2) -> str:
    """The first `limit` errors of a compute-sanitizer memcheck run, each as its header (access
    and size) with the kernel (and source line where the build has line info), thread and block,
    and address; then the error summary. "" when the output holds no error."""
    reports: list[list[str]] = []
    current: list[str] | None = None
    summary = ""
    for raw in text.splitlines():
        if not raw.startswith("="):
            continue
        body = raw.lstrip("=").strip()
        if "ERROR SUMMARY" in body:
            summary = body
            continue
        if _SAN_HEADER.match(body):
            current = [body] if len(reports) < limit else None
            if current is not None:
                reports.append(current)
            continue
        if current is None:
            continue
        if not body or body.startswith(("Saved host backtrace", "Host Frame", "Device Frame")):
            current = None
        elif body.lower().startswith(_SAN_DETAIL) and len(current) < 6:
            current.append("  " + body)
    if not reports:
        return ""
    return "\n".join(["\n".join(r) for r in reports] + ([summary] if summary else []))


def wants_sanitizer(log: str) -> bool:
    low = (log or "").lower()
    return any(p.lower() in low for p in SANITIZE_PATTERNS)


# -- the engine side -------------------------------------------------------------------------


def find_tool(name: str) -> str | None:
    """A CUDA tool's path: `KTREE_NCU` / `KTREE_SANITIZER` (a path, or "none": unavailable), else
    PATH, else $CUDA_HOME/bin, /usr/local/cuda/bin."""
    env = {"ncu": "KTREE_NCU", "compute-sanitizer": "KTREE_SANITIZER"}[name]
    given = os.environ.get(env)
    if given is not None:
        return None if given.lower() in ("", "none", "off", "0") or not os.path.exists(given) else given
    found = shutil.which(name)
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "bin", name)):
            return os.path.join(home, "bin", name)
    return None


def cache_key(job: EvalJob, tool: str, device: str) -> str:
    problem = Path(job.problem_path).read_text() if job.problem_path else ""
    return hashlib.sha256(json.dumps([
        job.solution_source, problem, sorted(job.sizes.items()), job.backend, tool, device,
        platform.node(), job.flops, job.bytes,
    ]).encode()).hexdigest()[:24]


def ncu_command(ncu: str, log_path: str) -> list[str]:
    metrics = [*NCU_METRICS, *(STALL_METRIC.format(s) for s in STALLS)]
    return [ncu, "--csv", "--page", "details", "--print-metric-name", "name", "--print-units", "base",
            "--profile-from-start", "off", "--launch-count", "64", "--metrics", ",".join(metrics),
            "--log-file", log_path]


class Profiler:
    """Profiles for one evaluator: the mode, the probe of ncu (once per device), the cache dir.
    The runner (`run`) is the evaluator's: it starts a command in the sandbox, on the device."""

    def __init__(self, mode: str, cache_dir: str, budget_s: float = DEFAULT_BUDGET_S):
        if mode not in PROFILE_MODES:
            raise ValueError(f"unknown profile mode {mode!r} (choose from {', '.join(PROFILE_MODES)})")
        self.mode = mode
        self.cache_dir = cache_dir
        self.budget_s = budget_s
        self._ncu_ok: dict[str, tuple[bool, str]] = {}  # device -> (counters readable, why not)
        self._reference: dict[str, dict[str, Any]] = {}

    async def _run(self, runner: Any, argv_prefix: list[str], job: EvalJob, action: str,
                   env: dict[str, str], timeout_s: float) -> tuple[dict[str, Any] | None, str, str]:
        """Run the profile subprocess (behind `argv_prefix`: ncu or compute-sanitizer, or none).
        (its result JSON or None, its output, the tool's log file's text)."""
        return await runner(argv_prefix, job, action, env, timeout_s)

    async def ncu_usable(self, runner: Any, job: EvalJob, env: dict[str, str], device: str) -> tuple[bool, str]:
        """Can ncu read this device's counters? Probed once per device on a tiny job."""
        if device in self._ncu_ok:
            return self._ncu_ok[device]
        ncu = find_tool("ncu")
        if ncu is None:
            answer = (False, "ncu not found")
        else:
            probe = job.replace(solution_source="", problem_path="", sizes={})
            _, out, log = await runner(ncu_command(ncu, "{log}"), probe, "probe", env, 120.0)
            text = log + out
            if "ERR_NVGPUCTRPERM" in text:
                answer = (False, "ncu cannot read the GPU's counters (ERR_NVGPUCTRPERM)")
            elif parse_ncu_csv(log):
                answer = (True, "")
            else:
                answer = (False, f"ncu read no counters: {_last_line(text) or 'no output'}")
        self._ncu_ok[device] = answer
        return answer

    async def profile(self, runner: Any, job: EvalJob, time_ms: float | None, env: dict[str, str],
                      device: str, ref_ms: float | None = None) -> dict[str, Any]:
        """The profile of a correct variant (and its diagnosis; with the reference's, whose
        achieved rates come from `ref_ms`, its eager time); {} when off."""
        if self.mode == "off":
            return {}
        started = time.perf_counter()
        if job.backend == "cpu":
            result = await self._cpu(runner, job, time_ms, env, device)
        else:
            tool, why = await self._tool(runner, job, env, device)
            if tool == "off":
                return {"tool": "off", "why": why}
            result = await self._cached(runner, job, time_ms, env, device, tool)
            if why:
                result["why"] = why
            if job.solution_source:
                ref = await self.reference(runner, job, env, device, tool, ref_ms)
                if ref:
                    result["reference"] = ref
        result["seconds"] = round(time.perf_counter() - started, 3)
        return result

    async def _tool(self, runner: Any, job: EvalJob, env: dict[str, str], device: str) -> tuple[str, str]:
        if self.mode == "torch":
            return "torch", ""
        if self.mode == "ncu":
            return "ncu", ""
        ok, why = await self.ncu_usable(runner, job, env, device)
        return ("ncu", "") if ok else ("torch", f"auto: {why}; torch.profiler instead")

    async def reference(self, runner: Any, job: EvalJob, env: dict[str, str], device: str,
                        tool: str, ref_ms: float | None = None) -> dict[str, Any]:
        """The reference's profile (compact), once per problem, sizes, device and tool."""
        ref_job = job.replace(solution_source="")
        key = cache_key(ref_job, tool, device)
        if key not in self._reference:
            full = await self._cached(runner, ref_job, ref_ms, env, device, tool)
            self._reference[key] = {k: full[k] for k in ("tool", "diagnosis", "kernels", "error")
                                    if k in full}
            if "kernels" in self._reference[key]:
                self._reference[key]["kernels"] = self._reference[key]["kernels"][:TOP_KERNELS]
        return self._reference[key]

    def _cache_file(self, job: EvalJob, tool: str, device: str) -> Path:
        return Path(self.cache_dir) / "profile" / f"{cache_key(job, tool, device)}.json"

    async def _cached(self, runner: Any, job: EvalJob, time_ms: float | None, env: dict[str, str],
                      device: str, tool: str) -> dict[str, Any]:
        file = self._cache_file(job, tool, device)
        if file.exists():
            with _suppress():
                data = json.loads(file.read_text())
                data["cached"] = True
                return data
        data = await self._take(runner, job, time_ms, env, tool)
        if not data.get("error"):
            file.parent.mkdir(parents=True, exist_ok=True)
            tmp = file.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, file)
        return data

    async def _take(self, runner: Any, job: EvalJob, time_ms: float | None, env: dict[str, str],
                    tool: str) -> dict[str, Any]:
        profile: dict[str, Any] = {"tool": tool}
        if tool == "ncu":
            ncu = find_tool("ncu")
            if ncu is None:
                return {"tool": tool, "error": "ncu not found"}
            result, out, log = await runner(ncu_command(ncu, "{log}"), job, "ncu", env, self.budget_s)
            kernels = parse_ncu_csv(log) or parse_ncu_csv(out)
            if not kernels:
                why = (result or {}).get("error") or _last_line(log + "\n" + out) or "no kernel was profiled"
                return {"tool": tool, "error": why}
        else:
            result, out, _ = await runner([], job, "torch", env, self.budget_s)
            if not result or result.get("error"):
                return {"tool": tool, "error": (result or {}).get("error") or _last_line(out) or "it died"}
            kernels = result.get("kernels") or []
        result = result or {}
        profile["kernels"] = kernels
        for key in ("kernels_per_call", "device_us_per_call", "wall_us_per_call", "peaks"):
            if result.get(key) is not None:
                profile[key] = result[key]
        if "kernels_per_call" not in profile:
            profile["kernels_per_call"] = sum(k.get("calls", 1) for k in kernels)
            profile["device_us_per_call"] = sum(k.get("time_us") or 0.0 for k in kernels)
        if time_ms:
            profile["achieved"] = achieved(job.flops, job.bytes, time_ms, result.get("peaks"),
                                           bool(result.get("half")))
        profile["diagnosis"] = diagnose(profile)
        return profile

    async def _cpu(self, runner: Any, job: EvalJob, time_ms: float | None, env: dict[str, str],
                   device: str) -> dict[str, Any]:
        """No counters on the cpu backend: achieved rates against the host's measured peaks."""
        file = Path(self.cache_dir) / "profile" / f"cpu-peaks-{_safe(platform.node())}.json"
        peaks = None
        if file.exists():
            with _suppress():
                peaks = json.loads(file.read_text())
        if peaks is None:
            result, out, _ = await runner([], job.replace(solution_source="", problem_path=""), "cpu-peaks",
                                          env, self.budget_s)
            peaks = (result or {}).get("peaks")
            if not peaks:
                return {"tool": "cpu", "error": (result or {}).get("error") or _last_line(out) or "no peaks"}
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(json.dumps(peaks))
        profile: dict[str, Any] = {"tool": "cpu", "kernels": [], "peaks": peaks,
                                   "achieved": achieved(job.flops, job.bytes, time_ms, peaks)}
        profile["diagnosis"] = diagnose(profile)
        return profile

    async def sanitize(self, runner: Any, job: EvalJob, env: dict[str, str]) -> str:
        """compute-sanitizer memcheck's report of the candidate's forward ("" when none)."""
        tool = find_tool("compute-sanitizer")
        if tool is None:
            return ""
        argv = [tool, "--tool", "memcheck", "--print-limit", "4", "--show-backtrace", "device",
                "--log-file", "{log}"]
        _, out, log = await runner(argv, job, "sanitize", env, self.budget_s)
        return parse_sanitizer(log + "\n" + out)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is not None and issubclass(exc[0], (OSError, ValueError))  # type: ignore[arg-type]


# -- the subprocess side ---------------------------------------------------------------------


def _model_and_inputs(job: EvalJob) -> tuple[Any, Any, str]:
    import torch

    from engine.evaluate import child
    from engine.evaluate.loading import load_module_from_path

    device = "cuda" if job.backend == "cuda" else "cpu"
    problem = load_module_from_path(job.problem_path, job.sizes)
    init = problem.get_init_inputs()
    torch.manual_seed(job.seed)
    ref = problem.Model(*init)
    if job.solution_source:
        solution = child.load_solution(job)
        torch.manual_seed(job.seed)
        model = solution.ModelNew(*init)
        if isinstance(model, torch.nn.Module) and isinstance(ref, torch.nn.Module):
            child._sync_state(ref, model)
            model = model.to(device).eval()
    else:
        model = ref.to(device).eval()
    torch.manual_seed(job.seed + 2000)
    return model, child._inputs(problem, device), device


def _probe() -> dict[str, Any]:
    import torch

    x = torch.ones(1024, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    (x * 2).sum().item()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return {"ok": True}


def _under_ncu(job: EvalJob) -> dict[str, Any]:
    """One forward, warmed, bracketed by cudaProfilerStart/Stop (ncu profiles only that)."""
    import torch

    from engine.evaluate import timing

    model, inputs, _ = _model_and_inputs(job)
    with torch.no_grad():
        for _ in range(2):
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        out = model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    half = _is_half(out)
    return {"peaks": timing.device_peaks(job.cache_dir), "half": half}


def _is_half(out: Any) -> bool:
    import torch

    t = out[0] if isinstance(out, (list, tuple)) and out else out
    return isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16)


def _torch_profile(job: EvalJob, calls: int = 3) -> dict[str, Any]:
    """The torch.profiler kernel table over `calls` warmed forwards, with wall time per call."""
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile

    from engine.evaluate import timing

    model, inputs, _ = _model_and_inputs(job)
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
            "half": _is_half(out)}


def _cpu_peaks() -> dict[str, Any]:
    """This host's copy bandwidth and FP32 matmul rate (best of several), for the cpu diagnosis."""
    import torch

    def best(fn: Any, reps: int = 5) -> float:
        fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    src = torch.ones(2**25)  # 128 MiB
    dst = torch.empty_like(src)
    peaks = {"bandwidth": 2 * src.numel() * 4 / best(lambda: dst.copy_(src))}
    n = 1024
    a, b = torch.randn(n, n), torch.randn(n, n)
    peaks["fp32"] = 2 * n**3 / best(lambda: a @ b)
    return {"peaks": peaks}


def _sanitize(job: EvalJob) -> dict[str, Any]:
    import torch

    model, inputs, _ = _model_and_inputs(job)
    with torch.no_grad():
        model(*inputs)
        torch.cuda.synchronize()
    return {"ok": True}


ACTIONS = {"probe": lambda job: _probe(), "ncu": _under_ncu, "torch": _torch_profile,
           "cpu-peaks": lambda job: _cpu_peaks(), "sanitize": _sanitize}


def main(argv: list[str]) -> int:
    job_path, result_path, action = argv[1], argv[2], argv[3]
    with open(job_path) as f:
        job = EvalJob.from_dict(json.load(f))
    try:
        result = ACTIONS[action](job)
    except Exception as exc:  # the candidate's fault, or the tool's: reported, not raised
        result = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    with open(result_path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(result_path + ".tmp", result_path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


async def run_tool(argv_prefix: list[str], job: EvalJob, action: str, env: dict[str, str],
                   timeout_s: float, sandbox: Any) -> tuple[dict[str, Any] | None, str, str]:
    """Start `[prefix...] python -m engine.evaluate.profile JOB OUT ACTION` in the sandbox and wait
    (killed at `timeout_s`). `{log}` in the prefix is the tool's log file. (result or None, the
    process's output tail, the tool's log)."""
    from engine.evaluate.runner import _read_tail
    from engine.evaluate.sandbox import evaluation_binds, kill_tree, make_workdir

    workdir = make_workdir(f"profile-{action}")
    job_path, result_path = workdir / "job.json", workdir / "result.json"
    out_path, log_path = workdir / "out.txt", workdir / "tool.log"
    job_path.write_text(json.dumps(job.to_dict()))
    prefix = [a.replace("{log}", str(log_path)) for a in argv_prefix]
    cache_ro, cache_rw = evaluation_binds(job.cache_dir)  # runs the candidate: no build dir writable
    argv = sandbox.command(
        [*prefix, sys.executable, "-m", "engine.evaluate.profile", str(job_path), str(result_path), action],
        workdir=workdir, read_only=([job.problem_path] if job.problem_path else []) + cache_ro,
        writable=cache_rw, timeout_s=timeout_s)
    try:
        with open(out_path, "wb") as out:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=workdir, env=sandbox.env(env, workdir=workdir), stdin=asyncio.subprocess.DEVNULL,
                stdout=out, stderr=out, start_new_session=True)
            try:
                await asyncio.wait_for(proc.wait(), timeout_s)
            except TimeoutError:
                kill_tree(proc.pid)
                await proc.wait()
                return {"error": f"over its time budget of {timeout_s:g} s"}, _read_tail(out_path), ""
            except asyncio.CancelledError:
                kill_tree(proc.pid)
                await proc.wait()
                raise
        kill_tree(proc.pid)
        result = json.loads(result_path.read_text()) if result_path.exists() else None
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        keep = os.environ.get("KTREE_PROFILE_LOGS")  # a dir: keep each tool's log (debugging)
        if keep and (log or out_path.exists()):
            os.makedirs(keep, exist_ok=True)
            stem = os.path.join(keep, f"{action}-{time.time():.3f}")
            with open(f"{stem}.log", "w") as fh:
                fh.write(log + "\n--- output ---\n" + _read_tail(out_path))
        return result, _read_tail(out_path), log
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
