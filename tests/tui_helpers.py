"""Shared helpers for the TUI tests: a deterministic fake session in a fresh DB, and readers of what
the widgets show."""

from __future__ import annotations

import re
from pathlib import Path

from textual.widgets import DataTable, RichLog, Tree

from engine.store import Store
from tests.fake_session import write_fake_session


async def fake_db(path: Path, n_nodes: int = 40, status: str = "finished", **kw: object) -> tuple[Path, int]:
    store = await Store.open(path)
    try:
        sid = await write_fake_session(store, n_nodes, status=status, **kw)  # type: ignore[arg-type]
    finally:
        await store.close()
    return path, sid


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
