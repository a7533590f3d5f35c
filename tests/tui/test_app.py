"""The TUI driven by Pilot: a live scripted CPU search, and browsing a recorded session."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable, RichLog, Static, Tree

from tests.tui_helpers import (
    app_on,
    label_of,
    log_text,
    scripted_search,
    table_row,
    tree_labels,
    without_line_numbers,
)
from tui.screens.search import SearchScreen
from tui.screens.sessions import SessionsScreen


@pytest.mark.slow
async def test_live_search_fills_tree_code_and_timings(tmp_path: Path):
    db = tmp_path / "k.db"
    search = scripted_search(db, "--rounds", "1", "--ideas", "2").search
    async with app_on(db, size=(160, 50), search_factory=search) as (app, pilot):
        screen = app.screen
        assert isinstance(screen, SearchScreen) and screen.model.live
        await app.workers.wait_for_complete()
        await pilot.pause()
        summary = app.search_summary
        assert summary is not None and summary["status"] == "finished"
        variants = {n.id: n for n in screen.model.nodes.values() if n.kind == "variant"}
        assert len(variants) == 4
        # The finished search's worker processes ended with it (the app goes on).
        assert all(d.worker is None or d.worker.proc is None for d in app.search.evaluator.devices)

        # The tree shows each variant with its final status (and speedup when correct).
        tree = screen.query_one("#tree", Tree)
        for node in variants.values():
            label = label_of(tree, node.id)
            assert f" #{node.id} " in label and node.status in label  # (the best: "✔ ★ best #5 ...")
            if node.status == "correct":
                assert f"{node.speedup:.2f}x" in label
                vs_compile = screen.model.verdicts[node.id].speedup_compile
                if vs_compile is not None:  # wide terminal: the speedup vs torch.compile too
                    assert f"({vs_compile:.2f}x compile)" in label
        assert any("★ best" in lb for lb in tree_labels(tree))
        assert "SCRIPTED" in str(screen.query_one("#banner", Static).content)
        assert "live" not in str(screen.query_one("#banner", Static).content)  # only while it runs

        # The timings table has a row per evaluated variant, with the verdict's numbers.
        table = screen.query_one("#timings", DataTable)
        assert table.row_count == 4
        for node in variants.values():
            row = table.get_row(str(node.id))
            assert row[0] == str(node.id) and str(row[3]) == node.status
            if node.status == "correct":
                speedup = screen.model.verdicts[node.id].speedup_eager
                assert table.get_cell(str(node.id), "speedup") == f"{speedup:.3g}x"

        # Selecting a row selects the node and shows its source, highlighted, line-numbered.
        table.focus()
        target = int(table.coordinate_to_cell_key((2, 0)).row_key.value)
        await pilot.press("down", "down")
        await pilot.pause()
        assert screen.selected == target
        assert tree.cursor_node is not None and tree.cursor_node.data == target
        shown = log_text(screen.query_one("#code", RichLog))
        assert without_line_numbers(shown).strip() == variants[target].source.strip()
        assert screen.code_text.spans  # highlighted, not plain

        # Progress: the round, and the tokens counted from the LLM calls.
        progress = str(screen.query_one("#progress-text", Static).content)
        assert "round 1/1" in progress and "finished" in progress
        await pilot.press("q")


@pytest.mark.slow
async def test_sessions_screen_opens_a_past_session(recorded_search: dict):
    db = recorded_search["db"]
    summary = recorded_search["summary"]
    async with app_on(db, size=(160, 50)) as (app, pilot):
        assert isinstance(app.screen, SessionsScreen)
        table = app.screen.query_one("#sessions", DataTable)
        assert table.row_count == 1
        row = table_row(table, str(summary["session_id"]))
        # (SCRIPTED leads the problem's cell, at every width: tui/screens/sessions.py)
        assert row["problem"] == "SCRIPTED softmax" and row["status"] == "finished"
        assert row["best"] == f"{summary['best']['speedup_eager']:.2f}x"
        assert row["variants"] == str(summary["variants"])

        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SearchScreen) and not screen.model.live and not screen.model.follow
        variants = [n for n in screen.model.nodes.values() if n.kind == "variant"]
        assert len(variants) == summary["variants"]
        evaluated = [n for n in variants if n.id in screen.model.verdicts]
        assert screen.query_one("#timings", DataTable).row_count == len(evaluated)
        best = summary["best"]["node_id"]
        assert "★ best" in label_of(screen.query_one("#tree", Tree), best)
        assert "round 2/2" in str(screen.query_one("#progress-text", Static).content)

        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, SessionsScreen)
        await pilot.press("q")


async def test_a_database_the_tui_cannot_use_exits_2_as_headless_does(tmp_path: Path):
    """Issue 56, item 8: `ktree --db <read-only folder>/x.db run softmax` printed the error but exited
    0 in the TUI (Textual's `exit(2)` is a result, not a return code); it exits 2, as headless does.
    So does a session the database does not hold."""
    from tests.tui_helpers import fake_db
    from tui.app import KtreeApp

    (tmp_path / "folder.db").mkdir()  # not a database file: the store refuses it
    for app in (KtreeApp(db_path=tmp_path / "folder.db"),
                KtreeApp(db_path=(await fake_db(tmp_path / "k.db", 5))[0], session_id=99)):
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
        assert app.return_code == 2
