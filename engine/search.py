"""The idea-tree search: for each parent, K ideas; for each idea, M variants; evaluate all;
keep the top T correct variants (and every pinned one) as the next round's parents; R rounds.
Two baselines share the machinery (`strategy`): `sequential` (one chain; each step asks for one
idea from the best so far, with the last attempt's verdict as feedback, and implements it once)
and `best-of-n` (N = ideas x variants independent samples from the reference, one round).

Each unit of work is a task on the scheduler (engine.scheduler): an ideas call, or a variant's
generate -> compile -> check -> time. The DB is the state: every node is inserted before its work
starts (a batch of nodes in one transaction), every LLM reply and every verdict is committed
before its event is published. So a search killed at any moment resumes from the DB alone
(`Search(..., resume=session_id)`): a node whose reply is recorded is not asked again, a node
whose verdict is recorded is not evaluated again, and work that was in flight is redone once.

Human commands (engine.control) come through the DB too: a poller applies pending ones every
0.25 s and between scheduling steps, in the order given, and marks each applied.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from engine import control, crash, prompts
from engine.domain import DEVICE_PHASES, DONE_STATUSES, STRATEGIES, Node, best_variant, excluded
from engine.evaluate.base import Evaluator
from engine.events import (
    BudgetReached,
    CommandApplied,
    EventBus,
    LLMCallDone,
    NodeAdded,
    NodeUpdated,
    Progress,
    RoundDone,
    SessionDone,
    SessionStarted,
    VerdictReady,
)
from engine.llm.base import LLMAuthError, LLMError, Message, Provider
from engine.problems import Problem
from engine.scheduler import Scheduler
from engine.store import Store

COMMAND_POLL_S = 0.25
HEARTBEAT_S = 2.0


@dataclass(frozen=True)
class SearchConfig:
    rounds: int = 2
    ideas: int = 3
    variants: int = 2
    top: int = 2
    max_output_tokens: int = 16000
    reasoning: str | None = None
    fixes: int = 1  # fix-prompt retries for a variant that fails to compile
    budget_usd: float | None = None
    budget_tokens: int | None = None
    max_variants: int | None = None  # variants generated (LLM code or a human edit)
    time_limit_s: float | None = None  # wall time of this run of the engine
    atol: float = 1e-2
    rtol: float = 1e-2
    trials: int = 3
    seed: int = 0
    strategy: str = "tree"
    llm_concurrency: int = 8  # concurrent calls per provider

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


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
    ):
        if not models:
            raise ValueError("a search needs at least one model")
        if config.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {config.strategy!r} (known: {', '.join(STRATEGIES)})")
        self.store = store
        self.bus = bus
        self.models = models  # (provider, model name), used round-robin across calls
        self._turn = 0
        self.scripted = any(getattr(p, "scripted", False) for p, _ in models)
        self.spent_usd = 0.0
        self.spent_tokens = 0
        self.stop_reason: str | None = None
        self.evaluator = evaluator
        self.problem = problem
        self.config = config
        self.backend = evaluator.backend
        self.sizes = problem.sizes_for(self.backend)
        self.cost = problem.cost(self.backend)
        self.session_id: int | None = resume
        self.resuming = resume is not None
        self.nodes: dict[int, Node] = {}
        self.verdicts: dict[int, dict[str, Any]] = {}
        self.replies: dict[tuple[int, str], dict[str, Any]] = {}  # (node, purpose) -> llm_calls row
        self.started = time.time()
        self.round = 0
        self.parents: list[int] = []  # this round's parents
        self.variants_generated = 0
        self.sched = Scheduler(config.llm_concurrency)
        self._commands_lock = asyncio.Lock()
        self._last_progress: tuple | None = None
        self._last_progress_at = 0.0
        self._publishing: set[asyncio.Task[None]] = set()

    # -- the loop ---------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        if self.resuming:
            await self._load()
        else:
            await self._create()
        status = "failed"
        background: list[asyncio.Task[None]] = []
        try:
            if self.round == 0:
                await self._apply_commands()  # e.g. a human idea before the first round
                root = next(n for n in self.nodes.values() if n.kind == "root")
                await self._start_round(1, self._first_parents(root))
            else:
                await self._recover()  # before any command adds work of its own
                await self._apply_commands()
            background = [asyncio.create_task(self._poll_commands()), asyncio.create_task(self._tick())]
            await self._rounds()
            status = "stopped" if self.stop_reason else "finished"
        except SearchAborted as exc:
            status, self.stop_reason = "failed", str(exc)
        except asyncio.CancelledError:
            status = "interrupted"
            raise
        finally:
            for task in background:
                task.cancel()
            await asyncio.shield(self.sched.cancel_all())
            summary = await self._finish(status)
        return summary

    async def _rounds(self) -> None:
        while True:
            await self.sched.drain()
            await self._apply_commands()  # commands given while the last work finished
            if self.sched.tasks:
                continue
            last = self.stop_reason is not None or self.round >= self._total_rounds()
            parents = self._select()
            await self.bus.publish(RoundDone(self.round, tuple(parents), self.best_speedup()))
            if last:
                return
            if not parents:
                self.stop_reason = "no parent left to expand (all pruned)"
                return
            if self._over_budget():
                return
            await self._start_round(self.round + 1, [self.nodes[p] for p in parents])

    def _total_rounds(self) -> int:
        return 1 if self.config.strategy == "best-of-n" else self.config.rounds

    def _first_parents(self, root: Node) -> list[Node]:
        if self.config.strategy == "best-of-n":
            return [root] * (self.config.ideas * self.config.variants)
        return [root]

    def _ideas_per_call(self) -> int:
        return self.config.ideas if self.config.strategy == "tree" else 1

    def _variants_per_idea(self) -> int:
        return self.config.variants if self.config.strategy == "tree" else 1

    async def _start_round(self, r: int, parents: list[Node]) -> None:
        """Record the round's parents and one generating idea node per parent (one
        transaction), then start their idea calls."""
        self.round = r
        self.parents = [p.id for p in parents]
        k = self._ideas_per_call()
        rows = [{"parent_id": p.id, "kind": "idea", "round": r, "status": "generating",
                 "title": f"asking for {k} idea{'s' if k > 1 else ''}", "want": k} for p in parents]
        made = await self.store.add_nodes(self._sid, rows, round_parents=(r, self.parents))
        for node in made:
            await self._added(node)
            self.sched.spawn(self._guard(node.id, self._ideas(node)), node.id)

    def _select(self) -> list[int]:
        """The next round's parents: pinned nodes, then the best correct variants."""
        cfg = self.config
        pinned = [n.id for n in self.nodes.values()
                  if n.pinned and n.kind in ("root", "variant") and not self._excluded(n)]
        correct = [n for n in self.nodes.values()
                   if n.kind == "variant" and n.status == "correct" and not self._excluded(n)
                   and n.id not in pinned]
        if cfg.strategy == "sequential":
            best = max(correct, key=lambda n: n.speedup or 0.0, default=None)
            chosen = [best.id] if best else [p for p in self.parents if p not in pinned
                                             and not self._excluded(self.nodes[p])][:1]
        else:
            this_round = sorted((n for n in correct if n.round == self.round),
                                key=lambda n: n.speedup or 0.0, reverse=True)
            chosen = [n.id for n in this_round[: cfg.top]]
            if not chosen:  # nothing correct this round: try the same parents again
                chosen = [p for p in dict.fromkeys(self.parents)
                          if p not in pinned and not self._excluded(self.nodes[p])]
        return list(dict.fromkeys(pinned + chosen))

    def _excluded(self, node: Node) -> bool:
        return excluded(node, self.nodes)

    # -- work -------------------------------------------------------------------------------

    async def _guard(self, node_id: int, work: Any) -> None:
        """Run one node's work; a cancelled (pruned, stopped) or skipped node says why."""
        try:
            await work
        except _Skipped as exc:
            await self._update(node_id, status="failed", text=f"not started: {exc}")
        except asyncio.CancelledError:
            reason = self.sched.cancelled.pop(node_id, None)
            if reason is None:
                raise  # the whole search is being cancelled: the node stays in flight, for resume
            await asyncio.shield(self._update(node_id, status="failed", text=f"cancelled: {reason}"))

    async def _ideas(self, node: Node) -> None:
        """An idea node that is still generating: ask for its ideas, then make the first idea
        this node and each further one a sibling, each with M generating variants (one
        transaction), and start the variants."""
        parent = self.nodes[node.parent_id]  # type: ignore[index]
        k = node.want or self._ideas_per_call()
        reply = await self._llm(node, "idea", lambda: prompts.idea_prompt(
            self.problem.source, parent.source, self._describe(parent), self._tried(parent), k,
            self.backend))
        if reply is None:
            await self._update(node.id, status="failed", text="the LLM call failed")
            return
        try:
            ideas = prompts.parse_ideas(reply)[:k]
        except prompts.ReplyError as exc:
            await self._update(node.id, status="failed", title="(unparseable ideas)", text=str(exc))
            return
        m = self._variants_per_idea()
        first, rest = ideas[0], ideas[1:]
        rows: list[dict[str, Any]] = [self._variant_row(node.id, first.title, node.round) for _ in range(m)]
        for idea in rest:
            rows.append({"parent_id": parent.id, "kind": "idea", "round": node.round, "status": "ok",
                         "title": idea.title, "text": idea.description})
            at = len(rows) - 1
            rows += [self._variant_row({"new": at}, idea.title, node.round) for _ in range(m)]
        changes = {"status": "ok", "title": first.title, "text": first.description, "want": 0}
        made = await self.store.add_nodes(self._sid, rows, update=(node.id, changes))
        await self._update(node.id, commit=False, **changes)
        await self._start_made(made)

    def _variant_row(self, parent: int | dict[str, int], title: str, r: int, **extra: Any) -> dict[str, Any]:
        return {"parent_id": parent, "kind": "variant", "round": r, "status": "generating",
                "title": title, **extra}

    async def _start_made(self, made: list[Node]) -> None:
        for n in made:
            await self._added(n)
        for n in made:
            if n.kind == "variant":
                self.sched.spawn(self._guard(n.id, self._variant(n)), n.id)

    async def _variant(self, node: Node) -> None:
        """Generate (unless the code is there), evaluate (unless the verdict is recorded); a
        compile error gets a fix child, up to `fixes` deep."""
        if not node.source:
            reply = await self._llm(node, node.origin if node.origin == "fix" else "implement",
                                    lambda: self._code_prompt(node), counts_variant=True)
            if reply is None:
                await self._update(node.id, status="failed", text="the LLM call failed")
                return
            try:
                source = prompts.extract_code(reply)
            except prompts.ReplyError as exc:
                await self._update(node.id, status="failed", text=str(exc))
                return
            await self._update(node.id, source=source, status="queued")
        verdict = await self._evaluate(self.nodes[node.id])
        if verdict["status"] == "compile_error":
            await self._maybe_fix(self.nodes[node.id])

    async def _maybe_fix(self, failed: Node) -> None:
        if self._fix_depth(failed) >= self.config.fixes or self._excluded(failed) or self._over_budget():
            return
        [child] = await self.store.add_nodes(self._sid, [self._variant_row(
            failed.id, failed.title, failed.round, origin="fix", text="fix")])
        await self._start_made([child])

    def _fix_depth(self, node: Node) -> int:
        depth = 0
        while node.origin == "fix" and node.parent_id is not None:
            depth += 1
            node = self.nodes[node.parent_id]
        return depth

    def _code_prompt(self, node: Node) -> str:
        parent = self.nodes[node.parent_id]  # type: ignore[index]
        if node.origin == "fix":
            verdict = self.verdicts.get(parent.id, {})
            return prompts.fix_prompt(self.problem.source, parent.source, node.title,
                                      verdict.get("log", ""), self.backend, self.config.rtol)
        idea = prompts.IdeaText(parent.title, parent.text)
        base = self.nodes[parent.parent_id]  # type: ignore[index]
        return prompts.implement_prompt(self.problem.source, base.source, idea, self.backend,
                                        self.config.rtol)

    async def _evaluate(self, node: Node) -> dict[str, Any]:
        verdict = self.verdicts.get(node.id)
        if verdict is None:  # not evaluated yet (a resume finds the verdicts already committed)
            # Code that exists is evaluated even once a budget is spent: budgets stop new LLM work.
            await self.sched.gate()
            job = self.evaluator.job(
                self.problem.path, node.source, self.sizes, atol=self.config.atol,
                rtol=self.config.rtol, trials=self.config.trials, seed=self.config.seed,
            )

            async def on_phase(phase: str) -> None:
                await self._update(node.id, status=phase)
                crash.point("compile" if phase == "compiling" else
                            "evaluate" if phase in DEVICE_PHASES else "phase")

            verdict = (await self.evaluator.evaluate(job, on_phase)).to_dict()
            await self.store.add_evaluation(node_id=node.id, session_id=self._sid, verdict=verdict)
            self.verdicts[node.id] = verdict
            crash.point("db")  # the evaluation is committed, the node not yet updated
        await self._update(node.id, status=verdict["status"], speedup=verdict.get("speedup_eager"),
                           time_ms=verdict.get("time_ms"), publish=False)
        if verdict.get("ref_eager_ms") and verdict["status"] == "correct":
            await self.store.update_session(self._sid, ref_ms=verdict["ref_eager_ms"])
        await self.bus.publish(VerdictReady(self.nodes[node.id], verdict))
        return verdict

    async def _llm(self, node: Node, purpose: str, prompt: Any, counts_variant: bool = False) -> str | None:
        """The reply for this node's call: from the DB when it was recorded (never asked
        twice), else one LLM call, recorded whether it succeeds or not. None when it failed."""
        done = self.replies.get((node.id, purpose))
        if done is not None:
            return done["reply"] if done["status"] == "ok" else None
        provider, model = self._next_model()
        async with self.sched.llm_slot(provider.name):
            self._check_budget_or_skip()
            if counts_variant:
                if self.config.max_variants is not None and self.variants_generated >= self.config.max_variants:
                    await self._stop_for_budget(f"max variants reached: {self.variants_generated}")
                    raise _Skipped(self.stop_reason)
                self.variants_generated += 1
            text = prompt()
            crash.point("llm")
            call = await self._call(provider, model, purpose, text, node.id)
        self.replies[(node.id, purpose)] = call
        if call["status"] == "auth":
            raise SearchAborted(call["error"])
        return call["reply"] if call["status"] == "ok" else None

    async def _call(self, provider: Provider, model: str, purpose: str, prompt: str,
                    node_id: int) -> dict[str, Any]:
        messages = [Message("user", prompt)]
        try:
            completion = await provider.complete(
                messages, model, self.config.max_output_tokens, self.config.reasoning)
        except LLMError as exc:
            call_id = await self.store.add_llm_call(
                session_id=self._sid, node_id=node_id, provider=provider.name, model=model,
                purpose=purpose, prompt=prompt, reply="", status="error", error=str(exc),
            )
            await self.bus.publish(LLMCallDone(call_id, node_id, purpose, model, 0, 0, 0.0, 0.0,
                                               "error"))
            status = "auth" if isinstance(exc, LLMAuthError) else "error"
            return {"status": status, "reply": "", "error": str(exc)}
        u = completion.usage
        self.spent_usd += completion.cost_usd
        self.spent_tokens += u.input + u.output + u.reasoning
        call_id = await self.store.add_llm_call(
            session_id=self._sid, node_id=node_id, provider=provider.name,
            model=completion.model or model, purpose=purpose, prompt=prompt, reply=completion.text,
            input_tokens=u.input, output_tokens=u.output, reasoning_tokens=u.reasoning,
            cost_usd=completion.cost_usd, latency_s=completion.latency_s,
            attempts=getattr(completion, "attempts", 1),
        )
        await self.bus.publish(LLMCallDone(call_id, node_id, purpose, completion.model or model,
                                           u.input, u.output, completion.cost_usd,
                                           completion.latency_s, "ok", reasoning_tokens=u.reasoning))
        return {"status": "ok", "reply": completion.text}

    # -- budgets ----------------------------------------------------------------------------

    def _check_budget_or_skip(self) -> None:
        if self._over_budget():
            raise _Skipped(self.stop_reason)

    def _over_budget(self) -> bool:
        """True once a budget is spent or the search is stopping; then no new work starts."""
        cfg = self.config
        if self.stop_reason:
            return True
        reason = None
        if cfg.budget_usd is not None and self.spent_usd >= cfg.budget_usd:
            reason = f"budget reached: ${self.spent_usd:.4f} of ${cfg.budget_usd:g}"
        elif cfg.budget_tokens is not None and self.spent_tokens >= cfg.budget_tokens:
            reason = f"budget reached: {self.spent_tokens} of {cfg.budget_tokens} tokens"
        elif cfg.time_limit_s is not None and time.time() - self.started >= cfg.time_limit_s:
            reason = f"time limit reached: {cfg.time_limit_s:g} s"
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

    # -- human commands ---------------------------------------------------------------------

    async def _poll_commands(self) -> None:
        while True:
            await asyncio.sleep(COMMAND_POLL_S)
            try:
                await self._apply_commands()
            except Exception as exc:  # a bug: end the search with it, as a task's error would
                self.sched.fail(exc)
                return

    async def _apply_commands(self) -> None:
        async with self._commands_lock:
            for row in await self.store.commands(self._sid, pending_only=True):
                try:
                    command = control.decode(row["kind"], row["args"])
                except (ValueError, TypeError):
                    command = None
                ids = await self._apply(row["id"], command) if command is not None else ()
                made_nodes = ids and isinstance(command, control.InjectIdea | control.EditVariant
                                                | control.Expand)
                if not made_nodes:  # (one that made nodes was marked in the same transaction)
                    await self.store.mark_command_applied(row["id"])
                await self.bus.publish(CommandApplied(row["id"], row["kind"], tuple(ids)))

    async def _apply(self, command_id: int, cmd: control.Command) -> tuple[int, ...]:
        """Carry out one command; the nodes it touched or created. A command whose nodes it
        creates is marked applied in the same transaction (so a kill never applies it twice)."""
        r = max(self.round, 1)
        if isinstance(cmd, control.Pause):
            self.sched.pause()
            return ()
        if isinstance(cmd, control.Resume):
            self.sched.resume()
            return ()
        if isinstance(cmd, control.Stop):
            if not self.stop_reason:
                self.stop_reason = "stopped by the user"
            self.sched.resume()  # paused work must see the stop
            self.sched.cancel(set(self.nodes), self.stop_reason)
            return ()
        if isinstance(cmd, control.Pin):
            node = self.nodes.get(cmd.node_id)
            if node is None or node.kind == "idea":
                return ()
            await self._update(node.id, pinned=bool(cmd.pinned))
            return (node.id,)
        if isinstance(cmd, control.Prune):
            node = self.nodes.get(cmd.node_id)
            if node is None or node.kind == "root":
                return ()
            await self._update(node.id, pruned=True)
            branch = self._branch(node.id)
            self.sched.cancel(branch, "pruned")
            return (node.id,)
        if isinstance(cmd, control.Expand):
            node = self.nodes.get(cmd.node_id)
            if node is None or self._excluded(node) or self.stop_reason:
                return ()
            rows: list[dict[str, Any]] = []
            if cmd.ideas > 0 and node.kind in ("root", "variant"):
                rows.append({"parent_id": node.id, "kind": "idea", "round": r, "status": "generating",
                             "title": f"asking for {cmd.ideas} idea{'s' if cmd.ideas > 1 else ''}",
                             "want": cmd.ideas})
            if cmd.variants > 0 and node.kind == "idea" and node.status == "ok":
                rows += [self._variant_row(node.id, node.title, r) for _ in range(cmd.variants)]
            if not rows:
                return ()
            made = await self.store.add_nodes(self._sid, rows, command_id=command_id)
            for n in made:
                if n.kind == "idea":
                    await self._added(n)
                    self.sched.spawn(self._guard(n.id, self._ideas(n)), n.id)
            await self._start_made([n for n in made if n.kind == "variant"])
            return tuple(n.id for n in made)
        if isinstance(cmd, control.InjectIdea):
            parent = self.nodes.get(cmd.parent_id)
            text = cmd.text.strip()
            if parent is None or parent.kind == "idea" or not text or self.stop_reason:
                return ()
            title = text.splitlines()[0][:120]
            rows = [{"parent_id": parent.id, "kind": "idea", "round": r, "status": "ok",
                     "title": title, "text": text, "origin": "human"}]
            rows += [self._variant_row({"new": 0}, title, r) for _ in range(self._variants_per_idea())]
            made = await self.store.add_nodes(self._sid, rows, command_id=command_id)
            await self._start_made(made)
            return tuple(n.id for n in made)
        if isinstance(cmd, control.EditVariant):
            node = self.nodes.get(cmd.node_id)
            if node is None or node.kind != "variant" or not cmd.source.strip() or self.stop_reason:
                return ()
            [child] = await self.store.add_nodes(self._sid, [{
                "parent_id": node.id, "kind": "variant", "round": r, "status": "queued",
                "title": node.title, "text": "edited by hand", "source": cmd.source, "origin": "edit",
            }], command_id=command_id)
            self.variants_generated += 1
            await self._start_made([child])
            return (child.id,)
        return ()

    def _branch(self, node_id: int) -> set[int]:
        """The node and everything under it."""
        out = {node_id}
        grew = True
        while grew:
            more = {n.id for n in self.nodes.values() if n.parent_id in out} - out
            out |= more
            grew = bool(more)
        return out

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
                    await self.store.update_session(self._sid, heartbeat_at=now)
                    last_beat = now
                await self.publish_progress()
            except Exception as exc:  # end the search with it: a silent heartbeat reads as dead
                self.sched.fail(exc)
                return

    async def publish_progress(self, force: bool = False) -> None:
        cfg = self.config
        waiting = getattr(self.evaluator, "waiting", {})
        device_states = getattr(self.evaluator, "device_states", None)  # not every evaluator has it
        devices = tuple(device_states()) if device_states is not None else ()
        state = (self.round, self._total_rounds(), waiting.get("compile", 0), waiting.get("device", 0),
                 self.sched.llm_running, self.spent_tokens, round(self.spent_usd, 6), self.sched.paused,
                 tuple((d["name"], d["busy"], d["jobs"], d["queue"], d["alive"]) for d in devices))
        now = time.monotonic()
        if not force and state == self._last_progress and now - self._last_progress_at < 1.0:
            return
        self._last_progress, self._last_progress_at = state, now
        await self.bus.publish(Progress(
            round=self.round, rounds=self._total_rounds(), compile_queue=state[2], gpu_queue=state[3],
            llm_running=state[4], tokens=self.spent_tokens, cost_usd=self.spent_usd,
            budget_usd=cfg.budget_usd, budget_tokens=cfg.budget_tokens,
            elapsed_s=round(time.time() - self.started, 2), paused=self.sched.paused, devices=devices,
        ))

    # -- starting and resuming ----------------------------------------------------------------

    async def _create(self) -> None:
        cfg = self.config
        self.session_id = await self.store.create_session(
            problem=self.problem.name, problem_path=str(self.problem.path), backend=self.backend,
            strategy=cfg.strategy, provider=self.provider_names, models=self.model_names,
            config={**asdict(cfg), "flops": self.cost.flops, "bytes": self.cost.bytes,
                    "cost_estimated": self.cost.estimated,
                    "gpus": getattr(self.evaluator, "gpus", None)},  # a resume uses them again
            sizes=self.sizes,
        )
        await self.store.update_session(self._sid, pid=os.getpid(), heartbeat_at=time.time())
        await self._publish_started()
        [root] = await self.store.add_nodes(self._sid, [{
            "parent_id": None, "kind": "root", "round": 0, "status": "reference",
            "title": self.problem.title, "source": self.problem.source}])
        await self._added(root)

    async def _load(self) -> None:
        """Take the session's state from the DB: nodes, verdicts, replies, rounds, spending."""
        sid = self._sid
        await self.store.update_session(sid, status="running", stop_reason=None, finished_at=None,
                                        pid=os.getpid(), heartbeat_at=time.time())
        await self._publish_started()
        self.nodes = {n.id: n for n in await self.store.nodes(sid)}
        for e in await self.store.evaluations(sid):
            self.verdicts[e["node_id"]] = e["verdict"]
        for call in await self.store.llm_calls(sid):
            if call["node_id"] is not None:
                status = call["status"]
                if status == "error" and "HTTP 401" in (call["error"] or ""):
                    continue  # a rejected key: ask again (with the key now given)
                self.replies[(call["node_id"], call["purpose"])] = {
                    "status": status, "reply": call["reply"], "error": call["error"]}
        totals = await self.store.llm_totals(sid)
        self.spent_usd = float(totals["cost_usd"])
        self.spent_tokens = int(totals["tokens"])
        self.variants_generated = sum(1 for n in self.nodes.values() if n.kind == "variant" and n.source)
        rounds = await self.store.rounds(sid)
        if rounds:
            self.round = max(rounds)
            self.parents = rounds[self.round]
        elif any(n.kind == "idea" for n in self.nodes.values()):  # recorded before schema 3
            self.round = max(n.round for n in self.nodes.values())
            self.parents = list(dict.fromkeys(n.parent_id for n in self.nodes.values()  # type: ignore[misc]
                                              if n.kind == "idea" and n.round == self.round))
        for row in await self.store.commands(sid):  # pause state as the human left it
            if row["applied_at"] is not None and row["kind"] in ("pause", "resume"):
                (self.sched.pause if row["kind"] == "pause" else self.sched.resume)()
        if not any(n.kind == "root" for n in self.nodes.values()):
            [root] = await self.store.add_nodes(sid, [{
                "parent_id": None, "kind": "root", "round": 0, "status": "reference",
                "title": self.problem.title, "source": self.problem.source}])
            self.nodes[root.id] = root

    async def _recover(self) -> None:
        """Restart the current round's unfinished work; none of what is recorded is redone."""
        busy = self.sched.busy_nodes()
        for node in sorted(self.nodes.values(), key=lambda n: n.id):
            if node.id in busy:
                continue
            if node.status in DONE_STATUSES:
                if (node.kind == "variant" and node.status == "compile_error" and node.round == self.round
                        and not any(c.parent_id == node.id for c in self.nodes.values())):
                    await self._maybe_fix(node)  # killed before its fix child was recorded
                continue
            if self._excluded(node):
                await self._update(node.id, status="failed", text="cancelled: pruned")
            elif node.kind == "idea":
                self.sched.spawn(self._guard(node.id, self._ideas(node)), node.id)
            elif node.kind == "variant":
                self.sched.spawn(self._guard(node.id, self._variant(node)), node.id)

    async def _publish_started(self) -> None:
        await self.bus.publish(SessionStarted(
            self._sid, self.problem.name, self.backend, self.provider_names, self.scripted,
            dict(self.sizes), asdict(self.config), self.cost.describe(), resumed=self.resuming,
        ))

    # -- helpers ----------------------------------------------------------------------------

    @property
    def _sid(self) -> int:
        assert self.session_id is not None
        return self.session_id

    @property
    def provider_names(self) -> str:
        return ",".join(dict.fromkeys(p.name for p, _ in self.models))

    @property
    def model_names(self) -> list[str]:
        return [f"{p.name}:{m}" for p, m in self.models]

    def _next_model(self) -> tuple[Provider, str]:
        pair = self.models[self._turn % len(self.models)]
        self._turn += 1
        return pair

    async def _added(self, node: Node) -> None:
        self.nodes[node.id] = node
        await self.bus.publish(NodeAdded(node))

    async def _update(self, node_id: int, publish: bool = True, commit: bool = True, **changes: Any) -> None:
        """Commit changes to a node (unless already committed), then (unless a VerdictReady
        follows) publish them."""
        if commit:
            await self.store.update_node(node_id, **changes)
        self.nodes[node_id] = replace(self.nodes[node_id], **changes)
        if publish:
            await self.bus.publish(NodeUpdated(self.nodes[node_id]))

    def _tried(self, parent: Node) -> list[str]:
        """Idea titles on the path from the root to `parent`, and those already under it."""
        titles: list[str] = []
        node: Node | None = parent
        while node is not None:
            if node.kind == "idea":
                titles.append(node.title)
            node = self.nodes.get(node.parent_id) if node.parent_id is not None else None
        titles += [n.title for n in self.nodes.values()
                   if n.parent_id == parent.id and n.kind == "idea" and n.status == "ok"]
        return list(dict.fromkeys(reversed(titles)))

    def _describe(self, parent: Node) -> str:
        ref_ms = next((v.get("ref_eager_ms") for v in self.verdicts.values()
                       if v.get("ref_eager_ms")), None)
        text = prompts.describe_verdict(self.verdicts.get(parent.id), ref_ms)
        if self.config.strategy == "sequential":  # feedback: the last attempt's verdict
            last = max((n for n in self.nodes.values() if n.kind == "variant" and n.id in self.verdicts),
                       key=lambda n: n.id, default=None)
            if last is not None and last.id != parent.id:
                text += (f"\n\nThe last attempt (\"{last.title}\") was evaluated as follows:\n"
                         + prompts.describe_verdict(self.verdicts[last.id], ref_ms))
        return text

    def best(self) -> Node | None:
        return best_variant(self.nodes)

    def best_speedup(self) -> float | None:
        best = self.best()
        return best.speedup if best else None

    def summary(self, status: str) -> dict[str, Any]:
        variants = [n for n in self.nodes.values() if n.kind == "variant"]
        by_status: dict[str, int] = {}
        for n in variants:
            by_status[n.status] = by_status.get(n.status, 0) + 1
        best = self.best()
        best_verdict = self.verdicts.get(best.id, {}) if best else {}
        return {
            "session_id": self.session_id,
            "problem": self.problem.name,
            "backend": self.backend,
            "provider": self.provider_names,
            "models": self.model_names,
            "scripted": self.scripted,
            "strategy": self.config.strategy,
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
                "ref_eager_ms": best_verdict.get("ref_eager_ms"),
            },
            "elapsed_s": round(time.time() - self.started, 2),
        }

    async def _finish(self, status: str) -> dict[str, Any]:
        summary = self.summary(status)
        if self.session_id is None:
            return summary
        summary["llm"] = await asyncio.shield(self.store.llm_totals(self._sid))
        best = self.best()
        # Shielded: an interrupted search still records how it ended.
        await asyncio.shield(self.store.update_session(
            self._sid, status=status, stop_reason=self.stop_reason, finished_at=time.time(),
            best_node_id=best.id if best else None, best_speedup=best.speedup if best else None,
        ))
        await self.publish_progress(force=True)
        await self.bus.publish(SessionDone(self._sid, status, summary))
        return summary
