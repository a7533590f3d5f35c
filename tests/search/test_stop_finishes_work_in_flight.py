"""Stop says "In-flight work finishes" (issue 30.2): a variant being built or timed when the user
stops gets its real verdict; only work that had not started its evaluation (a queued variant, an
LLM call) is recorded as cancelled. An evaluator that builds nothing, one build slot and one
device, each phase long enough for the Stop to land in it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.evaluate.host.make_job import make_job
from engine.evaluate.verdict import Verdict
from engine.llm.scripted import ScriptedProvider
from engine.problems import load_problem
from engine.record import control
from engine.record.events import Event, EventBus, NodeUpdated
from engine.record.store import Store
from engine.search import Search, SearchConfig
from tests.conftest import query

PHASE_S = 1.5  # several of the steering's command polls (0.25 s)


class SlowEvaluator:
    backend = "cpu"
    gpus = None
    waiting = {"compile": 0, "device": 0}
    compile_workers = 1

    def __init__(self) -> None:
        self._build = asyncio.Semaphore(1)
        self._device = asyncio.Semaphore(1)

    def device_states(self) -> list[dict]:
        return []

    def job(self, problem_path, source, sizes, *, flops, bytes, **options):
        return make_job(problem_path, source, sizes, backend="cpu", cache_dir="", flops=flops, bytes=bytes,
                        **options)

    async def evaluate(self, job, on_phase=None, gate=None) -> Verdict:
        async with self._build:
            await on_phase("compiling")
            await asyncio.sleep(PHASE_S)
        await on_phase("waiting")
        async with self._device:
            await on_phase("timing")
            await asyncio.sleep(PHASE_S)
        return Verdict(status="correct", backend="cpu", time_ms=1.0, ref_eager_ms=2.0, speedup_eager=2.0,
                       trials=3)

    async def profile(self, job, verdict, on_phase=None) -> Verdict:
        return verdict

    async def close(self) -> None:
        pass


async def test_stop_lets_the_variants_being_built_and_timed_finish(tmp_path: Path):
    db = tmp_path / "k.db"
    store = await Store.open(db)
    bus = EventBus()
    search: Search | None = None
    at_stop: dict[int, str] = {}

    async def on_event(event: Event) -> None:
        # The first variant is timed, the second built: stop now.
        if isinstance(event, NodeUpdated) and event.node.status == "timing" and not at_stop:
            assert search is not None and search.session_id is not None
            at_stop.update({i: n.status for i, n in search.nodes.items() if n.kind == "variant"})
            await store.commands.add(search.session_id, *control.encode(control.Stop()))

    bus.subscribe(on_event)
    search = Search(store, bus, [(ScriptedProvider("softmax", "cpu", seed=0), "scripted")], SlowEvaluator(),
                    load_problem("softmax"), SearchConfig.of(rounds=2, ideas=1, variants=3, top=1, fixes=0))
    try:
        summary = await asyncio.wait_for(search.run(), timeout=60)
    finally:
        await store.close()
    assert summary["status"] == "stopped" and summary["stop_reason"] == "stopped by the user"
    assert sorted(at_stop.values()) == ["compiling", "queued", "timing"], at_stop
    ended = dict(query(db, "SELECT id, status FROM nodes WHERE kind = 'variant'"))
    evaluated = {i for (i,) in query(db, "SELECT node_id FROM evaluations")}
    for node, status in at_stop.items():
        if status in ("compiling", "timing"):  # in flight: finished, with its real verdict
            assert ended[node] == "correct" and node in evaluated, (node, status, ended)
        else:  # not started: cancelled, never evaluated
            assert ended[node] == "cancelled" and node not in evaluated, (node, status, ended)
    assert len(ended) == 3  # no round 2, no new variant after the stop
    [(text,)] = query(db, "SELECT text FROM nodes WHERE status = 'cancelled' AND kind = 'variant'")
    assert text == "cancelled: stopped by the user"
