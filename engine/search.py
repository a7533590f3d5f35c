"""The idea-tree search: for each parent, K ideas; for each idea, M variants; evaluate all;
keep the top T correct variants as the next round's parents; R rounds.

Every step is a row in the store, committed before its event is published. Work within a
round is concurrent: a variant goes to the evaluator as soon as its reply arrives.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

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
from engine.llm.base import LLMError, Message, Provider
from engine.problems import Problem
from engine.store import Node, Store

VARIANT_DONE = ("compile_error", "runtime_error", "timeout", "crashed", "incorrect", "flagged",
                "correct", "failed")


@dataclass(frozen=True)
class SearchConfig:
    rounds: int = 2
    ideas: int = 3
    variants: int = 2
    top: int = 2
    model: str = "scripted"
    max_output_tokens: int = 16000
    atol: float = 1e-2
    rtol: float = 1e-2
    trials: int = 3
    seed: int = 0
    strategy: str = "tree"


class Search:
    def __init__(
        self,
        store: Store,
        bus: EventBus,
        provider: Provider,
        evaluator: Evaluator,
        problem: Problem,
        config: SearchConfig,
    ):
        self.store = store
        self.bus = bus
        self.provider = provider
        self.evaluator = evaluator
        self.problem = problem
        self.config = config
        self.backend = evaluator.backend
        self.sizes = problem.sizes_for(self.backend)
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
            strategy=cfg.strategy, provider=self.provider.name, models=[cfg.model],
            config=asdict(cfg), sizes=self.sizes,
        )
        await self.bus.publish(SessionStarted(
            self.session_id, self.problem.name, self.backend, self.provider.name,
            getattr(self.provider, "scripted", False), dict(self.sizes), asdict(cfg),
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
                children = await asyncio.gather(*(self._expand(p, r) for p in parents))
                evaluated = [v for group in children for v in group]
                correct = sorted(
                    (v for v in evaluated if self.nodes[v].status == "correct"),
                    key=lambda v: self.nodes[v].speedup or 0.0, reverse=True,
                )
                if correct:
                    parents = [self.nodes[v] for v in correct[: cfg.top]]
                await self.bus.publish(RoundDone(r, tuple(p.id for p in parents), self.best_speedup()))
            status = "finished"
        except asyncio.CancelledError:
            status = "interrupted"
            raise
        finally:
            summary = await self._finish(status)
        return summary

    async def _expand(self, parent: Node, r: int) -> list[int]:
        """Ask for ideas for `parent`, implement each M times, evaluate; return variant ids."""
        cfg = self.config
        prompt = prompts.idea_prompt(
            self.problem.source, parent.source, self._describe(parent),
            self._tried(parent), cfg.ideas, self.backend,
        )
        reply, call_id = await self._call("idea", prompt, node_id=parent.id)
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
        results = await asyncio.gather(*jobs)
        return [v for v in results if v is not None]

    async def _variant(self, parent: Node, idea_node: Node, idea: prompts.IdeaText, r: int) -> int | None:
        node = await self._add_node(parent_id=idea_node.id, kind="variant", round=r,
                                    status="generating", title=idea.title)
        prompt = prompts.implement_prompt(
            self.problem.source, parent.source, idea, self.backend, self.config.rtol
        )
        reply, _ = await self._call("implement", prompt, node_id=node.id)
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
        return node.id

    # -- helpers ----------------------------------------------------------------------------

    @property
    def _sid(self) -> int:
        assert self.session_id is not None
        return self.session_id

    async def _call(self, purpose: str, prompt: str, node_id: int | None) -> tuple[str | None, int]:
        """One LLM call, recorded whether it succeeds or not."""
        messages = [Message("user", prompt)]
        try:
            completion = await self.provider.complete(
                messages, self.config.model, self.config.max_output_tokens)
        except LLMError as exc:
            call_id = await self.store.add_llm_call(
                session_id=self._sid, node_id=node_id, provider=self.provider.name,
                model=self.config.model, purpose=purpose, prompt=prompt, reply="",
                status="error", error=str(exc),
            )
            await self.bus.publish(LLMCallDone(call_id, node_id, purpose, self.config.model,
                                               0, 0, 0.0, 0.0, "error"))
            return None, call_id
        u = completion.usage
        call_id = await self.store.add_llm_call(
            session_id=self._sid, node_id=node_id, provider=self.provider.name,
            model=completion.model, purpose=purpose, prompt=prompt, reply=completion.text,
            input_tokens=u.input, output_tokens=u.output, reasoning_tokens=u.reasoning,
            cost_usd=completion.cost_usd, latency_s=completion.latency_s,
        )
        await self.bus.publish(LLMCallDone(call_id, node_id, purpose, completion.model, u.input,
                                           u.output, completion.cost_usd, completion.latency_s, "ok"))
        return completion.text, call_id

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
            "provider": self.provider.name,
            "scripted": getattr(self.provider, "scripted", False),
            "status": status,
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
        best = self.best()
        # Shielded: an interrupted search still records how it ended.
        await asyncio.shield(self.store.update_session(
            self._sid, status=status, finished_at=time.time(),
            best_node_id=best.id if best else None, best_speedup=best.speedup if best else None,
        ))
        await self.bus.publish(SessionDone(self._sid, status, summary))
        return summary
