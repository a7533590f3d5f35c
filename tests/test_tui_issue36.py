"""What a new user hit, fourth pass (issue 36): the search screen's layout at medium sizes (4),
charts whose axes say where the values are (20), the sessions and timings tables at 80 columns
(21), and the suite's own duration and best (25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tui_helpers import fake_db
from tui.app import KtreeApp

# (width, height): the tree's rows and the code's lines at least this many (border and scrollbars
# not counted); 80x24 and 100x30 are compact (the tabs hidden), 110x32 the smallest wide one.
SIZES = [((80, 24), 8), ((100, 30), 10), ((110, 32), 8), ((120, 35), 10), ((132, 40), 10),
         ((140, 42), 10), ((140, 44), 10), ((160, 45), 10), ((160, 48), 12)]


@pytest.mark.parametrize(("size", "lines"), SIZES, ids=[f"{w}x{h}" for (w, h), _ in SIZES])
async def test_the_tree_and_the_code_stay_readable(tmp_path: Path, size: tuple[int, int], lines: int):
    db, sid = await fake_db(tmp_path / "k.db", 40)
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        screen = app.screen
        screen.select_node(screen.model.best_id)
        await pilot.pause()
        tree, code = screen.query_one("#tree"), screen.query_one("#code")
        assert tree.scrollable_content_region.height >= lines, tree.scrollable_content_region
        assert code.scrollable_content_region.height >= lines, code.scrollable_content_region
        wide = not screen.has_class("compact")
        assert screen.query_one("#details").display == wide  # the tabs: shown where wide
        if wide:  # the timings keep a few rows, the progress pane its text
            assert screen.query_one("#timings").scrollable_content_region.height >= 4
            assert screen.query_one("#progress").region.height >= 5
        await pilot.press("q")
