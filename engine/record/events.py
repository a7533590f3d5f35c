"""Typed events the engine publishes after each committed state change.

The TUI and the headless printer are two subscribers of the same stream.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from engine.domain import Node
from engine.evaluate import Verdict


@dataclass(frozen=True)
class SessionStarted:
    session_id: int
    problem: str
    backend: str
    provider: str
    scripted: bool
    sizes: dict[str, int] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    cost: str = ""  # FLOPs and bytes at these sizes, "(estimated)" when counted, not declared
    resumed: bool = False  # a `--resume`: the tree so far is in the DB
    elapsed_s: float = 0.0  # seconds the session ran before this start (a resume's clock goes on from it)


@dataclass(frozen=True)
class NodeAdded:
    node: Node


@dataclass(frozen=True)
class NodeUpdated:
    """A node's new state (status, source, text, speedup), as committed."""

    node: Node


@dataclass(frozen=True)
class VerdictReady:
    """A variant's evaluation, committed, and the node as it now stands."""

    node: Node
    verdict: Verdict


@dataclass(frozen=True)
class ProfileTaken:
    """A judged variant's profile, taken after its verdict and committed (the verdict now holds
    it). `reason`: parent (its children's idea prompt reads it), best (the search's final best),
    asked (a person asked for it)."""

    node: Node
    verdict: Verdict
    reason: str


@dataclass(frozen=True)
class LLMCallDone:
    call_id: int
    node_id: int | None
    purpose: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float
    latency_s: float
    status: str
    reasoning_tokens: int = 0
    error: str = ""  # why a failed call failed (the provider's one-line reason)
    attempts: int = 1

    @property
    def tokens(self) -> int:
        """Every token the call was billed for: input, output and reasoning."""
        return self.input_tokens + self.output_tokens + self.reasoning_tokens


@dataclass(frozen=True)
class RoundDone:
    round: int
    parent_ids: tuple[int, ...]
    best_speedup: float | None
    # The choices of parents that were ties within timing noise, one line each
    # (engine.search.strategies.ties_within_noise).
    ties: tuple[str, ...] = ()
    profiles: int = 0  # profiles taken in this round (counted from the DB)
    last: bool = False  # the search ends with this round: its parents start nothing


@dataclass(frozen=True)
class CommandApplied:
    """A steering command (engine.record.control) the engine has carried out and marked applied.
    `node_ids`: the nodes it touched or created."""

    command_id: int
    kind: str
    node_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Progress:
    """Where the search stands, published (throttled) whenever one of these changes. The queues are
    not here: they are the nodes' statuses, which a follower reads from the DB as well."""

    round: int
    rounds: int
    llm_running: int  # LLM calls in flight
    tokens: int
    cost_usd: float
    budget_usd: float | None
    budget_tokens: int | None
    elapsed_s: float
    paused: bool
    # One dict per evaluation device (LocalEvaluator.device_states): name ("gpu0", "node/gpu0"), busy,
    # jobs (evaluations finished), busy_s, queue (jobs waiting for that device alone), alive, and
    # waiting_for ("gpu0 (held by pid N, session M)" while another process holds its host lock; optional).
    devices: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class BudgetReached:
    """A budget (dollars, tokens, variants, time) is spent: no new work starts, in-flight work
    finishes, then the session ends as stopped."""

    reason: str


@dataclass(frozen=True)
class SessionDone:
    session_id: int
    status: str
    summary: dict[str, Any]


Event = (SessionStarted | NodeAdded | NodeUpdated | VerdictReady | ProfileTaken | LLMCallDone | RoundDone
         | CommandApplied | Progress | BudgetReached | SessionDone)
Subscriber = Callable[[Event], Awaitable[None] | None]


class EventBus:
    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    async def publish(self, event: Event) -> None:
        for subscriber in list(self._subscribers):
            result = subscriber(event)
            if inspect.isawaitable(result):
                await result
