"""The search as an orchestrator: it runs the work, and asks its parts what the work is.

Each unit of work is a task on the scheduler (engine.search.scheduler): an ideas call, or a variant's
generate -> compile -> check -> time. Rounds follow the strategy (engine.search.strategies: how
many rounds, ideas, variants, and whom each round grows from); every LLM call is charged to the
budget (engine.search.budget); human commands are applied by engine.search.steering; a resumed
session is read back and its in-flight work recovered by engine.search.resume; the session's
record (start, heartbeat, progress, end) is kept by engine.search.lifecycle. Profiles are taken
for what reads them (engine.search.profile_requests): a round's parents, just before their idea prompts,
the final best, and whatever a person asks for.

The DB is the state: every node is inserted before its work starts (a batch of nodes in one
transaction), every LLM reply and every verdict is committed before its event is published. So
a search killed at any moment resumes from the DB alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any

from engine import prompts
from engine.domain import DEVICE_PHASES, Node, best_variant, excluded, library_ops_text
from engine.evaluate import Evaluator, Verdict, is_disturbed, languages
from engine.llm.base import Provider
from engine.options import Placement
from engine.problems import Problem
from engine.record import crash
from engine.record.events import (
    BudgetReached,
    CommandApplied,
    EventBus,
    NodeAdded,
    NodeUpdated,
    ProfileTaken,
    RoundDone,
    VerdictReady,
)
from engine.record.store import Store
from engine.search.budget import Budget, Pool
from engine.search.calls import CallSettings, LLMResult, Models, call_llm
from engine.search.config import SearchConfig
from engine.search.history import describe, tried
from engine.search.jobs import variant_job
from engine.search.lifecycle import SessionRecord
from engine.search.resume import CANCEL, FIX, Saved, recovery
from engine.search.rows import asking_row, idea_row, variant_row
from engine.search.scheduler import Scheduler
from engine.search.steering import USER_STOP, Steering
from engine.search.strategies import strategy_for, ties_within_noise


@dataclass
class SuiteShare:
    """What a suite's problems share: the suite (its id, recorded with each session), one LLM
    concurrency limit per provider, and the suite-wide dollar cap. (The evaluator — one compile
    pool, the GPU timers — is shared by handing every search the same one.)"""

    suite_id: int
    pool: Pool = field(default_factory=Pool)
    llm_limits: dict[str, asyncio.Semaphore] = field(default_factory=dict)


class SearchAborted(Exception):
    """The search cannot go on (a bad key): the session ends as failed with this reason."""


class _Skipped(Exception):
    """A node's work did not start (a budget is spent, the search is stopping)."""


class Search:
    def __init__(
        self,
        store: Store,
        bus: EventBus,
        models: list[tuple[Provider, str]],
        evaluator: Evaluator,
        problem: Problem,
        config: SearchConfig,
        resume: int | None = None,
        suite: SuiteShare | None = None,
        placement: Placement | None = None,
    ):
        self.models = Models(models)
        self.placement = placement
        self.suite = suite
        shape = config.shape
        self.strategy = strategy_for(shape.strategy, rounds=shape.rounds, ideas=shape.ideas,
                                     variants=shape.variants, top=shape.top,
                                     library_ops=config.checks.library_ops)
        self.store = store
        self.bus = bus
        self.scripted = self.models.scripted
        self.budget = Budget(usd=config.budgets.budget_usd, tokens=config.budgets.budget_tokens,
                             variants=config.budgets.max_variants, time_limit_s=config.budgets.time_limit_s,
                             pool=suite.pool if suite else None)
        self.call_settings = CallSettings(config.llm.max_output_tokens, config.llm.reasoning)
        self.stop_reason: str | None = None
        self.evaluator = evaluator
        self.problem = problem
        self.config = config
        self.backend = evaluator.backend
        self.sizes = problem.sizes_for(self.backend)
        self.cost = problem.cost(self.backend)
        self._spread = 0  # ideas given languages so far (languages_for)
        self.record = SessionRecord(self, store, bus, resume)  # the session's row, start to end
        self.nodes: dict[int, Node] = {}
        self.verdicts: dict[int, Verdict] = {}
        self.replies: dict[tuple[int, str], LLMResult] = {}  # (node, purpose) -> how its call ended
        self.round = 0
        self.parents: list[int] = []  # this round's parents
        self.sched = Scheduler(config.llm.llm_concurrency, suite.llm_limits if suite else None)
        self._publishing: set[asyncio.Task[None]] = set()
        self._profiling: dict[int, asyncio.Lock] = {}  # node -> held while its profile is taken
        self._cap_hit: str | None = None  # the variant cap left work undone (the stop reason, at the end)

    # -- the loop ---------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        """Run (or resume) the search to its end; the summary, also recorded and published."""
        if self.record.resuming:
            self._restore(await self.record.load())
        else:
            await self._added(await self.record.create())
        steering = Steering(self, self.store, self.bus, self._sid)
        status = "failed"
        background: list[asyncio.Task[None]] = []
        try:
            if self.round == 0:
                await steering.apply_pending()  # e.g. a human idea before the first round
                root = next(n for n in self.nodes.values() if n.kind == "root")
                await self._start_round(1, self.strategy.first_parents(root.id))
            else:
                await self._recover()  # before any command adds work of its own
                await steering.apply_pending()
            background = [asyncio.create_task(steering.poll()), asyncio.create_task(self.record.tick())]
            await self._rounds(steering)
            await steering.apply_pending(kinds=("profile",))  # asked for while the search ended
            await self.sched.drain()
            status = "stopped" if self.stop_reason else "finished"
            failed_calls = self._only_failed_calls()
            if status == "finished" and failed_calls:  # nothing was judged: the run did not work
                status, self.stop_reason = "failed", failed_calls
        except SearchAborted as exc:
            status, self.stop_reason = "failed", str(exc)
        except asyncio.CancelledError:
            status = "interrupted"
            raise
        finally:
            for task in background:
                task.cancel()
            await asyncio.shield(self.sched.cancel_all())
            summary = await self.record.finish(status)
        return summary

    async def _rounds(self, steering: Steering) -> None:
        while True:
            await self.sched.drain()
            await steering.apply_pending()  # commands given while the last work finished
            if self.sched.tasks:
                continue
            last = self.stop_reason is not None or self.round >= self.strategy.total_rounds()
            capped = self._cap_hit or (None if last else self.budget.variant_limit())
            if capped:  # the variant cap cut work short, or leaves none for another round
                await self._stop_for_budget(capped)
                last = True
            parents = self.strategy.next_parents(self.nodes, self.round, self.parents)
            intervals = {i: v.speedup_interval for i, v in self.verdicts.items() if v.speedup_interval}
            ties = ties_within_noise(parents, self.nodes, self.round, intervals, self.config.checks.library_ops)
            ends = last or not parents or self._over_budget()
            if ends:  # the search ends: its best is read
                await self._profile_best()
            profiles = (await self.store.profiles.per_round(self._sid)).get(self.round, 0)
            await self.bus.publish(RoundDone(self.round, tuple(parents), self.best_speedup(), tuple(ties),
                                             profiles=profiles, last=ends))
            if last:
                return
            if not parents:
                self.stop_reason = "no parent left to expand (all pruned)"
                return
            if self._over_budget():
                return
            await self._start_round(self.round + 1, parents)

    async def _start_round(self, r: int, parents: list[int]) -> None:
        """Record the round's parents and one generating idea node per parent (one
        transaction), then start their idea calls."""
        self.round = r
        self.parents = list(parents)
        k = self.strategy.ideas_per_call()
        rows = [asking_row(p, r, k) for p in parents]
        made = await self.store.nodes.add_many(self._sid, rows, round_parents=(r, self.parents))
        for node in made:
            await self._added(node)
            self._spawn(node)

    # -- what the parts may do (engine.search.steering.Steerable) ---------------------------

    def stop(self, reason: str) -> None:
        """No new work starts from now on (the first reason given is the one recorded)."""
        if not self.stop_reason:
            self.stop_reason = reason

    async def update(self, node_id: int, publish: bool = True, commit: bool = True, **changes: Any) -> None:
        """Commit changes to a node (unless already committed), then (unless a VerdictReady
        follows) publish them."""
        if commit:
            await self.store.nodes.update(node_id, **changes)
        self.nodes[node_id] = replace(self.nodes[node_id], **changes)
        if publish:
            await self.bus.publish(NodeUpdated(self.nodes[node_id]))

    async def add_nodes(self, rows: list[dict[str, Any]], command_id: int | None = None) -> list[Node]:
        """Insert rows in one transaction (marking the command that made them applied)."""
        return await self.store.nodes.add_many(self._sid, rows, command_id=command_id)

    async def start(self, made: list[Node]) -> None:
        """Announce new nodes, then start the work of those that have some."""
        for n in made:
            await self._added(n)
        for n in made:
            if n.kind == "variant" or (n.kind == "idea" and n.status == "generating"):
                self._spawn(n)

    # -- work -------------------------------------------------------------------------------

    def _spawn(self, node: Node) -> None:
        work = self._ideas(node) if node.kind == "idea" else self._variant(node)
        self.sched.spawn(self._guard(node.id, work), node.id)

    async def _guard(self, node_id: int, work: Coroutine[Any, Any, None]) -> None:
        """Run one node's work; a cancelled (pruned, stopped) or skipped node is recorded as
        cancelled, not failed (nothing went wrong with it), and says why."""
        try:
            await work
        except _Skipped as exc:
            await self.update(node_id, status="cancelled", text=f"not started: {exc}")
        except asyncio.CancelledError:
            reason = self.sched.cancelled.pop(node_id, None)
            if reason is None:
                raise  # the whole search is being cancelled: the node stays in flight, for resume
            await asyncio.shield(self.update(node_id, status="cancelled", text=f"cancelled: {reason}"))

    async def _ideas(self, node: Node) -> None:
        """An idea node that is still generating: ask for its ideas, then make the first idea
        this node and each further one a sibling, each with M generating variants (one
        transaction), and start the variants."""
        parent = self.nodes[node.parent_id]  # type: ignore[index]
        k = node.want or self.strategy.ideas_per_call()
        if (node.id, "idea") not in self.replies and (capped := self.budget.variant_limit()):
            self._cap_hit = self._cap_hit or capped
            raise _Skipped(capped)  # ideas no variant could be made of
        if (node.id, "idea") not in self.replies:  # the prompt is to be built: it reads the profile
            await self.profile(parent.id, "parent", node.round)
        reply = await self._llm(node, "idea", lambda: prompts.idea_prompt(
            self.problem.source, parent.source,
            describe(self.nodes, self.verdicts, parent, self.strategy.feedback),
            tried(self.nodes, self.verdicts, parent), k, self.backend, sizes=self.sizes))
        if reply is None:
            await self.update(node.id, status="failed", text=self._call_failed(node, "idea"))
            return
        try:
            ideas = prompts.parse_ideas(reply)[:k]
        except prompts.ReplyError as exc:  # an empty list is said as such: it parsed, and held nothing
            title = exc.title if isinstance(exc, prompts.NoIdeas) else "(unparseable ideas)"
            await self.update(node.id, status="failed", title=title, text=str(exc))
            return
        m = self.strategy.variants_per_idea()
        room = self.budget.reserve_variants(len(ideas) * m)  # the cap: ideas beyond it are not made
        if room < len(ideas) * m:
            self._cap_hit = self._cap_hit or f"max variants reached: {self.budget.variants_generated}"
        ideas = ideas[:max(1, -(-room // m))]
        counts = [min(m, room - i * m) for i in range(len(ideas))]  # the last idea's may be fewer
        first, rest = ideas[0], ideas[1:]
        rows: list[dict[str, Any]] = [variant_row(node.id, first.title, node.round, language=lang)
                                      for lang in self.languages_for(m)[:counts[0]]]
        for idea, count in zip(rest, counts[1:], strict=True):
            rows.append(idea_row(parent.id, node.round, idea.title, idea.description))
            at = len(rows) - 1
            rows += [variant_row({"new": at}, idea.title, node.round, language=lang)
                     for lang in self.languages_for(m)[:count]]
        changes = {"status": "ok", "title": first.title, "text": first.description, "want": 0}
        made = await self.store.nodes.add_many(self._sid, rows, update=(node.id, changes))
        await self.update(node.id, commit=False, **changes)
        await self.start(made)

    async def _variant(self, node: Node) -> None:
        """Generate (unless the code is there), evaluate (unless the verdict is recorded); a
        compile error gets a fix child, up to `fixes` deep."""
        if not node.source:
            purpose = node.origin if node.origin == "fix" else "implement"
            reply = await self._llm(node, purpose, lambda: self._code_prompt(node))
            if reply is None:
                await self.update(node.id, status="failed", text=self._call_failed(node, purpose))
                return
            try:
                source = prompts.extract_code(reply)
            except prompts.ReplyError as exc:
                await self.update(node.id, status="failed", text=str(exc))
                return
            # A reply written in another language than asked is evaluated, and shown, in its own.
            language = languages.kernel_language(source)
            await self.update(node.id, source=source, status="queued",
                              **({"language": language} if language != node.language else {}))
        verdict = await self._evaluate(self.nodes[node.id])
        if verdict.status == "compile_error" or (verdict.status == "runtime_error" and verdict.sanitizer):
            await self._maybe_fix(self.nodes[node.id])

    async def _maybe_fix(self, failed: Node) -> None:
        if (self._fix_depth(failed) >= self.config.shape.fixes or excluded(failed, self.nodes)
                or self._over_budget()):
            return
        if not self.budget.reserve_variants(1):  # a fix is a variant: within the cap
            self._cap_hit = self._cap_hit or self.budget.variant_limit()
            return
        [child] = await self.add_nodes([variant_row(failed.id, failed.title, failed.round, origin="fix",
                                                    language=failed.language,
                                                    text="fix")])
        await self.start([child])

    def languages_for(self, m: int) -> list[str]:
        """The kernel languages of one idea's m variants: the search's languages in turn, each
        idea starting one further along (so that with one variant per idea, ideas alternate)."""
        langs = self.config.shape.languages or (languages.DEFAULT,)
        start = self._spread
        self._spread += 1
        return [langs[(start + i) % len(langs)] for i in range(m)]

    def _fix_depth(self, node: Node) -> int:
        depth = 0
        while node.origin == "fix" and node.parent_id is not None:
            depth += 1
            node = self.nodes[node.parent_id]
        return depth

    def _code_prompt(self, node: Node) -> str:
        parent = self.nodes[node.parent_id]  # type: ignore[index]
        if node.origin == "fix":
            verdict = self.verdicts.get(parent.id)
            return prompts.fix_prompt(self.problem.source, parent.source, node.title,
                                      verdict.log if verdict else "", self.backend, self.config.checks.rtol,
                                      sanitizer=verdict.sanitizer if verdict else "",
                                      language=node.language, sizes=self.sizes)
        idea = prompts.IdeaText(parent.title, parent.text)
        base = self.nodes[parent.parent_id]  # type: ignore[index]
        return prompts.implement_prompt(self.problem.source, base.source, idea, self.backend,
                                        self.config.checks.rtol, language=node.language, sizes=self.sizes)

    async def _evaluate(self, node: Node) -> Verdict:
        verdict = self.verdicts.get(node.id)
        if verdict is None:  # not evaluated yet (a resume finds the verdicts already committed)
            # Code that exists is evaluated even once a budget is spent: budgets stop new LLM work.
            await self.sched.gate()
            job = self._job(node)

            async def on_phase(phase: str) -> None:
                await self.update(node.id, status=phase)
                crash.point("compile" if phase == "compiling" else
                            "evaluate" if phase in DEVICE_PHASES else "phase")

            verdict = await self.evaluator.evaluate(job, on_phase, gate=self.sched)
            await self.store.evaluations.add(node_id=node.id, session_id=self._sid, verdict=verdict)
            self.verdicts[node.id] = verdict
            crash.point("db")  # the evaluation is committed, the node not yet updated
        await self.update(node.id, status=verdict.status, speedup=verdict.speedup_eager,
                          time_ms=verdict.time_ms, library=library_ops_text(verdict.library),
                          disturbed=is_disturbed(verdict.flags), publish=False)
        if verdict.ref_eager_ms and verdict.status == "correct":
            best = self.best()  # the best so far, for the sessions list and show while it runs
            await self.store.sessions.update(self._sid, ref_ms=verdict.ref_eager_ms,
                                            best_node_id=best.id if best else None,
                                            best_speedup=best.speedup if best else None)
        await self.bus.publish(VerdictReady(self.nodes[node.id], verdict))
        return verdict

    def _job(self, node: Node) -> Any:
        return variant_job(self.evaluator, self.problem.path, node, self.sizes, self.config,
                           self.cost.flops, self.cost.bytes)

    # -- profiles (engine.search.profile_requests) ----------------------------------------------------

    async def profile(self, node_id: int, reason: str, round: int | None = None) -> bool:
        """Profile a correct variant that has no profile yet, and record it (`reason`: parent,
        best, asked; counted in `round`, by default the current one). False when there was
        nothing to take: not a correct variant, profiled already, or profiling is off."""
        async with self._profiling.setdefault(node_id, asyncio.Lock()):
            node, verdict = self.nodes.get(node_id), self.verdicts.get(node_id)
            if node is None or node.kind != "variant" or verdict is None or not verdict.ok or verdict.profile:
                return False
            await self.sched.gate()
            profiled = await self.evaluator.profile(self._job(node), verdict)
            if not profiled.profile:
                return False
            await self.store.profiles.add(self._sid, node_id, profiled, round=max(1, round or self.round),
                                         reason=reason)
            self.verdicts[node_id] = profiled
            await self.bus.publish(ProfileTaken(self.nodes[node_id], profiled, reason))
            return True

    def profile_later(self, node_id: int, command_id: int) -> bool:
        """A person asked for the node's profile (a steering command): take it in a task of its
        own, then mark the command applied. False (nothing started) for a node that is not a
        judged variant."""
        node = self.nodes.get(node_id)
        if node is None or node.kind != "variant" or node_id not in self.verdicts:
            return False
        self.sched.spawn(self._profile_asked(node_id, command_id), node_id)
        return True

    async def _profile_asked(self, node_id: int, command_id: int) -> None:
        try:
            await self.profile(node_id, "asked")
        except asyncio.CancelledError:
            if self.sched.cancelled.pop(node_id, None) is None:
                raise  # the whole search is going: the command stays pending, for a resume
        await self.store.commands.mark_applied(command_id)
        await self.bus.publish(CommandApplied(command_id, "profile", (node_id,)))

    async def _profile_best(self) -> None:
        """The search ends: profile its best (unless a person stopped it: they want it over)."""
        best = self.best()
        if best is not None and self.stop_reason != USER_STOP:
            await self.profile(best.id, "best")

    async def _llm(self, node: Node, purpose: str, prompt: Callable[[], str]) -> str | None:
        """The reply for this node's call: from the DB when it was recorded (never asked
        twice), else one LLM call, recorded whether it succeeds or not. None when it failed."""
        done = self.replies.get((node.id, purpose))
        if done is not None:
            return done.reply if done.ok else None
        provider, model = self.models.next()
        async with self.sched.llm_slot(provider.name):
            if self._over_budget():
                raise _Skipped(self.stop_reason)
            text = prompt()
            crash.point("llm")
            result = await call_llm(self.store, self.bus, self.budget, self._sid, self.call_settings,
                                    provider, model, purpose, text, node.id)
        self.replies[(node.id, purpose)] = result
        if result.status == "auth":
            raise SearchAborted(result.error)
        return result.reply if result.ok else None

    def _only_failed_calls(self) -> str | None:
        """Why a search that judged no variant and whose LLM calls all failed failed (None when a
        variant was judged, or a call went through)."""
        if self.verdicts:
            return None
        asked = [n for n in self.nodes.values() if n.kind in ("idea", "variant") and n.origin == "llm"]
        failed = [n for n in asked if n.status == "failed"]
        if not failed or len(failed) < len(asked):
            return None
        last = (failed[-1].text or "the LLM call failed").splitlines()[0]
        # answered, but nothing in the answers was usable; or no call went through
        answered = any(r.ok for r in self.replies.values())
        what = "no LLM reply was usable" if answered else "every LLM call failed"
        return f"{what} ({len(failed)} of {len(asked)}), no variant was judged; last: {last}"

    def _call_failed(self, node: Node, purpose: str) -> str:
        """A failed node's text: that its call failed, and the provider's reason."""
        done = self.replies.get((node.id, purpose))
        reason = done.error if done is not None else None
        return f"the LLM call failed: {reason}" if reason else "the LLM call failed"

    # -- budgets ----------------------------------------------------------------------------

    def _over_budget(self) -> bool:
        """True once a budget is spent or the search is stopping; then no new work starts."""
        if self.stop_reason:
            return True
        reason = self.budget.exceeded(time.time() - self.record.started)
        if reason:
            self.stop_reason = reason
            task = asyncio.get_running_loop().create_task(self.bus.publish(BudgetReached(reason)))
            self._publishing.add(task)
            task.add_done_callback(self._publishing.discard)
        return self.stop_reason is not None

    async def _stop_for_budget(self, reason: str) -> None:
        if not self.stop_reason:
            self.stop_reason = reason
            await self.bus.publish(BudgetReached(reason))

    # -- resuming (the session is read back by engine.search.lifecycle) -------------------------

    def _restore(self, saved: Saved) -> None:
        """Take up the session's state as the DB holds it: nodes, verdicts, replies, rounds, spending."""
        self.nodes, self.verdicts, self.replies = saved.nodes, saved.verdicts, saved.replies
        self.round, self.parents = saved.round, saved.parents
        self.budget.restore(saved.totals, saved.variants_generated)
        if saved.paused:
            self.sched.pause()

    async def _recover(self) -> None:
        """Restart the current round's unfinished work; none of what is recorded is redone."""
        sanitized = {nid for nid, v in self.verdicts.items() if v.status == "runtime_error" and v.sanitizer}
        for step, node in recovery(self.nodes, self.round, self.sched.busy_nodes(), sanitized):
            if step == FIX:
                await self._maybe_fix(node)
            elif step == CANCEL:
                await self.update(node.id, status="cancelled", text="cancelled: pruned")
            else:
                self._spawn(node)


    # -- helpers ----------------------------------------------------------------------------

    @property
    def session_id(self) -> int | None:
        return self.record.session_id

    @property
    def _sid(self) -> int:
        return self.record.sid

    @property
    def provider_names(self) -> str:
        return self.models.provider_names

    @property
    def model_names(self) -> list[str]:
        return self.models.model_names

    async def _added(self, node: Node) -> None:
        self.nodes[node.id] = node
        await self.bus.publish(NodeAdded(node))

    def best(self) -> Node | None:
        return best_variant(self.nodes, self.config.checks.library_ops)

    def best_speedup(self) -> float | None:
        best = self.best()
        return best.speedup if best else None
