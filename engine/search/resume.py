"""Taking a session up again from the DB alone (`Search(..., resume=session_id)`).

The DB is the state: every node is inserted before its work starts, every LLM reply and every
verdict is committed before its event is published. So `load_session` reads back all a search needs —
nodes, verdicts, replies, the round and its parents, the pause state, what was spent — and
`recovery` says what to do with each node whose work was in flight when the engine died: a node
whose reply is recorded is not asked again, a node whose verdict is recorded is not evaluated
again, and the rest is redone once.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field

from engine.domain import DONE_STATUSES, Node, excluded
from engine.evaluate import Verdict
from engine.record.store import Store
from engine.search.calls import LLMResult


@dataclass
class Saved:
    """A session as the DB holds it."""

    nodes: dict[int, Node] = field(default_factory=dict)
    verdicts: dict[int, Verdict] = field(default_factory=dict)
    replies: dict[tuple[int, str], LLMResult] = field(default_factory=dict)  # (node, purpose)
    round: int = 0  # the last round started (0: none yet)
    parents: list[int] = field(default_factory=list)  # its parents
    paused: bool = False  # as the human left it
    totals: dict[str, float] = field(default_factory=dict)  # Store.calls.totals
    variants_generated: int = 0


async def load_session(store: Store, session_id: int) -> Saved:
    """Read the session's state back (reads only)."""
    saved = Saved()
    saved.nodes = {n.id: n for n in await store.nodes.of(session_id)}
    for e in await store.evaluations.of(session_id):
        saved.verdicts[e["node_id"]] = e["verdict"]
    for call in await store.calls.of(session_id):
        if call["node_id"] is None:
            continue
        if call["status"] == "error" and "HTTP 401" in (call["error"] or ""):
            continue  # a rejected key: ask again (with the key now given)
        saved.replies[(call["node_id"], call["purpose"])] = LLMResult(call["status"], call["reply"],
                                                                      call["error"])
    saved.totals = await store.calls.totals(session_id)
    # Counted as made (engine.search.budget): all but those cancelled before their code came.
    saved.variants_generated = sum(1 for n in saved.nodes.values()
                                   if n.kind == "variant" and (n.source or n.status != "cancelled"))
    rounds = await store.nodes.rounds(session_id)
    if rounds:
        saved.round = max(rounds)
        saved.parents = rounds[saved.round]
    elif any(n.kind == "idea" for n in saved.nodes.values()):  # recorded before schema 3
        saved.round = max(n.round for n in saved.nodes.values())
        saved.parents = list(dict.fromkeys(n.parent_id for n in saved.nodes.values()  # type: ignore[misc]
                                           if n.kind == "idea" and n.round == saved.round))
    for row in await store.commands.of(session_id):
        if row["applied_at"] is not None and row["kind"] in ("pause", "resume"):
            saved.paused = row["kind"] == "pause"
    return saved


# What to do with an unfinished node: ask for a compile error's missing fix, mark a pruned
# node's work cancelled, or restart an idea call or a variant's pipeline.
FIX, CANCEL, IDEAS, VARIANT = "fix", "cancel", "ideas", "variant"


def recovery(nodes: Mapping[int, Node], round: int, busy: set[int],
             sanitized: Set[int] = frozenset()) -> list[tuple[str, Node]]:
    """The steps that finish the work the engine was doing when it died, in node order; none
    for a node whose work is done or running (`busy`). `sanitized`: runtime errors with a
    compute-sanitizer report, which get a fix child like compile errors."""
    steps: list[tuple[str, Node]] = []
    for node in sorted(nodes.values(), key=lambda n: n.id):
        if node.id in busy:
            continue
        if node.status in DONE_STATUSES:
            fixable = node.status == "compile_error" or (
                node.status == "runtime_error" and node.id in sanitized)
            if (node.kind == "variant" and fixable and node.round == round
                    and not any(c.parent_id == node.id for c in nodes.values())):
                steps.append((FIX, node))  # killed before its fix child was recorded
            continue
        if excluded(node, nodes):
            steps.append((CANCEL, node))
        elif node.kind == "idea":
            steps.append((IDEAS, node))
        elif node.kind == "variant":
            steps.append((VARIANT, node))
    return steps
