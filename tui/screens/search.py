"""The search screen: idea tree, code pane, verdict, timings table; live or read-only."""

from __future__ import annotations

from typing import Any

from rich.syntax import Syntax
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static, Tree
from textual.widgets.tree import TreeNode

from engine.events import (
    Event,
    NodeAdded,
    NodeUpdated,
    RoundDone,
    SessionDone,
    SessionStarted,
    VerdictReady,
)
from engine.report import format_verdict
from engine.store import Node

GLYPHS = {
    "reference": "◆", "ok": "◇", "generating": "…", "queued": "·", "compiling": "⚙",
    "evaluating": "⏱", "correct": "✔", "incorrect": "✘", "flagged": "⚑", "compile_error": "⚠",
    "runtime_error": "!", "timeout": "⌛", "crashed": "☠", "failed": "✘",
}
STYLES = {
    "correct": "green", "incorrect": "red", "compile_error": "yellow", "runtime_error": "red",
    "timeout": "magenta", "crashed": "red", "failed": "red", "flagged": "magenta",
    "reference": "cyan", "ok": "blue",
}
COLUMNS = [("node", "node"), ("round", "round"), ("idea", "idea"), ("status", "status"),
           ("time_ms", "ms"), ("ref_ms", "eager ms"), ("speedup", "speedup")]


class EngineEvent(Message):
    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


class SearchScreen(Screen):
    BINDINGS = [
        Binding("escape", "back", "Back", id="back"),
        Binding("s", "sort_speedup", "Sort by speedup", id="sort_speedup"),
    ]

    def __init__(self, session_id: int | None = None, live: bool = False):
        super().__init__()
        self.session_id = session_id
        self.live = live
        self.nodes: dict[int, Node] = {}
        self.tree_nodes: dict[int, TreeNode] = {}
        self.verdicts: dict[int, dict[str, Any]] = {}
        self.best_id: int | None = None
        self.selected: int | None = None
        self.info: dict[str, Any] = {}

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="banner")
        with Horizontal(id="main"):
            yield Tree("problem", id="tree")
            with Vertical(id="right"):
                with VerticalScroll(id="code-scroll"):
                    yield Static("", id="code")
                yield Static("", id="verdict")
        yield DataTable(id="timings", cursor_type="row", zebra_stripes=True)
        yield Static("", id="status-line")
        yield Footer()

    async def on_mount(self) -> None:
        table = self.query_one("#timings", DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        self.query_one("#tree", Tree).root.expand()
        if not self.live and self.session_id is not None:
            await self._load_past()

    # -- building from the store (past sessions) -------------------------------------------

    async def _load_past(self) -> None:
        store = self.app.store  # type: ignore[attr-defined]
        session = await store.session(self.session_id)
        if session is None:
            return
        self._set_info(session["problem"], session["backend"], session["provider"],
                       "scripted" in session["provider"].split(","), session["sizes"], session["status"])
        for ev in await store.evaluations(self.session_id):
            self.verdicts[ev["node_id"]] = ev["verdict"]
        for node in await store.nodes(self.session_id):
            self._add(node)
        self._refresh_best()

    # -- live events: the engine calls `receive` (a bus subscriber) in this loop -----------

    def receive(self, event: Event) -> None:
        self.post_message(EngineEvent(event))

    @on(EngineEvent)
    def _handle(self, message: EngineEvent) -> None:
        event = message.event
        if isinstance(event, SessionStarted):
            self.session_id = event.session_id
            self._set_info(event.problem, event.backend, event.provider, event.scripted,
                           event.sizes, "running")
        elif isinstance(event, NodeAdded):
            self._add(event.node)
        elif isinstance(event, NodeUpdated):
            self._update(event.node)
        elif isinstance(event, VerdictReady):
            self.verdicts[event.node.id] = event.verdict
            self._update(event.node)
            self._refresh_best()
        elif isinstance(event, RoundDone):
            self._status_line(f"round {event.round} done")
        elif isinstance(event, SessionDone):
            self.info["status"] = event.status
            self._status_line(f"session {event.status}")

    # -- widgets -------------------------------------------------------------------------------

    def _set_info(self, problem: str, backend: str, provider: str, scripted: bool,
                  sizes: dict[str, int], status: str) -> None:
        self.info = {"problem": problem, "backend": backend, "provider": provider,
                     "scripted": scripted, "status": status}
        sizes_text = ", ".join(f"{k}={v}" for k, v in sizes.items())
        banner = Text()
        if scripted:
            banner.append(" SCRIPTED ", style="bold black on yellow")
            banner.append(" offline canned answers, no LLM  ")
        if backend == "cpu":
            banner.append(" CPU ", style="bold black on cyan")
            banner.append(" C++ kernels vs the CPU reference at the CPU size preset  ")
        banner.append(f"{problem} [{sizes_text}] · provider {provider} · {backend}")
        self.query_one("#banner", Static).update(banner)
        tree = self.query_one("#tree", Tree)
        tree.root.set_label(Text(f"{problem}", style="bold"))
        self._status_line(status)

    def _status_line(self, text: str) -> None:
        sid = f"session {self.session_id}" if self.session_id is not None else "session"
        self.query_one("#status-line", Static).update(f"{sid} · {text}")

    def _label(self, node: Node) -> Text:
        glyph = GLYPHS.get(node.status, "?")
        style = STYLES.get(node.status, "")
        label = Text(f"{glyph} ", style=style)
        if node.kind == "root":
            label.append(f"reference #{node.id}")
        elif node.kind == "idea":
            label.append(node.title or "(idea)", style="bold" if node.status == "ok" else style)
        else:
            label.append(f"#{node.id} ")
            if node.speedup is not None:
                label.append(f"{node.speedup:.2f}x ", style="bold green" if node.speedup >= 1 else "")
            label.append(node.status, style=style)
            if node.id == self.best_id:
                label.append("  ★ best", style="bold yellow")
        return label

    def _add(self, node: Node) -> None:
        self.nodes[node.id] = node
        tree = self.query_one("#tree", Tree)
        if node.parent_id is None:
            parent = tree.root
        else:
            parent = self.tree_nodes.get(node.parent_id, tree.root)
        parent.allow_expand = True  # a node shows its expander once it has children
        self.tree_nodes[node.id] = parent.add(self._label(node), data=node.id, expand=True,
                                              allow_expand=False)
        if node.kind == "variant":
            self._table_row(node)
        if self.selected is None and node.kind == "root":
            self._show(node.id)

    def _update(self, node: Node) -> None:
        self.nodes[node.id] = node
        self.tree_nodes[node.id].set_label(self._label(node))
        if node.kind == "variant":
            self._table_row(node)
        if self.selected == node.id:
            self._show(node.id)

    def _table_row(self, node: Node) -> None:
        table = self.query_one("#timings", DataTable)
        v = self.verdicts.get(node.id, {})
        cells = {
            "node": node.id,
            "round": node.round,
            "idea": node.title[:40],
            "status": Text(node.status, style=STYLES.get(node.status, "")),
            "time_ms": _num(v.get("time_ms")),
            "ref_ms": _num(v.get("ref_eager_ms")),
            "speedup": _num(v.get("speedup_eager"), "x"),
        }
        key = str(node.id)
        if key in table.rows:
            for column, value in cells.items():
                table.update_cell(key, column, value)
        else:
            table.add_row(*cells.values(), key=key)

    def _refresh_best(self) -> None:
        correct = [n for n in self.nodes.values() if n.status == "correct" and n.speedup]
        best = max(correct, key=lambda n: n.speedup or 0.0, default=None)
        old, self.best_id = self.best_id, best.id if best else None
        for node_id in {old, self.best_id} - {None}:
            self.tree_nodes[node_id].set_label(self._label(self.nodes[node_id]))

    def _show(self, node_id: int) -> None:
        self.selected = node_id
        node = self.nodes[node_id]
        code = self.query_one("#code", Static)
        if node.kind == "idea":
            code.update(Text(f"{node.title}\n\n{node.text}"))
        elif node.source:
            code.update(Syntax(node.source, "python", line_numbers=True, word_wrap=False,
                               theme="monokai"))
        else:
            code.update(Text(node.text or f"({node.status})", style="dim"))
        verdict = self.verdicts.get(node_id)
        self.query_one("#verdict", Static).update(
            format_verdict(verdict) if verdict else f"{node.kind} #{node.id}: {node.status}")

    @on(Tree.NodeHighlighted, "#tree")
    def _tree_highlighted(self, event: Tree.NodeHighlighted) -> None:
        if event.node.data is not None:
            self._show(event.node.data)

    @on(DataTable.RowHighlighted, "#timings")
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is None:
            return
        node_id = int(event.row_key.value)
        tree = self.query_one("#tree", Tree)
        if node_id in self.tree_nodes:
            tree.move_cursor(self.tree_nodes[node_id])
            self._show(node_id)

    def action_sort_speedup(self) -> None:
        self.query_one("#timings", DataTable).sort(
            "speedup", key=lambda v: float(str(v).rstrip("x")) if str(v) not in ("", "-") else -1,
            reverse=True)

    def action_back(self) -> None:
        if not self.live and len(self.app.screen_stack) > 2:
            self.app.pop_screen()


def _num(value: float | None, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.4g}{suffix}"
