"""The ktree Textual app: a sessions screen, and a search screen for a live, followed or past session."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from textual import events
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import ModalScreen, Screen
from textual.widgets import Input, TextArea
from textual.worker import Worker, WorkerState

from engine.record.events import EventBus
from engine.record.store import Store, StoreError, session_state
from tui import warm
from tui.collector import IdleCollector
from tui.model import isolation_words
from tui.screens.ahead import draw_ahead, lay_out_ahead
from tui.screens.compare import CompareScreen
from tui.screens.dialogs import Confirm
from tui.screens.help import HelpScreen
from tui.screens.new_search import NewSearchScreen
from tui.screens.search import SearchScreen
from tui.screens.sessions import SessionsScreen

SearchFactory = Callable[[Store, EventBus], Any]
SPARE = "search-ahead"  # the names the screens built ahead are installed under
SPARE_COMPARE = "compare-ahead"
PREPARED = "session-ahead"
COMPARE_AHEAD_DELAY_S = 0.15  # two sessions marked: their comparison drawn ahead after this long
SESSION_AHEAD_DELAY_S = 0.3  # the cursor on an interrupted session this long: its screen drawn ahead
POSTED_S = 0.15  # a screen given what it shows: what its widgets posted (sizes, a table's) is done by then
ScreenT = TypeVar("ScreenT", bound=Screen)


class KtreeApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "ktree"
    BINDINGS = [Binding("q", "quit", "Quit", id="quit"),
                Binding("question_mark", "help", "Keys", id="help")]

    def __init__(self, db_path: Path, search_factory: SearchFactory | None = None,
                 session_id: int | None = None, follow: bool = False,
                 keymap: dict[str, str] | None = None):
        super().__init__()
        if "TEXTUAL_ANIMATIONS" not in os.environ:  # (a user's own choice holds)
            # no sliding: a tab's underline slid for 0.3 s after `1` or `2`, a frame each 16 ms
            # drawn while the next key waited; a terminal tool has no use for the motion
            self.animation_level = "none"
        self.db_path = db_path
        self.search_factory = search_factory
        self.open_session_id = session_id
        self.follow = follow
        self.store: Store | None = None
        self.search: Any = None
        self.search_summary: dict[str, Any] | None = None
        self.bus = EventBus()
        self.initial_keymap = keymap or {}
        self._asking_quit = False
        self.warm_up: Worker[None] | None = None  # tui.warm's thread, once the first screen is drawn
        self.collector = IdleCollector()  # full garbage collections in idle time, not in a key press
        self._spare: SearchScreen | None = None  # a search screen built ahead, for the next R or Enter
        self._spare_compare: CompareScreen | None = None  # ... and a compare screen, for the next `c`
        self._building = asyncio.Lock()
        self._prepared: SearchScreen | None = None  # a spare given the session under the cursor
        self._session_wanted: int | None = None  # the last session asked to be prepared
        self._compare_wanted: tuple[int, int] | None = None  # ... and pair (prepare_compare)

    async def on_mount(self) -> None:
        if self.initial_keymap:
            self.set_keymap(self.initial_keymap)
        try:
            self.store = await Store.open(self.db_path)
        except StoreError as exc:
            self.exit(return_code=2, message=f"ktree: error: {exc}")
            return
        self.sub_title = self.db_path.name
        self.collector.hold()
        self.set_interval(0.5, self.collector.tick)
        self.call_after_refresh(self._warm_up)
        if self.search_factory is not None:
            await self.start_search(self.search_factory)
            return
        await self.push_screen(SessionsScreen())
        if self.open_session_id is not None:
            session = await self.store.sessions.get(self.open_session_id)
            if session is None:
                missing = f"no session {self.open_session_id} in {self.db_path}"
                self.exit(return_code=2, message=f"ktree: error: {missing}")
                return
            running = session_state(session) == "running"
            await self.push_screen(SearchScreen(session_id=self.open_session_id, follow=self.follow or running))

    def _warm_up(self) -> None:
        """Once the first screen is drawn: what the first `n` or `R` would wait for, while the
        person reads the screen."""
        self.warm_up = self.run_worker(self._warm, name="warm-up", group="warm-up", exit_on_error=False)

    async def _warm(self) -> None:
        """The slow imports and the form's problem in a thread (tui.warm), then the new-search form
        built (composed, mounted and laid out, not shown): `n` only shows it; then the screens
        `R`, Enter and `c` fill (build_ahead)."""
        await asyncio.to_thread(warm.warm)
        form = self._new_search_form()
        if not form.is_running:
            _, mounted = self._get_screen(form)
            await mounted
            await self._draw_ahead(form)
        self.collector.freeze()  # the imports and the form live on: no full pass walks them again
        await self._build_spare()

    def build_ahead(self, delay: float = 0.0) -> None:
        """A search screen and a compare screen built (composed, mounted and laid out, no session
        yet) for the next R or Enter and the next `c`, in `delay` seconds, where there are none:
        making them is ~0.1 s of the loop's time, spent while a person reads the screen rather
        than after the key."""
        if (self._spare is None or self._spare_compare is None) and not any(
                w.group == "ahead" and w.is_running for w in self.workers):
            self.run_worker(self._build_spare(delay), name="screens-ahead", group="ahead", exit_on_error=False)

    async def _build_spare(self, delay: float = 0.0) -> None:
        if delay:
            await asyncio.sleep(delay)
        async with self._building:  # the warm-up's and a screen's asks, one after the other
            if self._spare is None and self.store is not None:
                self._spare = await self._built_ahead(SearchScreen(), SPARE)
            if self._spare_compare is None and self.store is not None:
                self._spare_compare = await self._built_ahead(CompareScreen(), SPARE_COMPARE)

    async def _built_ahead(self, screen: ScreenT, name: str) -> ScreenT:
        self.install_screen(screen, name)  # closed with the app if it is never shown
        _, mounted = self._get_screen(screen)
        await mounted
        lay_out_ahead(screen, self.size)
        return screen

    async def _draw_ahead(self, screen: Screen) -> None:
        """A screen built ahead and given what it shows, drawn once what its widgets posted is done."""
        await asyncio.sleep(POSTED_S)
        draw_ahead(screen, self.size)

    async def _search_screen(self, session_id: int, follow: bool = False) -> SearchScreen:
        """The screen of a past or followed session: the one prepared for it where there is one
        (prepare_session), else the one built ahead where there is one."""
        async with self._building:  # (a preparation under way finishes first; one still to come is not needed)
            self._session_wanted = None
            prepared, self._prepared = self._prepared, None
            if prepared is not None:
                self.uninstall_screen(PREPARED)
                if prepared.model.session_id == session_id and prepared.model.follow == follow:
                    return prepared
                await prepared.remove()
        spare, self._spare = self._spare, None
        if spare is None:
            return SearchScreen(session_id=session_id, follow=follow)
        self.uninstall_screen(SPARE)  # an ordinary screen from now on: removed once closed
        await spare.take(session_id, follow=follow)
        return spare

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.InputEvent):
            self.collector.input()
        await super().on_event(event)

    # -- navigation: screens ask the app by name; no screen imports another ---------------------

    async def open_session(self, session_id: int, follow: bool = False) -> None:
        """Show a session's search screen (followed from the DB where it is running)."""
        await self.push_screen(await self._search_screen(session_id, follow=follow))

    def open_sessions(self) -> None:
        """Back to the sessions screen: the one below, or a new one where the search screen came
        first (`ktree run`; a live search goes on, and shows as running there)."""
        if len(self.screen_stack) > 2:
            self.pop_screen()
        else:
            self.switch_screen(SessionsScreen())

    def open_new_search(self) -> None:
        """The new-search form: one, kept (with what was typed in it) from one `n` to the next."""
        self.push_screen(self._new_search_form())

    def _new_search_form(self) -> NewSearchScreen:
        if not self.is_screen_installed("new-search"):
            self.install_screen(NewSearchScreen(), "new-search")
        return self.get_screen("new-search", NewSearchScreen)

    async def open_compare(self, a: int, b: int) -> None:
        """Two sessions side by side: on the compare screen built ahead where there is one, already
        holding these two where they were marked a moment before (prepare_compare) and neither
        was running then (a running one is read again)."""
        async with self._building:  # (a preparation under way finishes first; one still to come is not needed)
            self._compare_wanted = None
            spare, self._spare_compare = self._spare_compare, None
        if spare is None:
            await self.push_screen(CompareScreen(a, b))
            return
        self.uninstall_screen(SPARE_COMPARE)  # an ordinary screen from now on: removed once closed
        if spare.ids != (a, b) or spare.live():
            await spare.take(a, b)
        await self.push_screen(spare)

    def prepare_compare(self, a: int, b: int) -> None:
        """Two sessions just marked: read and drawn into the compare screen built ahead (~0.2 s of
        the loop's time on this host: the table, the chart, both best kernels highlighted) while a
        person reads, so that `c` only shows it. Marks changed again soon after: the last pair
        (a preparation is never cancelled halfway: one no longer wanted does nothing)."""
        self._compare_wanted = (a, b)
        self.run_worker(self._prepare_compare(a, b), name="compare-ahead", group="compare-ahead",
                        exit_on_error=False)

    async def _prepare_compare(self, a: int, b: int) -> None:
        await asyncio.sleep(COMPARE_AHEAD_DELAY_S)
        async with self._building:
            if self._compare_wanted != (a, b):
                return
            if self._spare_compare is None and self.store is not None:
                self._spare_compare = await self._built_ahead(CompareScreen(), SPARE_COMPARE)
            spare = self._spare_compare
            if spare is not None and spare.ids != (a, b):
                await spare.take(a, b)
                await self._draw_ahead(spare)

    def prepare_session(self, session_id: int, follow: bool = False) -> None:
        """An interrupted (or running: `follow`) session under the sessions screen's cursor a
        moment: its recorded tree read and drawn into the search screen built ahead (~0.2 s of the
        loop's time on this host), so that R or Enter only shows it. The cursor moved on soon
        after: the last one."""
        self._session_wanted = session_id
        self.run_worker(self._prepare_session(session_id, follow), name="session-ahead", group="session-ahead",
                        exit_on_error=False)

    async def _prepare_session(self, session_id: int, follow: bool) -> None:
        await asyncio.sleep(SESSION_AHEAD_DELAY_S)
        async with self._building:
            if self._session_wanted != session_id or self.store is None:
                return
            if self._prepared is not None:
                if self._prepared.model.session_id == session_id and self._prepared.model.follow == follow:
                    return
                old, self._prepared = self._prepared, None
                self.uninstall_screen(PREPARED)
                await old.remove()
            screen, self._spare = self._spare, None
            if screen is None:
                screen = await self._built_ahead(SearchScreen(), PREPARED)
            else:
                self.uninstall_screen(SPARE)
                self.install_screen(screen, PREPARED)
            self._prepared = screen
            await screen.take(session_id, follow=follow)
            await self._draw_ahead(screen)
        self.build_ahead()  # a spare again, for another session

    async def resume_session(self, session_id: int) -> None:
        """Resume an interrupted session: its recorded tree at once (read from the DB), and the
        search going on in the same screen once prepared (in a thread: the problem, the sandbox
        probe and the providers take a second or more)."""
        screen = await self._search_screen(session_id)
        await self.push_screen(screen)
        self.run_worker(self._resume(screen, session_id), name="resume", group="resume", exit_on_error=False)

    async def _resume(self, screen: SearchScreen, session_id: int) -> None:
        from engine.launch import ResumeRequest, UsageError, prepare_resume

        try:  # on the app's own store, in its loop
            prepared = await prepare_resume(ResumeRequest(session=session_id), self.store)  # type: ignore[arg-type]
        except UsageError as exc:
            self.notify(f"cannot resume: {exc}", severity="error")
            if self.screen is screen:
                self.pop_screen()
            return
        if screen not in self.screen_stack:  # left before the search was ready: it does not start
            await prepared.evaluator.close()
            self.notify(f"session {session_id} not resumed (its screen was closed first)", severity="warning")
            return
        await self.start_search(prepared.search, screen=screen)

    async def start_search(self, factory: SearchFactory, screen: SearchScreen | None = None) -> bool:
        """Run a new search in this process and show it live (in `screen`, a resumed session's,
        where given); False (and a notice) if it cannot start."""
        assert self.store is not None
        try:
            search = factory(self.store, self.bus)
        except Exception as exc:  # a usage error found late: say it in one line
            if not self.screen_stack or len(self.screen_stack) <= 1:
                self.exit(return_code=2, message=f"ktree: error: {exc}")
            else:
                self.notify(f"cannot start: {exc}", severity="error")
            return False
        self.search = search
        isolation = isolation_label(getattr(search, "evaluator", None))
        if screen is None:
            screen = SearchScreen(live=True, isolation=isolation)
            await self.push_screen(screen)
        else:
            screen.go_live(isolation)
        self.bus.subscribe(screen.receive)
        self.run_worker(self._run_search(), name="search", group="search", exit_on_error=False)
        return True

    async def _run_search(self) -> None:
        search = self.search
        try:
            self.search_summary = await search.run()
        finally:  # its worker processes (on a GPU, a CUDA context each) end with it, not with the app
            await search.evaluator.close()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A search that dies of an unexpected error says so on screen (its session row says
        failed or interrupted, recorded by the search itself)."""
        if event.worker.group == "search" and event.state == WorkerState.ERROR:
            self.notify(f"the search stopped: {event.worker.error}", severity="error", timeout=30)

    def action_help(self) -> None:
        """The help overlay: every key of the current screen (not over another overlay)."""
        if not isinstance(self.screen, ModalScreen):
            self.push_screen(HelpScreen(self.screen))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The palette offers the app's commands plus the current screen's own (steering keys on
        the search screen, open/delete/compare on the sessions screen)."""
        yield from super().get_system_commands(screen)
        commands = getattr(screen, "palette_commands", None)
        if commands is not None:
            yield from commands()

    async def action_quit(self) -> None:
        """Quit; a search running in this process is stopped first (its session recorded as
        interrupted), so `q` asks before it does that."""
        if not self._search_running():
            await self._quit()
            return
        if self._asking_quit:
            return

        async def done(yes: bool | None) -> None:
            self._asking_quit = False
            if yes:
                await self._quit()

        self._asking_quit = True
        await self.push_screen(Confirm("The search is running. Stop it and quit? (It is recorded as"
                                       " interrupted; `ktree` resumes it later.)"), done)

    async def _on_key(self, event: events.Key) -> None:
        """Type-ahead: a key read before the focus moved was handed to the widget focused then (the
        tree, under `/ #29`), which passes it up unhandled. A printable one goes on to the text field
        focused since (the `/` bar, a dialog's field), as it would have typed one at a time; any
        other runs the bindings of the focus as it is now (Enter: the bar's)."""
        focused = self.focused
        editable = isinstance(focused, Input) or (isinstance(focused, TextArea) and not focused.read_only)
        if event.is_printable and editable:
            event.stop()
            event.prevent_default()  # (not Textual's App._on_key too: it runs the bindings)
            # Typed here, in turn with the keys around it (posted to the field, it would come after
            # an Enter the app runs at once); the field's own handler keeps its restrictions.
            await focused._on_key(event)  # type: ignore[union-attr]

    async def action_help_quit(self) -> None:
        """Ctrl-C quits as `q` does (asking first while a search runs here): Textual's own only said
        which key quits. In a text field it still copies (the field's binding comes first)."""
        await self.action_quit()

    def _search_running(self) -> bool:
        return any(w.group == "search" and w.is_running for w in self.workers)

    async def _quit(self) -> None:
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
        self.collector.release()
        await self._close_store()

    async def _close_store(self) -> None:
        if self.store is not None:
            store, self.store = self.store, None
            await store.close()


def isolation_label(evaluator: Any) -> str | None:
    """How generated code is isolated in a search run by this process, in a few words for the
    header (the CLI says it on stderr before the screen draws, where no one reads it); None where
    the evaluator does not say (a Ray cluster: each node picks its own)."""
    from engine.launch import isolation_level

    level = isolation_level(evaluator)
    return isolation_words(level) if level else None


def keymap_from_config(raw: dict[str, Any]) -> dict[str, str]:
    """The `[bindings]` table of the config file: binding id -> key(s), e.g. `prune = "delete"`.
    Raises ValueError (one line) on a malformed entry."""
    table = raw.get("bindings") or {}
    if not isinstance(table, dict):
        raise ValueError("[bindings] must be a table of binding id = \"key\" entries")
    keymap = {}
    for binding_id, keys in table.items():
        if isinstance(keys, list) and all(isinstance(k, str) for k in keys):
            keys = ",".join(keys)
        if not isinstance(keys, str) or not keys.strip():
            raise ValueError(f"[bindings] {binding_id}: expected a key name like \"ctrl+k\", got {keys!r}")
        keymap[str(binding_id)] = keys
    return keymap
