"""`ktree bench gpu-cost`: what each variant costs the device it is judged on.

For each seed problem, the scripted library's honest kernels (engine.bench.honest)
are built all at once in the compile pool, then evaluated one at a time, so the device's busy
time grows by exactly one variant's held time per evaluation. Per variant, the seconds the
device was held, split by phase from the verdict's own record (`timing.phases_s` from the worker,
`timing.held_s` from the evaluator):

- load: the worker's start where it was paid under the lock, the problem and the solution
  imported, the models built and moved, a Triton solution's JIT;
- ref: the check trials' inputs and fp64 answers (once per worker: engine.evaluate.harness.expected_cache);
- check: the candidate's check trials; time: the timing passes and the recheck;
- profile: a profile taken while held (`--profile`: each correct variant profiled on demand);
- baseline: the reference's eager and torch.compile timing (once per problem and GPU);
- audit: the judge's fresh-input calls from outside the candidate's process (engine.evaluate.host.judge);
- other: the rest of the held time (protocol, the process's memory given back, ...).

The ref phase's own parts (the answers, the reference's op profile, its outputs compared trial by
trial, the timed input sets with the speed of light) come in each row as `ref_parts_s`.

Beside it the timing floor: the least device time a verdict needs, (warm-up + reps) x (reference
+ candidate time) + trials x candidate time, and the goal 1.5 x floor + 0.5 s. A verdict without
the phase record (an older evaluator) still gets its held total, from the device's busy time.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from engine.bench.honest import SEED_PROBLEMS, honest_variants
from engine.bench.summary import cell, markdown_table, median
from engine.evaluate import WARMUP_CALLS, LocalEvaluator
from engine.problems import load_problem

PHASES = ("load", "ref", "check", "time", "profile", "baseline", "audit", "other")


def floor_s(verdict: Any) -> float | None:
    """The timing floor of one verdict, in seconds (None: not timed)."""
    if not verdict.reps or verdict.time_ms is None or verdict.ref_eager_ms is None:
        return None
    return ((WARMUP_CALLS + verdict.reps) * (verdict.ref_eager_ms + verdict.time_ms)
            + (verdict.trials or 0) * verdict.time_ms) / 1e3


def split(verdict: Any, held_total: float) -> dict[str, float | None]:
    """The held seconds by phase (None where the verdict does not say)."""
    timing = verdict.timing or {}
    phases, held = timing.get("phases_s"), timing.get("held_s")
    if not phases or not held:
        return {name: None for name in PHASES}
    out = {
        "load": held.get("start", 0.0) + phases.get("load", 0.0) + phases.get("jit", 0.0),
        "ref": phases.get("reference", 0.0),
        "check": phases.get("check", 0.0),
        "time": phases.get("time", 0.0),
        "profile": held.get("after", 0.0) + held.get("profile", 0.0),
        "baseline": held.get("reference", 0.0),
        "audit": (timing.get("judge") or {}).get("wall_s", 0.0),
    }
    out["other"] = max(0.0, held_total - sum(out.values()))
    return out


async def gpu_cost_bench(backend: str, arch: str | None = None, problems: list[str] | None = None,
                         per_problem: int | None = 3, profile: str = "off") -> dict[str, Any]:
    """Rows per variant and a summary per problem (see the module's docstring)."""
    rows: list[dict[str, Any]] = []
    evaluator = LocalEvaluator(backend, cuda_arch=arch, profile=profile)
    device = evaluator.devices[0]
    try:
        for name in problems or SEED_PROBLEMS:
            files = honest_variants(name, backend)[:per_problem]
            if not files:
                continue
            problem = load_problem(name)
            cost = problem.cost(backend)
            jobs = [evaluator.job(problem.path, f.read_text(), problem.sizes_for(backend), flops=cost.flops,
                                  bytes=cost.bytes) for f in files]
            print(f"{name}: building {len(files)} variants ...", file=sys.stderr, flush=True)
            # Build all at once, then judge one at a time: the device's busy time then grows by
            # one variant's held time per evaluation.
            await _build_all(evaluator, jobs)
            for f, job in zip(files, jobs, strict=True):
                busy = device.busy_s
                verdict = await evaluator.evaluate(job)
                if profile != "off" and verdict.ok and hasattr(evaluator, "profile"):
                    verdict = await evaluator.profile(job, verdict)
                held_total = device.busy_s - busy
                record = (verdict.timing or {}).get("held_s") or {}
                row = {"problem": name, "variant": f.name, "status": verdict.status,
                       "held_s": round(held_total, 4), "floor_s": floor_s(verdict),
                       "time_ms": verdict.time_ms, "ref_ms": verdict.ref_eager_ms, "reps": verdict.reps,
                       "worker_start_in_lock": "start" in record,
                       "reference_cached": ((verdict.timing or {}).get("reference_checks") or {}).get("cached"),
                       "ref_parts_s": (verdict.timing or {}).get("reference_parts_s"),
                       **{f"{k}_s": (round(v, 4) if v is not None else None)
                          for k, v in split(verdict, held_total).items()}}
                rows.append(row)
                # the phases said as each variant ends: a run cut before its JSON still tells them
                phases = " ".join(f"{k} {row[f'{k}_s']:.2f}" for k in PHASES if row.get(f"{k}_s"))
                parts = " ".join(f"{k} {v:.2f}" for k, v in (row["ref_parts_s"] or {}).items()
                                 if isinstance(v, (int, float)))
                print(f"{name}/{f.name}: {verdict.status}, held {held_total:.2f} s"
                      f" (floor {row['floor_s'] or 0:.3f} s){': ' + phases if phases else ''}"
                      f"{'; ref: ' + parts if parts else ''}", file=sys.stderr, flush=True)
    finally:
        await evaluator.close()
    return {"backend": backend, "gpu": (device.info or {}).get("name"), "profile": profile,
            "rows": rows, "problems": summarize(rows)}


async def _build_all(evaluator: LocalEvaluator, jobs: list[Any]) -> None:
    """Every job's build at once in the compile pool (cache hits after the first time)."""
    from engine.evaluate import run_child

    async def one(job: Any) -> None:
        async with evaluator._slot("compile"):
            await run_child(job.replace(mode="compile"), evaluator.compile_timeout_s, evaluator._compile_env,
                            evaluator.sandbox)

    await asyncio.gather(*(one(j) for j in jobs))


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per problem: medians of the timed variants' held seconds, floors and phases; the goal."""
    out = []
    for name in dict.fromkeys(r["problem"] for r in rows):
        timed = [r for r in rows if r["problem"] == name and r["floor_s"] is not None]
        if not timed:
            out.append({"problem": name, "variants": 0})
            continue
        held = median(r["held_s"] for r in timed)
        floor = median(r["floor_s"] for r in timed)
        goal = 1.5 * floor + 0.5
        summary = {"problem": name, "variants": len(timed), "held_s": round(held, 4),
                   "floor_s": round(floor, 4), "goal_s": round(goal, 4), "meets_goal": held <= goal}
        for phase in PHASES:
            values = [r[f"{phase}_s"] for r in timed if r.get(f"{phase}_s") is not None]
            summary[f"{phase}_s"] = median(values, 4)
        out.append(summary)
    return out


def gpu_cost_table(result: dict[str, Any]) -> str:
    def num(v: Any) -> str:
        return cell(v, ".3f", blank="")

    rows = []
    for p in result["problems"]:
        if not p.get("variants"):
            rows.append((p["problem"], 0, *[""] * (4 + len(PHASES))))
            continue
        rows.append((p["problem"], p["variants"], num(p["held_s"]), num(p["floor_s"]), num(p["goal_s"]),
                     "yes" if p["meets_goal"] else "NO", *(num(p.get(f"{k}_s")) for k in PHASES)))
    return "\n".join([f"gpu-cost on {result.get('gpu') or result['backend']} (profile {result['profile']});"
                      " medians over each problem's timed honest variants, seconds",
                      markdown_table(("problem", "variants", "held", "floor", "goal 1.5xfloor+0.5", "met",
                                      *PHASES), rows)])
