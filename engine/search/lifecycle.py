"""The search's session as the DB and the readers see it: created or read back at the start,
kept alive by a heartbeat and Progress events while it runs, and recorded (summary, status, best)
at its end. A part of engine.search.orchestrator.Search, kept apart so the orchestrator reads as
the work it runs."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from engine import settings
from engine.record.events import Progress, SessionDone, SessionStarted
from engine.search.resume import load_session
from engine.search.rows import root_row

if TYPE_CHECKING:
    from engine.domain import Node
    from engine.evaluate import Evaluator, Verdict
    from engine.options import Placement
    from engine.problems import Problem
    from engine.record.events import EventBus
    from engine.record.store import Store
    from engine.search.budget import Budget
    from engine.search.calls import LLMResult
    from engine.search.config import SearchConfig
    from engine.search.scheduler import Scheduler
    from engine.search.strategies import Strategy

HEARTBEAT_S = 2.0


class SessionLifecycle:
    """Search's session record, mixed into engine.search.orchestrator.Search: Search sets the
    attributes below and gives the rest (`_sid`, `_added`, `best`, the names of its models)."""

    store: Store
    bus: EventBus
    evaluator: Evaluator
    problem: Problem
    config: SearchConfig
    placement: Placement | None  # where it runs, as resolved (None: what the evaluator says)
    strategy: Strategy
    budget: Budget
    sched: Scheduler
    suite: Any  # engine.search.orchestrator.SuiteShare, or None
    session_id: int | None
    resuming: bool
    nodes: dict[int, Node]
    verdicts: dict[int, Verdict]
    replies: dict[tuple[int, str], LLMResult]
    started: float
    run_before_s: float
    round: int
    parents: list[int]
    _last_progress: tuple | None
    _last_progress_at: float

    # -- progress ---------------------------------------------------------------------------

    async def _tick(self) -> None:
        """Progress events (when something changed, at most 4 a second, and once a second
        regardless) and the session's heartbeat (so a reader can tell a dead engine)."""
        last_beat = 0.0
        while True:
            await asyncio.sleep(0.25)
            now = time.time()
            try:
                if now - last_beat >= HEARTBEAT_S:
                    await self.store.sessions.update(self._sid, heartbeat_at=now)
                    await self.store.sessions.set_run_s(self._sid, self.elapsed_s())
                    last_beat = now
                await self.publish_progress()
            except Exception as exc:  # end the search with it: a silent heartbeat reads as dead
                self.sched.fail(exc)
                return

    async def publish_progress(self, force: bool = False) -> None:
        """A Progress event, unless nothing changed in the last second (`force`: regardless)."""
        cfg = self.config
        devices = tuple(self.evaluator.device_states())
        rounds = self.strategy.total_rounds()
        spent = self.budget
        state = (self.round, rounds, self.sched.llm_running, spent.spent_tokens, round(spent.spent_usd, 6),
                 self.sched.paused,
                 tuple((d["name"], d["busy"], d["jobs"], d["queue"], d["alive"], d.get("waiting_for"))
                       for d in devices))
        now = time.monotonic()
        if not force and state == self._last_progress and now - self._last_progress_at < 1.0:
            return
        self._last_progress, self._last_progress_at = state, now
        await self.bus.publish(Progress(
            round=self.round, rounds=rounds, llm_running=state[2], tokens=spent.spent_tokens,
            cost_usd=spent.spent_usd, budget_usd=cfg.budgets.budget_usd,
            budget_tokens=cfg.budgets.budget_tokens,
            elapsed_s=round(self.elapsed_s(), 2), paused=self.sched.paused, devices=devices,
        ))


    def placement_record(self) -> dict[str, Any]:
        """Where the search runs, as the session records it (engine.options.Placement's fields)."""
        if self.placement is not None:
            return asdict(self.placement)
        gpus = self.evaluator.gpus
        return {"backend": self.backend, "gpus": list(gpus) if gpus else None}

    async def _create(self) -> None:
        cfg = self.config
        self.session_id = await self.store.sessions.create(
            problem=self.problem.name, problem_path=str(self.problem.path), backend=self.backend,
            strategy=cfg.shape.strategy, provider=self.provider_names, models=self.model_names,
            config={**cfg.record(), "flops": self.cost.flops, "bytes": self.cost.bytes,
                    "cost_estimated": self.cost.estimated,
                    # where it ran, as resolved (engine.options.Placement): a resume uses its GPUs again
                    "placement": self.placement_record(),
                    # KTREE_* settings that can change a time or a verdict (engine.settings)
                    "environment": settings.recorded(),
                    # The reference's output does not depend on its inputs (engine.problems).
                    "degenerate": await asyncio.to_thread(lambda: self.problem.degenerate)},
            sizes=self.sizes, suite_id=self.suite.suite_id if self.suite else None,
        )
        await self.store.sessions.update(self._sid, pid=os.getpid(), heartbeat_at=time.time())
        await self._publish_started()
        [root] = await self.store.nodes.add_many(self._sid, [root_row(self.problem.title, self.problem.source)])
        await self._added(root)

    async def _load(self) -> None:
        """Take the session's state from the DB: nodes, verdicts, replies, rounds, spending."""
        sid = self._sid
        self.run_before_s = await self._ran_before(sid)
        await self.store.sessions.update(sid, status="running", stop_reason=None, finished_at=None,
                                        pid=os.getpid(), heartbeat_at=time.time())
        await self._publish_started()
        saved = await load_session(self.store, sid)
        self.nodes, self.verdicts, self.replies = saved.nodes, saved.verdicts, saved.replies
        self.round, self.parents = saved.round, saved.parents
        self.budget.restore(saved.totals, saved.variants_generated)
        if saved.paused:
            self.sched.pause()
        if not any(n.kind == "root" for n in self.nodes.values()):
            [root] = await self.store.nodes.add_many(sid, [root_row(self.problem.title, self.problem.source)])
            self.nodes[root.id] = root

    async def _ran_before(self, sid: int) -> float:
        """How long the session ran before this resume: as its engine recorded it, else (a DB
        from before that record) from its start to its last sign of life."""
        recorded = await self.store.sessions.run_s(sid)
        if recorded is not None:
            return recorded
        row = await self.store.sessions.get(sid) or {}
        end = row.get("finished_at") or row.get("heartbeat_at") or row.get("created_at") or 0.0
        return max(0.0, end - (row.get("created_at") or end))

    def elapsed_s(self) -> float:
        """Seconds the session has run: its earlier runs, then this one."""
        return self.run_before_s + time.time() - self.started

    async def _publish_started(self) -> None:
        if hasattr(self.evaluator, "session"):  # a LocalEvaluator records it in its device locks
            path = getattr(self.store, "path", None)
            self.evaluator.session = {"id": self._sid, "db": str(path) if path else None}
        await self.bus.publish(SessionStarted(
            self._sid, self.problem.name, self.backend, self.provider_names, self.scripted,
            dict(self.sizes), {**self.config.record(), "placement": self.placement_record(),
             "degenerate": self.problem.degenerate},
            self.cost.describe(), resumed=self.resuming,
            elapsed_s=round(self.run_before_s, 2),
        ))

    # -- the end ------------------------------------------------------------------------------

    def summary(self, status: str, elapsed_s: float | None = None) -> dict[str, Any]:
        """What the search did, as `ktree run --json` prints it."""
        variants = [n for n in self.nodes.values() if n.kind == "variant"]
        by_status: dict[str, int] = {}
        for n in variants:
            by_status[n.status] = by_status.get(n.status, 0) + 1
        best = self.best()
        best_verdict = self.verdicts.get(best.id) if best else None
        return {
            "session_id": self.session_id,
            "problem": self.problem.name,
            "backend": self.backend,
            "provider": self.provider_names,
            "models": self.model_names,
            "scripted": self.scripted,
            "strategy": self.config.shape.strategy,
            "library_ops": self.config.checks.library_ops,
            "resumed": self.resuming,
            "status": status,
            "stop_reason": self.stop_reason,
            "rounds": self.round,
            "sizes": self.sizes,
            "ideas": sum(1 for n in self.nodes.values() if n.kind == "idea"),
            "variants": len(variants),
            "by_status": by_status,
            "best": None if best is None else {
                "node_id": best.id,
                "idea": best.title,
                "speedup_eager": best.speedup,
                "time_ms": best.time_ms,
                "ref_eager_ms": best_verdict.ref_eager_ms if best_verdict else None,
                "library": best.library or None,  # its `library` mark's ops (only under allow)
            },
            "elapsed_s": round(self.elapsed_s() if elapsed_s is None else elapsed_s, 2),
        }

    async def _finish(self, status: str) -> dict[str, Any]:
        elapsed = self.elapsed_s()  # one reading: the summary says what the DB keeps for a resume
        summary = self.summary(status, elapsed)
        if self.session_id is None:
            return summary
        summary["llm"] = await asyncio.shield(self.store.calls.totals(self._sid))
        best = self.best()
        # Shielded: an interrupted search still records how it ended.
        await asyncio.shield(self.store.sessions.set_run_s(self._sid, elapsed))
        await asyncio.shield(self.store.sessions.update(
            self._sid, status=status, stop_reason=self.stop_reason, finished_at=time.time(),
            best_node_id=best.id if best else None, best_speedup=best.speedup if best else None,
        ))
        await self.publish_progress(force=True)
        await self.bus.publish(SessionDone(self._sid, status, summary))
        return summary
