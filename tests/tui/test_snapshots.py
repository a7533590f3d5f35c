"""Snapshot tests (pytest-textual-snapshot) at fixed sizes on deterministic fake sessions.
Update after an intended change with `pytest tests/tui/test_snapshots.py --snapshot-update`,
and look at the SVGs before committing them."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from engine.record.store import Store
from tests.fake_session import T0, write_fake_session
from tui.app import KtreeApp


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TZ", "UTC")  # start times render the same on every machine
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def make_db(path: Path, sessions: int = 1) -> Path:
    async def go() -> None:
        store = await Store.open(path)
        for i in range(sessions):
            await write_fake_session(store, 40 + 20 * i, seed=i, t0=T0 + 3600 * i)
        await store.close()

    asyncio.run(go())
    return path


def test_search_screen(snap_compare, tmp_path: Path):
    db = make_db(tmp_path / "k.db")

    async def select(pilot) -> None:  # noqa: ANN001
        await pilot.pause()
        pilot.app.screen.select_node(4)
        await pilot.pause()

    assert snap_compare(KtreeApp(db_path=db, session_id=1), terminal_size=(140, 44), run_before=select)


def test_search_screen_compact_80x24(snap_compare, tmp_path: Path):
    db = make_db(tmp_path / "k.db")
    assert snap_compare(KtreeApp(db_path=db, session_id=1), terminal_size=(80, 24), press=["down", "down"])


def test_diff_view(snap_compare, tmp_path: Path):
    db = make_db(tmp_path / "k.db")

    async def diff(pilot) -> None:  # noqa: ANN001
        await pilot.pause()
        pilot.app.screen.select_node(9)
        await pilot.press("d")
        await pilot.pause()

    assert snap_compare(KtreeApp(db_path=db, session_id=1), terminal_size=(140, 44), run_before=diff)


def test_sessions_screen(snap_compare, tmp_path: Path):
    db = make_db(tmp_path / "k.db", sessions=3)
    assert snap_compare(KtreeApp(db_path=db), terminal_size=(120, 24))


def test_search_screen_80x24_with_tabs(snap_compare, tmp_path: Path):
    """80x24 after `t`: the tree and the code keep usable heights, the ★ shows, the footer holds
    only the tree's keys (no stray character under the palette's)."""
    db = make_db(tmp_path / "k.db")

    async def tabs(pilot) -> None:  # noqa: ANN001
        await pilot.press("t")
        await pilot.wait_for_scheduled_animations()  # (on a loaded host the tabs drew after one pause)
        await pilot.pause()
        pilot.app.screen.select_node(pilot.app.screen.model.best_id)
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(KtreeApp(db_path=db, session_id=1), terminal_size=(80, 24), run_before=tabs)


def test_search_screen_160x48(snap_compare, tmp_path: Path):
    db = make_db(tmp_path / "k.db")

    async def select(pilot) -> None:  # noqa: ANN001
        await pilot.pause()
        pilot.app.screen.select_node(pilot.app.screen.model.best_id)
        await pilot.pause()

    assert snap_compare(KtreeApp(db_path=db, session_id=1), terminal_size=(160, 48), run_before=select)


# -- issue 36: the layouts at 80x24, 120x35 and 160x45; the sessions with a suite; the compare chart


async def _best(pilot) -> None:  # noqa: ANN001
    await pilot.pause()
    pilot.app.screen.select_node(pilot.app.screen.model.best_id)
    await pilot.pause()


@pytest.mark.parametrize("size", [(80, 24), (120, 35), (160, 45)], ids=["80x24", "120x35", "160x45"])
def test_search_screen_sizes(snap_compare, tmp_path: Path, size: tuple[int, int]):
    """Compact, snug and full: the tree and the code keep 10 lines or more at 120x35 (item 4); the
    progress chart labels every row (item 20)."""
    db = make_db(tmp_path / "k.db")
    assert snap_compare(KtreeApp(db_path=db, session_id=1), terminal_size=size, run_before=_best)


@pytest.mark.parametrize("size", [(80, 24), (120, 35), (160, 45)], ids=["80x24", "120x35", "160x45"])
def test_sessions_screen_with_a_suite(snap_compare, tmp_path: Path, size: tuple[int, int]):
    """Only whole columns at any width (item 21); the suite's duration and geomean best (item 25)."""
    from tests.tui.helpers import suite_of_two

    db, _, _ = asyncio.run(suite_of_two(tmp_path / "k.db"))
    assert snap_compare(KtreeApp(db_path=db), terminal_size=size)


@pytest.mark.parametrize("size", [(80, 24), (120, 35), (160, 45)], ids=["80x24", "120x35", "160x45"])
def test_compare_screen(snap_compare, tmp_path: Path, size: tuple[int, int]):
    """Whole rounds on x, a label on every row, the legend above the plot (item 20); both sessions'
    columns whole beside the chart at 80 and 120 columns (item 14's leftover)."""
    db = make_db(tmp_path / "k.db", sessions=2)

    async def compare(pilot) -> None:  # noqa: ANN001
        await pilot.press("m", "down", "m", "c")
        await pilot.pause()
        pilot.app.clear_notifications()  # the marks' toasts: shown or gone by now, as the host's load has it
        await pilot.pause()

    assert snap_compare(KtreeApp(db_path=db), terminal_size=size, run_before=compare)
