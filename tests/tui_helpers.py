"""Shared helpers for the TUI tests: deterministic fake sessions in a fresh DB (one session, a
running one, two, a suite), ktree's app run headless on one (`app_on`), and readers of what the
widgets and the terminal show."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from textual.app import App
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import DataTable, RichLog, Tree

from engine.cli import build_parser
from engine.commands.run import Prepared, prepare_search
from engine.record.store import Store
from tests.fake_session import T0, write_fake_session
from tui.app import KtreeApp


async def fake_db(path: Path, n_nodes: int = 40, status: str = "finished", **kw: object) -> tuple[Path, int]:
    store = await Store.open(path)
    try:
        sid = await write_fake_session(store, n_nodes, status=status, **kw)  # type: ignore[arg-type]
    finally:
        await store.close()
    return path, sid


async def running_db(path: Path, n_nodes: int = 40) -> tuple[Path, int]:
    """A fake running session whose engine (this process) beats for the whole test, however slow
    the machine: the screen follows it and takes steering keys."""
    db, sid = await fake_db(path, n_nodes, status="running")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sessions SET heartbeat_at = ? WHERE id = ?", (time.time() + 3600, sid))
    return db, sid


def scripted_search(db: Path, *flags: str) -> Prepared:
    """What `ktree run softmax --backend cpu --provider scripted FLAGS --db DB` prepares: a live
    search in this process, compiling for real (its `.search` is the app's search_factory)."""
    return prepare_search(build_parser().parse_args(
        ["run", "softmax", "--backend", "cpu", "--provider", "scripted", *flags, "--db", str(db)]))


@contextlib.asynccontextmanager
async def app_on(db: Path, size: tuple[int, int] = (160, 50),
                 **kw: Any) -> AsyncIterator[tuple[KtreeApp, Pilot]]:
    """ktree's app on `db` (`kw` as KtreeApp takes them: session_id=, follow=, search_factory=...),
    run headless at `size`, its first screen drawn: what each TUI test starts from."""
    app = KtreeApp(db_path=db, **kw)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        yield app, pilot


def tree_labels(tree: Tree) -> list[str]:
    labels, stack = [], [tree.root]
    while stack:
        node = stack.pop()
        labels.append(str(node.label))
        stack.extend(reversed(node.children))
    return labels


def label_of(tree: Tree, node_id: int) -> str:
    stack = [tree.root]
    while stack:
        node = stack.pop()
        if node.data == node_id:
            return str(node.label)
        stack.extend(node.children)
    raise AssertionError(f"node {node_id} is not in the tree")


def log_text(log: RichLog) -> str:
    return "\n".join(strip.text for strip in log.lines)


def without_line_numbers(text: str) -> str:
    return "\n".join(re.sub(r"^\s*\d+ ", "", line, count=1) for line in text.splitlines())


async def wait_until(pilot, what, timeout: float = 60) -> None:  # noqa: ANN001
    """Pause until `what()` holds (a poll, an engine step); fail after `timeout` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out waiting"
        await pilot.pause(0.1)


def table_row(table: DataTable, key: str) -> dict[str, str]:
    """A row of a DataTable by its key, as {column key: cell text}."""
    keys = [str(c.key.value) for c in table.ordered_columns]
    return {k: str(v) for k, v in zip(keys, table.get_row(key), strict=True)}


SUITE_NAME = "level1-all-the-problems-of-kernelbench-level-one"


async def suite_db(path: Path) -> tuple[Path, int, list[int]]:
    """A plain session, then a suite (a long name) of three problems, one of them running."""
    store = await Store.open(path)
    await write_fake_session(store, 20)
    suite = await store.suites.create(name=SUITE_NAME, problems=["/a.py", "/b.py", "/c.py"], config={})
    members = []
    for name in ("relu", "matmul_with_a_rather_long_problem_name", "softmax"):
        sid = await store.sessions.create(problem=name, problem_path=f"/{name}.py", backend="cpu",
                                         strategy="tree", provider="scripted", models=["scripted:synthetic"],
                                         config={}, sizes={}, suite_id=suite)
        members.append(sid)
    await store.sessions.update(members[0], status="finished", best_speedup=1.5, finished_at=time.time())
    await store.sessions.update(members[1], pid=os.getpid(), heartbeat_at=time.time() + 3600)
    await store.close()
    return path, suite, members


def whole_columns(table: DataTable) -> list[str]:
    """The columns drawn whole within the table's width, left to right."""
    room, out = table.scrollable_content_region.width, []
    for column in table.ordered_columns:
        room -= column.get_render_width(table)
        if room < 0:
            break
        out.append(str(column.key.value))
    return out


def footer_fits(screen) -> None:  # noqa: ANN001
    """Every key of the footer is drawn whole, left of the command palette's."""
    keys = [k for k in screen.query("FooterKey") if k.display]
    palette = keys.pop()  # ^p palette, at the right end
    assert keys, "no key in the footer"
    for key in keys:  # every key shown whole, none under the palette's
        assert key.region.right <= palette.region.x, (key.description, key.region, palette.region)


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


async def two_sessions(path: Path) -> tuple[Path, int, int]:
    """Two finished sessions of softmax, the second an hour later with more nodes."""
    store = await Store.open(path)
    a = await write_fake_session(store, 40)
    b = await write_fake_session(store, 60, seed=3, t0=T0 + 3600)
    await store.close()
    return path, a, b


def screen_lines(app: App) -> list[str]:
    """The terminal's lines as drawn now."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def shown_text(app: App, widget: Widget) -> str:
    """What the terminal shows of `widget`, its lines joined with single spaces."""
    region = widget.region
    lines = screen_lines(app)[region.y:region.bottom]
    return " ".join(" ".join(line[region.x:region.right].split()) for line in lines).strip()
