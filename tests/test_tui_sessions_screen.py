"""What a new user hit on the screens (issue 30): the sessions table with a suite at 160 and 80
columns, footers that fit, j/k/g/G, q on a running search, the footer's verbs, the isolation level
in the header, the LLM pane's prompts, the "why it waits" text, filters, zoom, undo of a prune."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from textual.widgets import DataTable

from engine.store import Store
from tests.fake_session import write_fake_session
from tests.tui_helpers import fake_db
from tui.app import KtreeApp
from tui.screens.dialogs import Confirm
from tui.screens.search import SearchScreen
from tui.screens.sessions import SessionsScreen
from tui.widgets.timings import COLUMNS

SUITE_NAME = "level1-all-the-problems-of-kernelbench-level-one"


async def suite_db(path: Path) -> tuple[Path, int, list[int]]:
    """A plain session, then a suite (a long name) of three problems, one of them running."""
    store = await Store.open(path)
    await write_fake_session(store, 20)
    suite = await store.create_suite(name=SUITE_NAME, problems=["/a.py", "/b.py", "/c.py"], config={})
    members = []
    for name in ("relu", "matmul_with_a_rather_long_problem_name", "softmax"):
        sid = await store.create_session(problem=name, problem_path=f"/{name}.py", backend="cpu",
                                         strategy="tree", provider="scripted", models=["scripted:synthetic"],
                                         config={}, sizes={}, suite_id=suite)
        members.append(sid)
    await store.update_session(members[0], status="finished", best_speedup=1.5, finished_at=time.time())
    await store.update_session(members[1], pid=os.getpid(), heartbeat_at=time.time() + 3600)
    await store.close()
    return path, suite, members


def visible_columns(table: DataTable) -> list[str]:
    """The columns drawn whole within the table's width, left to right."""
    room, out = table.scrollable_content_region.width, []
    for column in table.ordered_columns:
        room -= column.get_render_width(table)
        if room < 0:
            break
        out.append(str(column.key.value))
    return out


def footer_fits(screen) -> None:  # noqa: ANN001
    keys = [k for k in screen.query("FooterKey") if k.display]
    palette = keys.pop()  # ^p palette, at the right end
    assert keys, "no key in the footer"
    for key in keys:  # every key shown whole, none under the palette's
        assert key.region.right <= palette.region.x, (key.description, key.region, palette.region)


async def test_sessions_with_a_suite_at_160_columns(tmp_path: Path):
    db, suite, members = await suite_db(tmp_path / "k.db")
    app = KtreeApp(db_path=db)
    async with app.run_test(size=(160, 30)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        table = screen.query_one("#sessions", DataTable)
        assert table.columns["problem"].content_width <= 24
        assert visible_columns(table) == [str(c.key.value) for c in table.ordered_columns]  # none cut
        row = [str(c) for c in table.get_row(f"suite-{suite}")]
        assert row[1].startswith("suite level1") and row[1].endswith("…")
        started = row[6]
        assert len(started) == len("2026-01-01 12:00") and started[4] == "-"
        assert " correct · fast_1 " in row[-1]  # its score, in short
        assert "fast_1 " in str(screen.query_one("#banner").content)  # the whole line, on the suite
        footer_fits(screen)
        await pilot.press("q")


async def test_sessions_at_80x24_keep_status_and_best(tmp_path: Path):
    db, suite, members = await suite_db(tmp_path / "k.db")
    app = KtreeApp(db_path=db)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = app.screen
        table = screen.query_one("#sessions", DataTable)
        assert visible_columns(table)[:4] == ["id", "problem", "status", "best"]
        assert str(table.get_cell(str(members[0]), "best")) == "1.50x"
        footer_fits(screen)
        shown = {b.binding.id for b in screen.active_bindings.values() if b.binding.show}
        assert {"sessions.new", "sessions.resume", "help", "quit"} <= shown
        await pilot.press("q")


async def test_j_k_g_G_in_the_sessions_list(tmp_path: Path):
    db, suite, members = await suite_db(tmp_path / "k.db")
    app = KtreeApp(db_path=db)
    async with app.run_test(size=(120, 24)) as pilot:
        await pilot.pause()
        table = app.screen.query_one("#sessions", DataTable)
        assert table.row_count == 5 and table.cursor_row == 0
        await pilot.press("j", "j")
        assert table.cursor_row == 2
        await pilot.press("k")
        assert table.cursor_row == 1
        await pilot.press("G")
        assert table.cursor_row == 4
        await pilot.press("g")
        assert table.cursor_row == 0
        await pilot.press("q")


def shown_ids(screen) -> set[str]:  # noqa: ANN001
    return {b.binding.id for b in screen.active_bindings.values() if b.binding.show}


async def test_the_footer_shows_the_verbs_of_the_focused_pane(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 40, status="running")
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert {"pause", "stop", "inject_idea", "edit_variant", "export", "prune"} <= shown_ids(screen)  # tree
        screen.query_one("#code").focus()
        await pilot.pause()
        assert {"edit_variant", "export", "pause", "stop"} <= shown_ids(screen)
        await pilot.press("1")  # the timings
        await pilot.pause()
        assert {"sort", "export", "pause", "stop"} <= shown_ids(screen)
        footer_fits(screen)
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        screen.query_one("#tree").focus()
        await pilot.pause()
        assert {"pause", "stop", "inject_idea", "prune"} <= shown_ids(screen)
        footer_fits(screen)
        await pilot.press("q")


class Forever:
    """A search that runs until cancelled (no compile): what `q` sees while a search is live."""

    def __init__(self) -> None:
        self.cancelled = False
        evaluator = type("Evaluator", (), {})()

        async def close() -> None:
            pass

        evaluator.close = close
        self.evaluator = evaluator

    async def run(self) -> dict:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return {}


async def test_q_on_a_running_search_asks_first(tmp_path: Path):
    search = Forever()
    app = KtreeApp(db_path=tmp_path / "k.db", search_factory=lambda store, bus: search)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, Confirm)
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, SearchScreen) and not search.cancelled
        await pilot.press("q", "y")
        await pilot.pause()
    assert search.cancelled and app.return_value == 0


async def test_the_header_says_the_isolation_level(tmp_path: Path):
    from textual.widgets._header import HeaderTitle

    from engine.evaluate.sandbox import Sandbox

    for level, shown in (("basic", "isolation: basic (no filesystem or network isolation)"),
                         ("strict", "isolation: strict")):
        search = Forever()
        search.evaluator.sandbox = Sandbox(level)
        if level == "strict":  # as where bubblewrap runs (the level is resolved when asked)
            search.evaluator.sandbox = type("Strict", (), {"level": "strict"})()
        app = KtreeApp(db_path=tmp_path / f"{level}.db", search_factory=lambda store, bus, s=search: s)
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.pause()
            assert shown in app.screen.sub_title
            assert shown in str(app.screen.query_one(HeaderTitle).render())
            await pilot.press("q", "y")


async def test_the_llm_tab_has_room_and_any_pane_zooms(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 20)
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        screen.select_node(next(n.id for n in screen.model.nodes.values() if n.kind == "variant"))
        await pilot.press("2")
        await app.workers.wait_for_complete()
        await pilot.pause()
        llm = screen.query_one("#llm")
        assert llm.has_focus and llm.content_size.height >= 16  # was 8 lines
        assert screen.query_one("#tree").content_size.height >= 10  # the tree keeps room
        await pilot.press("z")
        await pilot.pause()
        assert screen.maximized is llm and llm.content_size.height >= 40
        await pilot.press("z")
        await pilot.pause()
        assert screen.maximized is None
        screen.query_one("#code").focus()
        await pilot.press("z")
        await pilot.pause()
        assert screen.maximized is screen.query_one("#code")
        await pilot.press("escape")  # Esc leaves the zoom first, then goes back
        await pilot.pause()
        assert screen.maximized is None and app.screen is screen
        await pilot.press("q")


async def test_why_it_waits_follows_the_queues(tmp_path: Path):
    import sqlite3

    from engine.events import Progress

    db, sid = await fake_db(tmp_path / "k.db", 20, status="running")
    with sqlite3.connect(db) as conn:
        vid = conn.execute("SELECT MAX(id) FROM nodes WHERE kind = 'variant'").fetchone()[0]
        conn.execute("DELETE FROM evaluations WHERE node_id = ?", (vid,))
        conn.execute("UPDATE nodes SET status = 'waiting', speedup = NULL WHERE id = ?", (vid,))
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        screen.select_node(vid)
        await pilot.pause()
        verdict = screen.query_one("#verdict")
        assert "builds queued or running: 0" in str(verdict.content)
        for queued in (5, 2):
            screen.receive(Progress(round=1, rounds=2, compile_queue=queued, gpu_queue=1, llm_running=0,
                                    tokens=0, cost_usd=0.0, budget_usd=None, budget_tokens=None,
                                    elapsed_s=1.0, paused=False))
            await pilot.pause()
            assert f"builds queued or running: {queued}" in str(verdict.content)
        await pilot.press("q")


async def test_slash_filters_the_sessions_and_jumps_to_one(tmp_path: Path):
    db, suite, members = await suite_db(tmp_path / "k.db")
    app = KtreeApp(db_path=db)
    async with app.run_test(size=(160, 30)) as pilot:
        await pilot.pause()
        table = app.screen.query_one("#sessions", DataTable)
        assert table.row_count == 5
        await pilot.press("slash", *"running", "enter")
        await pilot.pause()
        keys = [table.coordinate_to_cell_key((i, 0)).row_key.value for i in range(table.row_count)]
        assert keys == [f"suite-{suite}", str(members[1])]  # the running problem, under its suite
        await pilot.press("slash", "escape")
        await pilot.pause()
        assert table.row_count == 5 and table.has_focus
        await pilot.press("slash", *f"#{members[2]}", "enter")
        await pilot.pause()
        at = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        assert table.row_count == 5 and at == str(members[2])
        await pilot.press("q")


def test_a_filter_matches_words_from_their_start():
    from tui.screens.filtering import matches, number

    assert matches("correct", ["7", "correct", "Tile rows"]) and not matches("correct", ["incorrect"])
    assert matches("tile cor", ["Tile rows", "correct"]) and matches("", ["anything"])
    assert number("#12") == 12 and number(" 7 ") == 7 and number("correct") is None


async def test_slash_filters_the_timings_and_finds_in_the_tree(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 40)
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        table = screen.query_one("#timings", DataTable)
        every = table.row_count
        statuses = [str(table.get_row_at(i)[3]) for i in range(every)]
        assert "correct" in statuses and set(statuses) != {"correct"}
        await pilot.press("1", "slash", *"correct", "enter")
        await pilot.pause()
        assert table.row_count == statuses.count("correct") and table.has_focus
        assert {str(table.get_row_at(i)[3]) for i in range(table.row_count)} == {"correct"}
        await pilot.press("slash", "escape")
        await pilot.pause()
        assert table.row_count == every
        await pilot.press("o", "slash", *"correct", "enter")  # sorted by speedup, then filtered
        await pilot.pause()
        speeds = [float(str(table.get_row_at(i)[[k for k, _, _ in COLUMNS].index("speedup")]).rstrip("x"))
                  for i in range(table.row_count)]
        assert speeds == sorted(speeds, reverse=True) and len(speeds) > 1, speeds  # the order stays
        await pilot.press("slash", "escape")
        await pilot.pause()
        screen.query_one("#tree").focus()
        await pilot.press("slash", *"#5", "enter")
        await pilot.pause()
        assert screen.selected == 5
        await pilot.press("slash", *"incorrect", "enter")
        await pilot.pause()
        first = screen.selected
        assert screen.model.nodes[first].status == "incorrect" and first > 5
        await pilot.press("slash", "enter")  # again: the next one
        await pilot.pause()
        assert screen.model.nodes[screen.selected].status == "incorrect" and screen.selected != first
        await pilot.press("q")


async def test_a_past_session_says_the_isolation_it_ran_under(tmp_path: Path):
    import json
    import sqlite3

    from textual.widgets._header import HeaderTitle

    db, sid = await fake_db(tmp_path / "k.db", 20)
    with sqlite3.connect(db) as conn:  # as `ktree run` records it (SearchConfig.isolation)
        [(config,)] = conn.execute("SELECT config FROM sessions WHERE id = ?", (sid,)).fetchall()
        conn.execute("UPDATE sessions SET config = ? WHERE id = ?",
                     (json.dumps({**json.loads(config), "isolation": "basic"}), sid))
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        shown = "isolation: basic (no filesystem or network isolation)"
        assert shown in app.screen.sub_title
        assert shown in str(app.screen.query_one(HeaderTitle).render())


async def test_the_line_above_the_code_holds_a_long_reference_header(tmp_path: Path):
    import sqlite3

    from textual.widgets import Static

    db, sid = await fake_db(tmp_path / "k.db", 20)
    title = ("Conv2d (NCHW, fp32): a 3x3 convolution, stride 1, padding 1, of a batch of images with"
             " many input channels into many output channels; " * 2 + "the last words END")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE nodes SET title = ? WHERE kind = 'root'", (title,))
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        screen = app.screen
        screen.select_node(next(n.id for n in screen.model.nodes.values() if n.kind == "root"))
        await pilot.pause()
        idea = screen.query_one("#idea", Static)
        lines = [strip.text for strip in idea.render_lines(idea.region.reset_offset)]
        assert len(title) > 2 * idea.region.width  # more than two lines' worth
        assert "END" in "".join(lines), lines  # wrapped onto more lines, not cut after two
        assert idea.region.height <= 4
