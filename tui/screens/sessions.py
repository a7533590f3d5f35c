"""The sessions screen (`ktree` with no arguments): every session in the database; open one,
resume an interrupted one, delete one, compare two, start a new search."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from engine.store import session_state
from tui.screens.dialogs import Confirm

# What matters most first: at 80 columns the models and strategy are the ones cut off.
COLUMNS = [("id", "#"), ("problem", "problem"), ("status", "status"), ("best", "best"),
           ("variants", "variants"), ("cost", "cost"), ("started", "started"), ("duration", "duration"),
           ("strategy", "strategy"), ("models", "models")]
STATUS_STYLES = {"running": "bold green", "finished": "", "stopped": "yellow", "interrupted": "magenta",
                 "failed": "red"}


class SessionsScreen(Screen):
    BINDINGS = [
        Binding("enter", "open", "Open", id="sessions.open"),
        Binding("n", "new", "New search", id="sessions.new"),
        Binding("R", "resume", "Resume", id="sessions.resume"),
        Binding("m", "mark", "Mark for compare", id="sessions.mark"),
        Binding("c", "compare", "Compare", id="sessions.compare"),
        Binding("delete,D", "delete", "Delete", id="sessions.delete"),
        Binding("r", "reload", "Reload", id="sessions.reload"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.marked: list[int] = []
        self.rows: dict[int, dict[str, Any]] = {}

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Sessions — Enter opens · n new search · m marks two, c compares", id="banner")
        yield DataTable(id="sessions", cursor_type="row", zebra_stripes=True)
        yield Footer(compact=True)

    async def on_mount(self) -> None:
        table = self.query_one("#sessions", DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        await self.action_reload()
        table.focus()
        self.set_interval(2.0, self._refresh_running)

    async def on_screen_resume(self) -> None:
        await self.action_reload()

    async def _refresh_running(self) -> None:
        if not any(r["status"] == "running" for r in self.rows.values()):
            return
        try:
            await self.action_reload()
        except Exception:
            if self.app.store is not None:  # type: ignore[attr-defined]
                raise
            # else the app closed the store mid-read (quitting): nothing left to show

    async def action_reload(self) -> None:
        table = self.query_one("#sessions", DataTable)
        cursor = table.cursor_row
        rows = await self.app.store.sessions()  # type: ignore[attr-defined]
        self.rows = {s["id"]: s for s in rows}
        self.marked = [m for m in self.marked if m in self.rows]
        with self.app.batch_update():
            table.clear()
            for s in rows:
                table.add_row(*self._cells(s), key=str(s["id"]))
            if rows:
                table.move_cursor(row=min(cursor, len(rows) - 1))
        if not rows:
            self.query_one("#banner", Static).update(
                "No sessions yet — n starts a new search (or run `ktree run softmax`)")

    def _cells(self, s: dict[str, Any]) -> list[Any]:
        status = session_status(s)
        end = s["finished_at"] or (time.time() if status == "running" else s.get("heartbeat_at"))
        duration = _duration(end - s["created_at"]) if end else "-"
        models = ", ".join(m.split(":", 1)[-1] for m in s["models"]) or s["provider"]
        if "scripted" in s["provider"].split(","):
            models = f"SCRIPTED {models}"
        mark = "▶ " if s["id"] in self.marked else ""
        cells = {
            "id": Text(f"{mark}{s['id']}", style="bold yellow" if mark else ""), "problem": s["problem"],
            "status": Text(status, style=STATUS_STYLES.get(status, "")),
            "best": "-" if not s.get("best_speedup") else f"{s['best_speedup']:.2f}x",
            "variants": str(s["variants"]), "cost": f"${s['cost_usd']:.2f}",
            "started": datetime.fromtimestamp(s["created_at"]).strftime("%Y-%m-%d %H:%M"),
            "duration": duration, "strategy": s["strategy"], "models": models[:28],
        }
        return [cells[key] for key, _ in COLUMNS]

    def _current(self) -> dict[str, Any] | None:
        table = self.query_one("#sessions", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return self.rows.get(int(key)) if key is not None else None

    @on(DataTable.RowSelected, "#sessions")
    async def _selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            await self._open(int(event.row_key.value))

    async def action_open(self) -> None:
        row = self._current()
        if row is not None:
            await self._open(row["id"])

    async def _open(self, session_id: int) -> None:
        from tui.screens.search import SearchScreen

        row = self.rows.get(session_id)
        follow = row is not None and session_status(row) == "running"
        await self.app.push_screen(SearchScreen(session_id=session_id, follow=follow))

    def action_new(self) -> None:
        from tui.screens.new_search import NewSearchScreen

        self.app.push_screen(NewSearchScreen())

    async def action_resume(self) -> None:
        row = self._current()
        if row is None:
            return
        if session_status(row) != "interrupted":
            self.notify(f"session {row['id']} is {session_status(row)}: only an interrupted one resumes",
                        severity="warning")
            return
        from engine.launch import ResumeRequest, UsageError, prepare_resume

        store = self.app.store  # type: ignore[attr-defined]
        try:  # on the app's own store, in its loop
            prepared = await prepare_resume(ResumeRequest(session=row["id"]), store)
        except UsageError as exc:
            self.notify(f"cannot resume: {exc}", severity="error")
            return
        await self.app.start_search(prepared.search)  # type: ignore[attr-defined]

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
            table.update_cell(str(sid), "id", self._cells(r)[0], update_width=True)  # "▶ 12" fits
        self.notify(f"marked for compare: {', '.join(map(str, self.marked)) or 'none'}")

    def action_compare(self) -> None:
        from tui.screens.compare import CompareScreen

        if len(self.marked) != 2:
            self.notify("mark two sessions with m first", severity="warning")
            return
        self.app.push_screen(CompareScreen(*self.marked))

    def action_delete(self) -> None:
        row = self._current()
        if row is None:
            return
        if session_status(row) == "running":
            self.notify(f"session {row['id']} is running: stop it first", severity="warning")
            return

        async def done(yes: bool | None) -> None:
            if yes:
                await self.app.store.delete_session(row["id"])  # type: ignore[attr-defined]
                self.notify(f"deleted session {row['id']}")
                await self.action_reload()

        self.app.push_screen(Confirm(f"Delete session {row['id']} ({row['problem']}, {row['variants']}"
                                     " variants) and everything recorded under it?"), done)

    def palette_commands(self) -> Iterator[SystemCommand]:
        for action, title, help_text in [
            ("open", "Open session", "open the selected session"),
            ("new", "New search", "start a search from a form"),
            ("resume", "Resume session", "continue an interrupted session"),
            ("mark", "Mark session", "mark the selected session for compare"),
            ("compare", "Compare sessions", "compare the two marked sessions"),
            ("delete", "Delete session", "delete the selected session (asks first)"),
        ]:
            yield SystemCommand(title, help_text, partial(self.run_action, action))


def session_status(row: dict[str, Any]) -> str:
    """As the store reports it: a 'running' session whose engine stopped beating is interrupted."""
    return session_state({**row, "status": row.get("recorded_status", row["status"])})


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"
