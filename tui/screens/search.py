"""The search screen: idea tree, code pane (source or diff), verdict, progress, timings, LLM calls.

Three ways in, one model: live (the search runs in this process; its events arrive on the bus),
followed (another process runs it; the DB is polled) and past (the DB, read once) all feed
`ScreenModel.apply`, and the screen redraws what it says changed. Steering (tui.screens.steering)
records commands; the engine applies them and confirms.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult, SystemCommand
from textual.binding import ActiveBinding, Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Header, Static, TabbedContent, TabPane, Tree
from textual.widgets.tree import TreeNode

from engine.domain import Node
from engine.record.events import Event
from tui.keymap import fit_footer
from tui.model import Changes, ModelInput, Note, ScreenModel, isolation_words, read_rows
from tui.screens.ahead import SteadyBelow, StyledAhead
from tui.screens.filtering import FilterBar, matches, number
from tui.screens.steering import STEERING, SteeringKeys
from tui.widgets.banner import banner_text, status_text
from tui.widgets.code_pane import CodePane, idea_text
from tui.widgets.footer import SteadyFooter
from tui.widgets.llm import LLMPane
from tui.widgets.progress import ProgressPane
from tui.widgets.timings import COLUMN_LABELS, DESCENDING, SORTS, TimingsTable
from tui.widgets.tree import SearchTree
from tui.widgets.verdict import VerdictPane

STEERING_HELP = {action: help_text for action, _, help_text in STEERING}
WIDE = 120  # columns from which labels also show the speedup vs torch.compile
POLL_S = 0.5  # a followed session: how often the DB is read
TICK_S = 0.25  # the progress pane: redrawn at most this often
SNUG_BELOW = 42  # rows under which a wide screen drops the plot (the "snug" layout)



def find_note(query: str, target: int, count: int) -> str:
    """What `/` in the tree says: where it went and how many nodes match (one node matches)."""
    many = f"{count} nodes match" if count != 1 else "1 node matches"
    return f"“{query}”: #{target}, {many} (/ Enter: the next)"

class EngineEvent(Message):
    """An engine event, handed from the bus into the screen's message queue."""

    def __init__(self, event: Event | Any) -> None:
        super().__init__()
        self.event = event


class SearchScreen(SteadyBelow, StyledAhead, Screen):
    BINDINGS = [
        Binding("escape", "back", "Back", id="back", tooltip="back to the sessions screen"),
        Binding("x", "steer('prune')", "Prune", id="prune", tooltip=STEERING_HELP["prune"]),
        Binding("u", "steer('undo_prune')", "Unprune", id="undo_prune", tooltip=STEERING_HELP["undo_prune"]),
        Binding("e", "steer('expand')", "Expand", id="expand", tooltip=STEERING_HELP["expand"]),
        Binding("p", "steer('pin')", "Pin", id="pin", tooltip=STEERING_HELP["pin"]),
        Binding("i", "steer('inject')", "Idea", id="inject_idea", tooltip=STEERING_HELP["inject"]),
        Binding("E", "steer('edit')", "Edit", id="edit_variant", tooltip=STEERING_HELP["edit"]),
        Binding("f", "steer('profile')", "Profile", id="profile", tooltip=STEERING_HELP["profile"]),
        Binding("P", "steer('pause')", "Pause", id="pause", tooltip=STEERING_HELP["pause"]),
        Binding("S", "steer('stop')", "Stop", id="stop", tooltip=STEERING_HELP["stop"]),
        Binding("w", "steer('export')", "Export", id="export", tooltip=STEERING_HELP["export"]),
        Binding("d", "diff", "Diff", id="diff", tooltip=STEERING_HELP["diff"]),
        Binding("o", "sort", "Sort", id="sort", tooltip="sort the timings: speedup, round, time"),
        Binding("b", "best", "Best", id="goto_best", tooltip=STEERING_HELP["best"]),
        Binding("t", "details", "Tabs", id="details", tooltip="show or hide the Timings and LLM tabs"),
        Binding("1", "tab('tab-timings')", "Timings", id="tab_timings", tooltip="the timings table"),
        Binding("2", "tab('tab-llm')", "LLM", id="tab_llm", tooltip="the LLM calls behind the node"),
        Binding("z", "zoom", "Zoom", id="zoom", tooltip="the focused pane fills the screen (z or Esc: back)"),
        Binding("slash", "filter", "Filter", id="filter",
                tooltip="timings: only the rows with these words (e.g. correct); tree: go to the next"
                        " node that has them; #N: go to node N"),
    ]
    # The footer shows the verbs of the focused pane, most important first, as many as the width
    # holds (every key still works; `?` lists them all). By binding id; a pane not named here gets
    # the tree's. Steering verbs go last while the session is not running (nothing to steer).
    FOOTER = {
        "tree": ["help", "prune", "expand", "inject_idea", "pin", "pause", "stop", "edit_variant", "export",
                 "diff", "goto_best", "zoom", "filter", "undo_prune", "details", "back", "quit"],
        "code": ["help", "edit_variant", "export", "diff", "pause", "stop", "goto_best", "zoom", "details",
                 "back", "quit"],
        "timings": ["help", "sort", "export", "pause", "stop", "filter", "tab_llm", "zoom", "goto_best",
                    "details", "back", "quit"],
        "llm": ["help", "tab_timings", "pause", "stop", "zoom", "details", "back", "quit"],
        "verdict": ["help", "zoom", "edit_variant", "export", "profile", "goto_best", "details", "back",
                    "quit"],
    }
    STEERING_IDS = {"prune", "undo_prune", "expand", "pin", "inject_idea", "edit_variant", "pause", "stop"}

    def __init__(self, session_id: int | None = None, live: bool = False, follow: bool = False,
                 isolation: str | None = None):
        super().__init__()
        self.model = ScreenModel(session_id=session_id, live=live, follow=follow)
        self.isolation = isolation  # how generated code runs, where this process runs it
        self.steering = SteeringKeys(self)  # its steering keys (the `steer` action)
        self._sorted: tuple[str, bool] | None = None  # the timings' chosen order, kept through a filter
        self.selected: int | None = None
        self._why: str | None = None  # why the selected node waits, as the verdict pane says it
        self._tabs = (False, False)  # (shown by `t` or a tab's key, hidden by `t`): _apply_tabs
        self.query_text = ""  # the timings' `/` filter: only the rows it matches
        self._filter_pane = "tree"  # where `/` was pressed
        self._timing_rows: set[int] = set()  # every node the timings table has a row for, filtered or not
        self.show_diff = False
        self.sort_index = -1
        self._progress_dirty = True
        self._plot_dirty = True
        self._polling = False
        self._footer_for: bool | None = None  # whether the footer shows the steering keys as usable

    # -- layout -----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="banner")
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield SearchTree(self.model, id="tree")
                yield ProgressPane(id="progress")
            with Vertical(id="right"):
                yield Static("", id="idea")
                yield CodePane(id="code")
                yield VerdictPane("", id="verdict")
        with TabbedContent(id="details"):
            with TabPane("Timings", id="tab-timings"):
                yield TimingsTable(id="timings")
            with TabPane("LLM", id="tab-llm"):
                yield LLMPane(id="llm")
        yield FilterBar(id="filter")
        yield Static("", id="status-line")
        yield SteadyFooter(compact=True)

    @property
    def store(self) -> Any:
        return self.app.store  # type: ignore[attr-defined]

    @property
    def tree_nodes(self) -> dict[int, TreeNode[int]]:
        """The nodes that have a tree item so far (a large tree makes them as it opens)."""
        return self.query_one(SearchTree).items

    @property
    def code_text(self) -> Text:
        """What the code pane shows now."""
        return self.query_one(CodePane).text

    async def on_mount(self) -> None:
        tree = self.query_one(SearchTree)
        tree.root.expand()
        tree.focus()
        if self.isolation:  # in the header, beside the database's name
            self.sub_title = f"{self.app.sub_title} · isolation: {self.isolation}"
        self._layout(self.app.size.width, self.app.size.height)
        await self._open()
        self.set_interval(TICK_S, self._tick)
        self.watch(self.app, "theme", self._theme_changed, init=False)

    async def take(self, session_id: int, follow: bool = False) -> None:
        """A screen built ahead with no session (KtreeApp.build_ahead) takes this one, before it is
        shown: read from the DB and drawn into widgets already made."""
        assert self.model.session_id is None and not self.model.nodes and self.selected is None
        self.model = ScreenModel(session_id=session_id, follow=follow)
        tree = self.query_one(SearchTree)
        tree.model = self.model
        self._layout(self.app.size.width, self.app.size.height)  # the terminal may have changed since
        await self._open()
        first = tree.get_node_at_line(tree.cursor_line)  # the tree's cursor was on its first line, empty:
        if self.selected is None and first is not None and first.data is not None:  # no highlight came
            self._show(first.data)

    async def _open(self) -> None:
        """A followed or past session: its rows read (then polled where followed)."""
        if self.model.session_id is None or self.model.live:
            return
        await self._read(first=True)
        config = self.model.info.get("config") or {}  # its placement (older records: the config's)
        recorded = (config.get("placement") or {}).get("isolation") or config.get("isolation")
        if recorded and not self.isolation:  # a followed or past session: as it was recorded
            self.isolation = isolation_words(recorded)  # (this view runs nothing: the run's, said so)
            self.sub_title = f"{self.app.sub_title} · ran with isolation: {self.isolation}"
        if self.model.follow:
            self.set_interval(POLL_S, self._poll)

    def go_live(self, isolation: str | None) -> None:
        """A resumed session, shown from the DB while its search was prepared: the search runs in
        this process now, and its events come on the bus (its first reads the tree again)."""
        self.model.live, self.model.follow = True, False
        if isolation:
            self.isolation = isolation
            self.sub_title = f"{self.app.sub_title} · isolation: {isolation}"

    def _theme_changed(self) -> None:
        """Code colours follow the theme (dark or light); the rest is Textual's own styling."""
        if self.selected is not None and self.selected in self.model.nodes:
            self._show(self.selected)

    def on_resize(self, event: Any) -> None:
        self._layout(event.size.width, event.size.height)
        self.refresh_bindings()  # the footer holds as many verbs as the new width does

    def _layout(self, width: int, height: int) -> None:
        """Three layouts by size: compact (under 110x32: the tabs hide until `t`), snug (wide but
        under 42 rows: the progress pane drops its plot and the tabs, verdict and idea shrink, so
        the tree and the code keep 10 lines or more) and full."""
        compact = width < 110 or height < 32
        self.set_class(compact, "compact")
        self.set_class(not compact and height < SNUG_BELOW, "snug")
        self._apply_tabs()
        self._progress_dirty = True  # its height depends on the layout
        tree = self.query_one(SearchTree)
        tree.set_wide(width >= WIDE)
        tree.guide_depth = 2 if compact else 4  # narrow: labels keep more of their width

    # -- the footer -------------------------------------------------------------------------

    def _focused_pane(self) -> str:
        widget = self.focused
        while widget is not None and widget is not self:
            if widget.id in self.FOOTER:
                return str(widget.id)
            widget = widget.parent  # type: ignore[assignment]
        return "tree"

    @property
    def active_bindings(self) -> dict[str, ActiveBinding]:
        """What the footer shows: the focused pane's verbs that fit the width, with the steering
        keys dimmed when the session is not running (nothing to steer)."""
        steerable = self.model.status == "running"
        wanted = self.FOOTER[self._focused_pane()]
        if not steerable:
            wanted = [b for b in wanted if b not in self.STEERING_IDS] + [
                b for b in wanted if b in self.STEERING_IDS]
        out: dict[str, ActiveBinding] = {}
        for key, active in fit_footer(self.app, super().active_bindings, wanted, self.app.size.width).items():
            enabled = active.enabled and (steerable or active.binding.id not in self.STEERING_IDS)
            out[key] = ActiveBinding(active.node, active.binding, enabled, active.tooltip)
        return out

    # -- the one way in: feed the model, redraw what changed --------------------------------

    def feed(self, message: ModelInput) -> Changes:
        """Apply an event or a read of the store to the model, then redraw what it changed."""
        changes = self.model.apply(message)
        self._redraw(changes)
        return changes

    def _redraw(self, changes: Changes) -> None:
        model = self.model
        tree = self.query_one(SearchTree)
        if changes.sources:
            self.query_one(CodePane).forget(changes.sources)
        if changes.added:
            tree.add_nodes(changes.added)
        if changes.relabel:
            tree.relabel(changes.relabel)
        if changes.rows:
            self._timing_rows.update(changes.rows)
            self.query_one(TimingsTable).write_rows(
                (model.nodes[i], model.verdicts.get(i)) for i in changes.rows if self._kept(i))
        if "header" in changes.panes:
            self.query_one("#banner", Static).update(banner_text(model))
        if "status" in changes.panes:
            line, text = self.query_one("#status-line", Static), status_text(model)
            # a layout only where it may change the line's height (it wraps rather than cut)
            line.update(text, layout=line.size.height > 1 or len(text) > line.content_size.width)
        if self._footer_for != (model.status == "running"):  # the steering keys dim once it is not
            self._footer_for = model.status == "running"
            self.refresh_bindings()  # the footer is rebuilt: only when what it shows changes
        self._progress_dirty |= "progress" in changes.panes
        self._plot_dirty |= "plot" in changes.panes
        if self.selected is None and not changes.bulk:  # a live tree: show the reference as it comes
            root = next((i for i in changes.added if model.nodes[i].kind == "root"), None)
            if root is not None:
                self._show(root)
        if self.selected is not None:
            if self.selected in changes.updated:
                self._show(self.selected)
                return
            if changes.updated or "progress" in changes.panes:  # the queues it waits in moved
                self._refresh_why()
            if self.selected in changes.llm:
                self.query_one(LLMPane).invalidate()

    async def _read(self, first: bool = False) -> None:
        """Read the session's rows (all of them, or what changed since the last read) and feed them."""
        sid = self.model.session_id
        if sid is None or self.store is None:  # the app is closing
            return
        rows = await read_rows(self.store, sid, self.model, first=first)
        if rows.session is None:
            if first:
                self.notify(f"no session {sid} in this database", severity="error")
            return
        self.feed(rows)

    async def _poll(self) -> None:
        """Follow a session that another process runs."""
        if self._polling:
            return
        self._polling = True
        try:
            await self._read()
        except Exception:
            if self.store is not None:
                raise
            # else the app closed the store mid-read (quitting): aiosqlite's ValueError or
            # sqlite3.ProgrammingError says so, and there is nothing left to show
        finally:
            self._polling = False

    def receive(self, event: Event) -> None:
        """A bus subscriber: the engine publishes in this loop; the screen handles it in its own turn."""
        self.post_message(EngineEvent(event))

    @on(EngineEvent)
    async def _engine_event(self, message: EngineEvent) -> None:
        if self.feed(message.event).reload:  # a resumed session: its tree so far is in the DB
            await self._read(first=True)
            if self.selected is None and self.model.nodes:  # show something at once, not on a key
                root = next((n.id for n in self.model.nodes.values() if n.kind == "root"), None)
                if root is not None:
                    self.select_node(root)

    # -- the selected node ------------------------------------------------------------------

    def select_node(self, node_id: int, from_table: bool = False) -> None:
        """Select a node: the tree cursor goes to it (opening its ancestors), the timings' cursor to
        its row (unless the user chose it there: moving it back could undo keys typed ahead), and
        the panes show it."""
        if node_id not in self.model.nodes:
            return
        tree = self.query_one(SearchTree)
        item = tree.reveal(node_id)
        if item is not None:
            tree.move_cursor(item)
        if not from_table:
            self.query_one(TimingsTable).point_at(node_id)
        self._show(node_id)

    def _show(self, node_id: int) -> None:
        self.selected = node_id
        node = self.model.nodes[node_id]
        head = self.query_one("#idea", Static)  # its height follows (≤ 4 lines: fewer at small sizes)
        head.set_class(node.kind == "root", "whole")  # the reference's: what runs, never cut
        most = head.styles.max_height
        head.update(idea_text(node, self.model, head.content_region.width or None,
                              int(most.value) if most is not None else None))
        self.query_one(CodePane).show(node, self.model, self.show_diff, self.app.current_theme.dark)
        why = self._why = self.model.wait_reason(node_id)
        self.query_one(VerdictPane).show(node, self.model.verdicts.get(node_id), why,
                                         self.model.library_excluded(node))
        self.query_one(LLMPane).invalidate()
        if self.query_one("#details", TabbedContent).active == "tab-llm":
            self._load_llm(node)

    def _refresh_why(self) -> None:
        """Say again why the selected node waits, where that changed (the queues ahead of it)."""
        node_id = self.selected
        if node_id is None or node_id not in self.model.nodes:
            return
        why = self.model.wait_reason(node_id)
        if why != self._why:
            self._why = why
            node = self.model.nodes[node_id]
            self.query_one(VerdictPane).show(node, self.model.verdicts.get(node_id), why,
                                             self.model.library_excluded(node))

    def _load_llm(self, node: Node) -> None:
        if self.model.session_id is not None:
            self.query_one(LLMPane).load(self.store, self.model.session_id, node, self.model.nodes)

    @on(Tree.NodeHighlighted, "#tree")
    def _tree_highlighted(self, event: Tree.NodeHighlighted) -> None:
        data = event.node.data
        if data is not None and data in self.model.nodes and data != self.selected:
            self.query_one(TimingsTable).point_at(data)
            self._show(data)

    @on(TabbedContent.TabActivated, "#details")
    def _tab(self, event: TabbedContent.TabActivated) -> None:
        self._apply_tabs()
        llm = self.query_one(LLMPane)
        if event.pane.id == "tab-llm" and self.selected is not None and llm.shown_for != self.selected:
            self._load_llm(self.model.nodes[self.selected])

    @on(DataTable.RowHighlighted, "#timings")
    @on(DataTable.RowSelected, "#timings")
    def _row(self, event: DataTable.RowHighlighted | DataTable.RowSelected) -> None:
        """The user moved to a row (TimingsTable posts no highlight for rows the program wrote)."""
        if event.row_key.value is None or not event.data_table.has_focus:
            return
        self.select_node(int(event.row_key.value), from_table=True)

    # -- timings order ----------------------------------------------------------------------

    def _sort(self, column: str, reverse: bool) -> None:
        self._sorted = (column, reverse)
        table = self.query_one(TimingsTable)
        table.sort_by(column, reverse)
        if self.selected is not None:  # the cursor stays on the selected row, wherever it went
            table.point_at(self.selected)
        label = COLUMN_LABELS.get(column, column)
        self.feed(Note(f"timings sorted by {label}{' (descending)' if reverse else ''}"))

    def action_sort(self) -> None:
        self.sort_index = (self.sort_index + 1) % len(SORTS)
        self._sort(*SORTS[self.sort_index])

    @on(DataTable.HeaderSelected, "#timings")
    def _header(self, event: DataTable.HeaderSelected) -> None:
        column = str(event.column_key.value)
        self._sort(column, column in DESCENDING)

    # -- progress (redrawn at most 4 times a second) ----------------------------------------

    def _tick(self) -> None:
        try:
            if self.model.status == "running" or self._progress_dirty:
                self.refresh_progress()
            if self._plot_dirty:
                self._plot_dirty = False
                self.query_one(ProgressPane).show_plot(self.model)
        except NoMatches:  # the app is closing: a screen's panes go before its timer (a spare screen's)
            return

    def refresh_progress(self) -> None:
        """Redraw the progress pane now (the timer does it when something changed)."""
        self._progress_dirty = False
        short = self.has_class("compact") or self.has_class("snug")  # no plot: the pane fits its text
        self.query_one(ProgressPane).show(self.model, compact=short)


    # -- view keys --------------------------------------------------------------------------

    def action_diff(self) -> None:
        self.show_diff = not self.show_diff
        self.query_one(CodePane).set_class(self.show_diff, "diff")  # (the pane's class: see _panes)
        if self.selected is not None:
            self._show(self.selected)

    def action_best(self) -> None:
        if self.model.best_id is None:
            self.notify("no correct variant yet")
            return
        self.select_node(self.model.best_id)

    @property
    def details_shown(self) -> bool:
        """Whether `t` was pressed to show the tabs (an odd number of times, or `1`, `2`)."""
        return self._tabs[0]

    def action_details(self) -> None:
        show, hide = self._tabs
        self._tabs = (not show, not hide)
        self._apply_tabs()

    def action_tab(self, pane: str) -> None:
        """Show the tabs (if hidden) on this one, and focus its content."""
        self._tabs = (True, False)
        self.query_one("#details", TabbedContent).active = pane
        self._apply_tabs()
        self.query_one("#timings" if pane == "tab-timings" else "#llm").focus()

    def _apply_tabs(self) -> None:
        """The tabs' room, from `t` (`self._tabs`), the layout and the tab open. Compact, the tabs
        hide until `t` and take the progress pane's and part of the verdict's room when shown (the
        tree and the code keep usable heights); otherwise `t` hides them. The LLM tab gets more
        room (a prompt needs more than a dozen lines; `z` zooms), snug excepted.

        Set on the panes' own styles, not as classes: a class changed on the tabs restyled every
        widget inside them (~40 ms of `1`, `2` or `t` here); a style set only lays them out again
        (a value set again as it was does nothing). None: the stylesheet's, by layout."""
        show, hide = self._tabs
        compact = self.has_class("compact")
        shown = show if compact else not hide
        details = self.query_one("#details", TabbedContent)
        llm = details.active == "tab-llm"
        details.styles.display = "block" if shown else "none"
        if compact and shown:
            details.styles.height = 11 if llm else 8
        else:
            details.styles.height = "45%" if llm and shown and not self.has_class("snug") else None
        self.query_one(ProgressPane).styles.display = "none" if compact and shown else None
        self.query_one(VerdictPane).styles.height = 4 if compact and shown else None

    def action_zoom(self) -> None:
        """The focused pane (tree, code, timings, LLM calls) fills the screen; again: back."""
        if self.maximized is not None:
            self.minimize()
            return
        pane = self.focused
        while pane is not None and pane is not self and pane.id not in self.FOOTER:
            pane = pane.parent  # type: ignore[assignment]
        if pane is None or pane is self:
            pane = self.query_one(SearchTree)
        self.maximize(pane, container=False)  # type: ignore[arg-type]

    def _watch_maximized(self, previously: Widget | None, maximized: Widget | None) -> None:
        """Zoom as Textual does (only the zoomed pane and the footer are laid out), less its classes
        on the screen and the pane: they restyle the screen, which redraws every widget of it from
        scratch, and the pane, which a Tree takes as a reason to draw itself twice (~100 ms each `z`
        and Esc), for rules (centred, hatched around, undocked) that change nothing here: every pane
        that zooms fills the screen by its own, the verdict's (a few lines tall) once given the room."""
        verdict = self.query_one(VerdictPane)
        if maximized is verdict:
            verdict.styles.height = "1fr"
        elif previously is verdict:
            self._apply_tabs()  # its height as the layout has it

    # -- `/`: filter the timings, find in the tree, jump to a node ---------------------------

    def _fields(self, node_id: int) -> list[object]:
        node = self.model.nodes[node_id]
        return [node.id, node.status, node.kind, node.title, node.language or "", f"round {node.round}",
                "lib library" if node.library else ""]

    def _kept(self, node_id: int) -> bool:
        return not self.query_text or matches(self.query_text, self._fields(node_id))

    def action_filter(self) -> None:
        self._filter_pane = self._focused_pane()
        self.query_one(FilterBar).open()

    def apply_filter(self, value: str) -> None:
        """Enter in the `/` bar (FilterBar: at once, before the next key is read)."""
        bar = self.query_one(FilterBar)
        bar.display = False
        query = value.strip()
        wanted = number(query)
        pane = self.query_one("#timings" if self._filter_pane == "timings" else "#tree")
        self.set_focus(pane)
        if wanted is not None:
            bar.value = ""
            if wanted in self.model.nodes:
                self.select_node(wanted)
            else:
                self.notify(f"no node #{wanted} in this session", severity="warning")
        elif self._filter_pane == "timings":
            self._filter_timings(query)
        elif query:
            self._find(query)

    @on(FilterBar.Closed)
    def _unfilter(self) -> None:
        if self.query_text:
            self._filter_timings("")
        self.query_one("#timings" if self._filter_pane == "timings" else "#tree").focus()

    def _filter_timings(self, query: str) -> None:
        """Only the timings' rows that match (all of them again for an empty query)."""
        self.query_text = query
        table = self.query_one(TimingsTable)
        with self.app.batch_update():
            table.clear()
            table.write_rows((self.model.nodes[i], self.model.verdicts.get(i))
                             for i in sorted(self._timing_rows) if self._kept(i))
            if self._sorted is not None:  # the order chosen before stays
                table.sort_by(*self._sorted)
            if self.selected is not None:
                table.point_at(self.selected)
        shown = f"{table.row_count} of {len(self._timing_rows)} rows"
        self.feed(Note(f"timings filtered by “{query}”: {shown} (/ then Esc: all)" if query
                       else "timings: every row"))

    def _find(self, query: str) -> None:
        """The tree: go to the next node (after the selected one, by number) that matches."""
        found = sorted(i for i in self.model.nodes if matches(query, self._fields(i)))
        if not found:
            self.notify(f"no node matches “{query}”", severity="warning")
            return
        after = [i for i in found if self.selected is None or i > self.selected]
        target = (after or found)[0]
        self.select_node(target)
        self.feed(Note(find_note(query, target, len(found))))

    async def action_steer(self, verb: str) -> None:
        """A steering key (tui.screens.steering): recorded for the engine, or done here."""
        await self.steering.run(verb)

    def palette_commands(self) -> Iterator[SystemCommand]:
        """What the command palette offers on this screen: the steering actions."""
        return self.steering.palette_commands()

    def action_back(self) -> None:
        """Back to the sessions screen (the app knows which: the one below, or a new one)."""
        self.app.open_sessions()  # type: ignore[attr-defined]
