"""A resumed session's clock goes on from where it stopped: the engine's elapsed time (Progress,
summary) and the TUI's header count the earlier run, and not the time between the runs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from engine.evaluate.host.evaluator import LocalEvaluator
from engine.llm.scripted import ScriptedProvider
from engine.problems import load_problem
from engine.record.events import Event, EventBus, Progress, SessionStarted
from engine.record.store import Store
from engine.search import Search, SearchConfig
from tui.model import ScreenModel
from tui.widgets.progress import elapsed_s

GAP_S = 3.0


async def run(db: Path, resume: int | None = None) -> tuple[dict, list[Event], float]:
    store = await Store.open(db)
    bus = EventBus()
    events: list[Event] = []
    bus.subscribe(lambda e: events.append(e))
    evaluator = LocalEvaluator("cpu")
    # matmul's scripted CPU library builds in seconds (no torch headers)
    search = Search(store, bus, [(ScriptedProvider("matmul", "cpu", seed=0, latency_s=0.5), "scripted")],
                    evaluator, load_problem("matmul"), SearchConfig.of(rounds=1, ideas=1, variants=1),
                    resume=resume)
    t0 = time.time()
    try:
        summary = await asyncio.wait_for(search.run(), timeout=300)
    finally:
        await evaluator.close()
        run_s = await store.sessions.run_s(search.session_id) if search.session_id else None
        await store.close()
    assert run_s is not None and abs(run_s - summary["elapsed_s"]) < 0.1
    return summary, events, time.time() - t0


@pytest.mark.slow
async def test_a_resumed_sessions_clock_continues_from_its_earlier_elapsed_time(tmp_path: Path):
    db = tmp_path / "k.db"
    first, _, _ = await run(db)
    assert first["status"] == "finished" and first["elapsed_s"] > 0.5
    await asyncio.sleep(GAP_S)  # the time between the runs is not the session's

    second, events, wall = await run(db, resume=first["session_id"])
    assert second["resumed"]
    [started] = [e for e in events if isinstance(e, SessionStarted)]
    assert started.elapsed_s == round(first["elapsed_s"], 2)
    # The count starts from the first run's elapsed time, goes up with this run, skips the gap.
    assert first["elapsed_s"] <= second["elapsed_s"] <= first["elapsed_s"] + wall + 0.1
    progress = [e.elapsed_s for e in events if isinstance(e, Progress)]
    assert progress and min(progress) >= first["elapsed_s"]

    # The TUI's header: from the SessionStarted event alone (no Progress yet), then from Progress.
    now = 10_000.0
    model = ScreenModel(live=True, clock=lambda: now)
    model.apply(started)
    assert elapsed_s(model, now + 2.0) == pytest.approx(started.elapsed_s + 2.0)
    for e in events:
        model.apply(e)
    assert elapsed_s(model, now) == progress[-1]

    # A past session read from the DB shows the recorded count, not finished - created (which
    # holds the gap between the runs).
    store = await Store.open(db)
    try:
        row = await store.sessions.get(first["session_id"])
    finally:
        await store.close()
    assert row is not None and abs(row["run_s"] - second["elapsed_s"]) < 0.1
    assert row["finished_at"] - row["created_at"] > second["elapsed_s"] + GAP_S - 0.5
    past = ScreenModel(live=False, clock=lambda: now)
    past.info = {**row, "status": "finished"}
    assert elapsed_s(past, now) == row["run_s"]
