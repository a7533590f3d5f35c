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

Where every idle second went (engine.bench.idle): each sample in which a device is not held is
given one cause by a fixed precedence (its own stage before it is held, the device queue, builds,
fix calls, other LLM calls, the round's tail, the search's setup and end), from the evaluator's
state and the nodes' statuses and rounds heard here; the causes sum to the idle total (`idle`).

On the cpu backend a timing waits until running builds end (so no build skews it): that wait is
device idle time while compiled variants wait, by design; the < 5 % target is for cuda.

With `llm_latency` (`--llm-latency 40` or `lognormal:median=40,sigma=0.5`) every scripted call
first waits as long as a model would (drawn per call, seeded), and with `suite` > 1 the bench runs
a suite of that many problems (engine.search.suite: one LLM limit, one evaluator): the problems
with scripted answers on the backend in turn, from the one given, each its own session with its
own distinct sources. It then reports the devices' busy fraction of the wall and of the window in
which every problem has variants in flight (from the moment the last problem's first variant has
its code to the moment the first problem's search ends).
"""

from __future__ import annotations

import asyncio
import math
import random
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from engine.bench.idle import IdleLedger, idle_table, moment_of
from engine.bench.summary import markdown_table, quantile
from engine.domain import DEFAULT_LANGUAGE, DEVICE_PHASES, language_label
from engine.evaluate import Evaluator, LocalEvaluator
from engine.evaluate import languages as kernel_languages
from engine.llm.base import Completion, Message
from engine.llm.scripted import ScriptedProvider, scripted_backends, scripted_problems
from engine.record.events import Event, NodeAdded, NodeUpdated, RoundDone, SessionDone, VerdictReady
from engine.record.store import Store
from engine.search import Search, SearchConfig

SAMPLE_S = 0.005


def parse_latency(spec: str, seed: int = 0) -> tuple[Callable[[], float], str]:
    """(a draw of one call's latency in seconds, the spec in words) for `--llm-latency`: a fixed
    number of seconds, or `lognormal:median=M,sigma=S` (the log of the latency normal with mean
    log M and deviation S: reasoning models' spread). ValueError, in words, for anything else."""
    spec = spec.strip()
    try:
        fixed = float(spec)
    except ValueError:
        fixed = None
    if fixed is not None:
        if fixed < 0:
            raise ValueError(f"{spec}: a latency cannot be negative")
        return (lambda: fixed), f"{fixed:g} s a call"
    kind, _, params = spec.partition(":")
    if kind != "lognormal":
        raise ValueError(f"{spec!r}: give seconds (e.g. 40) or lognormal:median=40,sigma=0.5")
    try:
        values = {k.strip(): float(v) for k, v in (p.split("=", 1) for p in params.split(",") if p.strip())}
    except ValueError:
        raise ValueError(f"{spec!r}: lognormal takes median=SECONDS,sigma=SPREAD") from None
    if set(values) - {"median", "sigma"} or "median" not in values:
        raise ValueError(f"{spec!r}: lognormal takes median=SECONDS,sigma=SPREAD")
    median, sigma = values["median"], values.get("sigma", 0.5)
    if median <= 0 or sigma < 0:
        raise ValueError(f"{spec!r}: the median must be more than 0 and sigma not negative")
    rng = random.Random(seed)
    words = f"lognormal, median {median:g} s, sigma {sigma:g}"
    return (lambda: rng.lognormvariate(math.log(median), sigma)), words


class _Slow:
    """A provider that waits as a model would before the scripted answer."""

    def __init__(self, inner: ScriptedProvider, latency: Callable[[], float]):
        self.inner, self.latency = inner, latency
        self.name, self.scripted = inner.name, True

    async def complete(self, messages: list[Message], model: str = "scripted", max_output_tokens: int = 0,
                       reasoning: str | None = None) -> Completion:
        started = time.perf_counter()
        await asyncio.sleep(self.latency())
        done = await self.inner.complete(messages, model, max_output_tokens, reasoning)
        return Completion(done.text, done.usage, done.cost_usd, time.perf_counter() - started, done.model)


async def pipeline_bench(problem: Any, backend: str, arch: str | None, *, rounds: int, ideas: int,
                         variants: int, top: int = 2, compile_workers: int | None = None,
                         cold: bool = False, log: TextIO | None = None, evaluator: Evaluator | None = None,
                         gpus: list[int] | None = None, devices: int = 1,
                         repeat_sources: bool = False, llm_latency: str | None = None, suite: int = 1,
                         llm_concurrency: int = 8, language: str = DEFAULT_LANGUAGE,
                         keep_evaluator: bool = False, cpu_timer: str | None = None) -> dict[str, Any]:
    """`log`: one line per node status change (seconds since start, node, kind, status).
    `evaluator`: one to use (the ray executor's, or a warm one) instead of a local one; closed
    here unless `keep_evaluator` (engine.bench.scaling runs several searches on one).
    `gpus`: the local one's GPUs (cuda; default all visible); `devices`: its cpu devices (tests).
    `llm_latency`: each call's wait (parse_latency's spec); `suite`: that many problems at once."""
    from engine.record.events import EventBus
    from engine.search.suite import Suite, SuiteEntry

    status: dict[int, str] = {}
    nodes: dict[int, tuple[str, str, str]] = {}  # node -> (kind, status, origin), for the idle causes
    working, last_rounds = False, 0  # a node beyond a root seen; searches past their last round
    first_code: dict[int, float] = {}  # session -> when its first variant had its code
    ended: dict[int, float] = {}  # session -> when its search ended
    t0 = time.perf_counter()
    latency, latency_words = parse_latency(llm_latency) if llm_latency else (None, "no LLM latency")

    def watch(event: Event) -> None:
        nonlocal working, last_rounds
        if isinstance(event, NodeAdded | NodeUpdated | VerdictReady):
            node = event.node
            if log is not None and status.get(node.id) != node.status:
                log.write(f"{time.perf_counter() - t0:8.2f}s node {node.id} {node.kind} {node.status}\n")
                log.flush()
            status[node.id] = node.status
            nodes[node.id] = (node.kind, node.status, node.origin)
            working = working or node.kind != "root"
            if node.kind == "variant" and node.source:
                first_code.setdefault(node.session_id, time.perf_counter())
        elif isinstance(event, RoundDone) and event.last:
            last_rounds += 1
        elif isinstance(event, SessionDone):
            ended.setdefault(event.session_id, time.perf_counter())

    # before the store opens: an error after it would leave its thread keeping the process alive
    config = SearchConfig.of(rounds=rounds, ideas=ideas, variants=variants, top=top,
                             llm_concurrency=llm_concurrency, languages=(language,))
    with tempfile.TemporaryDirectory(prefix="ktree-bench-") as tmp:
        store = await Store.open(Path(tmp) / "bench.db")
        bus = EventBus()
        bus.subscribe(watch)
        cache = {"cache_dir": Path(tmp) / "build-cache"} if cold else {}
        if evaluator is None:
            evaluator = LocalEvaluator(backend, compile_workers=compile_workers, cuda_arch=arch, gpus=gpus,
                                  devices=devices, cpu_timer=cpu_timer, **cache)

        def provider_for(p: Any) -> Any:
            inner = ScriptedProvider(p.name, backend, seed=0, latency_s=0.0, fill=not repeat_sources,
                                     stamp=None if repeat_sources else uuid.uuid4().hex[:12])
            return inner if latency is None else _Slow(inner, latency)

        problems = suite_problems(problem, backend, suite)
        runner: Any
        if suite > 1:
            entries = [SuiteEntry(f"{p.path}#{i}", p.name, p, [(provider_for(p), "scripted")], config)
                       for i, p in enumerate(problems)]
            runner = Suite(store, entries, evaluator, name=f"bench {suite}", record={}, bus_for=lambda e: bus)
        else:
            runner = Search(store, bus, [(provider_for(problem), "scripted")], evaluator, problem, config)
        jobs_before = {d["name"]: d.get("jobs", 0) for d in evaluator.device_states()}
        samples: list[tuple[float, float, int]] = []  # (time, dt, devices busy)
        totals = {"device_s": 0.0, "device_active_s": 0.0, "compile_slot_s": 0.0, "waiting_s": 0.0,
                  "idle_waiting_s": 0.0}
        per_device: dict[str, dict[str, float]] = {}  # by name, as devices appear (ray: as actors start)
        idle = IdleLedger()  # each idle sample's cause (engine.bench.idle)
        done = asyncio.Event()

        async def sample() -> None:
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(SAMPLE_S)
                now = time.perf_counter()
                dt, last = now - last, now
                phases = list(status.values())
                active = sum(p in DEVICE_PHASES for p in phases)
                states = evaluator.device_states()
                held = {d["name"]: d["busy"] for d in states}  # loading counts too
                busy = sum(held.values())
                queued = evaluator.waiting.get("device", 0)
                shown_waiting = phases.count("waiting")
                compiling = phases.count("compiling") - max(0, queued - shown_waiting)
                # A variant that holds a device but has not begun, with an evaluator that
                # reports no "waiting" phase, still shows "compiling": it is not building.
                if not shown_waiting:
                    compiling -= max(0, busy - active)
                totals["device_s"] += dt * busy
                samples.append((now, dt, busy))
                totals["device_active_s"] += dt if active else 0.0
                totals["compile_slot_s"] += dt * max(0, compiling)
                finished = max(last_rounds, len(ended)) >= len(problems)
                idle.add(dt, moment_of(nodes.values(), queued=queued, building=max(0, compiling),
                                       started=working, ended=finished), states)
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
            summary = await runner.run()
        finally:
            wall = time.perf_counter() - started
            done.set()
            await sampler
            try:
                sessions = [s["id"] for s in await store.sessions.all()]
                evaluations = sum([len(await store.evaluations.of(sid)) for sid in sessions])
                variant_nodes = [n for sid in sessions for n in await store.nodes.of(sid)
                                 if n.kind == "variant"]
                sources = {n.source for n in variant_nodes if n.source}
                by_status: dict[str, int] = {}
                for n in variant_nodes:
                    by_status[n.status] = by_status.get(n.status, 0) + 1
                # Build (cuda) or import + JIT + autotune (triton) seconds per variant that got that far.
                verdicts = [e["verdict"] for sid in sessions for e in await store.evaluations.of(sid)]
                builds = sorted(v.compile_s for v in verdicts
                                if v.compile_s is not None and v.status != "compile_error")
                states = {d["name"]: d for d in evaluator.device_states()}
            finally:  # whatever went wrong above, no worker or compile process outlives the bench
                if not keep_evaluator:
                    await evaluator.close()
                await store.close()
    workers = evaluator.compile_workers
    n_devices = max(1, len(per_device))
    window = None
    if len(first_code) == len(problems) and ended:
        start, end = max(first_code.values()), min(ended.values())
        if end > start:
            held = sum(dt * busy for t, dt, busy in samples if start <= t <= end)
            window = {"start_s": round(start - started, 2), "end_s": round(end - started, 2),
                      "busy_fraction": round(held / ((end - start) * n_devices), 4)}
    ideal = totals["compile_slot_s"] / workers + totals["device_s"] / max(1, len(per_device))
    waited = totals["waiting_s"]
    return {
        "problem": problem.name, "problems": [p.name for p in problems], "llm_latency": latency_words,
        "llm_concurrency": llm_concurrency, "backend": backend, "language": language,
        "status": summary["status"], "cold_cache": cold,
        "compile_s_per_variant": {"n": len(builds), "median": quantile(builds, 0.5),
                                  "p90": quantile(builds, 0.9)},
        "shape": {"rounds": rounds, "ideas": ideas, "variants": variants, "top": top},
        "compile_workers": workers, "variants": len(variant_nodes), "evaluations": evaluations,
        "distinct_sources": len(sources), "repeat_sources": repeat_sources,
        "by_status": by_status, "wall_s": round(wall, 3),
        "busy_fraction_of_wall": round(totals["device_s"] / (wall * n_devices), 4) if wall else 0.0,
        "busy_window": window,
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
            "name": name, "jobs": states.get(name, {}).get("jobs", 0) - jobs_before.get(name, 0),
            "busy_s": round(d["busy_s"], 3),
            "idle_fraction_of_wall": round(d["idle_s"] / wall, 4) if wall else 0.0,
            "idle_while_waiting_s": round(d["idle_waiting_s"], 3),
            "idle_fraction_while_waiting": round(d["idle_waiting_s"] / waited, 4) if waited else 0.0,
        } for name, d in per_device.items()],
        "idle": idle.report(wall),
    }


def suite_problems(problem: Any, backend: str, n: int) -> list[Any]:
    """`n` problems for a bench suite: the given one, then the others the scripted provider
    answers on this backend, in turn (a problem comes back as often as needed)."""
    from engine.problems import load_problem

    others = [p for p in scripted_problems() if p != problem.name and backend in scripted_backends(p)]
    pool = [problem] + [load_problem(name) for name in others[:max(0, n - 1)]]
    return [pool[i % len(pool)] for i in range(n)]


def format_pipeline(r: dict[str, Any]) -> str:
    s = r["shape"]
    pct = r["idle_fraction_while_waiting"] * 100
    ratio = r["wall_over_ideal"]
    n = len(r["problems"])
    what = r["problem"] if n == 1 else f"a suite of {n} ({', '.join(r['problems'])})"
    window = r["busy_window"]
    rows = [
        ("variants / evaluations", f"{r['variants']} / {r['evaluations']}", ""),
        ("distinct sources",
         f"{r['distinct_sources']}{' (library files as they are)' if r['repeat_sources'] else ''}", ""),
        ("wall time", f"{r['wall_s']:.2f} s", ""),
        ("total compile time (slot-seconds)", f"{r['compile_s']:.2f} s", ""),
        ("total device time (device-seconds held)", f"{r['device_s']:.2f} s", ""),
        ("of which checking / timing", f"{r['device_active_s']:.2f} s", ""),
        ("ideal = compile / workers + device / devices", f"{r['ideal_s']:.2f} s", ""),
        ("wall / ideal", "-" if ratio is None else f"{ratio:.3f}", "<= 1.15"),
        ("time compiled variants waited for the device", f"{r['waiting_s']:.2f} s", ""),
        ("device idle while they waited", f"{r['idle_while_waiting_s']:.3f} s ({pct:.1f} %)", "< 5 %"),
        ("variants evaluated per minute", f"{r['variants_per_minute']:.2f}", ""),
        ("devices busy, of the wall", f"{r['busy_fraction_of_wall'] * 100:.1f} %", ""),
        ("devices busy once every problem has variants in flight",
         f"{window['busy_fraction'] * 100:.1f} % ({window['start_s']:.1f}-{window['end_s']:.1f} s)"
         if window else "-", ">= 60 % (suite)"),
    ]
    per = r.get("compile_s_per_variant") or {}
    if per.get("n"):
        what_build = kernel_languages.get(r.get("language") or "").build_words
        rows.append((f"{what_build} seconds per variant, median / p90 (n={per['n']})",
                     f"{per['median']:.2f} / {per['p90']:.2f} s", ""))
    lines = [
        f"Pipeline bench: {what} in {language_label(r.get('language'), r['backend'])} on {r['backend']},"
        f" scripted provider ({r['llm_latency']}),"
        f" {s['rounds']} rounds x {s['ideas']} ideas x {s['variants']} variants, top {s['top']},"
        f" {r['compile_workers']} compile workers, {'empty' if r['cold_cache'] else 'shared'} build cache:"
        f" {r['status']}",
        "",
        markdown_table(("measure", "value", "target (cuda)"), rows),
    ]
    if len(r["devices"]) > 1:
        lines += ["", markdown_table(
            ("device", "evaluations", "busy", "idle (of wall)", "idle while variants waited"),
            [(d["name"], d["jobs"], f"{d['busy_s']:.2f} s", f"{d['idle_fraction_of_wall'] * 100:.1f} %",
              f"{d['idle_while_waiting_s']:.3f} s ({d['idle_fraction_while_waiting'] * 100:.1f} %)")
             for d in r["devices"]])]
    if r.get("idle"):
        lines += ["", idle_table(r["idle"])]
    return "\n".join(lines)
