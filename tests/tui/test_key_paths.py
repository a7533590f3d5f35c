"""What a key of the search screen does on its way to the frame (issue 46, item 4: `d`, `t`, `1`,
`2`, `?`, Enter on a session over 100 ms in scripts/bench-tui --part keys). Not timed tests: each
asserts on the work a key causes, which is what made it slow."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from textual.widgets import DataTable

from tests.tui_helpers import app_on, fake_db, running_db, screen_lines, wait_until
from tui.screens.help import HelpScreen
from tui.screens.search import SearchScreen
from tui.screens.sessions import SessionsScreen


def restyled(app: Any) -> list[Any]:
    """Every node the app is asked to restyle from now on (with its whole subtree)."""
    seen: list[Any] = []
    update = app.update_styles

    def spy(node: Any = None, **kw: Any) -> None:
        seen.append(node)
        update(node, **kw)

    app.update_styles = spy
    return seen


async def test_view_keys_restyle_their_panes_not_the_screen(tmp_path: Path):
    """`d`, `t`, `1`, `2` changed a class on the screen, and Textual restyled and redrew every
    widget of it (~100 ms a key): the class goes on the panes it changes."""
    db, sid = await fake_db(tmp_path / "k.db", 30)
    async with app_on(db, session_id=sid, size=(120, 35)) as (app, pilot):
        screen = app.screen
        assert isinstance(screen, SearchScreen)
        variant = max(i for i, n in screen.model.nodes.items() if n.kind == "variant" and n.source)
        screen.select_node(variant)
        await pilot.pause()
        seen = restyled(app)
        details = screen.query_one("#details")
        await pilot.press("d")
        assert screen.show_diff and screen.query_one("#code").has_class("diff")
        await pilot.press("t")
        assert screen.details_shown and not details.display  # full layout: `t` hides the tabs
        await pilot.press("t", "2")
        assert details.display and details.active == "tab-llm"
        await pilot.press("1")
        assert details.active == "tab-timings"
        await pilot.pause()
        assert screen not in seen and app.screen not in seen
        assert details not in seen  # the LLM tab's room: a style on the tabs, not a class (restyled them)
        await pilot.press("q")


async def test_the_llm_tab_takes_its_room_without_restyling_the_tabs(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 30)
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
        screen = app.screen
        assert isinstance(screen, SearchScreen)
        details = screen.query_one("#details")
        rows = details.outer_size.height
        seen = restyled(app)
        await pilot.press("2")
        await pilot.pause()
        assert details.outer_size.height >= 20 > rows  # 45 % of the screen, was 12 rows
        await pilot.press("1")
        await pilot.pause()
        assert details.outer_size.height == rows
        assert details not in seen and screen not in seen
        await pilot.resize_terminal(80, 24)  # compact: `2` shows the tabs, 11 rows
        await pilot.pause()
        await pilot.press("2")
        await pilot.pause()
        assert details.display and details.outer_size.height == 11
        await pilot.press("q")


async def test_compact_tabs_still_take_the_progress_panes_room(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 30)
    async with app_on(db, session_id=sid, size=(80, 24)) as (app, pilot):
        screen = app.screen
        details, progress = screen.query_one("#details"), screen.query_one("#progress")
        assert not details.display and progress.display
        await pilot.press("t")
        await pilot.pause()
        assert details.display and not progress.display
        await pilot.press("t")
        await pilot.pause()
        assert not details.display and progress.display
        await pilot.press("q")


async def test_help_lists_each_key_with_its_id_and_what_it_does(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 12)
    async with app_on(db, session_id=sid, size=(120, 35)) as (app, pilot):
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        lines = [" ".join(line.split()) for line in screen_lines(app)]
        assert any("Keys — search screen" in line for line in lines)
        assert any("key id (rebind in [bindings]) what it does" in line for line in lines)
        assert any("x prune cancel the selected node's queued work;" in line for line in lines)  # (wrapped)
        await pilot.press("escape", "q")


async def test_a_dialog_or_the_help_is_laid_out_once_when_it_opens(tmp_path: Path):
    """Textual laid a pushed screen out on resume and again on the Resize that follows at the
    same size: two full frames, each drawing the dimmed screen below through its tint."""
    from textual.screen import Screen

    laid_out: list[Any] = []
    original = Screen._refresh_layout

    def spy(screen: Any, *args: Any, **kw: Any) -> None:
        laid_out.append((type(screen).__name__, sys._getframe(1).f_code.co_name))  # (by whom)
        original(screen, *args, **kw)

    db, sid = await running_db(tmp_path / "k.db", 12)  # (running: E opens its editor)
    async with app_on(db, session_id=sid, follow=True, size=(120, 35)) as (app, pilot):
        screen = app.screen
        screen.select_node(max(i for i, n in screen.model.nodes.items() if n.kind == "variant" and n.source))
        await pilot.pause()
        Screen._refresh_layout = spy  # type: ignore[method-assign]
        try:
            for key, name in (("question_mark", "HelpScreen"), ("E", "EditSource")):
                laid_out.clear()
                await pilot.press(key)
                await pilot.pause()
                await pilot.pause()
                assert type(app.screen).__name__ == name
                assert (name, "_on_screen_resume") in laid_out  # laid out when shown ...
                assert (name, "_screen_resized") not in laid_out, laid_out  # ... not again at that size
                await pilot.press("escape")
                await pilot.pause()
        finally:
            Screen._refresh_layout = original  # type: ignore[method-assign]
        await pilot.press("q")


async def test_enter_on_a_running_session_shows_the_screen_drawn_ahead(tmp_path: Path):
    """The cursor resting on a running session: its followed screen is read and drawn ahead (as an
    interrupted one's is for R), and Enter only shows it."""
    db, sid = await running_db(tmp_path / "k.db", 30)
    async with app_on(db, size=(120, 35)) as (app, pilot):
        sessions = app.screen
        assert isinstance(sessions, SessionsScreen)
        table = sessions.query_one("#sessions", DataTable)
        table.move_cursor(row=table.get_row_index(str(sid)))
        await wait_until(pilot, lambda: app._prepared is not None and app._prepared.model.session_id == sid)
        prepared = app._prepared
        assert prepared.model.follow
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is prepared and prepared.model.follow and prepared.selected is not None
        await pilot.press("escape")
        await wait_until(pilot, lambda: app._prepared is not None and app._prepared is not prepared
                         and app._prepared.model.session_id == sid)  # back: drawn ahead again
        await pilot.press("q")


async def test_a_focus_move_relabels_the_footers_keys_as_a_recompose_would(tmp_path: Path):
    """`1`, `2`, Tab change the footer's verbs (18 on the tree, 13 on the timings, 9 on the LLM
    tab): the footer relabels the keys it has and removes or adds the difference (before: every
    key unmounted, new ones mounted and styled), and reads as Textual's own footer would."""
    from textual.widgets import Footer

    db, sid = await running_db(tmp_path / "k.db", 12)
    async with app_on(db, session_id=sid, follow=True, size=(160, 50)) as (app, pilot):
        screen = app.screen
        footer = screen.query_one(Footer)
        def keys() -> list[Any]:  # (the command palette's comes last, whatever the pane)
            return [w for w in footer.children if not w.has_class("-command-palette")]

        for key in ("1", "2", "tab", "1"):
            before = keys()
            shown = screen_lines(app)[-1]
            await pilot.press(key)
            await pilot.pause()
            await pilot.pause()
            relabelled = screen_lines(app)[-1]
            kept = min(len(before), len(keys()))  # (a pane has more verbs than another)
            assert keys()[:kept] == before[:kept]  # the same keys, relabelled
            footer.call_later(footer.recompose)  # what Textual's footer shows (run by the footer)
            await pilot.pause()
            await pilot.pause()
            assert screen_lines(app)[-1] == relabelled
            assert relabelled != shown  # (each of these keys changes the verbs)
        await pilot.press("q")


async def test_the_progress_timer_firing_while_the_app_closes_is_quiet(tmp_path: Path):
    """A screen's panes are removed before its timer stops when the app closes: a tick between the
    two raised NoMatches (a spare screen built ahead, seen in the suite as a failed test)."""
    from tui.widgets.progress import ProgressPane

    db, sid = await running_db(tmp_path / "k.db", 12)
    async with app_on(db, session_id=sid, follow=True, size=(120, 35)) as (app, pilot):
        screen = app.screen
        assert isinstance(screen, SearchScreen)
        await screen.query_one(ProgressPane).remove()
        screen._progress_dirty = screen._plot_dirty = True
        screen._tick()  # no pane: nothing to draw, no error
        await pilot.press("q")
