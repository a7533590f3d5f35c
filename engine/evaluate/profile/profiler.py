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

This module is the entry: the engine side (the Profiler: which tool, its cache, the budget) and
the subprocess side's dispatch, run as ``python -m engine.evaluate.profile.profiler JOB.json OUT.json
ACTION``. Each job lives in its own module: `ncu` (Nsight Compute), `torch_profiler`
(torch.profiler), `cpu` (the cpu backend's peaks) beside it in engine.evaluate.profile;
engine.evaluate.profile.sanitizer (compute-sanitizer) and engine.evaluate.profile.diagnosis (the pure diagnosis
and summary). Torch + stdlib only, like all of engine.evaluate.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from engine import settings
from engine.evaluate.jobs import EvalJob
from engine.evaluate.profile.cpu import cpu_peaks, working_set_bytes
from engine.evaluate.profile.diagnosis import BOUND_LABELS, TOP_KERNELS, achieved, diagnose, summary_lines
from engine.evaluate.profile.ncu import NCU_METRICS, ncu_command, parse_ncu_csv, probe, under_ncu
from engine.evaluate.profile.sanitizer import SANITIZE_PATTERNS, parse_sanitizer, sanitize, wants_sanitizer
from engine.evaluate.profile.torch_profiler import parse_trace_kernels, torch_profile

# Imported from here by the engine (evaluator, report, prompts, launch, cli) and the tests.
__all__ = ["BOUND_LABELS", "DEFAULT_BUDGET_S", "NCU_METRICS", "PROFILE_MODES", "SANITIZE_PATTERNS",
           "TOP_KERNELS", "Profiler", "achieved", "cache_key", "diagnose", "find_tool", "main", "ncu_command",
           "parse_ncu_csv", "parse_sanitizer", "parse_trace_kernels", "summary_lines",
           "wants_sanitizer"]

PROFILE_MODES = ("auto", "ncu", "torch", "off")
DEFAULT_BUDGET_S = 120.0


def find_tool(name: str) -> str | None:
    """A CUDA tool's path: `KTREE_NCU` / `KTREE_SANITIZER` (a path, or "none": unavailable), else
    PATH, else $CUDA_HOME/bin, /usr/local/cuda/bin."""
    env = {"ncu": "KTREE_NCU", "compute-sanitizer": "KTREE_SANITIZER"}[name]
    given = settings.get(env)
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
        footprint = working_set_bytes(job.bytes)
        name = f"cpu-peaks-v2-{_safe(platform.node())}" + (f"-ws{footprint}" if footprint else "")
        file = Path(self.cache_dir) / "profile" / f"{name}.json"
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
        # The working set stays in the caches between timed calls (the cpu timer flushes none):
        # its bytes are held to a copy of the same footprint, not to the DRAM's (profile.cpu).
        bandwidth = max(peaks.get("bandwidth") or 0.0, peaks.get("bandwidth_working_set") or 0.0)
        profile: dict[str, Any] = {"tool": "cpu", "kernels": [], "peaks": peaks,
                                   "achieved": achieved(job.flops, job.bytes, time_ms,
                                                        {**peaks, "bandwidth": bandwidth})}
        if peaks.get("bandwidth_working_set"):
            profile["peak_note"] = f"for a {peaks['working_set_bytes'] / 2**20:.1f} MiB working set"
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


# -- the subprocess side (engine.evaluate.profile: ncu, torch_profiler, cpu, sanitizer) --

ACTIONS = {"probe": lambda job: probe(), "ncu": under_ncu, "torch": torch_profile,
           "cpu-peaks": lambda job: cpu_peaks(job.bytes), "sanitize": sanitize}


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


if __name__ == "__main__":
    sys.exit(main(sys.argv))
