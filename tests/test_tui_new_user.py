"""What a new user hit on the screens (issue 30): the sessions table with a suite at 160 and 80
columns, footers that fit, j/k/g/G, q on a running search, the footer's verbs, the isolation level
in the header, the LLM pane's prompts, the "why it waits" text, filters, zoom, undo of a prune."""

from __future__ import annotations

import os
import time
from pathlib import Path

from textual.widgets import DataTable

from engine.store import Store
from tests.fake_session import write_fake_session
from tui.app import KtreeApp
from tui.screens.sessions import SessionsScreen

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
