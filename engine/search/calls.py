"""The search's LLM calls: models taken in turn, and each call recorded in the DB whether it
succeeds or not, charged to the budget, then published — so a resumed search finds every reply
(and every failure) and never asks twice."""

from __future__ import annotations

from dataclasses import dataclass

from engine.llm.base import LLMAuthError, LLMError, Message, Provider
from engine.record.events import EventBus, LLMCallDone
from engine.record.store import Store
from engine.search.budget import Budget


@dataclass(frozen=True)
class LLMResult:
    """How one call ended: "ok" (with its reply), "error" (recorded; the node fails), or "auth"
    (the key was rejected: the search cannot go on)."""

    status: str
    reply: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Models:
    """The (provider, model) pairs of a search, used round-robin across calls."""

    def __init__(self, pairs: list[tuple[Provider, str]]):
        if not pairs:
            raise ValueError("a search needs at least one model")
        self.pairs = pairs
        self._turn = 0

    def next(self) -> tuple[Provider, str]:
        pair = self.pairs[self._turn % len(self.pairs)]
        self._turn += 1
        return pair

    @property
    def scripted(self) -> bool:
        """Some answers are canned (the offline scripted provider), not a model's."""
        return any(p.scripted for p, _ in self.pairs)

    @property
    def provider_names(self) -> str:
        return ",".join(dict.fromkeys(p.name for p, _ in self.pairs))

    @property
    def model_names(self) -> list[str]:
        return [f"{p.name}:{m}" for p, m in self.pairs]


@dataclass(frozen=True)
class CallSettings:
    max_output_tokens: int
    reasoning: str | None


async def call_llm(store: Store, bus: EventBus, budget: Budget, session_id: int, settings: CallSettings,
               provider: Provider, model: str, purpose: str, prompt: str, node_id: int) -> LLMResult:
    """One call for `node_id`, recorded (a failure too) and published."""
    try:
        completion = await provider.complete([Message("user", prompt)], model, settings.max_output_tokens,
                                             settings.reasoning)
    except LLMError as exc:
        call_id = await store.calls.add(
            session_id=session_id, node_id=node_id, provider=provider.name, model=model,
            purpose=purpose, prompt=prompt, reply="", status="error", error=str(exc),
            latency_s=exc.latency_s, attempts=exc.attempts,
        )
        await bus.publish(LLMCallDone(call_id, node_id, purpose, model, 0, 0, 0.0, exc.latency_s, "error",
                                      error=str(exc), attempts=exc.attempts))
        return LLMResult("auth" if isinstance(exc, LLMAuthError) else "error", "", str(exc))
    u = completion.usage
    budget.charge(completion.cost_usd, u)
    call_id = await store.calls.add(
        session_id=session_id, node_id=node_id, provider=provider.name,
        model=completion.model or model, purpose=purpose, prompt=prompt, reply=completion.text,
        input_tokens=u.input, output_tokens=u.output, reasoning_tokens=u.reasoning,
        cost_usd=completion.cost_usd, latency_s=completion.latency_s, attempts=completion.attempts,
    )
    await bus.publish(LLMCallDone(call_id, node_id, purpose, completion.model or model, u.input, u.output,
                                  completion.cost_usd, completion.latency_s, "ok",
                                  reasoning_tokens=u.reasoning))
    return LLMResult("ok", completion.text)
