"""The idea-tree search: for each parent, K ideas; for each idea, M variants; evaluate all;
keep the top T correct variants as the next round's parents; R rounds.

Every step is a row in the store, committed before its event is published. Work within a
round is concurrent: a variant goes to the evaluator as soon as its reply arrives.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeVar

from engine import prompts
from engine.evaluate.evaluator import Evaluator
from engine.events import (
    EventBus,
    LLMCallDone,
    NodeAdded,
    NodeUpdated,
    RoundDone,
    SessionDone,
    SessionStarted,
    VerdictReady,
)
from engine.llm.base import LLMAuthError, LLMError, Message, Provider
from engine.problems import Problem
from engine.store import Node, Store

T = TypeVar("T")


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
    atol: float = 1e-2
    rtol: float = 1e-2
    trials: int = 3
    seed: int = 0
    strategy: str = "tree"


class SearchAborted(Exception):
    """The search cannot go on (a bad key): the session ends as failed with this reason."""


class Search:
    def __init__(
        self,
        store: Store,
        bus: EventBus,
        models: list[tuple[Provider, str]],
        evaluator: Evaluator,
        problem: Problem,
        config: SearchConfig,
    ):
        if not models:
            raise ValueError("a search needs at least one model")
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
        self.session_id: int | None = None
        self.nodes: dict[int, Node] = {}
        self.verdicts: dict[int, dict[str, Any]] = {}
        self.started = time.time()
        self.round = 0

    # -- the loop ---------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        cfg = self.config
        self.session_id = await self.store.create_session(
            problem=self.problem.name, problem_path=str(self.problem.path), backend=self.backend,
            strategy=cfg.strategy, provider=self.provider_names, models=self.model_names,
            config={**asdict(cfg), "flops": self.cost.flops, "bytes": self.cost.bytes,
                    "cost_estimated": self.cost.estimated},
            sizes=self.sizes,
        )
        await self.bus.publish(SessionStarted(
            self.session_id, self.problem.name, self.backend, self.provider_names,
            self.scripted, dict(self.sizes), asdict(cfg), self.cost.describe(),
        ))
        status = "failed"
        try:
            root = await self._add_node(
                parent_id=None, kind="root", round=0, status="reference",
                title=self.problem.title, source=self.problem.source,
            )
            parents = [root]
            for r in range(1, cfg.rounds + 1):
                self.round = r
                children = await _all(self._expand(p, r) for p in parents)
                evaluated = [v for group in children for v in group]
                correct = sorted(
                    (v for v in evaluated if self.nodes[v].status == "correct"),
                    key=lambda v: self.nodes[v].speedup or 0.0, reverse=True,
                )
                if correct:
                    parents = [self.nodes[v] for v in correct[: cfg.top]]
                await self.bus.publish(RoundDone(r, tuple(p.id for p in parents), self.best_speedup()))
                if self.stop_reason:
                    break
            status = "stopped" if self.stop_reason else "finished"
        except SearchAborted as exc:
            status, self.stop_reason = "failed", str(exc)
        except asyncio.CancelledError:
            status = "interrupted"
            raise
        finally:
            summary = await self._finish(status)
        return summary

    async def _expand(self, parent: Node, r: int) -> list[int]:
        """Ask for ideas for `parent`, implement each M times, evaluate; return variant ids."""
        cfg = self.config
        if self._over_budget():
            return []
        prompt = prompts.idea_prompt(
            self.problem.source, parent.source, self._describe(parent),
            self._tried(parent), cfg.ideas, self.backend,
        )
        reply = await self._call("idea", prompt, node_id=parent.id)
        if reply is None:
            return []
        try:
            ideas = prompts.parse_ideas(reply)[: cfg.ideas]
        except prompts.ReplyError as exc:
            await self._add_node(parent_id=parent.id, kind="idea", round=r, status="failed",
                                 title="(unparseable ideas)", text=str(exc))
            return []
        jobs = []
        for idea in ideas:
            node = await self._add_node(parent_id=parent.id, kind="idea", round=r, status="ok",
                                        title=idea.title, text=idea.description)
            jobs += [self._variant(parent, node, idea, r) for _ in range(cfg.variants)]
        results = await _all(jobs)
        return [v for v in results if v is not None]

    async def _variant(self, parent: Node, idea_node: Node, idea: prompts.IdeaText, r: int) -> int | None:
        if self._over_budget():
            return None
        node = await self._add_node(parent_id=idea_node.id, kind="variant", round=r,
                                    status="generating", title=idea.title)
        prompt = prompts.implement_prompt(
            self.problem.source, parent.source, idea, self.backend, self.config.rtol
        )
        verdict = await self._generate_and_evaluate(node, "implement", prompt)
        fixes_left = self.config.fixes
        while verdict is not None and verdict["status"] == "compile_error" and fixes_left > 0:
            if self._over_budget():
                break
            fixes_left -= 1
            failed = self.nodes[node.id]
            node = await self._add_node(parent_id=failed.id, kind="variant", round=r,
                                        status="generating", title=idea.title, text="fix")
            prompt = prompts.fix_prompt(self.problem.source, failed.source, idea.title,
                                        verdict.get("log", ""), self.backend, self.config.rtol)
            verdict = await self._generate_and_evaluate(node, "fix", prompt)
        return node.id if verdict is not None else None

    async def _generate_and_evaluate(self, node: Node, purpose: str, prompt: str) -> dict[str, Any] | None:
        """Ask for the code of `node`, then evaluate it. None when no code came back."""
        reply = await self._call(purpose, prompt, node_id=node.id)
        if reply is None:
            await self._update(node.id, status="failed", text="the LLM call failed")
            return None
        try:
            source = prompts.extract_code(reply)
        except prompts.ReplyError as exc:
            await self._update(node.id, status="failed", text=str(exc))
            return None
        await self._update(node.id, source=source, status="queued")

        job = self.evaluator.job(
            self.problem.path, source, self.sizes, atol=self.config.atol, rtol=self.config.rtol,
            trials=self.config.trials, seed=self.config.seed,
        )

        async def on_phase(phase: str) -> None:
            await self._update(node.id, status=phase)

        verdict = (await self.evaluator.evaluate(job, on_phase)).to_dict()
        await self.store.add_evaluation(node_id=node.id, session_id=self._sid, verdict=verdict)
        self.verdicts[node.id] = verdict
        await self._update(node.id, status=verdict["status"], speedup=verdict.get("speedup_eager"),
                           time_ms=verdict.get("time_ms"), publish=False)
        if verdict.get("ref_eager_ms") and verdict["status"] == "correct":
            await self.store.update_session(self._sid, ref_ms=verdict["ref_eager_ms"])
        await self.bus.publish(VerdictReady(self.nodes[node.id], verdict))
        return verdict

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

    def _over_budget(self) -> bool:
        """True once a budget is spent; then no new LLM call starts (in-flight ones finish)."""
        cfg = self.config
        if self.stop_reason:
            return True
        if cfg.budget_usd is not None and self.spent_usd >= cfg.budget_usd:
            self.stop_reason = f"budget reached: ${self.spent_usd:.4f} of ${cfg.budget_usd:g}"
        elif cfg.budget_tokens is not None and self.spent_tokens >= cfg.budget_tokens:
            self.stop_reason = f"budget reached: {self.spent_tokens} of {cfg.budget_tokens} tokens"
        return self.stop_reason is not None

    async def _call(self, purpose: str, prompt: str, node_id: int | None) -> str | None:
        """One LLM call, recorded whether it succeeds or not; the reply text, or None."""
        provider, model = self._next_model()
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
            if isinstance(exc, LLMAuthError):
                raise SearchAborted(str(exc)) from exc
            return None
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
                                           completion.latency_s, "ok"))
        return completion.text

    async def _add_node(self, **fields: Any) -> Node:
        node = await self.store.add_node(session_id=self._sid, **fields)
        self.nodes[node.id] = node
        await self.bus.publish(NodeAdded(node))
        return node

    async def _update(self, node_id: int, publish: bool = True, **changes: Any) -> None:
        """Commit changes to a node, then (unless a VerdictReady follows) publish them."""
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
        titles += [n.title for n in self.nodes.values() if n.parent_id == parent.id and n.kind == "idea"]
        return list(dict.fromkeys(reversed(titles)))

    def _describe(self, parent: Node) -> str:
        ref_ms = next((v.get("ref_eager_ms") for v in self.verdicts.values()
                       if v.get("ref_eager_ms")), None)
        return prompts.describe_verdict(self.verdicts.get(parent.id), ref_ms)

    def best(self) -> Node | None:
        correct = [n for n in self.nodes.values() if n.status == "correct" and n.speedup]
        return max(correct, key=lambda n: n.speedup or 0.0, default=None)

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
        summary["llm"] = await asyncio.shield(self.store.llm_totals(self._sid))
        best = self.best()
        # Shielded: an interrupted search still records how it ended.
        await asyncio.shield(self.store.update_session(
            self._sid, status=status, stop_reason=self.stop_reason, finished_at=time.time(),
            best_node_id=best.id if best else None, best_speedup=best.speedup if best else None,
        ))
        await self.bus.publish(SessionDone(self._sid, status, summary))
        return summary


async def _all(coros: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Run concurrently; if one fails, cancel the rest and raise its exception (unwrapped)."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(c) for c in coros]
    except BaseExceptionGroup as eg:
        raise eg.exceptions[0] from None
    return [t.result() for t in tasks]
