"""`ktree bench profile`: what a profile costs per variant, on this machine.

The scripted library's honest kernels (those declaring "Intended outcome: correct") of each seed
problem are evaluated once without profiles (which also builds them), then once per profiler path
with profiles on: `ncu` and `torch` on cuda, the achieved-rates diagnosis (`auto`) on cpu. Each
path gets an empty profile cache, so every profile is taken, not read back; the build cache is
shared, so the builds are not paid twice. Per variant: the profile's seconds (the problem's first
variant also pays for the reference's profile, as in a search), the evaluation's own seconds, the
build's, and the overhead: profile seconds over build + evaluation + profile seconds, the variant's
whole cost in a search. Reported per path: median and p90 overhead, and each variant's diagnosis.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from engine.bench.honest import SEED_PROBLEMS, honest_variants
from engine.bench.summary import cell, median, quantile
from engine.evaluate import LocalEvaluator
from engine.problems import load_problem


def paths_for(backend: str) -> list[str]:
    return ["ncu", "torch"] if backend == "cuda" else ["auto"]


async def _evaluate(evaluator: LocalEvaluator, problem: Any, backend: str, files: list[Path]) -> list[Any]:
    cost = problem.cost(backend)
    jobs = [evaluator.job(problem.path, f.read_text(), problem.sizes_for(backend),
                          flops=cost.flops, bytes=cost.bytes) for f in files]
    return list(await asyncio.gather(*(evaluator.evaluate(j) for j in jobs)))


async def profile_bench(backend: str, arch: str | None, problems: list[str] | None = None,
                        paths: list[str] | None = None, per_problem: int | None = None) -> dict[str, Any]:
    chosen = {name: files[:per_problem] for name in problems or SEED_PROBLEMS
              if (files := honest_variants(name, backend))}
    rows: list[dict[str, Any]] = []
    base = LocalEvaluator(backend, cuda_arch=arch, profile="off")
    plain: dict[tuple[str, str], Any] = {}
    try:
        for name, files in chosen.items():
            print(f"evaluating {name} ({len(files)} variants, no profile) ...", file=sys.stderr, flush=True)
            for f, v in zip(files, await _evaluate(base, load_problem(name), backend, files), strict=True):
                plain[(name, f.name)] = v
    finally:
        await base.close()
    summary: dict[str, Any] = {}
    for path in paths or paths_for(backend):
        evaluator = LocalEvaluator(backend, cuda_arch=arch, profile=path)
        with tempfile.TemporaryDirectory(prefix="ktree-profile-bench-") as fresh:
            evaluator.profiler.cache_dir = fresh  # every profile taken, none read back
            try:
                for name, files in chosen.items():
                    print(f"profiling {name} with {path} ...", file=sys.stderr, flush=True)
                    verdicts = await _evaluate(evaluator, load_problem(name), backend, files)
                    for f, v in zip(files, verdicts, strict=True):
                        rows.append(_row(path, name, f.name, v, plain[(name, f.name)]))
            finally:
                await evaluator.close()
        mine = [r for r in rows if r["path"] == path and r["overhead"] is not None]
        overheads = [r["overhead"] for r in mine]
        summary[path] = {
            "variants": sum(r["path"] == path for r in rows),
            "profiled": len(mine),
            "tools": sorted({r["tool"] for r in mine if r["tool"]}),
            "overhead_median": median(overheads),
            "overhead_p90": quantile(overheads, 0.9),
            "profile_s_median": median(r["profile_s"] for r in mine),
        }
    return {"backend": backend, "problems": list(chosen), "paths": summary, "rows": rows}


def _row(path: str, problem: str, file: str, v: Any, plain: Any) -> dict[str, Any]:
    profile = v.profile or {}
    diagnosis = profile.get("diagnosis") or {}
    build_s = plain.compile_s or 0.0  # the first (uncached) build; the profiled run's was a cache hit
    eval_s = v.eval_s or 0.0
    seconds = profile.get("seconds")
    total = build_s + eval_s + (seconds or 0.0)
    ok = v.status == "correct" and seconds is not None and not profile.get("error")
    return {"path": path, "problem": problem, "file": file, "status": v.status, "speedup": v.speedup_eager,
            "tool": profile.get("tool"), "why": profile.get("why"), "error": profile.get("error"),
            "bound": diagnosis.get("bound"), "evidence": diagnosis.get("evidence"),
            "profile_s": seconds, "eval_s": v.eval_s, "build_s": plain.compile_s,
            "overhead": seconds / total if ok and total else None}


def profile_table(result: dict[str, Any]) -> str:
    lines = [f"profile overhead per variant on {result['backend']} (profile s / (build + evaluation +"
             " profile) s)", "",
             f"{'path':6} {'problem':18} {'variant':16} {'status':9} {'speedup':>8} {'tool':6} {'bound':12}"
             f" {'profile s':>9} {'eval s':>7} {'build s':>7} {'overhead':>8}"]
    num = cell

    for r in result["rows"]:
        bound = r["bound"] or r["error"] or "-"
        lines.append(f"{r['path']:6} {r['problem']:18} {r['file']:16} {r['status']:9}"
                     f" {num(r['speedup'], '.2f'):>8} {r['tool'] or '-':6} {bound:12.12}"
                     f" {num(r['profile_s'], '.2f'):>9} {num(r['eval_s'], '.2f'):>7}"
                     f" {num(r['build_s'], '.2f'):>7} {num(r['overhead'], '.1%'):>8}")
    lines.append("")
    for path, s in result["paths"].items():
        lines.append(f"{path}: {s['profiled']}/{s['variants']} profiled ({', '.join(s['tools']) or 'none'}),"
                     f" overhead median {num(s['overhead_median'], '.1%')} p90 {num(s['overhead_p90'], '.1%')},"
                     f" profile median {num(s['profile_s_median'], '.2f')} s")
    return "\n".join(lines)
