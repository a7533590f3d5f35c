"""`ktree bench pipeline --scaling`: one device against several, in one run.

The same scripted search (engine.bench.pipeline) is run on every device given and on the first of
them alone, for each source mode: `distinct` (every variant a fresh source that really builds) and
`repeated` (the library's files as they are: repeats hit the build cache). Reported per mode:
variants per minute on each, their ratio, and per device its evaluations, busy fraction of the
wall and idle time while compiled variants waited.

One evaluator per placement (every device; the first alone) serves all of that placement's
searches, as one serves a long search, and only one exists at a time: a short warm-up search
first (the workers' start, the precompiled header, the references' times per GPU model),
reported apart, then a search per mode. Every device first, then the first alone: whatever the
first placement leaves warm (in `repeated` mode: the library's builds) the one-device runs find
ready, so the ratio is, if anything, low.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.bench.idle import idle_table
from engine.bench.pipeline import pipeline_bench
from engine.bench.summary import markdown_table
from engine.evaluate import LocalEvaluator

MODES = ("distinct", "repeated")
TARGET_RATIO_PER_DEVICE = 0.9  # several devices: at least 0.9x their count in variants per minute
TARGET_IDLE = 0.10  # each device idle at most this share of the time compiled variants waited


def _placement(backend: str, gpus: Sequence[int] | None, devices: int, one: bool) -> dict[str, Any]:
    """pipeline_bench's device arguments for all the devices, or the first alone."""
    if backend == "cuda":
        return {"gpus": list(gpus or [])[:1] if one else list(gpus or [])}
    return {"devices": 1 if one else devices}


async def scaling_bench(problem: Any, backend: str, arch: str | None, *, gpus: Sequence[int] | None = None,
                        devices: int = 1, modes: Sequence[str] = MODES, warm_up: bool = True,
                        **shape: Any) -> dict[str, Any]:
    """Per mode, the pipeline bench on every device and on the first alone; `gpus` (cuda, 2 or more)
    or `devices` (cpu slots, 2 or more) are the devices. `shape`: pipeline_bench's other arguments
    (rounds, ideas, variants, top, compile_workers, llm_latency, suite, language, ...)."""
    count = len(gpus or []) if backend == "cuda" else devices
    if count < 2:
        raise ValueError("a scaling bench needs two devices or more")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown source mode(s) {', '.join(unknown)} (known: {', '.join(MODES)})")
    # One evaluator per placement, kept for every search of that placement (its workers, started in
    # the warm-up, serve each mode as they serve a long search), and only one at a time: the other's
    # workers would hold GPU memory (their cached check sets) while this one runs.
    results: dict[str, dict[str, dict[str, Any]]] = {"many": {}, "one": {}}
    warm: dict[str, Any] = {}
    for key in ("many", "one"):
        evaluator = LocalEvaluator(backend, compile_workers=shape.get("compile_workers"), cuda_arch=arch,
                                   cpu_timer=shape.get("cpu_timer"),
                                   **_placement(backend, gpus, devices, key == "one"))
        try:
            if warm_up:
                small = {**shape, "rounds": 1, "ideas": 1, "variants": max(1, count), "suite": 1}
                done = await pipeline_bench(problem, backend, arch, **small, evaluator=evaluator,
                                            keep_evaluator=True)
                warm[key] = {"wall_s": done["wall_s"], "status": done["status"]}
            for mode in modes:
                results[key][mode] = await pipeline_bench(
                    problem, backend, arch, repeat_sources=mode == "repeated", **shape, evaluator=evaluator,
                    keep_evaluator=True)
        finally:
            await evaluator.close()
    runs: list[dict[str, Any]] = []
    for mode in modes:
        many, one = results["many"][mode], results["one"][mode]
        ratio = (many["variants_per_minute"] / one["variants_per_minute"]
                 if one["variants_per_minute"] else None)
        worst_idle = max((d["idle_fraction_while_waiting"] for d in many["devices"]), default=0.0)
        runs.append({
            "mode": mode, "devices": count, "one": one, "many": many,
            "ratio": None if ratio is None else round(ratio, 3),
            "worst_idle_while_waiting": worst_idle,
            "meets": {"ratio": ratio is not None and ratio >= TARGET_RATIO_PER_DEVICE * count,
                      "idle": worst_idle <= TARGET_IDLE},
        })
    finished = all(r[k]["status"] == "finished" for r in runs for k in ("one", "many"))
    status = "finished" if finished else "failed"
    return {"scaling": True, "problem": problem.name, "backend": backend, "devices": count,
            "status": status, "warm_up": warm or None,
            "target_ratio": round(TARGET_RATIO_PER_DEVICE * count, 2), "target_idle": TARGET_IDLE,
            "runs": runs}


def busy_fraction(device: dict[str, Any], wall_s: float) -> float:
    return round(device["busy_s"] / wall_s, 4) if wall_s else 0.0


def format_scaling(r: dict[str, Any]) -> str:
    n = r["devices"]
    head = (f"Scaling bench: {r['problem']} on {r['backend']}, 1 device against {n}, per source mode:"
            f" {r['status']} (targets: {n} devices >= {r['target_ratio']:g}x one in variants per minute;"
            f" each idle <= {r['target_idle'] * 100:.0f} % of the time compiled variants waited)")
    warm = r.get("warm_up") or {}
    if warm:
        head += "\nwarm-up (workers started, references timed): " + ", ".join(
            f"{'1 device' if key == 'one' else f'{n} devices'} {w['wall_s']:.1f} s" for key, w in warm.items())
    rows = []
    for run in r["runs"]:
        one, many = run["one"], run["many"]
        ratio = "-" if run["ratio"] is None else f"{run['ratio']:.2f}x"
        rows.append((run["mode"], one["evaluations"], f"{one['variants_per_minute']:.1f}",
                     many["evaluations"], f"{many['variants_per_minute']:.1f}", ratio,
                     f"{run['worst_idle_while_waiting'] * 100:.1f} %",
                     "yes" if all(run["meets"].values()) else "no"))
    per_device = []
    for run in r["runs"]:
        for label, result in (("1 device", run["one"]), (f"{n} devices", run["many"])):
            for d in result["devices"]:
                per_device.append((run["mode"], label, d["name"], d["jobs"],
                                   f"{busy_fraction(d, result['wall_s']) * 100:.1f} %",
                                   f"{d['idle_while_waiting_s']:.2f} s"
                                   f" ({d['idle_fraction_while_waiting'] * 100:.1f} %)"))
    idle = []  # where each run's idle seconds went (engine.bench.idle)
    for run in r["runs"]:
        for label, result in ((f"{n} devices", run["many"]), ("1 device", run["one"])):
            if result.get("idle"):
                idle += ["", f"Idle, {run['mode']} sources, {label} ({result['wall_s']:.1f} s wall):",
                         idle_table(result["idle"])]
    return "\n".join([
        head, "",
        markdown_table(("sources", "evaluations (1)", "variants/min (1)", f"evaluations ({n})",
                        f"variants/min ({n})", "ratio", "worst idle while waiting", "meets"), rows),
        "",
        markdown_table(("sources", "run", "device", "evaluations", "busy (of wall)",
                        "idle while variants waited"), per_device),
        *idle,
    ])
