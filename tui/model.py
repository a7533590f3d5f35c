"""The search screen's model: what the screen shows, as plain data, and the one reducer that changes it.

A search reaches the screen three ways — live (engine events on the bus), followed (another process
runs it; the DB is polled) and past (the DB, read once) — and all three go through `apply`: an
engine event, or a `SessionRows` read of the store, in; a `Changes` record (which tree labels,
timings rows and panes to redraw) out. No Textual here, so the rules are tested without an app.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import singledispatchmethod
from pathlib import Path
from typing import Any

from engine.domain import (
    DEVICE_PHASES,
    WORK_STATUSES,
    Node,
    best_variant,
    builds_header,
    counted,
    library_excluded,
    session_library_ops,
)
from engine.evaluate import Verdict
from engine.record import control
from engine.record.events import (
    BudgetReached,
    CommandApplied,
    Event,
    LLMCallDone,
    NodeAdded,
    NodeUpdated,
    ProfileTaken,
    Progress,
    RoundDone,
    SessionDone,
    SessionStarted,
    VerdictReady,
)
from engine.record.store import Store, session_state

BUILDS = frozenset({"queued", "compiling"})  # a variant whose build waits or runs
BUILT = frozenset({"waiting", *DEVICE_PHASES})  # built: waiting for its device, or on it
IN_FLIGHT = frozenset(WORK_STATUSES)  # a variant or idea whose work is not over
# Said while the session's first build runs on a build cache with no precompiled torch header: that
# build makes the header first (about a minute, once per cache), and would otherwise read as a hang.
PCH_NOTE = "building the precompiled header (first build, ~1 min)"
PCH_WHY = ("compiling: the first build on this build cache makes the precompiled torch header first"
           " (once per cache, about a minute); later builds take seconds")
PCH_DONE = "precompiled header built: later builds take seconds"
# Where builds need not wait for a timer (a GPU, the cpu's pinned timer) the header is made beside
# the first builds, which go without it (engine.evaluate.host.pch_ahead): said once, no build held.
PCH_AHEAD_NOTE = "making the precompiled header beside the first builds (once per cache, ~1 min)"


def isolation_words(level: str) -> str:
    """An isolation level in a few words for the header: strict, or what basic lacks."""
    return level if level == "strict" else f"{level} (no filesystem or network isolation)"


def pch_cold(cache_dir: str | Path | None = None) -> bool:
    """Whether the build cache (default: the evaluator's, engine.evaluate.host.runner) has no
    precompiled torch header yet, nor a record that one failed to build (engine.evaluate.harness.fastbuild):
    the next build makes it."""
    from engine.evaluate import default_cache_dir

    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return not any(root.glob("pch/*/torch/extension.h.gch")) and not any(root.glob("pch/*/failed.txt"))


# -- what the screen itself feeds in, besides engine events --------------------------------------


@dataclass(frozen=True)
class SessionRows:
    """One read of a session from the store: the whole of it (`first`: a past session, or the tree
    so far of a resumed one) or what changed since the last read (a followed session's poll)."""

    session: dict[str, Any] | None  # the sessions row, "status" as a reader sees it (session_state)
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[tuple[Node, float]] = field(default_factory=list)  # (node, updated_at)
    llm_totals: dict[str, float] | None = None
    commands: list[dict[str, Any]] | None = None  # None: not read this time
    first: bool = False


@dataclass(frozen=True)
class Steered:
    """A steering key was pressed on `node_id`: mark it pending before the command is recorded."""

    node_id: int
    mark: str


@dataclass(frozen=True)
class CommandRecorded:
    """A steering command is in the DB, waiting for the engine to apply it."""

    command_id: int
    kind: str
    node_id: int | None
    mark: str


@dataclass(frozen=True)
class Note:
    """A line for the status bar from the screen itself (sorting, exporting)."""

    text: str


ModelInput = Event | SessionRows | Steered | CommandRecorded | Note


@dataclass
class Changes:
    """What one `apply` changed, so the screen redraws only that."""

    added: list[int] = field(default_factory=list)  # new nodes, in the order they came (parents first)
    relabel: set[int] = field(default_factory=set)  # existing nodes whose tree label may differ
    updated: set[int] = field(default_factory=set)  # nodes whose state changed (a pane showing one redraws)
    sources: set[int] = field(default_factory=set)  # nodes whose source changed (cached highlighting is stale)
    rows: list[int] = field(default_factory=list)  # evaluated variants whose timings row to (re)write
    llm: set[int] = field(default_factory=set)  # nodes with a new LLM call
    panes: set[str] = field(default_factory=set)  # of "header", "status", "progress", "plot"
    bulk: bool = False  # a whole tree at once (a first read): the tree builds it in one go
    reload: bool = False  # a resumed session started: read its tree so far and feed it back (first=True)

    def __bool__(self) -> bool:
        return bool(self.added or self.relabel or self.updated or self.sources or self.rows or self.llm
                    or self.panes or self.bulk or self.reload)


def _moves_best(old: Node | None, new: Node) -> bool:
    """Whether this change can move the best variant: a prune (it excludes a whole branch), or a
    variant that is, or was, correct changing status or speed."""
    if old is not None and old.pruned != new.pruned:
        return True
    if new.kind != "variant":
        return False
    if old is None:
        return new.status == "correct"
    return "correct" in (old.status, new.status) and (old.status, old.speedup) != (new.status, new.speedup)


@dataclass(eq=False)
class ScreenModel:
    """A search as the screen shows it. Change it only through `apply`."""

    session_id: int | None = None
    live: bool = False  # the search runs in this process
    follow: bool = False  # another process runs it; the DB is polled
    clock: Callable[[], float] = time.time
    nodes: dict[int, Node] = field(default_factory=dict)
    kids: dict[int | None, list[int]] = field(default_factory=dict)
    verdicts: dict[int, Verdict] = field(default_factory=dict)
    best_id: int | None = None  # engine.domain.best_variant, nothing else
    best_by_round: dict[int, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)  # the session: problem, backend, sizes, status, ...
    progress: dict[str, Any] = field(default_factory=dict)  # the engine's last Progress event, if any
    tokens: int = 0
    cost_usd: float = 0.0
    llm_calls: int = 0  # counted from the same source as tokens (events, or the store's totals)
    paused: bool = False
    pending: dict[int, tuple[str, int | None]] = field(default_factory=dict)  # command id -> (kind, node)
    marks: dict[int, str] = field(default_factory=dict)  # command id -> what was done, as said (unprune)
    node_pending: dict[int, str] = field(default_factory=dict)  # node id -> the mark its label shows
    status_line: str = ""
    seen_ts: float = 0.0  # the followed session's cursors: nodes updated since, evaluations after
    seen_eval: int = 0
    cold_cache: Callable[[], bool] = pch_cold  # read once, when the session's first build starts
    first_build: bool = False  # that build runs now, on a cold cache: it makes the precompiled header
    _build_seen: bool = field(default=False, init=False, repr=False)
    _best_stale: bool = field(default=False, init=False, repr=False)  # during one apply

    def __post_init__(self) -> None:
        self.follow = self.follow and not self.live
        if not self.info:
            self.info = {"status": "starting", "config": {}, "created_at": self.clock()}

    # -- reading ----------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        return "live" if self.live else "following" if self.follow else "read-only"

    @property
    def status(self) -> str:
        return str(self.info.get("status", ""))

    @property
    def library_ops(self) -> str:
        """The session's `library_ops` (engine.domain.session_library_ops)."""
        return session_library_ops(self.info.get("config"))

    def library_excluded(self, node: Node) -> bool:
        """A correct, library-marked variant of a search that excludes library ops: neither a parent
        nor the best (engine.domain.library_excluded), never a hack."""
        return node.status == "correct" and library_excluded(node, self.library_ops)

    def queues(self) -> tuple[int, int]:
        """The compile queue (variants waiting for a build slot: `queued`) and the timing queue
        (built ones waiting to be checked and timed: `waiting`), counted from the nodes' statuses:
        the record the engine's own view and a follower reading the DB share, so both say the same
        (the engine's internal counts were one number live and another followed)."""
        counts = Counter(n.status for n in self.nodes.values())
        return counts["queued"], counts["waiting"]

    def wait_reason(self, node_id: int) -> str | None:
        """Why a variant sits `waiting` (built, not yet timed), from what the model knows: on the
        cpu backend timing waits until no build runs (the timer has the cores to itself); on a GPU
        it waits for a free device. And why the first build takes long, while it does."""
        node = self.nodes.get(node_id)
        if node is not None and node.status == "compiling" and self.first_build:
            return PCH_WHY
        if node is None or node.status != "waiting":
            return None
        if self.paused:
            return "waiting: the search is paused; nothing new is timed until it resumes"
        p = self.progress
        building = sum(n.status in BUILDS for n in self.nodes.values())
        ahead = max(0, self.queues()[1] - 1)
        devices = p.get("devices") or []
        busy = sum(bool(d.get("busy")) for d in devices)
        held = [d["waiting_for"] for d in devices if d.get("waiting_for") and not d.get("busy")]
        if held and busy + len(held) >= len(devices):  # every device in use, one of them by another process
            return f"waiting for {held[0]}: another ktree process on this host is timing there"
        if self.info.get("backend") == "cpu":
            return (f"waiting: on the cpu backend a variant is timed only while no build runs (the timer"
                    f" has the cores to itself); builds queued or running: {building},"
                    f" others waiting to be timed: {ahead}")
        gpus = f"{busy} of {len(devices)} GPUs busy" if devices else "every GPU busy"
        return f"waiting for a free GPU: {gpus}, {ahead} ahead of it in the GPU queue"

    def parent_source(self, node_id: int) -> tuple[int, str] | None:
        """The nearest ancestor with code (id, source): what a variant's diff is against."""
        node = self.nodes.get(node_id)
        nid = node.parent_id if node is not None else None
        while nid is not None and nid in self.nodes:
            parent = self.nodes[nid]
            if parent.source:
                return parent.id, parent.source
            nid = parent.parent_id
        return None

    # -- the reducer ------------------------------------------------------------------------

    def apply(self, message: ModelInput) -> Changes:
        """Take in one event or one read of the store; say what changed."""
        changes = Changes()
        self._best_stale = False
        self._reduce(message, changes)
        if self._best_stale:
            self._refresh_best(changes)
        changes.rows = list(dict.fromkeys(changes.rows))
        return changes

    @singledispatchmethod
    def _reduce(self, message: Any, changes: Changes) -> None:
        """An event this build does not know: nothing to show for it."""

    @_reduce.register
    def _(self, event: SessionStarted, changes: Changes) -> None:
        self.session_id = event.session_id
        self._header({"problem": event.problem, "backend": event.backend, "provider": event.provider,
                      "sizes": event.sizes, "status": "running", "config": event.config,
                      "created_at": self.clock(), "finished_at": None, "run_before_s": event.elapsed_s},
                     event.scripted, changes)
        changes.reload = event.resumed  # the tree so far is in the DB
        changes.panes.add("progress")

    @_reduce.register
    def _(self, event: NodeAdded, changes: Changes) -> None:
        self._add(event.node, changes)
        changes.panes.add("progress")

    @_reduce.register
    def _(self, event: NodeUpdated, changes: Changes) -> None:
        self._update(event.node, changes)
        changes.panes.add("progress")

    @_reduce.register
    def _(self, event: VerdictReady, changes: Changes) -> None:
        self.verdicts[event.node.id] = event.verdict
        self._update(event.node, changes)
        self._best_stale = True
        changes.panes.add("progress")

    @_reduce.register
    def _(self, event: ProfileTaken, changes: Changes) -> None:
        self.verdicts[event.node.id] = event.verdict
        self._update(event.node, changes)

    @_reduce.register
    def _(self, event: LLMCallDone, changes: Changes) -> None:
        self.tokens += event.tokens
        self.cost_usd += event.cost_usd
        self.llm_calls += 1
        if event.node_id is not None:
            changes.llm.add(event.node_id)
        if event.status != "ok":  # the reason on screen, not only in the DB
            where = f" for #{event.node_id}" if event.node_id is not None else ""
            tries = counted(event.attempts, "attempt")
            self._say(f"LLM {event.purpose} call{where} failed after {event.latency_s:.1f} s ({tries}):"
                      f" {event.error}", changes)
        changes.panes.add("progress")

    @_reduce.register
    def _(self, event: RoundDone, changes: Changes) -> None:
        best = "-" if event.best_speedup is None else f"{event.best_speedup:.2f}x"
        ties = "".join(f"; {tie}" for tie in event.ties)  # "tie within noise: kept #3 ... over #11 ..."
        self._say(f"round {event.round} done, best {best}{ties}", changes)
        changes.panes.add("progress")

    @_reduce.register
    def _(self, event: CommandApplied, changes: Changes) -> None:
        self._confirm(event.command_id, changes)
        changes.panes.add("progress")

    @_reduce.register
    def _(self, event: SessionDone, changes: Changes) -> None:
        self.info.update(status=event.status, finished_at=self.clock())
        self._say(event.status, changes)
        changes.panes.update(("progress", "header"))  # the header says "live" only while it runs

    @_reduce.register
    def _(self, event: Progress, changes: Changes) -> None:
        self.progress = asdict(event)
        self.paused = event.paused
        changes.panes.add("progress")

    @_reduce.register
    def _(self, event: BudgetReached, changes: Changes) -> None:
        self._say(f"budget reached: {event.reason}; in-flight work finishes", changes)
        changes.panes.add("progress")

    @_reduce.register
    def _(self, rows: SessionRows, changes: Changes) -> None:
        if rows.session is None:
            return
        if rows.first:
            self._first_read(rows, changes)
        else:
            self._poll_read(rows, changes)
        if rows.llm_totals is not None:
            self.tokens = int(rows.llm_totals["tokens"])
            self.cost_usd = float(rows.llm_totals["cost_usd"])
            self.llm_calls = int(rows.llm_totals.get("calls", self.llm_calls))
        self._best_stale = True
        changes.panes.add("progress")

    @_reduce.register
    def _(self, message: Steered, changes: Changes) -> None:
        self.node_pending[message.node_id] = message.mark
        changes.relabel.add(message.node_id)

    @_reduce.register
    def _(self, message: CommandRecorded, changes: Changes) -> None:
        self.pending[message.command_id] = (message.kind, message.node_id)
        self.marks[message.command_id] = message.mark
        where = f" #{message.node_id}" if message.node_id is not None else ""
        self._say(f"{message.mark}{where}: recorded as command {message.command_id}, waiting for the engine",
                  changes)

    @_reduce.register
    def _(self, message: Note, changes: Changes) -> None:
        self._say(message.text, changes)

    # -- DB rows ----------------------------------------------------------------------------

    def _first_read(self, rows: SessionRows, changes: Changes) -> None:
        """A past session, or a resumed one's tree so far: everything at once."""
        assert rows.session is not None
        if not self.live:  # a live session's header came with SessionStarted
            self._header(dict(rows.session), None, changes)
        for ev in rows.evaluations:
            self.verdicts[ev["node_id"]] = ev["verdict"]
            self.seen_eval = max(self.seen_eval, ev["id"])
        self.seen_ts = max((ts for _, ts in rows.nodes), default=0.0)
        new = [n for n, _ in rows.nodes if n.id not in self.nodes]
        for node in new:
            self.nodes[node.id] = node
            self.kids.setdefault(node.parent_id, []).append(node.id)
            self._note_best(node, changes)
        changes.added.extend(n.id for n in new)
        changes.bulk = True
        for node in new:  # a followed session opened while its first build runs
            if node.status == "compiling":
                self._watch_first_build(node, node, changes)
                break
        changes.rows.extend(n.id for n in new if n.id in self.verdicts and n.kind == "variant")
        for cmd in rows.commands or []:
            if cmd["applied_at"] is None:
                args = control.decode(cmd["kind"], cmd["args"])
                node_id = getattr(args, "node_id", None) or getattr(args, "parent_id", None)
                self.pending[cmd["id"]] = (cmd["kind"], node_id)
                if node_id is not None:
                    self.node_pending[node_id] = cmd["kind"]
        changes.panes.add("plot")

    def _poll_read(self, rows: SessionRows, changes: Changes) -> None:
        """What a followed session changed since the last read."""
        assert rows.session is not None
        judged: list[int] = []
        for ev in rows.evaluations:
            self.verdicts[ev["node_id"]] = ev["verdict"]
            self.seen_eval = max(self.seen_eval, ev["id"])
            judged.append(ev["node_id"])
        seen: set[int] = set()
        for node, ts in rows.nodes:
            self.seen_ts = max(self.seen_ts, ts)
            seen.add(node.id)
            if node.id not in self.nodes:
                self._add(node, changes)
            elif node != self.nodes[node.id] or (node.id in self.verdicts and node.kind == "variant"):
                self._update(node, changes)
        for node_id in judged:  # a verdict whose node row did not change since the last read
            if node_id not in seen and node_id in self.nodes:
                self._update(self.nodes[node_id], changes)
        if self.pending and rows.commands is not None:
            for cmd in rows.commands:
                if cmd["applied_at"] is not None and cmd["id"] in self.pending:
                    self._confirm(cmd["id"], changes)
        state = rows.session["status"]
        if state != self.info.get("status"):
            self.info.update(status=state, finished_at=rows.session.get("finished_at"),
                             stop_reason=rows.session.get("stop_reason"))
            reason = f" ({rows.session['stop_reason']})" if rows.session.get("stop_reason") else ""
            self._say(f"{state}{reason}", changes)
            changes.panes.add("header")
        if rows.session.get("run_s") is not None:  # the engine's count, across resumes
            self.info["run_s"] = rows.session["run_s"]

    # -- the pieces -------------------------------------------------------------------------

    def _header(self, session: dict[str, Any], scripted: bool | None, changes: Changes) -> None:
        if scripted is None:
            scripted = "scripted" in str(session.get("provider", "")).split(",")
        self.info = {**session, "scripted": scripted}
        self._say(str(session["status"]), changes)
        changes.panes.add("header")
        if self.nodes:  # the root's label names the problem
            changes.relabel.update(n.id for n in self.nodes.values() if n.kind == "root")

    def _say(self, text: str, changes: Changes) -> None:
        self.status_line = text
        changes.panes.add("status")

    def _add(self, node: Node, changes: Changes) -> None:
        if node.id in self.nodes:  # seen already (a resumed session's first read, then its event)
            self._update(node, changes)
            return
        self.nodes[node.id] = node
        self.kids.setdefault(node.parent_id, []).append(node.id)
        self._note_best(node, changes)
        changes.added.append(node.id)
        if node.kind == "variant" and node.id in self.verdicts:
            changes.rows.append(node.id)
        self._best_stale |= _moves_best(None, node)
        if node.status == "compiling":  # a followed session's poll may first see it building
            self._watch_first_build(node, node, changes)

    def _update(self, node: Node, changes: Changes) -> None:
        old = self.nodes.get(node.id)
        if old is None:
            self._add(node, changes)
            return
        self.nodes[node.id] = node
        if old.source != node.source:
            changes.sources.add(node.id)
        if (old.pinned, old.pruned) != (node.pinned, node.pruned):
            self.node_pending.pop(node.id, None)  # the engine has carried the pin / prune out
        self._note_best(node, changes)
        changes.relabel.add(node.id)
        changes.updated.add(node.id)
        self._watch_first_build(old, node, changes)
        if node.kind == "variant" and node.id in self.verdicts:
            changes.rows.append(node.id)
        self._best_stale |= _moves_best(old, node)

    def _watch_first_build(self, old: Node, node: Node, changes: Changes) -> None:
        """The session's first build: on a cold cache it makes the precompiled header, said on the
        status line and beside each build until a build ends (the header is there, or failed)."""
        header = builds_header(node.language)  # (a Triton kernel's build includes no torch header)
        if node.status == "compiling" and header and not self._build_seen and self.status == "running":
            self._build_seen = True
            built = any(n.status in BUILT for n in self.nodes.values()) or bool(self.verdicts)
            if not built and self.cold_cache():
                cfg = self.info.get("config") or {}
                if self.info.get("backend") == "cuda" or cfg.get("cpu_timer") == "pin":
                    self._say(PCH_AHEAD_NOTE, changes)
                    return
                self.first_build = True
                self._say(PCH_NOTE, changes)
        elif self.first_build and old.status == "compiling" and node.status != "compiling":
            self.first_build = False
            changes.relabel.update(n.id for n in self.nodes.values() if n.status == "compiling")
            changes.updated.update(n.id for n in self.nodes.values() if n.status == "compiling")
            if self.status_line == PCH_NOTE:
                self._say(PCH_DONE, changes)

    def _confirm(self, command_id: int, changes: Changes) -> None:
        kind, node_id = self.pending.pop(command_id, ("", None))
        mark = self.marks.pop(command_id, kind)
        if not kind:
            return
        if kind in ("pause", "resume"):
            self.paused = kind == "pause"
        if kind == "stop":
            self.info["stopping"] = True
        if node_id is not None:
            self.node_pending.pop(node_id, None)
            changes.relabel.add(node_id)
        self._say(f"{mark}{f' #{node_id}' if node_id is not None else ''}: applied", changes)

    def _note_best(self, node: Node, changes: Changes) -> None:
        """The plot's series: the best correct speedup seen in each round."""
        if node.status == "correct" and node.speedup and not self.library_excluded(node):
            best = self.best_by_round.get(node.round)
            if best is None or node.speedup > best:
                self.best_by_round[node.round] = node.speedup
                changes.panes.add("plot")

    def _refresh_best(self, changes: Changes) -> None:
        best = best_variant(self.nodes, self.library_ops)
        old, self.best_id = self.best_id, best.id if best else None
        if old != self.best_id:
            changes.relabel.update(i for i in (old, self.best_id) if i is not None)


async def read_rows(store: Store, session_id: int, model: ScreenModel, first: bool = False) -> SessionRows:
    """Read what the model lacks of a session: all of it (`first`), or what changed since the
    model's cursors (a poll). Steering commands are read only when some are pending."""
    session = await store.sessions.get(session_id)
    if session is None:
        return SessionRows(None, first=first)
    session = {**session, "status": session_state(session)}
    evaluations = await store.evaluations.of(session_id, after_id=0 if first else model.seen_eval)
    if not first:  # a verdict read before, since profiled
        evaluations += await store.evaluations.profiled(session_id, model.seen_ts)
    nodes = await store.nodes.since(session_id, 0.0 if first else model.seen_ts)
    commands = await store.commands.of(session_id) if first or model.pending else None
    totals = await store.calls.totals(session_id)
    return SessionRows(session, evaluations, nodes, totals, commands, first)
