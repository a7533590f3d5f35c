"""`ktree bench pipeline`: how well the pipeline overlaps its stages. A scripted search (no LLM
latency, so only compiles and device work remain) on a throwaway DB, watched from outside:

- device busy: a device is held (`LocalEvaluator.device_states()`: a variant is loading, checking or
  timing on it; on cpu not while its holder waits for running builds to end); without that
  method, some variant is in a device phase (checking / timing / evaluating), reported on its
  own too. With several devices (GPUs), each device's busy seconds, jobs and idle fractions;
- compiled variants waiting: the evaluator's device queue (`LocalEvaluator.waiting["device"]`);
- compile slots in use: variants in the "compiling" phase, less those that have finished building
  and wait for the device while still showing "compiling" (an evaluator that reports no
  "waiting" phase).

The scripted provider answers as a model with an endless supply would (every call gets the K ideas
asked for; every variant is a distinct source that really builds: see engine.llm.scripted), unless
`repeat_sources` asks for the library's files as they are (identical sources then hit the build
cache, and the library's few ideas run out before the shape is filled).

Sampled every 5 ms. Reports the devices' idle time while compiled variants wait (any device idle
counts), and the wall time against the ideal of a perfect pipeline: total compile time / compile
workers + total device time / devices.

On the cpu backend a timing waits until running builds end (so no build skews it): that wait is
device idle time while compiled variants wait, by design; the < 5 % target is for cuda.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, TextIO

from engine.domain import DEVICE_PHASES
from engine.evaluate.base import Evaluator
from engine.evaluate.evaluator import LocalEvaluator
from engine.events import Event, NodeAdded, NodeUpdated, VerdictReady
from engine.llm.scripted import ScriptedProvider
from engine.search import Search, SearchConfig
from engine.store import Store

SAMPLE_S = 0.005


async def pipeline_bench(problem: Any, backend: str, arch: str | None, *, rounds: int, ideas: int,
                         variants: int, top: int = 2, compile_workers: int | None = None,
                         cold: bool = False, log: TextIO | None = None, evaluator: Evaluator | None = None,
                         gpus: list[int] | None = None, devices: int = 1,
                         repeat_sources: bool = False, language: str = "cuda") -> dict[str, Any]:
    """`log`: one line per node status change (seconds since start, node, kind, status).
    `evaluator`: one to use (the ray executor's) instead of a local one; closed here all the same.
    `gpus`: the local one's GPUs (cuda; default all visible); `devices`: its cpu devices (tests)."""
    from engine.events import EventBus

    status: dict[int, str] = {}
    t0 = time.perf_counter()

    def watch(event: Event) -> None:
        if isinstance(event, NodeAdded | NodeUpdated | VerdictReady):
            node = event.node
            if log is not None and status.get(node.id) != node.status:
                log.write(f"{time.perf_counter() - t0:8.2f}s node {node.id} {node.kind} {node.status}\n")
                log.flush()
            status[node.id] = node.status

    with tempfile.TemporaryDirectory(prefix="ktree-bench-") as tmp:
        store = await Store.open(Path(tmp) / "bench.db")
        bus = EventBus()
        bus.subscribe(watch)
        cache = {"cache_dir": Path(tmp) / "build-cache"} if cold else {}
        if evaluator is None:
            evaluator = LocalEvaluator(backend, compile_workers=compile_workers, cuda_arch=arch, gpus=gpus,
                                  devices=devices, **cache)
        provider = ScriptedProvider(problem.name, backend, seed=0, latency_s=0.0, fill=not repeat_sources,
                                    stamp=None if repeat_sources else uuid.uuid4().hex[:12])
        config = SearchConfig(rounds=rounds, ideas=ideas, variants=variants, top=top, languages=(language,))
        search = Search(store, bus, [(provider, "scripted")], evaluator, problem, config)
        totals = {"device_s": 0.0, "device_active_s": 0.0, "compile_slot_s": 0.0, "waiting_s": 0.0,
                  "idle_waiting_s": 0.0}
        per_device: dict[str, dict[str, float]] = {}  # by name, as devices appear (ray: as actors start)
        done = asyncio.Event()

        async def sample() -> None:
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(SAMPLE_S)
                now = time.perf_counter()
                dt, last = now - last, now
                phases = list(status.values())
                active = sum(p in DEVICE_PHASES for p in phases)
                held = {d["name"]: d["busy"] for d in evaluator.device_states()}  # loading counts too
                busy = sum(held.values())
                queued = evaluator.waiting.get("device", 0)
                shown_waiting = phases.count("waiting")
                compiling = phases.count("compiling") - max(0, queued - shown_waiting)
                # A variant that holds a device but has not begun, with an evaluator that
                # reports no "waiting" phase, still shows "compiling": it is not building.
                if not shown_waiting:
                    compiling -= max(0, busy - active)
                totals["device_s"] += dt * busy
                totals["device_active_s"] += dt if active else 0.0
                totals["compile_slot_s"] += dt * max(0, compiling)
                for name, is_busy in held.items():
                    device = per_device.setdefault(name, {"busy_s": 0.0, "idle_s": 0.0, "idle_waiting_s": 0.0})
                    device["busy_s" if is_busy else "idle_s"] += dt
                    if queued and not is_busy:
                        device["idle_waiting_s"] += dt
                if queued:
                    totals["waiting_s"] += dt
                    if busy < len(held):
                        totals["idle_waiting_s"] += dt

        sampler = asyncio.create_task(sample())
        started = time.perf_counter()
        try:
            summary = await search.run()
        finally:
            wall = time.perf_counter() - started
            done.set()
            await sampler
            recorded = await store.evaluations(search.session_id) if search.session_id else []
            evaluations = len(recorded)
            # Build (cuda) or import + JIT + autotune (triton) seconds per variant that got that far.
            builds = sorted(e["verdict"].compile_s for e in recorded
                            if e["verdict"].compile_s is not None and e["verdict"].status != "compile_error")
            sources = {n.source for n in await store.nodes(search.session_id)
                       if n.kind == "variant" and n.source} if search.session_id else set()
            states = {d["name"]: d for d in evaluator.device_states()}
            await evaluator.close()
            await store.close()
    workers = evaluator.compile_workers
    ideal = totals["compile_slot_s"] / workers + totals["device_s"] / max(1, len(per_device))
    waited = totals["waiting_s"]
    return {
        "problem": problem.name, "backend": backend, "language": language, "status": summary["status"],
        "cold_cache": cold,
        "compile_s_per_variant": {"n": len(builds), "median": _quantile(builds, 0.5),
                                  "p90": _quantile(builds, 0.9)},
        "shape": {"rounds": rounds, "ideas": ideas, "variants": variants, "top": top},
        "compile_workers": workers, "variants": summary["variants"], "evaluations": evaluations,
        "distinct_sources": len(sources), "repeat_sources": repeat_sources,
        "by_status": summary["by_status"], "wall_s": round(wall, 3),
        "compile_s": round(totals["compile_slot_s"], 3), "device_s": round(totals["device_s"], 3),
        "device_active_s": round(totals["device_active_s"], 3),
        "ideal_s": round(ideal, 3), "wall_over_ideal": round(wall / ideal, 3) if ideal else None,
        "waiting_s": round(totals["waiting_s"], 3), "idle_while_waiting_s": round(totals["idle_waiting_s"], 3),
        "idle_fraction_while_waiting": (round(totals["idle_waiting_s"] / totals["waiting_s"], 4)
                                        if totals["waiting_s"] else 0.0),
        "idle_fraction_of_wall": round(totals["idle_waiting_s"] / wall, 4) if wall else 0.0,
        "variants_per_minute": round(evaluations / wall * 60, 2) if wall else 0.0,
        "gpus": evaluator.gpus,
        "devices": [{
            "name": name, "jobs": states.get(name, {}).get("jobs", 0), "busy_s": round(d["busy_s"], 3),
            "idle_fraction_of_wall": round(d["idle_s"] / wall, 4) if wall else 0.0,
            "idle_while_waiting_s": round(d["idle_waiting_s"], 3),
            "idle_fraction_while_waiting": round(d["idle_waiting_s"] / waited, 4) if waited else 0.0,
        } for name, d in per_device.items()],
    }


def _quantile(values: list[float], q: float) -> float | None:
    """The q-quantile of sorted values (nearest rank), rounded; None for none."""
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * len(values)))], 3)


def format_pipeline(r: dict[str, Any]) -> str:
    s = r["shape"]
    pct = r["idle_fraction_while_waiting"] * 100
    ratio = r["wall_over_ideal"]
    lines = [
        f"Pipeline bench: {r['problem']} in {r.get('language', 'cuda')} on {r['backend']},"
        " scripted provider (no LLM latency),"
        f" {s['rounds']} rounds x {s['ideas']} ideas x {s['variants']} variants, top {s['top']},"
        f" {r['compile_workers']} compile workers, {'empty' if r['cold_cache'] else 'shared'} build cache:"
        f" {r['status']}",
        "",
        "| measure | value | target (cuda) |",
        "| --- | --- | --- |",
        f"| variants / evaluations | {r['variants']} / {r['evaluations']} | |",
        f"| distinct sources | {r['distinct_sources']}"
        f"{' (library files as they are)' if r['repeat_sources'] else ''} | |",
        f"| wall time | {r['wall_s']:.2f} s | |",
        f"| total compile time (slot-seconds) | {r['compile_s']:.2f} s | |",
        f"| total device time (device-seconds held) | {r['device_s']:.2f} s | |",
        f"| of which checking / timing | {r['device_active_s']:.2f} s | |",
        f"| ideal = compile / workers + device / devices | {r['ideal_s']:.2f} s | |",
        f"| wall / ideal | {'-' if ratio is None else f'{ratio:.3f}'} | <= 1.15 |",
        f"| time compiled variants waited for the device | {r['waiting_s']:.2f} s | |",
        f"| device idle while they waited | {r['idle_while_waiting_s']:.3f} s ({pct:.1f} %) | < 5 % |",
        f"| variants evaluated per minute | {r['variants_per_minute']:.2f} | |",
    ]
    per = r.get("compile_s_per_variant") or {}
    if per.get("n"):
        what = "import + JIT + autotune" if r.get("language") == "triton" else "build"
        lines.append(f"| {what} seconds per variant, median / p90 (n={per['n']})"
                     f" | {per['median']:.2f} / {per['p90']:.2f} s | |")
    if len(r["devices"]) > 1:
        lines += ["", "| device | evaluations | busy | idle (of wall) | idle while variants waited |",
                  "| --- | --- | --- | --- | --- |"]
        lines += [f"| {d['name']} | {d['jobs']} | {d['busy_s']:.2f} s"
                  f" | {d['idle_fraction_of_wall'] * 100:.1f} % | {d['idle_while_waiting_s']:.3f} s"
                  f" ({d['idle_fraction_while_waiting'] * 100:.1f} %) |" for d in r["devices"]]
    return "\n".join(lines)
