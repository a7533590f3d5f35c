"""The TUI items of "the first ten minutes" (a newcomer ran `ktree run softmax`, then every key):
Esc on the run screen and in the edit dialog, panes filled after a resume, 80x24 with the tabs
shown, the `?` overlay, j/k, the tab keys, the footer by focused pane, why a node waits. Fake
sessions throughout (tests/fake_session.py): nothing compiles."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from textual.widgets import Static, TabbedContent, TextArea

from engine.events import EventBus, SessionStarted
from engine.store import Store
from tests.test_tui_model import node
from tests.tui_helpers import fake_db, wait_until
from tui.app import KtreeApp
from tui.model import ScreenModel
from tui.screens.dialogs import EditSource
from tui.screens.help import HelpScreen
from tui.screens.search import SearchScreen
from tui.screens.sessions import SessionsScreen


class FakeSearch:
    """What a search factory returns: `run()` publishes what the engine would (a resumed session's
    SessionStarted), then waits until cancelled (quit)."""

    def __init__(self, bus: EventBus, session: dict | None) -> None:
        self.bus, self.session = bus, session

    async def run(self) -> dict:
        if self.session is not None:
            s = self.session
            await self.bus.publish(SessionStarted(
                session_id=s["id"], problem=s["problem"], backend=s["backend"], provider=s["provider"],
                scripted=True, sizes=s["sizes"], config=s["config"], resumed=True))
        await asyncio.Event().wait()
        return {}


async def run_app(db: Path, resumed: int | None = None) -> KtreeApp:
    session = None
    if resumed is not None:
        store = await Store.open(db)
        session = await store.session(resumed)
        await store.close()
    return KtreeApp(db_path=db, search_factory=lambda store, bus: FakeSearch(bus, session))


async def test_escape_on_the_run_screen_goes_to_the_sessions_screen(tmp_path: Path):
    db, _ = await fake_db(tmp_path / "k.db", 12)
    app = await run_app(db)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, SearchScreen) and len(app.screen_stack) == 2  # `ktree run`: first
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, SessionsScreen)
        await pilot.press("q")


async def test_escape_cancels_the_edit_dialog(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 20, status="running")
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        vid = next(n.id for n in screen.model.nodes.values() if n.kind == "variant" and n.source)
        screen.select_node(vid)
        await pilot.press("E")
        assert isinstance(app.screen, EditSource)
        assert app.screen.query_one(TextArea).has_focus  # the editor would eat a plain Esc
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is screen
        assert not screen.model.pending  # nothing recorded
        await pilot.press("q")


async def test_panes_filled_at_once_after_a_resume(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 20, status="interrupted")
    app = await run_app(db, resumed=sid)
    async with app.run_test(size=(140, 44)) as pilot:
        screen = app.screen
        assert isinstance(screen, SearchScreen)
        await wait_until(pilot, lambda: len(screen.model.nodes) > 10, timeout=20)
        await pilot.pause()
        assert screen.selected is not None  # no key pressed
        assert "softmax" in str(screen.query_one("#banner", Static).content)
        assert screen.code_text.plain.strip()
        assert "reference" in str(screen.query_one("#verdict", Static).content)
        await pilot.press("q")


async def test_80x24_with_the_tabs_shown(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 40)
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = app.screen
        await pilot.press("t")
        await pilot.pause()
        tree, code = screen.query_one("#tree"), screen.query_one("#code")
        assert screen.query_one("#details").display
        assert tree.content_size.height >= 8 and code.content_size.height >= 5
        best = screen.model.best_id
        screen.select_node(best)
        await pilot.pause()
        line = tree.render_line(tree.cursor_line - int(tree.scroll_offset.y)).text
        assert "★ best" in line and f"#{best} " in line  # readable, not cut before the mark
        keys = [k for k in screen.query("FooterKey") if k.display]
        palette = keys.pop()  # ^p palette, at the right end
        for key in keys:  # every key shown whole, none under the palette's: no stray character
            assert key.region.right <= palette.region.x, (key.region, palette.region)
        await pilot.press("q")


async def test_help_overlay_lists_every_binding(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 12)
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        ids = {binding_id for _, binding_id, _ in app.screen.rows}
        assert {b.id for b in SearchScreen.BINDINGS} <= ids
        assert {"help", "quit", "tree.down", "tree.up"} <= ids
        assert ("j", "tree.down", "Down") in app.screen.rows
        assert ("x", "prune", "cancel the selected node's queued work; never select it") in app.screen.rows
        await pilot.press("question_mark")
        assert app.screen is screen
        await pilot.press("question_mark", "escape")
        assert app.screen is screen
        await pilot.press("q")


async def test_j_k_and_the_tab_keys(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 12)
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = app.screen
        tree = screen.query_one("#tree")
        start = tree.cursor_line
        await pilot.press("j", "j")
        assert tree.cursor_line == start + 2
        await pilot.press("k")
        assert tree.cursor_line == start + 1
        assert not screen.query_one("#details").display  # compact: hidden until asked for
        await pilot.press("1")
        await pilot.pause()
        tabs = screen.query_one("#details", TabbedContent)
        assert tabs.display and tabs.active == "tab-timings" and screen.query_one("#timings").has_focus
        assert "o" in {k for k, b in screen.active_bindings.items() if b.binding.show}  # sort, here
        await pilot.press("2")
        await pilot.pause()
        assert tabs.active == "tab-llm" and screen.query_one("#llm").has_focus
        await pilot.press("q")


async def test_focus_ring_follows_tab(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 12)
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        tree, code = screen.query_one("#tree"), screen.query_one("#code")
        focused_colour = tree.styles.border_top[1]
        await pilot.press("tab")
        await pilot.pause()
        assert code.has_focus and code.styles.border_top[1] == focused_colour
        assert tree.styles.border_top[1] != focused_colour
        await pilot.press("q")


async def test_steering_keys_dimmed_unless_running(tmp_path: Path):
    for status, enabled in (("finished", False), ("running", True)):
        db, sid = await fake_db(tmp_path / f"{status}.db", 12, status=status)
        app = KtreeApp(db_path=db, session_id=sid)
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.pause()
            bindings = app.screen.active_bindings
            assert bindings["x"].enabled is enabled and bindings["d"].enabled
            assert "session" in str(app.screen.query_one("#status-line", Static).content)
            await pilot.press("q")


def test_why_a_node_waits():
    model = ScreenModel(session_id=7)
    model.info.update(backend="cpu")
    for n in (node(1, None, "root", "reference"), node(2, 1, "idea", "ok"), node(3, 2, status="waiting"),
              node(4, 2, status="compiling")):
        model.nodes[n.id] = n
    assert "cpu backend" in model.wait_reason(3) and "builds queued or running: 1" in model.wait_reason(3)
    assert model.wait_reason(4) is None
    model.info.update(backend="cuda")
    model.progress = {"gpu_queue": 2, "devices": [{"busy": True}, {"busy": True}]}
    assert model.wait_reason(3) == "waiting for a free GPU: 2 of 2 GPUs busy, 1 ahead of it in the GPU queue"


async def test_a_marked_session_shows_its_id_too(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 12)
    app = KtreeApp(db_path=db)
    async with app.run_test(size=(120, 24)) as pilot:
        await pilot.pause()
        await pilot.press("m")
        await pilot.pause()
        table = app.screen.query_one("#sessions")
        assert str(table.get_cell(str(sid), "id")) == f"▶ {sid}"
        assert table.columns["id"].content_width >= len(f"▶ {sid}")  # not cut to the mark
        await pilot.press("q")


async def test_an_ideas_description_wraps(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 12)
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = app.screen
        idea = next(n for n in screen.model.nodes.values() if n.kind == "idea")
        screen.model.nodes[idea.id] = replace(idea, text="word " * 60)
        screen.select_node(idea.id)
        await pilot.pause()
        code = screen.query_one("#code")
        assert len(code.lines) > 1 and max(len(s.text.rstrip()) for s in code.lines) <= code.content_size.width
        await pilot.press("q")


async def test_sort_says_the_columns_label(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 12)
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        await pilot.press("o", "o", "o")
        await pilot.pause()
        status = str(app.screen.query_one("#status-line", Static).content)
        assert status == f"session {sid} · timings sorted by ms"  # the column's label, not time_ms
        await pilot.press("q")
