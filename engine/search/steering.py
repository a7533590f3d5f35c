"""Human commands (engine.record.control) carried out on a running search, in one place.

Commands come through the DB (the TUI, here or in another process, only records them): the
search polls for pending ones every 0.25 s and between scheduling steps, applies them in the
order given, and marks each applied. A command that creates nodes is marked applied in the
transaction that inserts them, so a kill never applies it twice; a profile asked for is marked
once the profile is recorded (a kill leaves it to the resume); the rest are marked after.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from engine.domain import EVALUATING_STATUSES, Node, excluded
from engine.evaluate import languages
from engine.record import control
from engine.record.events import CommandApplied, EventBus
from engine.record.store import Store
from engine.search.budget import Budget
from engine.search.rows import asking_row, idea_row, variant_row
from engine.search.scheduler import Scheduler
from engine.search.strategies import Strategy

COMMAND_POLL_S = 0.25
USER_STOP = "stopped by the user"  # the stop reason of a Stop command


class Steerable(Protocol):
    """What a command may read and do on the search (engine.search.Search)."""

    nodes: dict[int, Node]
    round: int
    stop_reason: str | None
    sched: Scheduler
    strategy: Strategy
    budget: Budget

    def stop(self, reason: str) -> None: ...

    async def update(self, node_id: int, **changes: Any) -> None: ...

    async def add_nodes(self, rows: list[dict[str, Any]], command_id: int | None = None) -> list[Node]: ...

    async def start(self, made: list[Node]) -> None: ...

    def languages_for(self, m: int) -> list[str]: ...

    def profile_later(self, node_id: int, command_id: int) -> bool: ...


class Steering:
    def __init__(self, search: Steerable, store: Store, bus: EventBus, session_id: int):
        self.search = search
        self.store = store
        self.bus = bus
        self.session_id = session_id
        self._lock = asyncio.Lock()
        self._started: set[int] = set()  # profile commands whose profile is being taken

    async def poll(self) -> None:
        """Apply pending commands every COMMAND_POLL_S, for as long as the search runs."""
        while True:
            await asyncio.sleep(COMMAND_POLL_S)
            try:
                await self.apply_pending()
            except Exception as exc:  # a bug: end the search with it, as a task's error would
                self.search.sched.fail(exc)
                return

    async def apply_pending(self, kinds: tuple[str, ...] | None = None) -> None:
        """Apply the commands recorded and not yet applied, in the order given (only those of
        `kinds`, when given)."""
        async with self._lock:
            for row in await self.store.commands.of(self.session_id, pending_only=True):
                if row["id"] in self._started or (kinds is not None and row["kind"] not in kinds):
                    continue
                try:
                    command = control.decode(row["kind"], row["args"])
                except (ValueError, TypeError):
                    command = None
                if isinstance(command, control.Profile):  # marked applied once it is recorded
                    if self.search.profile_later(command.node_id, row["id"]):
                        self._started.add(row["id"])
                        continue
                    command = None  # not a judged variant: nothing to do
                ids = await self.apply(row["id"], command) if command is not None else ()
                made_nodes = ids and isinstance(command, control.InjectIdea | control.EditVariant
                                                | control.Expand)
                if not made_nodes:  # (one that made nodes was marked in the same transaction)
                    await self.store.commands.mark_applied(row["id"])
                await self.bus.publish(CommandApplied(row["id"], row["kind"], tuple(ids)))

    async def apply(self, command_id: int, cmd: control.Command) -> tuple[int, ...]:
        """Carry out one command; the nodes it touched or created."""
        s = self.search
        r = max(s.round, 1)
        if isinstance(cmd, control.Pause):
            s.sched.pause()
            return ()
        if isinstance(cmd, control.Resume):
            s.sched.resume()
            return ()
        if isinstance(cmd, control.Stop):
            # No new LLM call or evaluation starts; a variant being built, waiting for its device,
            # checked or timed finishes with its real verdict (and gets no fix: the search stops).
            s.stop(USER_STOP)
            s.sched.resume()  # paused work must see the stop
            evaluating = {i for i, n in s.nodes.items() if n.status in EVALUATING_STATUSES}
            s.sched.cancel(set(s.nodes) - evaluating, s.stop_reason or "")
            return ()
        if isinstance(cmd, control.Pin):
            node = s.nodes.get(cmd.node_id)
            if node is None or node.kind == "idea":
                return ()
            await s.update(node.id, pinned=bool(cmd.pinned))
            return (node.id,)
        if isinstance(cmd, control.Prune):
            node = s.nodes.get(cmd.node_id)
            if node is None or node.kind == "root":
                return ()
            if not cmd.pruned:  # undone: selectable again; what was cancelled stays cancelled
                await s.update(node.id, pruned=False)
                return (node.id,)
            await s.update(node.id, pruned=True)
            s.sched.cancel(branch(s.nodes, node.id), "pruned")
            return (node.id,)
        if isinstance(cmd, control.Expand):
            node = s.nodes.get(cmd.node_id)
            if node is None or excluded(node, s.nodes) or s.stop_reason:
                return ()
            rows: list[dict[str, Any]] = []
            if cmd.ideas > 0 and node.kind in ("root", "variant"):
                rows.append(asking_row(node.id, r, cmd.ideas))
            if cmd.variants > 0 and node.kind == "idea" and node.status == "ok":
                rows += [variant_row(node.id, node.title, r, language=lang)  # within the variant cap
                         for lang in s.languages_for(cmd.variants)[:s.budget.reserve_variants(cmd.variants)]]
            if not rows:
                return ()
            made = await s.add_nodes(rows, command_id=command_id)
            await s.start(made)
            return tuple(n.id for n in made)
        if isinstance(cmd, control.InjectIdea):
            parent = s.nodes.get(cmd.parent_id)
            text = cmd.text.strip()
            if parent is None or parent.kind == "idea" or not text or s.stop_reason:
                return ()
            title = text.splitlines()[0][:120]
            rows = [idea_row(parent.id, r, title, text, origin="human")]
            m = s.strategy.variants_per_idea()
            rows += [variant_row({"new": 0}, title, r, language=lang)  # within the variant cap
                     for lang in s.languages_for(m)[:s.budget.reserve_variants(m)]]
            made = await s.add_nodes(rows, command_id=command_id)
            await s.start(made)
            return tuple(n.id for n in made)
        if isinstance(cmd, control.EditVariant):
            node = s.nodes.get(cmd.node_id)
            if node is None or node.kind != "variant" or not cmd.source.strip() or s.stop_reason:
                return ()
            if not s.budget.reserve_variants(1):  # an edit is a variant: within the cap
                return ()
            [child] = await s.add_nodes([variant_row(
                node.id, node.title, r, status="queued", text="edited by hand", source=cmd.source,
                origin="edit", language=languages.kernel_language(cmd.source))], command_id=command_id)
            await s.start([child])
            return (child.id,)
        return ()


def branch(nodes: Mapping[int, Node], node_id: int) -> set[int]:
    """The node and everything under it."""
    out = {node_id}
    grew = True
    while grew:
        more = {n.id for n in nodes.values() if n.parent_id in out} - out
        out |= more
        grew = bool(more)
    return out
