"""A suite: many problems searched as one run (`ktree suite level1`), one session a problem.

The problems run at once and share what is scarce: one LLM concurrency limit per provider (so one
problem's wait for a model is another's GPU time), one evaluator (its compile pool and its GPU
timers: whatever the executor built), and the suite-wide dollar cap (`Pool`). Each problem keeps
its own search shape and per-problem budgets.

The DB is the state, as for a session: the `suites` row lists the problems; each problem's
session carries `suite_id`. A problem that cannot be searched (it does not load, no provider
answers it) is recorded as a failed session with its reason, and the suite goes on. A resumed
suite resumes every session that did not end, starts the problems that have none yet, and leaves
the ended ones as they are — no LLM call is paid twice (engine.search.resume).

`scores` computes KernelBench's suite numbers from the stored verdicts (see its docstring).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from engine.domain import DEFAULT_LANGUAGE, library_excluded, session_library_ops
from engine.evaluate import Evaluator
from engine.llm.base import Provider
from engine.options import Placement
from engine.problems import Problem
from engine.record.events import EventBus
from engine.record.store import Store, session_state
from engine.search.budget import Pool
from engine.search.config import SearchConfig
from engine.search.orchestrator import Search, SuiteShare

FAST_P_THRESHOLDS = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
ENDED = ("finished", "stopped", "failed")
HEARTBEAT_S = 2.0


@dataclass(frozen=True)
class SuiteEntry:
    """One problem of a suite, as prepared: ready to search, or the reason it cannot be."""

    spec: str  # the problem's path (as listed in the suites row)
    name: str
    problem: Problem | None = None
    models: list[tuple[Provider, str]] | None = None
    config: SearchConfig | None = None
    error: str | None = None


def unanswered(entry: SuiteEntry) -> str | None:
    """Why no model of the entry can answer its problem (the scripted provider on a problem its
    library has no kernels for, in the search's languages); None when they can."""
    languages = entry.config.shape.languages if entry.config is not None else (DEFAULT_LANGUAGE,)
    for provider, _ in entry.models or []:
        check = getattr(provider, "unanswered", None)
        if check is not None and (reason := check(languages)) is not None:
            return reason
    return None


class Suite:
    def __init__(self, store: Store, entries: Sequence[SuiteEntry], evaluator: Evaluator, *, name: str,
                 record: dict[str, Any], cap_usd: float | None = None, resume: int | None = None,
                 bus_for: Callable[[SuiteEntry], EventBus] | None = None, placement: Placement | None = None):
        """`record`: the request as the suites row keeps it (for a resume); `bus_for`: the event
        bus each problem's search publishes on (by default a bus of its own nobody hears)."""
        self.store = store
        self.placement = placement  # the evaluator's, as resolved: each problem's session records it
        self.entries = list(entries)
        self.evaluator = evaluator
        self.name = name
        self.record = record
        self.cap_usd = cap_usd
        self.suite_id = resume
        self.bus_for = bus_for or (lambda entry: EventBus())
        self.searches: dict[str, Search] = {}  # spec -> its search, while it runs
        self.started = time.time()

    async def run(self) -> dict[str, Any]:
        """Run (or resume) every problem to its end; the suite's status."""
        if self.suite_id is None:
            self.suite_id = await self.store.suites.create(
                name=self.name, problems=[e.spec for e in self.entries], config=self.record)
        else:
            await self.store.suites.update(self.suite_id, status="running", stop_reason=None, finished_at=None,
                                          pid=os.getpid(), heartbeat_at=time.time())
        sessions = {s["problem_path"]: s for s in await self.store.suites.sessions(self.suite_id)}
        pool = Pool(self.cap_usd, spent_usd=sum(s["cost_usd"] for s in sessions.values()))
        share = SuiteShare(self.suite_id, pool)
        searches: list[tuple[SuiteEntry, Search]] = []
        for entry in self.entries:
            session = sessions.get(entry.spec)
            if session is not None and session_state(session) in ENDED:
                continue  # ended in an earlier run: recorded as it is
            if entry.error is None and entry.problem is not None:
                entry = replace(entry, error=unanswered(entry))
            if entry.error is not None or entry.problem is None:
                if session is None:
                    await self._record_unloadable(entry)
                continue
            assert entry.models is not None and entry.config is not None
            search = Search(self.store, self.bus_for(entry), entry.models, self.evaluator, entry.problem,
                            entry.config, resume=session["id"] if session else None, suite=share,
                            placement=self.placement)
            searches.append((entry, search))
            self.searches[entry.spec] = search
        start_workers = getattr(self.evaluator, "start_workers", None)
        if start_workers is not None and searches:  # every device's worker sees every problem file
            start_workers(*(str(entry.problem.path) for entry, _ in searches if entry.problem is not None))
        beat = asyncio.create_task(self._heartbeat())
        status = "interrupted"
        try:
            await asyncio.gather(*(self._one(entry, search) for entry, search in searches))
            status = "stopped" if pool.exceeded() else "finished"
        finally:
            beat.cancel()
            await asyncio.shield(self.store.suites.update(
                self.suite_id, status=status, stop_reason=pool.exceeded(), finished_at=time.time()))
        return {"suite_id": self.suite_id, "status": status, "problems": len(self.entries),
                "elapsed_s": round(time.time() - self.started, 2)}

    async def _one(self, entry: SuiteEntry, search: Search) -> None:
        """One problem's search; an error of its own ends that session as failed, not the suite."""
        try:
            await search.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if search.session_id is not None:
                await self.store.sessions.update(search.session_id, status="failed", finished_at=time.time(),
                                                stop_reason=f"{type(exc).__name__}: {exc}"[:500])

    async def _record_unloadable(self, entry: SuiteEntry) -> None:
        assert self.suite_id is not None
        backend = self.evaluator.backend
        await self.store.sessions.create(
            problem=entry.name, problem_path=entry.spec, backend=backend, strategy="-", provider="-",
            models=[], config={}, sizes={}, suite_id=self.suite_id, status="failed",
            stop_reason=f"not searched: {entry.error}")

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            await self.store.suites.update(self.suite_id, heartbeat_at=time.time())  # type: ignore[arg-type]


# --- the report: KernelBench's numbers from the stored verdicts -----------------------------------

@dataclass(frozen=True)
class ProblemResult:
    """A problem's outcome: its best correct variant against eager and against torch.compile
    (each the best over the correct variants; None without one)."""

    session_id: int
    problem: str
    status: str  # the session's
    reason: str | None
    correct: bool
    speedup_eager: float | None
    speedup_compile: float | None
    variants: int
    cost_usd: float
    tokens: int
    degenerate: bool = False  # the reference's output does not depend on its inputs (engine.problems)


def fast_p(results: Sequence[ProblemResult], p: float, baseline: str = "eager") -> float:
    """KernelBench's fast_p: the fraction of ALL problems (those that failed or never loaded
    included) whose kernel is correct AND more than p times faster than the baseline. fast_0 is
    the correctness rate."""
    if not results:
        return 0.0
    fast = sum(1 for r in results if r.correct and (s := _speedup(r, baseline)) is not None and s > p)
    return fast / len(results)


def geomean_speedup(results: Sequence[ProblemResult], baseline: str = "eager") -> float | None:
    """Geometric mean of the speedups over the correct problems only (KernelBench's
    `geometric_mean_speed_ratio_correct_only`); None when none is correct."""
    speeds = [s for r in results if r.correct and (s := _speedup(r, baseline)) is not None and s > 0]
    if not speeds:
        return None
    return math.exp(sum(math.log(s) for s in speeds) / len(speeds))


def _speedup(r: ProblemResult, baseline: str) -> float | None:
    return r.speedup_eager if baseline == "eager" else r.speedup_compile


async def suite_results(store: Store, suite_id: int) -> list[ProblemResult]:
    """Each problem of the suite from its stored verdicts and LLM calls (a session that excludes
    library ops counts none of its library-marked variants, as its best does not)."""
    out = []
    sessions = await store.suites.sessions(suite_id)
    for s in sessions:
        library_ops = session_library_ops(s.get("config"))
        correct = [e["verdict"] for e in await store.evaluations.of(s["id"])
                   if e["verdict"].status == "correct" and not library_excluded(e["verdict"], library_ops)]
        eager = [v.speedup_eager for v in correct if v.speedup_eager is not None]
        compiled = [v.speedup_compile for v in correct if v.speedup_compile is not None]
        totals = await store.calls.totals(s["id"])
        out.append(ProblemResult(
            session_id=s["id"], problem=s["problem"], status=s["status"], reason=s.get("stop_reason"),
            correct=bool(correct), speedup_eager=max(eager, default=None),
            speedup_compile=max(compiled, default=None), variants=s["variants"],
            cost_usd=float(totals["cost_usd"]), tokens=int(totals["tokens"]),
            degenerate=bool((s.get("config") or {}).get("degenerate"))))
    suite = await store.suites.get(suite_id)
    listed = list((suite or {}).get("problems", []))
    recorded = {s["problem_path"] for s in sessions}
    for spec in listed:  # killed before its session was made: counted too
        if spec not in recorded:
            out.append(ProblemResult(0, Path(spec).stem, "not started", None, False, None, None, 0, 0.0, 0))
    paths = {s["id"]: s["problem_path"] for s in sessions}
    order = {spec: i for i, spec in enumerate(listed)}
    return sorted(out, key=lambda r: order.get(paths.get(r.session_id, ""), len(order)))


def scores(results: Sequence[ProblemResult]) -> dict[str, Any]:
    """The suite's summary line: fast_p at each threshold vs eager and vs torch.compile, the
    geometric-mean speedups, the correctness rate, tokens and dollars."""
    n = len(results)
    return {
        "problems": n,
        "correct": sum(r.correct for r in results),
        "correctness_rate": (sum(r.correct for r in results) / n) if n else 0.0,
        "fast_p_eager": {f"{p:g}": fast_p(results, p, "eager") for p in FAST_P_THRESHOLDS},
        "fast_p_compile": {f"{p:g}": fast_p(results, p, "compile") for p in FAST_P_THRESHOLDS},
        "geomean_speedup_eager": geomean_speedup(results, "eager"),
        "geomean_speedup_compile": geomean_speedup(results, "compile"),
        "tokens": sum(r.tokens for r in results),
        "cost_usd": round(sum(r.cost_usd for r in results), 6),
    }


async def suite_report(store: Store, suite_id: int) -> dict[str, Any] | None:
    """`ktree show --suite N` as data: the suite row, each problem, the scores."""
    suite = await store.suites.get(suite_id)
    if suite is None:
        return None
    results = await suite_results(store, suite_id)
    return {"suite": suite, "problems": [asdict(r) for r in results], "scores": scores(results)}
