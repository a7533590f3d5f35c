"""The sessions screen: every session in the database; Enter opens one read-only."""

from __future__ import annotations

from datetime import datetime

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

COLUMNS = [("id", "#"), ("problem", "problem"), ("backend", "backend"), ("provider", "provider"),
           ("started", "started"), ("variants", "variants"), ("best", "best"), ("cost", "cost"),
           ("status", "status")]


class SessionsScreen(Screen):
    BINDINGS = [
        Binding("enter", "open", "Open", id="open", show=True),
        Binding("r", "reload", "Reload", id="reload"),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Past sessions — Enter opens one (read-only)", id="banner")
        yield DataTable(id="sessions", cursor_type="row", zebra_stripes=True)
        yield Footer()

    async def on_mount(self) -> None:
        table = self.query_one("#sessions", DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        await self.action_reload()
        table.focus()

    async def action_reload(self) -> None:
        table = self.query_one("#sessions", DataTable)
        table.clear()
        rows = await self.app.store.sessions()  # type: ignore[attr-defined]
        for s in rows:
            best = f"{s['best_speedup']:.2f}x" if s.get("best_speedup") else "-"
            table.add_row(
                s["id"], s["problem"], s["backend"], s["provider"],
                datetime.fromtimestamp(s["created_at"]).strftime("%Y-%m-%d %H:%M"),
                s["variants"], best, f"${s['cost_usd']:.2f}", s["status"], key=str(s["id"]),
            )
        if not rows:
            self.query_one("#banner", Static).update(
                "No sessions yet — start one with `ktree run softmax`")

    @on(DataTable.RowSelected, "#sessions")
    async def _selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            await self._open(int(event.row_key.value))

    async def action_open(self) -> None:
        table = self.query_one("#sessions", DataTable)
        if table.row_count:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
            if key is not None:
                await self._open(int(key))

    async def _open(self, session_id: int) -> None:
        from tui.screens.search import SearchScreen

        await self.app.push_screen(SearchScreen(session_id=session_id, live=False))
