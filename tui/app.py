"""The ktree Textual app: a sessions screen, and a search screen for a live or past session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.app import App
from textual.binding import Binding
from textual.worker import Worker, WorkerState

from engine.events import EventBus
from engine.store import Store, StoreError

SearchFactory = Callable[[Store, EventBus], Any]


class KtreeApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "ktree"
    BINDINGS = [Binding("q", "quit", "Quit", id="quit")]

    def __init__(self, db_path: Path, search_factory: SearchFactory | None = None):
        super().__init__()
        self.db_path = db_path
        self.search_factory = search_factory
        self.store: Store | None = None
        self.search: Any = None
        self.search_summary: dict[str, Any] | None = None
        self.bus = EventBus()

    async def on_mount(self) -> None:
        from tui.screens.search import SearchScreen
        from tui.screens.sessions import SessionsScreen

        try:
            self.store = await Store.open(self.db_path)
        except StoreError as exc:
            self.exit(2, message=f"ktree: error: {exc}")
            return
        self.sub_title = str(self.db_path)
        if self.search_factory is None:
            await self.push_screen(SessionsScreen())
            return
        try:
            self.search = self.search_factory(self.store, self.bus)
        except Exception as exc:  # a usage error found late: say it in one line
            self.exit(2, message=f"ktree: error: {exc}")
            return
        screen = SearchScreen(live=True)
        self.bus.subscribe(screen.receive)
        await self.push_screen(screen)
        self.run_worker(self._run_search(), name="search", group="search", exit_on_error=False)

    async def _run_search(self) -> None:
        self.search_summary = await self.search.run()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A search that dies of an unexpected error says so on screen (its session row says
        failed or interrupted, recorded by the search itself)."""
        if event.worker.group == "search" and event.state == WorkerState.ERROR:
            self.notify(f"the search stopped: {event.worker.error}", severity="error", timeout=30)

    async def action_quit(self) -> None:
        """Stop a running search first, so its session is recorded as interrupted."""
        for worker in self.workers:
            if worker.group == "search" and worker.is_running:
                worker.cancel()
                try:
                    await worker.wait()
                except Exception:
                    pass
        await self._close_store()
        self.exit(0)

    async def on_unmount(self) -> None:
        await self._close_store()

    async def _close_store(self) -> None:
        if self.store is not None:
            store, self.store = self.store, None
            await store.close()
