"""The search screen: idea tree, code pane (source or diff), verdict, progress, timings, LLM calls.

Three ways in: live (the search runs in this process; events arrive on the bus), followed (another
process runs it; the DB is polled), past (read once). Steering keys only record a command in the
DB (engine.control); the engine applies it and confirms (CommandApplied, NodeUpdated).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import (
    DataTable,
    Footer,
    Header,
    ProgressBar,
    RichLog,
    Static,
    TabbedContent,
    TabPane,
    Tree,
)
from textual.widgets.tree import TreeNode
from textual_plotext import PlotextPlot

from engine import control
from engine.domain import Node, best_variant
from engine.evaluate.verdict import device_label
from engine.events import (
    BudgetReached,
    CommandApplied,
    Event,
    LLMCallDone,
    NodeAdded,
    NodeUpdated,
    Progress,
    RoundDone,
    SessionDone,
    SessionStarted,
    VerdictReady,
)
from engine.export import ExportError, solution_text
from engine.store import session_state
from tui.screens.dialogs import AskNumber, AskText, Confirm, EditSource
from tui.widgets.code import diff_text, fmt_num, highlight_source

GLYPHS = {
    "reference": "◆", "ok": "◇", "generating": "…", "queued": "·", "compiling": "⚙", "waiting": "◌",
    "checking": "≟", "timing": "⏱", "evaluating": "⏱", "correct": "✔", "incorrect": "✘", "flagged": "⚑",
    "compile_error": "⚠", "runtime_error": "!", "timeout": "⌛", "crashed": "☠", "failed": "✗",
}
NEUTRAL = "•"  # a status this build does not know
STYLES = {
    "correct": "green", "incorrect": "red", "compile_error": "yellow", "runtime_error": "red",
    "timeout": "magenta", "crashed": "red", "failed": "red", "flagged": "magenta",
    "reference": "cyan", "ok": "blue", "generating": "dim", "queued": "dim",
}
COMPILE_QUEUE = {"queued", "compiling"}
GPU_QUEUE = {"waiting", "checking", "timing", "evaluating"}
IN_FLIGHT = {"generating"} | COMPILE_QUEUE | GPU_QUEUE
# (key, label, width): fixed widths, so adding thousands of rows measures no cell.
COLUMNS = [("node", "node", 6), ("round", "round", 5), ("idea", "idea", 32), ("status", "status", 13),
           ("time_ms", "ms", 8), ("p10", "p10", 8), ("p90", "p90", 8), ("ref_ms", "eager ms", 8),
           ("speedup", "vs eager", 8), ("speedup_compile", "vs compile", 10), ("sol", "% SOL", 6)]
SORTS = [("speedup", True), ("round", False), ("time_ms", False)]
AUTO_EXPAND = 400  # trees up to this many nodes open fully; larger ones open level by level
WIDE = 120  # columns from which labels also show the speedup vs torch.compile
STEERING = [  # (action, palette title, help)
    ("prune", "Prune node", "cancel the selected node's queued work; never select it"),
    ("expand", "Expand node", "ask for more ideas (from a variant) or variants (of an idea)"),
    ("pin", "Pin / unpin node", "always keep the selected variant as a parent"),
    ("inject", "Inject idea", "add your own idea under the selected variant"),
    ("edit", "Edit variant", "edit the selected variant's source and re-queue it"),
    ("pause", "Pause / resume search", "no new LLM calls or evaluations start while paused"),
    ("stop", "Stop search", "end the search after in-flight work"),
    ("export", "Export variant", "write the selected variant as a KernelBench solution file"),
    ("diff", "Toggle diff", "show the selected variant's diff against its parent"),
    ("best", "Go to best", "select the fastest correct variant"),
]


class EngineEvent(Message):
    def __init__(self, event: Event | Any) -> None:
        super().__init__()
        self.event = event


class SearchScreen(Screen):
    BINDINGS = [
        Binding("escape", "back", "Back", id="back"),
        Binding("x", "prune", "Prune", id="prune"),
        Binding("e", "expand", "Expand", id="expand"),
        Binding("p", "pin", "Pin", id="pin"),
        Binding("i", "inject", "Idea", id="inject_idea"),
        Binding("E", "edit", "Edit", id="edit_variant"),
        Binding("P", "pause", "Pause/resume", id="pause"),
        Binding("S", "stop", "Stop", id="stop"),
        Binding("w", "export", "Export", id="export"),
        Binding("d", "diff", "Diff", id="diff"),
        Binding("o", "sort", "Sort", id="sort"),
        Binding("b", "best", "Best", id="goto_best"),
        Binding("t", "details", "Details", id="details"),
    ]

    def __init__(self, session_id: int | None = None, live: bool = False, follow: bool = False):
        super().__init__()
        self.session_id = session_id
        self.live = live
        self.follow = follow and not live
        self.nodes: dict[int, Node] = {}
        self.kids: dict[int | None, list[int]] = {}
        self.tree_nodes: dict[int, TreeNode] = {}
        self.verdicts: dict[int, dict[str, Any]] = {}
        self.best_id: int | None = None
        self.selected: int | None = None
        self.info: dict[str, Any] = {"status": "starting", "config": {}, "created_at": time.time()}
        self.show_diff = False
        self.sort_index = -1
        self.pending: dict[int, tuple[str, int | None]] = {}  # command id -> (kind, node id)
        self.node_pending: dict[int, str] = {}
        self.paused = False
        self.progress: dict[str, Any] = {}  # the engine's last Progress event, when it sends one
        self.tokens = 0
        self.cost_usd = 0.0
        self.best_by_round: dict[int, float] = {}
        self._code_cache: dict[tuple[int, bool], Text] = {}  # (node, dark theme) -> highlighted
        self._wide = False
        self._progress_dirty = True
        self._plot_dirty = True
        self._llm_for: int | None = None
        self._seen_ts = 0.0
        self._seen_eval = 0
        self._polling = False
        self.code_text = Text()
        self.llm_text = Text()

    # -- layout -----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="banner")
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield Tree(Text("reference"), id="tree")
                with Vertical(id="progress") as progress:
                    progress.border_title = "progress · best speedup by round"
                    yield Static("", id="progress-text")
                    yield ProgressBar(id="round-bar", show_eta=False)
                    yield PlotextPlot(id="plot")
            with Vertical(id="right"):
                yield Static("", id="idea")
                yield RichLog(id="code", wrap=False, auto_scroll=False)
                yield Static("", id="verdict")
        with TabbedContent(id="details"):
            with TabPane("Timings", id="tab-timings"):
                yield DataTable(id="timings", cursor_type="row", zebra_stripes=True)
            with TabPane("LLM", id="tab-llm"):
                yield RichLog(id="llm", wrap=True, auto_scroll=False)
        yield Static("", id="status-line")
        yield Footer(compact=True)

    async def on_mount(self) -> None:
        table = self.query_one("#timings", DataTable)
        for key, label, width in COLUMNS:
            table.add_column(label, key=key, width=width)
        tree = self.query_one("#tree", Tree)
        tree.root.expand()
        tree.focus()
        self._layout(self.app.size.width, self.app.size.height)
        if self.session_id is not None and not self.live:
            await self._load_past()
            if self.follow:
                self.set_interval(0.5, self._poll)
        self.set_interval(0.25, self._tick)
        self.watch(self.app, "theme", self._theme_changed, init=False)

    def _theme_changed(self) -> None:
        """Code colours follow the theme (dark or light); the rest is Textual's own styling."""
        if self.selected is not None and self.selected in self.nodes:
            self._show(self.selected)

    def on_resize(self, event: Any) -> None:
        self._layout(event.size.width, event.size.height)

    def _layout(self, width: int, height: int) -> None:
        self.set_class(width < 110 or height < 32, "compact")
        self._progress_dirty = True  # its height depends on the layout
        wide = width >= WIDE
        if wide != self._wide:
            self._wide = wide
            self._relabel_all()

    # -- loading from the store (past or followed sessions) ---------------------------------

    @property
    def store(self) -> Any:
        return self.app.store  # type: ignore[attr-defined]

    async def _load_past(self) -> None:
        session = await self.store.session(self.session_id)
        if session is None:
            self.notify(f"no session {self.session_id} in this database", severity="error")
            return
        if not self.live:
            self._set_info({**session, "status": session_state(session)})
        for ev in await self.store.evaluations(self.session_id):
            self.verdicts[ev["node_id"]] = ev["verdict"]
            self._seen_eval = max(self._seen_eval, ev["id"])
        rows = await self.store.nodes_since(self.session_id, 0.0)
        self._seen_ts = max((ts for _, ts in rows), default=0.0)
        nodes = [n for n, _ in rows if n.id not in self.nodes]
        auto = len(nodes) + len(self.nodes) <= AUTO_EXPAND
        for node in nodes:
            self.nodes[node.id] = node
            self.kids.setdefault(node.parent_id, []).append(node.id)
            self._note_best(node)
        for node in nodes:  # tree items: all of a small tree, the first level of a large one
            if node.kind == "root" or auto:
                self._materialize(node, expand=auto)
        self._table_rows([n for n in nodes if n.id in self.verdicts and n.kind == "variant"])
        totals = await self.store.llm_totals(self.session_id)
        self.tokens = int(totals["tokens"])
        self.cost_usd = float(totals["cost_usd"])
        await self._load_pending()
        self._progress_dirty = self._plot_dirty = True
        self._refresh_best()

    async def _load_pending(self) -> None:
        for cmd in await self.store.commands(self.session_id):
            if cmd["applied_at"] is None:
                args = control.decode(cmd["kind"], cmd["args"])
                node_id = getattr(args, "node_id", None) or getattr(args, "parent_id", None)
                self.pending[cmd["id"]] = (cmd["kind"], node_id)
                if node_id is not None:
                    self.node_pending[node_id] = cmd["kind"]

    async def _poll(self) -> None:
        """Follow a session that another process runs: read what changed since the last poll."""
        if self._polling or self.session_id is None:
            return
        self._polling = True
        try:
            session = await self.store.session(self.session_id)
            if session is None:
                return
            for ev in await self.store.evaluations(self.session_id, after_id=self._seen_eval):
                self.verdicts[ev["node_id"]] = ev["verdict"]
                self._seen_eval = max(self._seen_eval, ev["id"])
            for node, ts in await self.store.nodes_since(self.session_id, self._seen_ts):
                self._seen_ts = max(self._seen_ts, ts)
                if node.id not in self.nodes:
                    self._add(node)
                elif node != self.nodes[node.id] or (node.id in self.verdicts and node.kind == "variant"):
                    self._update(node)
            if self.pending:
                applied = {c["id"]: c for c in await self.store.commands(self.session_id)
                           if c["applied_at"] is not None and c["id"] in self.pending}
                for cid in applied:
                    self._confirm(cid)
            totals = await self.store.llm_totals(self.session_id)
            self.tokens = int(totals["tokens"])
            self.cost_usd = float(totals["cost_usd"])
            state = session_state(session)
            if state != self.info.get("status"):
                self.info.update(status=state, finished_at=session["finished_at"],
                                 stop_reason=session.get("stop_reason"))
                reason = f" ({session['stop_reason']})" if session.get("stop_reason") else ""
                self._status_line(f"session {state}{reason}")
            self._refresh_best()
            self._progress_dirty = True
        finally:
            self._polling = False

    # -- live events: the engine calls `receive` (a bus subscriber) in this loop -------------

    def receive(self, event: Event) -> None:
        self.post_message(EngineEvent(event))

    @on(EngineEvent)
    async def _handle(self, message: EngineEvent) -> None:
        event = message.event
        if isinstance(event, SessionStarted):
            self.session_id = event.session_id
            self._set_info({"problem": event.problem, "backend": event.backend, "provider": event.provider,
                            "sizes": event.sizes, "status": "running", "config": event.config,
                            "created_at": time.time(), "finished_at": None}, scripted=event.scripted)
            if getattr(event, "resumed", False):  # the tree so far is in the DB
                await self._load_past()
                self.info["status"] = "running"
        elif isinstance(event, NodeAdded):
            self._add(event.node)
        elif isinstance(event, NodeUpdated):
            self._update(event.node)
        elif isinstance(event, VerdictReady):
            self.verdicts[event.node.id] = event.verdict
            self._update(event.node)
            self._refresh_best()
        elif isinstance(event, LLMCallDone):
            self.tokens += event.tokens
            self.cost_usd += event.cost_usd
            if event.node_id == self.selected:
                self._llm_for = None
        elif isinstance(event, RoundDone):
            self._status_line(f"round {event.round} done, best {fmt_num(event.best_speedup, '.2f', 'x')}")
        elif isinstance(event, CommandApplied):
            self._confirm(event.command_id)
        elif isinstance(event, SessionDone):
            self.info.update(status=event.status, finished_at=time.time())
            self._status_line(f"session {event.status}")
        elif isinstance(event, Progress):
            self.progress = asdict(event)
            self.paused = event.paused
        elif isinstance(event, BudgetReached):
            self._status_line(f"budget reached: {event.reason}; in-flight work finishes")
        self._progress_dirty = True

    # -- header ------------------------------------------------------------------------------

    def _set_info(self, session: dict[str, Any], scripted: bool | None = None) -> None:
        provider = session["provider"]
        if scripted is None:
            scripted = "scripted" in provider.split(",")
        self.info = {**session, "scripted": scripted}
        sizes_text = ", ".join(f"{k}={v}" for k, v in session["sizes"].items())
        banner = Text()
        if scripted:
            banner.append(" SCRIPTED ", style="bold black on yellow")
            banner.append(" canned answers, no LLM  ")
        if session["backend"] == "cpu":
            banner.append(" CPU ", style="bold black on cyan")
            banner.append(" C++ vs the CPU reference  ")
        mode = "live" if self.live else "following" if self.follow else "read-only"
        banner.append(f"{session['problem']} [{sizes_text}] · {provider} · {mode}")
        self.query_one("#banner", Static).update(banner)
        self._status_line(session["status"])

    def _status_line(self, text: str) -> None:
        sid = f"session {self.session_id}" if self.session_id is not None else "session"
        self.query_one("#status-line", Static).update(f"{sid} · {text}", layout=False)

    # -- the tree ----------------------------------------------------------------------------

    def _label(self, node: Node) -> Text:
        style = STYLES.get(node.status, "")
        label = Text(f"{GLYPHS.get(node.status, NEUTRAL)} ", style=style)
        if node.kind == "root":
            label.append(f"reference {self.info.get('problem', '')}".rstrip(), style="bold cyan")
        elif node.kind == "idea":
            label.append(node.title or "(idea)", style="bold" if node.status == "ok" else style)
            if node.origin == "human":
                label.append(" (yours)", style="italic")
        else:
            label.append(f"#{node.id} ")
            if node.speedup is not None:
                label.append(f"{node.speedup:.2f}x ", style="bold green" if node.speedup >= 1 else "")
            if self._wide:
                sc = self.verdicts.get(node.id, {}).get("speedup_compile")
                if sc is not None:
                    label.append(f"({sc:.2f}x compile) ", style="dim")
            label.append(node.status, style=style)
            if node.origin in ("human", "edit"):
                label.append(" (yours)", style="italic")
        if node.pinned:
            label.append(" ⚲pinned", style="bold blue")
        if node.pruned:
            label.stylize("dim strike")
            label.append(" ✂pruned", style="dim")
        if node.id in self.node_pending:
            label.append(f" ⧗{self.node_pending[node.id]}…", style="italic yellow")
        if node.id == self.best_id:
            label.append("  ★ best", style="bold yellow")
            label.stylize("reverse", 0, 1)
        return label

    def _materialize(self, node: Node, expand: bool) -> TreeNode | None:
        """Create the tree item of `node` (its parent's must exist); children come when it opens."""
        tree = self.query_one("#tree", Tree)
        if node.kind == "root" or node.parent_id is None:
            tn = tree.root
            tn.data = node.id
            tn.set_label(self._label(node))
            tn.allow_expand = True
        else:
            parent = self.tree_nodes.get(node.parent_id)
            if parent is None:
                return None
            parent.allow_expand = True
            tn = parent.add(self._label(node), data=node.id, expand=expand,
                            allow_expand=bool(self.kids.get(node.id)))
        self.tree_nodes[node.id] = tn
        return tn

    @on(Tree.NodeExpanded, "#tree")
    def _expanded(self, event: Tree.NodeExpanded) -> None:
        if event.node.data is not None:
            self._open_children(event.node.data)

    def _open_children(self, node_id: int) -> None:
        for cid in self.kids.get(node_id, []):
            if cid not in self.tree_nodes:
                self._materialize(self.nodes[cid], expand=len(self.nodes) <= AUTO_EXPAND)

    def _reveal(self, node_id: int) -> TreeNode | None:
        """The node's tree item, creating (and opening) its ancestors as needed."""
        path: list[int] = []
        nid: int | None = node_id
        while nid is not None and nid not in self.tree_nodes:
            path.append(nid)
            nid = self.nodes[nid].parent_id if nid in self.nodes else None
        if nid is None:
            return None
        for ancestor in [nid, *reversed(path[1:])]:
            self.tree_nodes[ancestor].expand()
            self._open_children(ancestor)
        tn = self.tree_nodes.get(node_id)
        if tn is not None and tn.parent is not None and not tn.parent.is_expanded:
            tn.parent.expand()
        return tn

    def _add(self, node: Node) -> None:
        self.nodes[node.id] = node
        self.kids.setdefault(node.parent_id, []).append(node.id)
        parent = self.tree_nodes.get(node.parent_id) if node.parent_id is not None else None
        if node.kind == "root" or node.parent_id is None:
            self._materialize(node, expand=True)
        elif parent is not None:
            if parent.is_expanded or parent.is_root:
                self._materialize(node, expand=len(self.nodes) <= AUTO_EXPAND)
            else:
                parent.allow_expand = True
        self._note_best(node)
        if node.kind == "variant" and node.id in self.verdicts:
            self._table_rows([node])
        if self.selected is None and node.kind == "root":
            self._show(node.id)

    def _update(self, node: Node) -> None:
        if node.id not in self.nodes:
            self._add(node)
            return
        old = self.nodes[node.id]
        self.nodes[node.id] = node
        if old.source != node.source:
            self._code_cache.pop((node.id, True), None)
            self._code_cache.pop((node.id, False), None)
        if (old.pinned, old.pruned) != (node.pinned, node.pruned):
            self.node_pending.pop(node.id, None)  # the engine has carried the pin / prune out
        self._note_best(node)
        self._relabel(node.id)
        if node.kind == "variant" and node.id in self.verdicts:
            self._table_rows([node])
        if self.selected == node.id:
            self._show(node.id)

    def _relabel(self, node_id: int) -> None:
        tn = self.tree_nodes.get(node_id)
        if tn is not None and node_id in self.nodes:
            tn.set_label(self._label(self.nodes[node_id]))

    def _relabel_all(self) -> None:
        for node_id in list(self.tree_nodes):
            self._relabel(node_id)

    def _note_best(self, node: Node) -> None:
        if node.status == "correct" and node.speedup:
            best = self.best_by_round.get(node.round)
            if best is None or node.speedup > best:
                self.best_by_round[node.round] = node.speedup
                self._plot_dirty = True

    def _refresh_best(self) -> None:
        best = best_variant(self.nodes)
        old, self.best_id = self.best_id, best.id if best else None
        if old != self.best_id:
            for node_id in {old, self.best_id} - {None}:
                self._relabel(node_id)  # type: ignore[arg-type]

    # -- panes -------------------------------------------------------------------------------

    def _parent_source(self, node: Node) -> tuple[int, str] | None:
        nid = node.parent_id
        while nid is not None and nid in self.nodes:
            parent = self.nodes[nid]
            if parent.source:
                return parent.id, parent.source
            nid = parent.parent_id
        return None

    def _show(self, node_id: int) -> None:
        self.selected = node_id
        node = self.nodes[node_id]
        idea = self.nodes.get(node.parent_id) if node.kind == "variant" and node.parent_id else None
        head = Text()
        if node.kind == "idea":
            head.append(f"idea: {node.title}\n", style="bold")
            head.append(node.text)
        elif idea is not None and idea.kind == "idea":
            head.append(f"idea: {idea.title}", style="bold")
            head.append(f" — {idea.text}" if idea.text else "")
        elif idea is not None:
            head.append(f"fix of #{idea.id}: {node.title}", style="bold")
        elif node.kind == "root":
            head.append(f"reference: {node.title or self.info.get('problem', '')}", style="bold")
        self.query_one("#idea", Static).update(head, layout=False)
        self.code_text = self._code(node)
        code = self.query_one("#code", RichLog)
        code.clear()
        code.write(self.code_text, scroll_end=False)
        code.scroll_home(animate=False)
        self.query_one("#verdict", Static).update(self._verdict(node), layout=False)
        self._llm_for = None
        if self.query_one("#details", TabbedContent).active == "tab-llm":
            self._load_llm(node_id)

    def _code(self, node: Node) -> Text:
        if not node.source:
            return Text(node.text or f"({node.kind}: {node.status}, no source)", style="dim")
        if self.show_diff:
            parent = self._parent_source(node)
            if parent is None:
                return Text("(no parent source to diff against)", style="dim")
            return diff_text(parent[1], node.source, f"#{parent[0]}", f"#{node.id}")
        dark = self.app.current_theme.dark
        text = self._code_cache.get((node.id, dark))
        if text is None:
            text = highlight_source(node.source, dark=dark)
            if len(self._code_cache) > 128:
                self._code_cache.pop(next(iter(self._code_cache)))
            self._code_cache[(node.id, dark)] = text
        return text

    def _verdict(self, node: Node) -> Text:
        v = self.verdicts.get(node.id)
        out = Text()
        out.append(f"{GLYPHS.get(node.status, NEUTRAL)} {node.status}",
                   style=f"bold {STYLES.get(node.status, '')}")
        out.append(f"  {node.kind} #{node.id} · round {node.round}")
        if node.pinned:
            out.append(" · pinned", style="blue")
        if node.pruned:
            out.append(" · pruned", style="dim")
        if v is None:
            return out
        if v.get("gpu"):  # which device measured it
            out.append(f" · {device_label(v)}", style="dim")
        out.append(f"\nmax abs err {fmt_num(v.get('max_abs_err'), '.3g')}")
        out.append(f" · median {fmt_num(v.get('time_ms'), '.4g', ' ms')}"
                   f" (p10 {fmt_num(v.get('time_p10_ms'), '.4g')}, p90 {fmt_num(v.get('time_p90_ms'), '.4g')})")
        out.append(f"\nvs eager {fmt_num(v.get('speedup_eager'), '.2f', 'x')}"
                   f" ({fmt_num(v.get('ref_eager_ms'), '.4g', ' ms')})"
                   f" · vs torch.compile {fmt_num(v.get('speedup_compile'), '.2f', 'x')}"
                   f" ({fmt_num(v.get('ref_compile_ms'), '.4g', ' ms')})")
        sol = v.get("sol_fraction")
        out.append(f" · SOL {'-' if sol is None else f'{100 * sol:.1f}%'}")
        for flag in v.get("flags") or []:
            out.append(f"\nflag: {flag}", style="magenta")
        log = (v.get("log") or "").rstrip()
        if log:
            out.append("\n" + "\n".join(log.splitlines()[-8:]), style="dim")
        return out

    @work(group="llm", exclusive=True)
    async def _load_llm(self, node_id: int) -> None:
        if self.session_id is None:
            return
        node = self.nodes[node_id]
        if node.kind == "idea":
            calls = await self.store.llm_calls(self.session_id, node_id=node.parent_id, purpose="idea")
            why = f"the idea call(s) of #{node.parent_id} that proposed this idea"
        else:
            calls = await self.store.llm_calls(self.session_id, node_id=node_id)
            why = "the call(s) that wrote this code" if node.kind == "variant" else "idea calls from it"
        if self.selected != node_id:
            return
        out = Text(f"#{node_id}: {why}\n", style="bold")
        if not calls:
            out.append("(no LLM call recorded for this node)", style="dim")
        for c in calls:
            tokens = c["input_tokens"] + c["output_tokens"] + c["reasoning_tokens"]
            out.append(f"\n{c['purpose']} · {c['provider']}:{c['model']} · {c['status']}", style="bold cyan")
            out.append(f"\ntokens in {c['input_tokens']} · out {c['output_tokens']}"
                       f" · reasoning {c['reasoning_tokens']} (total {tokens})"
                       f" · ${c['cost_usd']:.4f} · {c['latency_s']:.2f} s · attempts {c['attempts']}\n")
            if c.get("error"):
                out.append(f"error: {c['error']}\n", style="red")
            out.append("── prompt ──\n", style="bold")
            out.append(c["prompt"][-6000:] + "\n")
            out.append("── reply ──\n", style="bold")
            out.append(c["reply"][-8000:] + "\n")
        llm = self.query_one("#llm", RichLog)
        llm.clear()
        llm.write(out, scroll_end=False)
        llm.scroll_home(animate=False)
        self.llm_text = out
        self._llm_for = node_id

    @on(TabbedContent.TabActivated, "#details")
    def _tab(self, event: TabbedContent.TabActivated) -> None:
        if event.pane.id == "tab-llm" and self.selected is not None and self._llm_for != self.selected:
            self._load_llm(self.selected)

    # -- timings table -----------------------------------------------------------------------

    def _table_rows(self, nodes: list[Node]) -> None:
        table = self.query_one("#timings", DataTable)
        for node in nodes:
            v = self.verdicts.get(node.id, {})
            sol = v.get("sol_fraction")
            cells = {
                "node": str(node.id), "round": str(node.round), "idea": node.title[:32],
                "status": Text(node.status, style=STYLES.get(node.status, "")),
                "time_ms": fmt_num(v.get("time_ms")), "p10": fmt_num(v.get("time_p10_ms")),
                "p90": fmt_num(v.get("time_p90_ms")), "ref_ms": fmt_num(v.get("ref_eager_ms")),
                "speedup": fmt_num(v.get("speedup_eager"), ".3g", "x"),
                "speedup_compile": fmt_num(v.get("speedup_compile"), ".3g", "x"),
                "sol": "-" if sol is None else f"{100 * sol:.1f}",
            }
            key = str(node.id)
            if key in table.rows:
                for column, value in cells.items():
                    table.update_cell(key, column, value)
            else:
                table.add_row(*cells.values(), key=key)

    def _sort(self, column: str, reverse: bool) -> None:
        def key(value: Any) -> float:
            text = str(value).rstrip("x")
            try:
                return float(text)
            except ValueError:
                return float("-inf") if reverse else float("inf")

        self.query_one("#timings", DataTable).sort(column, key=key, reverse=reverse)
        self._status_line(f"timings sorted by {column}{' (descending)' if reverse else ''}")

    def action_sort(self) -> None:
        self.sort_index = (self.sort_index + 1) % len(SORTS)
        self._sort(*SORTS[self.sort_index])

    @on(DataTable.HeaderSelected, "#timings")
    def _header(self, event: DataTable.HeaderSelected) -> None:
        column = str(event.column_key.value)
        self._sort(column, column in ("speedup", "speedup_compile", "sol"))

    @on(DataTable.RowHighlighted, "#timings")
    @on(DataTable.RowSelected, "#timings")
    def _row(self, event: DataTable.RowHighlighted | DataTable.RowSelected) -> None:
        if event.row_key.value is None or not event.data_table.has_focus:
            return
        self.select_node(int(event.row_key.value))

    def select_node(self, node_id: int) -> None:
        """Select a node: the tree cursor goes to it (opening its ancestors) and the panes show it."""
        if node_id not in self.nodes:
            return
        tn = self._reveal(node_id)
        if tn is not None:
            self.query_one("#tree", Tree).move_cursor(tn)
        self._show(node_id)

    @on(Tree.NodeHighlighted, "#tree")
    def _tree_highlighted(self, event: Tree.NodeHighlighted) -> None:
        data = event.node.data
        if data is not None and data in self.nodes and data != self.selected:
            self._show(event.node.data)

    # -- progress (refreshed at most 4 times a second) ---------------------------------------

    def _tick(self) -> None:
        if self.info.get("status") == "running" or self._progress_dirty:
            self._render_progress()
        if self._plot_dirty:
            self._render_plot()

    def _render_progress(self) -> None:
        self._progress_dirty = False
        cfg = self.info.get("config") or {}
        p = self.progress
        counts: dict[str, int] = {}
        current = max((n.round for n in self.nodes.values()), default=0)
        round_variants = round_done = round_ideas = 0
        for n in self.nodes.values():
            counts[n.status] = counts.get(n.status, 0) + 1
            if n.round == current:
                if n.kind == "variant":
                    round_variants += 1
                    round_done += n.status not in IN_FLIGHT
                elif n.kind == "idea":
                    round_ideas += 1
        compile_q = p.get("compile_queue", sum(counts.get(s, 0) for s in COMPILE_QUEUE))
        gpu_q = p.get("gpu_queue", sum(counts.get(s, 0) for s in GPU_QUEUE))
        rnd, rounds = p.get("round", current), p.get("rounds", cfg.get("rounds", "?"))
        tokens, cost = p.get("tokens", self.tokens), p.get("cost_usd", self.cost_usd)
        budget_usd = p.get("budget_usd", cfg.get("budget_usd"))
        budget_tokens = p.get("budget_tokens", cfg.get("budget_tokens"))
        status = self.info.get("status", "")
        if status == "running":
            elapsed = p.get("elapsed_s", time.time() - self.info.get("created_at", time.time()))
        else:
            elapsed = (self.info.get("finished_at") or time.time()) - self.info.get("created_at", time.time())
        state = "paused" if self.paused else status
        text = Text()
        text.append(f"round {rnd}/{rounds}", style="bold")
        text.append(f" · {state}", style="yellow" if self.paused else "")
        text.append(f" · {_duration(elapsed)}\n")
        llm = f" · LLM calls {p['llm_running']}" if "llm_running" in p else ""
        device = "GPU" if self.info.get("backend") == "cuda" else "timing"
        text.append(f"compile queue {compile_q} · {device} queue {gpu_q}{llm}\n")
        text.append(f"tokens {_si(tokens)}{'/' + _si(budget_tokens) if budget_tokens else ''}"
                    f" · ${cost:.3f}{f'/${budget_usd:g}' if budget_usd else ''}")
        shown = self._device_lines(text, p.get("devices") or [], elapsed)
        if shown:  # the pane grows by a line per device (none: the stylesheet's sizes)
            compact = self.has_class("compact")  # where the queue line may wrap
            self.query_one("#progress-text", Static).styles.height = "auto" if compact else 3 + shown
            self.query_one("#progress").styles.height = "auto" if compact else 13 + shown
        self.query_one("#progress-text", Static).update(text, layout=bool(shown))
        expected = max(round_variants, round_ideas * int(cfg.get("variants") or 1), 1)
        self.query_one("#round-bar", ProgressBar).update(total=expected, progress=round_done)

    def _device_lines(self, text: Text, devices: list[dict[str, Any]], elapsed: float) -> int:
        """One line per evaluation device (GPU): busy or idle, evaluations done, utilisation (its
        busy time over the run's); at most 3 in a compact layout, then how many more. Returns the
        lines written."""
        limit = 3 if self.has_class("compact") else 12
        width = max((len(d["name"]) for d in devices), default=0)
        for d in devices[:limit]:
            util = min(1.0, d["busy_s"] / elapsed) if elapsed > 0 else 0.0
            state = "down" if not d["alive"] else "busy" if d["busy"] else "idle"
            style = {"down": "red", "busy": "green", "idle": "dim"}[state]
            text.append(f"\n{d['name']:<{width}} ")
            text.append(state, style=style)
            text.append(f" {d['jobs']:>3} jobs {util:>4.0%}" + (f" queue {d['queue']}" if d["queue"] else ""))
        if len(devices) > limit:
            text.append(f"\n+{len(devices) - limit} more devices", style="dim")
        return min(len(devices), limit + 1)

    def _render_plot(self) -> None:
        self._plot_dirty = False
        plot = self.query_one("#plot", PlotextPlot)
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        best, xs, ys = 0.0, [], []
        for r in sorted(self.best_by_round):
            best = max(best, self.best_by_round[r])
            xs.append(r)
            ys.append(best)
        if xs:
            plt.plot(xs, ys, marker="dot")
            plt.xticks(xs)
        plot.refresh()

    # -- steering ----------------------------------------------------------------------------

    def palette_commands(self) -> Iterator[SystemCommand]:
        """What the command palette offers on this screen: the steering actions."""
        for action, title, help_text in STEERING:
            yield SystemCommand(title, help_text, partial(self.run_action, action))

    def _steerable(self) -> bool:
        if self.session_id is None:
            self.notify("the search has not started yet", severity="warning")
            return False
        if self.info.get("status") != "running":
            self.notify(f"session {self.session_id} is {self.info.get('status')}: nothing to steer",
                        severity="warning")
            return False
        return True

    def _target(self, kinds: tuple[str, ...], what: str) -> Node | None:
        node = self.nodes.get(self.selected) if self.selected is not None else None
        if node is None or node.kind not in kinds:
            self.notify(f"select {what} first", severity="warning")
            return None
        return node

    async def _send(self, command: control.Command, node_id: int | None, mark: str) -> int:
        """Record a command; mark it pending in the tree at once, confirmed when the engine applies it."""
        if node_id is not None:
            self.node_pending[node_id] = mark
            self._relabel(node_id)
        cid = await self.store.add_command(self.session_id, *control.encode(command))
        self.pending[cid] = (command.kind, node_id)
        where = f" #{node_id}" if node_id is not None else ""
        self._status_line(f"{mark}{where}: recorded as command {cid}, waiting for the engine")
        return cid

    def _confirm(self, command_id: int) -> None:
        kind, node_id = self.pending.pop(command_id, ("", None))
        if not kind:
            return
        if kind in ("pause", "resume"):
            self.paused = kind == "pause"
        if kind == "stop":
            self.info["stopping"] = True
        if node_id is not None:
            self.node_pending.pop(node_id, None)
            self._relabel(node_id)
        self._status_line(f"{kind}{f' #{node_id}' if node_id is not None else ''}: applied")
        self._progress_dirty = True

    async def action_prune(self) -> None:
        node = self._target(("idea", "variant"), "an idea or a variant to prune")
        if node is None or not self._steerable():
            return
        if node.pruned:
            self.notify(f"#{node.id} is already pruned")
            return
        await self._send(control.Prune(node.id), node.id, "prune")

    async def action_pin(self) -> None:
        node = self._target(("variant",), "a variant to pin")
        if node is None or not self._steerable():
            return
        await self._send(control.Pin(node.id, pinned=not node.pinned), node.id,
                         "unpin" if node.pinned else "pin")

    def action_expand(self) -> None:
        node = self._target(("root", "idea", "variant"), "a node to expand")
        if node is None or not self._steerable():
            return
        cfg = self.info.get("config") or {}
        if node.kind == "idea":
            prompt = f"More variants of “{node.title}”: how many?"
            field, default = "variants", cfg.get("variants", 2)
        else:
            prompt, field, default = f"More ideas from #{node.id}: how many?", "ideas", cfg.get("ideas", 3)

        async def done(count: int | None) -> None:
            if count:
                await self._send(control.Expand(node.id, **{field: count}), node.id, f"+{count} {field}")

        self.app.push_screen(AskNumber(prompt, int(default or 2)), done)

    def action_inject(self) -> None:
        node = self._target(("root", "idea", "variant"), "a variant to add an idea under")
        if node is None or not self._steerable():
            return
        parent = self.nodes[node.parent_id] if node.kind == "idea" and node.parent_id else node

        async def done(text: str | None) -> None:
            if text:
                await self._send(control.InjectIdea(parent.id, text), parent.id, "idea")

        self.app.push_screen(AskText(f"Your idea for #{parent.id} (implemented like any other):",
                                     "e.g. fuse the max and the sum into one pass"), done)

    def action_edit(self) -> None:
        node = self._target(("variant",), "a variant to edit")
        if node is None or not self._steerable():
            return
        if not node.source:
            self.notify(f"#{node.id} has no source yet", severity="warning")
            return

        async def done(source: str | None) -> None:
            if source:
                await self._send(control.EditVariant(node.id, source), node.id, "edit")

        self.app.push_screen(EditSource(f"Edit #{node.id} — saved as a new variant, evaluated", node.source),
                             done)

    async def action_pause(self) -> None:
        if not self._steerable():
            return
        await self._send(control.Resume() if self.paused else control.Pause(), None,
                         "resume" if self.paused else "pause")

    def action_stop(self) -> None:
        if not self._steerable():
            return

        async def done(yes: bool | None) -> None:
            if yes:
                await self._send(control.Stop(), None, "stop")

        self.app.push_screen(Confirm(f"Stop session {self.session_id}? In-flight work finishes."), done)

    async def action_export(self) -> None:
        node = self._target(("variant",), "a variant to export")
        if node is None:
            return
        try:
            text = await solution_text(self.store, node.id)
        except ExportError as exc:
            self.notify(str(exc), severity="warning")
            return
        path = export_path(self.info.get("problem", "problem"), node.id, Path.cwd())
        path.write_text(text)
        self.notify(f"wrote {path}")
        self._status_line(f"exported #{node.id} to {path}")

    def action_diff(self) -> None:
        self.show_diff = not self.show_diff
        self.set_class(self.show_diff, "diff")
        if self.selected is not None:
            self._show(self.selected)

    def action_best(self) -> None:
        if self.best_id is None:
            self.notify("no correct variant yet")
            return
        self.select_node(self.best_id)

    def action_details(self) -> None:
        self.toggle_class("show-details")
        self.toggle_class("hide-details")

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()


def export_path(problem: str, node_id: int, directory: Path) -> Path:
    """Where the export key writes a variant: a new file in `directory`, never an existing one."""
    stem = f"{problem}_node{node_id}"
    path = directory / f"{stem}.py"
    n = 1
    while path.exists():
        n += 1
        path = directory / f"{stem}_{n}.py"
    return path


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def _si(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:g}"
