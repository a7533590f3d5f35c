"""The search's session as the DB and the readers see it: created or read back at the start,
kept alive by a heartbeat and Progress events while it runs, and recorded (summary, status, best)
at its end. The search owns one (`Search.record`), so the orchestrator reads as the work it runs."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Protocol

from engine import settings
from engine.record.events import Progress, SessionDone, SessionStarted
from engine.search.resume import Saved, load_session
from engine.search.rows import root_row

if TYPE_CHECKING:
    from engine.domain import Node
    from engine.evaluate import Evaluator, Verdict
    from engine.options import Placement
    from engine.problems import Cost, Problem
    from engine.record.events import EventBus
    from engine.record.store import Store
    from engine.search.budget import Budget
    from engine.search.config import SearchConfig
    from engine.search.scheduler import Scheduler
    from engine.search.strategies import Strategy

HEARTBEAT_S = 2.0


class Recorded(Protocol):
    """What the session's record reads of the search (engine.search.Search): what it searches, with
    what, and how far it has come."""

    evaluator: Evaluator
    problem: Problem
    config: SearchConfig
    placement: Placement | None  # where it runs, as resolved (None: what the evaluator says)
    backend: str
    sizes: dict[str, int]
    cost: Cost
    scripted: bool
    provider_names: str
    model_names: list[str]
    suite: Any  # engine.search.orchestrator.SuiteShare, or None
    strategy: Strategy
    budget: Budget
    sched: Scheduler
    nodes: dict[int, Node]
    verdicts: dict[int, Verdict]
    round: int
    stop_reason: str | None

    def best(self) -> Node | None: ...


class SessionRecord:
    """The session's row and what readers are told of it (SessionStarted, Progress, SessionDone),
    for one search; `session_id` None until the session is created."""

    def __init__(self, search: Recorded, store: Store, bus: EventBus, session_id: int | None = None):
        self.search = search
        self.store = store
        self.bus = bus
        self.session_id = session_id
        self.resuming = session_id is not None
        self.started = time.time()
        self.run_before_s = 0.0  # seconds the session ran before this start (a resume's earlier runs)
        self._last_progress: tuple | None = None
        self._last_progress_at = 0.0

    @property
    def sid(self) -> int:
        assert self.session_id is not None
        return self.session_id

    # -- progress ---------------------------------------------------------------------------

    async def tick(self) -> None:
        """Progress events (when something changed, at most 4 a second, and once a second
        regardless) and the session's heartbeat (so a reader can tell a dead engine)."""
        last_beat = 0.0
        while True:
            await asyncio.sleep(0.25)
            now = time.time()
            try:
                if now - last_beat >= HEARTBEAT_S:
                    await self.store.sessions.update(self.sid, heartbeat_at=now)
                    await self.store.sessions.set_run_s(self.sid, self.elapsed_s())
                    last_beat = now
                await self.publish_progress()
            except Exception as exc:  # end the search with it: a silent heartbeat reads as dead
                self.search.sched.fail(exc)
                return

    async def publish_progress(self, force: bool = False) -> None:
        """A Progress event, unless nothing changed in the last second (`force`: regardless)."""
        s = self.search
        devices = tuple(s.evaluator.device_states())
        rounds = s.strategy.total_rounds()
        spent = s.budget
        state = (s.round, rounds, s.sched.llm_running, spent.spent_tokens, round(spent.spent_usd, 6),
                 s.sched.paused,
                 tuple((d["name"], d["busy"], d["jobs"], d["queue"], d["alive"], d.get("waiting_for"))
                       for d in devices))
        now = time.monotonic()
        if not force and state == self._last_progress and now - self._last_progress_at < 1.0:
            return
        self._last_progress, self._last_progress_at = state, now
        await self.bus.publish(Progress(
            round=s.round, rounds=rounds, llm_running=state[2], tokens=spent.spent_tokens,
            cost_usd=spent.spent_usd, budget_usd=s.config.budgets.budget_usd,
            budget_tokens=s.config.budgets.budget_tokens,
            elapsed_s=round(self.elapsed_s(), 2), paused=s.sched.paused, devices=devices,
        ))

    def elapsed_s(self) -> float:
        """Seconds the session has run: its earlier runs, then this one."""
        return self.run_before_s + time.time() - self.started

    # -- the start ----------------------------------------------------------------------------

    def placement_record(self) -> dict[str, Any]:
        """Where the search runs, as the session records it (engine.options.Placement's fields)."""
        s = self.search
        if s.placement is not None:
            return asdict(s.placement)
        gpus = s.evaluator.gpus
        return {"backend": s.backend, "gpus": list(gpus) if gpus else None}

    async def create(self) -> Node:
        """A new session's row, announced; its root node (the reference), to be added."""
        s, cfg = self.search, self.search.config
        self.session_id = await self.store.sessions.create(
            problem=s.problem.name, problem_path=str(s.problem.path), backend=s.backend,
            strategy=cfg.shape.strategy, provider=s.provider_names, models=s.model_names,
            config={**cfg.record(), "flops": s.cost.flops, "bytes": s.cost.bytes,
                    "cost_estimated": s.cost.estimated,
                    # where it ran, as resolved (engine.options.Placement): a resume uses its GPUs again
                    "placement": self.placement_record(),
                    # KTREE_* settings that can change a time or a verdict (engine.settings)
                    "environment": settings.recorded(),
                    # The reference's output does not depend on its inputs (engine.problems).
                    "degenerate": await asyncio.to_thread(lambda: s.problem.degenerate)},
            sizes=s.sizes, suite_id=s.suite.suite_id if s.suite else None,
        )
        await self.store.sessions.update(self.sid, pid=os.getpid(), heartbeat_at=time.time())
        await self._publish_started()
        [root] = await self.store.nodes.add_many(self.sid, [root_row(s.problem.title, s.problem.source)])
        return root

    async def load(self) -> Saved:
        """The session marked running again, announced, and its state read back from the DB (nodes,
        verdicts, replies, rounds, spending), a root node added where it had none."""
        sid = self.sid
        self.run_before_s = await self._ran_before(sid)
        await self.store.sessions.update(sid, status="running", stop_reason=None, finished_at=None,
                                         pid=os.getpid(), heartbeat_at=time.time())
        await self._publish_started()
        saved = await load_session(self.store, sid)
        if not any(n.kind == "root" for n in saved.nodes.values()):
            problem = self.search.problem
            [root] = await self.store.nodes.add_many(sid, [root_row(problem.title, problem.source)])
            saved.nodes[root.id] = root
        return saved

    async def _ran_before(self, sid: int) -> float:
        """How long the session ran before this resume: as its engine recorded it, else (a DB
        from before that record) from its start to its last sign of life."""
        recorded = await self.store.sessions.run_s(sid)
        if recorded is not None:
            return recorded
        row = await self.store.sessions.get(sid) or {}
        end = row.get("finished_at") or row.get("heartbeat_at") or row.get("created_at") or 0.0
        return max(0.0, end - (row.get("created_at") or end))

    async def _publish_started(self) -> None:
        s = self.search
        if hasattr(s.evaluator, "session"):  # a LocalEvaluator records it in its device locks
            path = getattr(self.store, "path", None)
            s.evaluator.session = {"id": self.sid, "db": str(path) if path else None}
        await self.bus.publish(SessionStarted(
            self.sid, s.problem.name, s.backend, s.provider_names, s.scripted,
            dict(s.sizes), {**s.config.record(), "placement": self.placement_record(),
             "degenerate": s.problem.degenerate},
            s.cost.describe(), resumed=self.resuming,
            elapsed_s=round(self.run_before_s, 2),
        ))

    # -- the end ------------------------------------------------------------------------------

    def summary(self, status: str, elapsed_s: float | None = None) -> dict[str, Any]:
        """What the search did, as `ktree run --json` prints it."""
        s = self.search
        variants = [n for n in s.nodes.values() if n.kind == "variant"]
        by_status: dict[str, int] = {}
        for n in variants:
            by_status[n.status] = by_status.get(n.status, 0) + 1
        best = s.best()
        best_verdict = s.verdicts.get(best.id) if best else None
        return {
            "session_id": self.session_id,
            "problem": s.problem.name,
            "backend": s.backend,
            "provider": s.provider_names,
            "models": s.model_names,
            "scripted": s.scripted,
            "strategy": s.config.shape.strategy,
            "library_ops": s.config.checks.library_ops,
            "resumed": self.resuming,
            "status": status,
            "stop_reason": s.stop_reason,
            "rounds": s.round,
            "sizes": s.sizes,
            "ideas": sum(1 for n in s.nodes.values() if n.kind == "idea"),
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

    async def finish(self, status: str) -> dict[str, Any]:
        """The session's end recorded (shielded: an interrupted search still records how it ended)
        and announced; the summary."""
        elapsed = self.elapsed_s()  # one reading: the summary says what the DB keeps for a resume
        summary = self.summary(status, elapsed)
        if self.session_id is None:
            return summary
        summary["llm"] = await asyncio.shield(self.store.calls.totals(self.sid))
        best, stop_reason = self.search.best(), self.search.stop_reason
        await asyncio.shield(self.store.sessions.set_run_s(self.sid, elapsed))
        await asyncio.shield(self.store.sessions.update(
            self.sid, status=status, stop_reason=stop_reason, finished_at=time.time(),
            best_node_id=best.id if best else None, best_speedup=best.speedup if best else None,
        ))
        await self.publish_progress(force=True)
        await self.bus.publish(SessionDone(self.sid, status, summary))
        return summary
