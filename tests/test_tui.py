"""The TUI driven by Pilot: a live scripted CPU search, and browsing a recorded session."""

from __future__ import annotations

from pathlib import Path

from rich.syntax import Syntax
from textual.widgets import DataTable, Static, Tree

from engine.cli import build_parser, prepare_search
from tui.app import KtreeApp
from tui.screens.search import SearchScreen
from tui.screens.sessions import SessionsScreen


def tree_labels(tree: Tree) -> list[str]:
    labels, stack = [], [tree.root]
    while stack:
        node = stack.pop()
        labels.append(str(node.label))
        stack.extend(reversed(node.children))
    return labels


def shown_code(screen: SearchScreen) -> str:
    renderable = screen.query_one("#code", Static).content
    return renderable.code if isinstance(renderable, Syntax) else str(renderable)


async def test_live_search_fills_tree_code_and_timings(tmp_path: Path):
    db = tmp_path / "k.db"
    args = build_parser().parse_args(
        ["run", "softmax", "--backend", "cpu", "--provider", "scripted", "--rounds", "1",
         "--ideas", "2", "--db", str(db)])
    app = KtreeApp(db_path=db, search_factory=prepare_search(args).search)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SearchScreen) and screen.live
        await app.workers.wait_for_complete()
        await pilot.pause()
        summary = app.search_summary
        assert summary is not None and summary["status"] == "finished"
        variants = {n.id: n for n in screen.nodes.values() if n.kind == "variant"}
        assert len(variants) == 4

        # The tree shows each variant with its final status (and speedup when correct).
        labels = tree_labels(screen.query_one("#tree", Tree))
        for node in variants.values():
            label = next(lb for lb in labels if lb.split(" ")[1:2] == [f"#{node.id}"])
            assert node.status in label
            if node.status == "correct":
                assert f"{node.speedup:.2f}x" in label
        assert any("★ best" in lb for lb in labels)
        assert "SCRIPTED" in str(screen.query_one("#banner", Static).content)

        # The timings table has a row per evaluated variant, with the verdict's numbers.
        table = screen.query_one("#timings", DataTable)
        assert table.row_count == 4
        for node in variants.values():
            row = table.get_row(str(node.id))
            assert row[0] == node.id and str(row[3]) == node.status
            if node.status == "correct":
                assert row[6] == f"{screen.verdicts[node.id]['speedup_eager']:.4g}x"

        # Selecting a row selects the node and shows its source, highlighted.
        table.focus()
        target = next(iter(variants))
        table.move_cursor(row=table.get_row_index(str(target)))
        await pilot.pause()
        assert screen.selected == target
        assert shown_code(screen) == variants[target].source
        assert isinstance(screen.query_one("#code", Static).content, Syntax)
        await pilot.press("q")


async def test_sessions_screen_opens_a_past_session(recorded_search: dict):
    db = recorded_search["db"]
    summary = recorded_search["summary"]
    app = KtreeApp(db_path=db)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, SessionsScreen)
        table = app.screen.query_one("#sessions", DataTable)
        assert table.row_count == 1
        row = table.get_row(str(summary["session_id"]))
        assert row[1] == "softmax" and row[8] == "finished"
        assert row[6] == f"{summary['best']['speedup_eager']:.2f}x"

        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SearchScreen) and not screen.live
        variants = [n for n in screen.nodes.values() if n.kind == "variant"]
        assert len(variants) == summary["variants"]
        assert screen.query_one("#timings", DataTable).row_count == summary["variants"]
        labels = tree_labels(screen.query_one("#tree", Tree))
        best = summary["best"]["node_id"]
        assert any(f"#{best} " in lb and "★ best" in lb for lb in labels)

        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, SessionsScreen)
        await pilot.press("q")
