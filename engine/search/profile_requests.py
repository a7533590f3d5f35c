"""Profiles of what is read: a search profiles a variant only when something reads its profile —
the parents of a round (before their children's idea prompts are built), the final best, and
whatever a person asks for (`ktree show N --profile NODE`, the TUI's profile key). Each profile is
taken by the evaluator after the verdict (Evaluator.profile) and recorded with the verdict
(`Store.profiles.add`: the evaluation row holds it, a profiles row says when and why).

Here: the checks on a profile asked for, and a profile taken outside a running search (the
session is finished, stopped or interrupted); it rebuilds the job that was evaluated with
engine.search.jobs.variant_job, the one way a variant's evaluation job is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.domain import Node
from engine.evaluate import Evaluator, PhaseCallback, Verdict
from engine.record.store import Store
from engine.search.config import SearchConfig
from engine.search.jobs import variant_job

REASONS = ("parent", "best", "asked")


class ProfileRequestError(Exception):
    """A profile asked for that cannot be taken (no such session or node, not a correct variant):
    one line."""


@dataclass(frozen=True)
class ProfileTarget:
    """A variant a person asked to profile, checked: its session row, node and verdict."""

    session: dict[str, Any]
    node: Node
    verdict: Verdict


async def profile_target(store: Store, session_id: int, node_id: int) -> ProfileTarget:
    """The session, node and verdict of a profile asked for; ProfileRequestError, in words, for
    a session or node that is not there or a node that is not a correct variant."""
    session = await store.sessions.get(session_id)
    if session is None:
        raise ProfileRequestError(f"no session {session_id} in {store.path}")
    node = next((n for n in await store.nodes.of(session_id) if n.id == node_id), None)
    if node is None:
        raise ProfileRequestError(f"session {session_id} has no node {node_id}")
    if node.kind != "variant":
        raise ProfileRequestError(f"node {node_id} is {'the reference' if node.kind == 'root' else 'an idea'};"
                                  " only a correct variant can be profiled")
    verdict = next((e["verdict"] for e in reversed(await store.evaluations.of(session_id))
                    if e["node_id"] == node_id), None)
    if verdict is None or not verdict.ok:
        status = verdict.status if verdict is not None else node.status
        raise ProfileRequestError(f"node {node_id} is {status}; only a correct variant can be profiled")
    return ProfileTarget(session, node, verdict)


async def profile_recorded(store: Store, target: ProfileTarget, evaluator: Evaluator,
                           on_phase: PhaseCallback | None = None) -> Verdict:
    """Profile a variant of a session no engine runs, and record it (reason "asked", in the
    session's last round). The verdict as recorded: unchanged when profiling is off."""
    session, node = target.session, target.node
    config = SearchConfig.from_dict(session["config"])
    job = variant_job(evaluator, session["problem_path"], node, session["sizes"], config,
                      session["config"].get("flops"), session["config"].get("bytes"))
    profiled = await evaluator.profile(job, target.verdict, on_phase)
    if profiled.profile:
        rounds = await store.nodes.rounds(session["id"])
        await store.profiles.add(session["id"], node.id, profiled, round=max(rounds, default=node.round),
                                reason="asked")
    return profiled
