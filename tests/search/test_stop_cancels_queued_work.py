"""After Stop, work that was queued (a fix waiting for its LLM call) is recorded as cancelled, not
failed: nothing went wrong with it. A real scripted CPU search on matmul, whose library is in the
ctypes structure (builds take seconds)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.evaluate.host.evaluator import LocalEvaluator
from engine.llm.base import Completion, Message, Usage
from engine.llm.scripted import DATA, ScriptedProvider
from engine.problems import load_problem
from engine.prompts import FIX_HEADER, IMPLEMENT_HEADER
from engine.record import control
from engine.record.events import Event, EventBus, NodeAdded
from engine.record.store import Store
from engine.search import Search, SearchConfig
from tests.conftest import query

BROKEN = DATA / "matmul" / "cpu" / "tiled_2.py"  # declares: compile error


class BrokenThenSlowFix(ScriptedProvider):
    """Every implementation is the library's file that fails to compile; a fix call takes long
    enough for the user to stop the search while it waits."""

    async def complete(self, messages: list[Message], model: str = "scripted", max_output_tokens: int = 0,
                       reasoning: str | None = None) -> Completion:
        prompt = messages[-1].content
        if FIX_HEADER in prompt:
            await asyncio.sleep(60)
        elif IMPLEMENT_HEADER in prompt:
            text = f"```python\n{BROKEN.read_text()}\n```\n"
            return Completion(text, Usage(input=100, output=len(text) // 4), 0.0, 0.0, model)
        return await super().complete(messages, model, max_output_tokens, reasoning)


async def test_a_fix_queued_when_the_user_stops_is_recorded_as_cancelled(tmp_path: Path):
    db = tmp_path / "k.db"
    store = await Store.open(db)
    bus = EventBus()
    search: Search | None = None
    stopped: list[int] = []

    async def on_event(event: Event) -> None:
        if isinstance(event, NodeAdded) and event.node.origin == "fix" and not stopped:
            assert search is not None and search.session_id is not None
            stopped.append(event.node.id)
            await store.commands.add(search.session_id, *control.encode(control.Stop()))

    bus.subscribe(on_event)
    evaluator = LocalEvaluator("cpu")
    provider = BrokenThenSlowFix("matmul", "cpu", seed=0)
    search = Search(store, bus, [(provider, "scripted")], evaluator, load_problem("matmul"),
                    SearchConfig.of(rounds=1, ideas=1, variants=1, fixes=1))
    try:
        summary = await asyncio.wait_for(search.run(), timeout=300)
    finally:
        await evaluator.close()
        await store.close()
    assert summary["status"] == "stopped" and summary["stop_reason"] == "stopped by the user"
    [fix] = stopped
    [(status, text)] = query(db, "SELECT status, text FROM nodes WHERE id = ?", fix)
    assert (status, text) == ("cancelled", "cancelled: stopped by the user")
    llm_made = query(db, "SELECT status FROM nodes WHERE kind = 'variant' AND origin = 'llm'")
    assert llm_made == [("compile_error",)]
    assert summary["by_status"] == {"compile_error": 1, "cancelled": 1}
    assert query(db, "SELECT COUNT(*) FROM evaluations WHERE node_id = ?", fix) == [(0,)]
