"""The sessions screen (`ktree` with no arguments): every session in the database; open one,
resume an interrupted one, delete one, compare two, start a new search."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual import on
from textual.app import ComposeResult, SystemCommand
from textual.binding import ActiveBinding, Binding
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static

from engine.record.store import session_state
from tui.keymap import fit_footer
from tui.screens.ahead import SteadyBelow
from tui.screens.dialogs import Confirm
from tui.screens.filtering import FilterBar, matches, number
from tui.widgets.banner import MARKS
from tui.widgets.footer import SteadyFooter

# What matters most first: a narrow screen leaves out the columns that do not fit whole, from the
# right (at 80 columns: the start, duration, strategy and models); # and problem keep status and
# best beside them (the problem cell is never wider than PROBLEM_WIDTH).
COLUMNS = [("id", "#"), ("problem", "problem"), ("status", "status"), ("best", "best"),
           ("variants", "variants"), ("cost", "cost"), ("started", "started"), ("duration", "duration"),
           ("strategy", "strategy"), ("models", "models")]
PROBLEM_WIDTH = 24
SCRIPTED_STYLE = MARKS["scripted"][1]
MODELS_WIDTH = 28
AHEAD_DELAY_S = 0.2  # back on this screen: a search screen is built ahead after this long (once drawn)
STATUS_STYLES = {"running": "bold green", "finished": "", "stopped": "yellow", "interrupted": "magenta",
                 "failed": "red"}


class SessionsScreen(SteadyBelow, Screen):
    BINDINGS = [
        Binding("enter", "open", "Open", id="sessions.open"),
        Binding("n", "new", "New search", id="sessions.new"),
        Binding("R", "resume", "Resume", id="sessions.resume"),
        Binding("m", "mark", "Mark", tooltip="Mark a session for compare (two, then c)", id="sessions.mark"),
        Binding("c", "compare", "Compare", id="sessions.compare"),
        Binding("delete,D", "delete", "Delete", id="sessions.delete"),
        Binding("r", "reload", "Reload", id="sessions.reload"),
        Binding("p", "pause_suite", "Pause/resume suite", id="sessions.pause_suite"),
        Binding("x", "prune_problem", "Prune problem from suite", id="sessions.prune_problem"),
        Binding("j", "cursor(1)", "Down", id="sessions.down", show=False),
        Binding("k", "cursor(-1)", "Up", id="sessions.up", show=False),
        Binding("g", "cursor_to(0)", "First", id="sessions.first", show=False),
        Binding("G", "cursor_to(-1)", "Last", id="sessions.last", show=False),
        Binding("slash", "filter", "Filter", id="sessions.filter",
                tooltip="only the sessions whose row has these words (e.g. running), or #N to jump"),
    ]
    # The footer's keys, most important first: as many as the width holds (`?` lists every one). Mark
    # and Compare side by side (at 80 columns Compare showed, with no visible way to mark).
    FOOTER = ["sessions.open", "sessions.new", "help", "quit", "sessions.resume", "sessions.mark",
              "sessions.compare", "sessions.delete", "sessions.filter", "sessions.reload",
              "sessions.pause_suite", "sessions.prune_problem"]
    BANNER = "Sessions — Enter opens · n new search · m marks two, c compares"

    def __init__(self) -> None:
        super().__init__()
        self.marked: list[int] = []
        self.rows: dict[int, dict[str, Any]] = {}
        self.suites: dict[int, dict[str, Any]] = {}  # suite id -> its row, with "line" (fast_p)
        self.query_text = ""  # the `/` filter: only the rows it matches
        self.lines: list[tuple[str, dict[str, Any]]] = []  # the table's rows: (key, column key -> cell)
        self._drawn: tuple[list[tuple[str, dict[str, Any]]], list[str]] | None = None  # (lines, columns) shown
        self.reloads = 0  # reads of the database shown so far (scripts/bench-tui waits on it)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(self.BANNER, id="banner")
        yield DataTable(id="sessions", cursor_type="row", zebra_stripes=True)
        yield FilterBar(id="filter")
        yield SteadyFooter(compact=True)

    async def on_mount(self) -> None:
        table = self.query_one("#sessions", DataTable)
        await self.action_reload()
        table.focus()
        self.set_interval(2.0, self._refresh_running)

    @property
    def active_bindings(self) -> dict[str, ActiveBinding]:
        """The footer's keys: the most used ones that fit the width (no key runs under the palette's)."""
        return fit_footer(self.app, super().active_bindings, self.FOOTER, self.app.size.width)

    def on_resize(self) -> None:
        self.refresh_bindings()  # the footer holds as many keys as the new width does
        if self.lines:
            self._draw()  # as many columns as the new width holds

    def action_cursor(self, step: int) -> None:
        """j / k: the cursor one row down / up (as the arrows)."""
        table = self.query_one("#sessions", DataTable)
        if step > 0:
            table.action_cursor_down()
        else:
            table.action_cursor_up()

    def action_cursor_to(self, row: int) -> None:
        """g / G: the first / the last row."""
        table = self.query_one("#sessions", DataTable)
        if table.row_count:
            table.move_cursor(row=row % table.row_count)

    @on(DataTable.RowHighlighted, "#sessions")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        """On a suite (or one of its problems) the banner holds its whole fast_p line."""
        if not self.rows and not self.suites:
            return
        suite = self._current_suite()
        banner = self.BANNER if suite is None else f"suite {suite['id']} {suite['name']}: {suite['line']}"
        self.query_one("#banner", Static).update(banner)
        self._prepare_current()

    def _prepare_current(self) -> None:
        """The session under the cursor drawn ahead of R or Enter, where it is interrupted (its
        recorded tree) or running (followed, as Enter opens it)."""
        row = self._current()
        status = session_status(row) if row is not None else None
        if row is not None and status in ("interrupted", "running"):
            self.app.prepare_session(row["id"], follow=status == "running")  # type: ignore[attr-defined]

    async def on_screen_resume(self) -> None:
        await self.action_reload()
        self._prepare_current()  # (the cursor rests where it was: no highlight says so)
        self.app.build_ahead(delay=AHEAD_DELAY_S)  # type: ignore[attr-defined]  # for the next R or Enter
        if len(self.marked) == 2:  # still marked: their comparison drawn ahead again, for the next `c`
            self.app.prepare_compare(*self.marked)  # type: ignore[attr-defined]

    async def _refresh_running(self) -> None:
        if not any(r["status"] == "running" for r in [*self.rows.values(), *self.suites.values()]):
            return
        try:
            await self.action_reload()
        except Exception:
            if self.app.store is not None:  # type: ignore[attr-defined]
                raise
            # else the app closed the store mid-read (quitting): nothing left to show

    async def action_reload(self) -> None:
        store = self.app.store  # type: ignore[attr-defined]
        rows = await store.sessions.all()  # (each with the engine's recorded run time: run_time)
        self.rows = {s["id"]: s for s in rows}
        self.suites = {}
        for suite in await store.suites.all():  # each with its running fast_p line
            suite["line"], suite["short"], suite["geomean"] = await suite_line(store, suite["id"])
            self.suites[suite["id"]] = suite
        self.marked = [m for m in self.marked if m in self.rows]
        lines: list[tuple[str, dict[str, Any]]] = []
        shown: set[int] = set()
        for s in rows:  # newest first; a suite's sessions under it, where its newest one is
            suite_id = s.get("suite_id")
            if suite_id is None or suite_id not in self.suites:
                if self._wanted(self._cells(s)):
                    lines.append((str(s["id"]), self._cells(s)))
            elif suite_id not in shown:
                shown.add(suite_id)
                members = sorted((r for r in rows if r.get("suite_id") == suite_id), key=lambda r: r["id"])
                head = self._suite_cells(self.suites[suite_id])
                kept = [m for m in members
                        if self._wanted({"id": head["id"], "problem": head["problem"], **self._cells(m, True)})]
                if kept:
                    lines.append((f"suite-{suite_id}", head))
                lines.extend((str(m["id"]), self._cells(m, indent=True)) for m in kept)
        self.lines = lines
        self._draw()  # at the cursor as it is now: keys pressed during the read moved it
        if not rows:
            self.query_one("#banner", Static).update(
                "No sessions yet — n starts a new search (or run `ktree run softmax`)")
        self.reloads += 1

    def _draw(self, cursor: int | None = None) -> None:
        """Fill the table with `lines`, in the columns that fit the width whole; left as it is
        where it shows those already (back from a session: rewriting it costs a frame)."""
        table = self.query_one("#sessions", DataTable)
        cursor = table.cursor_row if cursor is None else cursor
        keys = fitting_columns([cells for _, cells in self.lines], self.app.size.width)
        if self._drawn == (self.lines, keys):
            return
        self._drawn = (self.lines, keys)
        with self.app.batch_update():
            if [str(c.key.value) for c in table.ordered_columns] != keys:
                table.clear(columns=True)
                labels = dict(COLUMNS)
                for key in keys:
                    table.add_column(labels[key], key=key)
            else:
                table.clear()
            for row_key, cells in self.lines:
                table.add_row(*(cells[k] for k in keys), key=row_key)
            if table.row_count:
                table.move_cursor(row=min(cursor, table.row_count - 1))

    def _wanted(self, cells: dict[str, Any]) -> bool:
        return not self.query_text or matches(self.query_text, list(cells.values()))

    def action_filter(self) -> None:
        self.query_one(FilterBar).open()

    async def apply_filter(self, value: str) -> None:
        """Enter in the `/` bar (FilterBar: at once, before the next key is read): a number jumps
        to that session; words keep only the rows that have them."""
        bar = self.query_one(FilterBar)
        table = self.query_one("#sessions", DataTable)
        wanted = number(value)
        bar.display = False
        self.set_focus(table)
        if wanted is not None:
            bar.value = ""
            if str(wanted) not in table.rows:
                self.query_text = ""
                await self.action_reload()
            if str(wanted) in table.rows:
                table.move_cursor(row=table.get_row_index(str(wanted)))
            else:
                self.notify(f"no session {wanted}", severity="warning")
            return
        self.query_text = value.strip()
        await self.action_reload()
        if self.query_text:
            self.notify(f"filter “{self.query_text}”: {table.row_count} rows (/ then Esc: all)")

    @on(FilterBar.Closed)
    async def _unfilter(self) -> None:
        self.query_text = ""
        self.query_one("#sessions", DataTable).focus()
        await self.action_reload()

    def _suite_cells(self, suite: dict[str, Any]) -> dict[str, Any]:
        """A suite's row: its name where a problem's goes (cut to the column, so it never widens
        it), its best as the geometric mean of its problems' best speedups (the correct ones,
        KernelBench's), its duration from its start to its end (or now), its score in short in the
        last column; the whole fast_p line is in the banner while the cursor is on the suite or
        one of its problems."""
        members = [r for r in self.rows.values() if r.get("suite_id") == suite["id"]]
        cells = {
            "id": Text(f"S{suite['id']}", style="bold cyan"),
            "problem": Text(fit(f"suite {suite['name']}", PROBLEM_WIDTH), style="bold"),
            "status": Text(suite["status"], style=STATUS_STYLES.get(suite["status"], "")),
            "best": "-" if suite["geomean"] is None else f"geo {suite['geomean']:.2f}x",
            "variants": str(sum(r["variants"] for r in members)),
            "cost": f"${sum(r['cost_usd'] for r in members):.2f}",
            "started": datetime.fromtimestamp(suite["created_at"]).strftime("%Y-%m-%d %H:%M"),
            "duration": run_time(suite, suite["status"]), "strategy": f"{len(suite['problems'])} problems",
            "models": fit(suite["short"], MODELS_WIDTH),
        }
        return cells

    def _cells(self, s: dict[str, Any], indent: bool = False) -> dict[str, Any]:
        status = session_status(s)
        models = ", ".join(m.split(":", 1)[-1] for m in s["models"]) or s["provider"]
        mark = "▶ " if s["id"] in self.marked else ""
        cells = {
            "id": Text(f"{mark}{s['id']}", style="bold yellow" if mark else ""),
            "problem": problem_cell(s["problem"], "scripted" in s["provider"].split(","), indent),
            "status": Text(status, style=STATUS_STYLES.get(status, "")),
            "best": "-" if not s.get("best_speedup") else f"{s['best_speedup']:.2f}x",
            "variants": str(s["variants"]), "cost": f"${s['cost_usd']:.2f}",
            "started": datetime.fromtimestamp(s["created_at"]).strftime("%Y-%m-%d %H:%M"),
            "duration": run_time(s, status), "strategy": s["strategy"], "models": fit(models, MODELS_WIDTH),
        }
        return cells

    def _current(self) -> dict[str, Any] | None:
        table = self.query_one("#sessions", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return self.rows.get(int(key)) if key is not None and key.isdigit() else None

    def _current_suite(self) -> dict[str, Any] | None:
        """The suite under the cursor: its own row, or one of its problems."""
        table = self.query_one("#sessions", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value or ""
        if key.startswith("suite-"):
            return self.suites.get(int(key.removeprefix("suite-")))
        row = self._current()
        return self.suites.get(row.get("suite_id")) if row is not None else None  # type: ignore[arg-type]

    async def action_pause_suite(self) -> None:
        """Pause every running problem of the suite (or resume them all, if paused), through the
        commands table: the engine running the suite applies them."""
        from engine.record import control

        suite = self._current_suite()
        if suite is None:
            self.notify("not a suite: p pauses the suite under the cursor", severity="warning")
            return
        store = self.app.store  # type: ignore[attr-defined]
        running = [r for r in self.rows.values()
                   if r.get("suite_id") == suite["id"] and session_status(r) == "running"]
        if not running:
            self.notify(f"suite {suite['id']} has no running problem", severity="warning")
            return
        paused = await _paused(store, running[0]["id"])
        command = control.Resume() if paused else control.Pause()
        for r in running:
            await store.commands.add(r["id"], *control.encode(command))
        self.notify(f"suite {suite['id']}: {'resume' if paused else 'pause'} sent to {len(running)} problems")

    async def action_prune_problem(self) -> None:
        """Stop one problem of a running suite (a Stop: its evaluations in flight finish, the rest is
        cancelled); the others go on."""
        from engine.record import control

        row = self._current()
        if row is None or row.get("suite_id") is None:
            self.notify("not a suite's problem: x prunes the problem under the cursor", severity="warning")
            return
        if session_status(row) != "running":
            self.notify(f"{row['problem']} is {session_status(row)}: nothing to prune", severity="warning")
            return
        await self.app.store.commands.add(row["id"], *control.encode(control.Stop()))  # type: ignore[attr-defined]
        self.notify(f"pruned {row['problem']} from suite {row['suite_id']}")

    @on(DataTable.RowSelected, "#sessions")
    async def _selected(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value
        if key is not None and key.isdigit():
            await self._open(int(key))
        elif key is not None and key.startswith("suite-"):
            suite = self.suites.get(int(key.removeprefix("suite-")))
            if suite is not None:
                self.notify(f"suite {suite['id']}: {suite['line']} (Enter on a problem opens its search)")

    async def action_open(self) -> None:
        row = self._current()
        if row is not None:
            await self._open(row["id"])

    async def _open(self, session_id: int) -> None:
        row = self.rows.get(session_id)
        follow = row is not None and session_status(row) == "running"
        await self.app.open_session(session_id, follow=follow)  # type: ignore[attr-defined]

    def action_new(self) -> None:
        self.app.open_new_search()  # type: ignore[attr-defined]

    async def action_resume(self) -> None:
        row = self._current()
        if row is None:
            return
        if session_status(row) != "interrupted":
            self.notify(f"session {row['id']} is {session_status(row)}: only an interrupted one resumes",
                        severity="warning")
            return
        await self.app.resume_session(row["id"])  # type: ignore[attr-defined]

    async def action_mark(self) -> None:
        row = self._current()
        if row is None:
            return
        if row["id"] in self.marked:
            self.marked.remove(row["id"])
        else:
            self.marked = [*self.marked[-1:], row["id"]]
        table = self.query_one("#sessions", DataTable)
        for sid, r in self.rows.items():
            if str(sid) in table.rows:
                table.update_cell(str(sid), "id", self._cells(r)["id"], update_width=True)  # "▶ 12" fits
        # Briefly: the ▶ beside the ids says it too, and a toast's 5 s covered the compare screen's code.
        self.notify(f"marked for compare: {', '.join(map(str, self.marked)) or 'none'}", timeout=1.5)
        if len(self.marked) == 2:  # drawn ahead of `c`
            self.app.prepare_compare(*self.marked)  # type: ignore[attr-defined]

    async def action_compare(self) -> None:
        if len(self.marked) != 2:
            self.notify("mark two sessions with m first", severity="warning")
            return
        problems = [self.rows[m]["problem"] for m in self.marked if m in self.rows]
        if len(set(problems)) == 2:  # allowed, but not a like-for-like comparison: said
            self.notify(f"two different problems ({' and '.join(problems)}): each speedup is against its own"
                        " reference", severity="warning")
        await self.app.open_compare(*self.marked)  # type: ignore[attr-defined]

    def action_delete(self) -> None:
        row = self._current()
        if row is None:
            return
        if session_status(row) == "running":
            self.notify(f"session {row['id']} is running: stop it first", severity="warning")
            return

        async def done(yes: bool | None) -> None:
            if yes:
                await self.app.store.sessions.delete(row["id"])  # type: ignore[attr-defined]
                if row["id"] in self.marked:  # (nothing left to compare it by)
                    self.marked.remove(row["id"])
                self.notify(f"deleted session {row['id']}")
                await self.action_reload()

        suite = row.get("suite_id")
        member = (f" It is suite S{suite}'s {row['problem']}: the suite then counts that problem as not"
                  " started, and its score falls." if suite is not None else "")
        self.app.push_screen(Confirm(f"Delete session {row['id']} ({row['problem']}, {row['variants']}"
                                     f" variants) and everything recorded under it?{member}"), done)

    def palette_commands(self) -> Iterator[SystemCommand]:
        for action, title, help_text in [
            ("open", "Open session", "open the selected session"),
            ("new", "New search", "start a search from a form"),
            ("resume", "Resume session", "continue an interrupted session"),
            ("mark", "Mark session", "mark the selected session for compare"),
            ("compare", "Compare sessions", "compare the two marked sessions"),
            ("delete", "Delete session", "delete the selected session (asks first)"),
            ("pause_suite", "Pause/resume suite", "pause (or resume) every running problem of the suite"),
            ("prune_problem", "Prune problem", "stop the selected problem of a running suite"),
        ]:
            yield SystemCommand(title, help_text, partial(self.run_action, action))


async def suite_line(store: Any, suite_id: int) -> tuple[str, str, float | None]:
    """The suite's running fast_p line (KernelBench's, over all its problems so far), the same in
    short for its row, and its geometric-mean speedup (None while no problem is correct)."""
    from engine.search.suite import scores, suite_results

    sc = scores(await suite_results(store, suite_id))
    fp = sc["fast_p_eager"]
    geo = sc["geomean_speedup_eager"]
    correct = f"{sc['correct']}/{sc['problems']} correct"
    return (f"{correct} · fast_1 {fp['1']:.2f} · fast_1.5 {fp['1.5']:.2f}"
            f" · fast_2 {fp['2']:.2f} · geomean {'-' if geo is None else f'{geo:.2f}x'}",
            f"{correct} · fast_1 {fp['1']:.2f}", geo)


def fitting_columns(rows: list[dict[str, Any]], width: int) -> list[str]:
    """The columns (keys, in COLUMNS' order) that fit `width` whole, each as wide as its widest
    cell or label; from the left, a column that does not fit is left out (a narrower one after it
    may still fit). Room is kept for the scrollbar and for a mark ("▶ ") on the id."""
    room, keys = width - 2, []
    for key, label in COLUMNS:
        need = max([cell_len(label), *(cell_len(str(r[key])) for r in rows)]) + 2  # the cell padding
        if key == "id":
            need += 2
        if need <= room:
            room -= need
            keys.append(key)
    return keys


def problem_cell(problem: str, scripted: bool, indent: bool = False) -> Text:
    """A session's problem, marked SCRIPTED as the search screen's header marks it (canned answers,
    no LLM): in the problem column, which every width shows (the models column, where the mark
    was, is the first to go at 80 columns, and beside a suite's score at 120)."""
    lead = "  └ " if indent else ""
    mark = "SCRIPTED " if scripted else ""
    cell = Text(fit(f"{lead}{mark}{problem}", PROBLEM_WIDTH))
    if scripted:
        cell.stylize(SCRIPTED_STYLE, len(lead), len(lead) + len(mark) - 1)
    return cell


def fit(text: str, width: int) -> str:
    """`text` in at most `width` columns, its cut marked."""
    return text if len(text) <= width else text[: width - 1] + "…"


async def _paused(store: Any, session_id: int) -> bool:
    """As the last pause / resume command given to the session left it."""
    kinds = [c["kind"] for c in await store.commands.of(session_id) if c["kind"] in ("pause", "resume")]
    return bool(kinds) and kinds[-1] == "pause"


def session_status(row: dict[str, Any]) -> str:
    """As the store reports it: a 'running' session whose engine stopped beating is interrupted."""
    return session_state({**row, "status": row.get("recorded_status", row["status"])})


def run_time(row: dict[str, Any], status: str) -> str:
    """How long a session or a suite ran: the engine's recorded run time (`run_s`: over all its
    runs, as the search's progress pane says it), else to its end, to now while it runs, to its
    last heartbeat when it was interrupted; "-" where none of these is known."""
    if status != "running" and row.get("run_s") is not None:
        return _duration(row["run_s"])
    end = row.get("finished_at") or (time.time() if status == "running" else row.get("heartbeat_at"))
    return _duration(end - row["created_at"]) if end else "-"


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"
