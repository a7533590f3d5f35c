"""What several search tests share: a search steered from its own events, an evaluator that answers
at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.host.make_job import make_job
from engine.evaluate.verdict import Verdict
from engine.llm.scripted import ScriptedProvider
from engine.problems import load_problem
from engine.record import control
from engine.record.events import Event
from engine.record.store import Store
from engine.search import Search
from engine.search.config import SearchConfig

Hook = Callable[[Event, "Steered"], Any]


class Steered:
    """A scripted search whose subscriber (`hook`) may record commands as events arrive."""

    def __init__(self, db: Path, hook: Hook, resume: int | None = None, **shape: Any):
        self.db = db
        self.resume = resume
        self.hook = hook
        self.shape = {"rounds": 1, "ideas": 1, "variants": 1, "top": 2, **shape}
        self.events: list[Event] = []
        self.store: Store | None = None
        self.search: Search | None = None

    async def command(self, cmd: control.Command) -> int:
        assert self.store is not None and self.search is not None
        return await self.store.commands.add(self.search.session_id, *control.encode(cmd))

    async def _receive(self, event: Event) -> None:
        self.events.append(event)
        result = self.hook(event, self)
        if asyncio.iscoroutine(result):
            await result

    async def run(self) -> dict[str, Any]:
        self.store = await Store.open(self.db)
        problem = load_problem("softmax")
        from engine.record.events import EventBus

        bus = EventBus()
        bus.subscribe(self._receive)
        evaluator = LocalEvaluator("cpu")
        self.search = Search(self.store, bus, [(ScriptedProvider("softmax", "cpu", seed=0), "scripted")],
                             evaluator, problem, SearchConfig.of(**self.shape), resume=self.resume)
        try:
            return await asyncio.wait_for(self.search.run(), timeout=400)
        finally:
            await evaluator.close()
            await self.store.close()

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


class InstantEvaluator:
    """Every variant fails to build (so each asks for a fix) unless `correct`."""

    backend = "cpu"
    gpus = None
    waiting = {"compile": 0, "device": 0}
    compile_workers = 1

    def __init__(self, correct: bool) -> None:
        self.correct = correct

    def device_states(self) -> list[dict]:
        return []

    def job(self, problem_path, source, sizes, *, flops, bytes, **options):
        return make_job(problem_path, source, sizes, backend="cpu", cache_dir="", flops=flops, bytes=bytes,
                        **options)

    async def evaluate(self, job, on_phase=None, gate=None) -> Verdict:
        if self.correct:
            return Verdict(status="correct", backend="cpu", time_ms=1.0, ref_eager_ms=2.0, speedup_eager=2.0,
                           trials=3)
        return Verdict(status="compile_error", backend="cpu", log="error: no")

    async def profile(self, job, verdict, on_phase=None) -> Verdict:
        return verdict

    async def close(self) -> None:
        pass

