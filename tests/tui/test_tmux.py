"""Smoke test in a real terminal: `ktree` under tmux on a fake session — the sessions screen, then
Enter opens the session and the tree and code pane appear (send-keys, capture-pane), at 80x24."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.record.store import Store
from tests.conftest import REPO
from tests.fake_session import write_fake_session

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (.ci/run installs it)")


def capture(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True,
                          check=True).stdout


def wait_for(session: str, text: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = capture(session)
        if text in screen:
            return screen
        time.sleep(0.3)
    raise AssertionError(f"{text!r} never appeared; the pane shows:\n{screen}")


def test_ktree_in_tmux(tmp_path: Path):
    db = tmp_path / "k.db"

    async def make() -> None:
        store = await Store.open(db)
        await write_fake_session(store, 40)
        await store.close()

    asyncio.run(make())
    session = f"ktree-smoke-{os.getpid()}"
    env = {"TERM": "xterm-256color", "PYTHONPATH": str(REPO), "KTREE_CONFIG": str(tmp_path / "none.toml")}
    command = " ".join([f"{k}={v}" for k, v in env.items()]
                       + [sys.executable, "-m", "engine.cli", "--db", str(db)])
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", command], check=True,
                   cwd=REPO)
    try:
        screen = wait_for(session, "SCRIPTED softmax")  # the sessions screen, one row, marked
        assert "finished" in screen and "3.12x" in screen  # what matters fits in 80 columns
        subprocess.run(["tmux", "send-keys", "-t", session, "Enter"], check=True)
        screen = wait_for(session, "reference softmax")  # the tree's root
        assert "Tile rows" in screen  # an idea in the tree (cut at 80 columns)
        subprocess.run(["tmux", "send-keys", "-t", session, "Down", "Down"], check=True)
        screen = wait_for(session, "max abs err")  # the verdict of the variant under the cursor
        assert "incorrect" in screen and "cpp_source" in screen  # and its code, in the code pane
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            alive = subprocess.run(["tmux", "has-session", "-t", session], capture_output=True).returncode == 0
            if not alive:
                break
            time.sleep(0.3)
        assert not alive, "ktree did not quit on q"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_edit_in_editor_under_tmux(tmp_path: Path):
    """E opens the editor pane; Ctrl+O hands the source to $EDITOR (here a sed that renames a
    constant) in the real terminal; Ctrl+S records the edited source as an edit_variant command."""
    import sqlite3

    db = tmp_path / "k.db"

    async def make() -> int:
        store = await Store.open(db)
        sid = await write_fake_session(store, 40, status="running")
        await store.close()
        return sid

    sid = asyncio.run(make())
    session = f"ktree-edit-{os.getpid()}"
    env = {"TERM": "xterm-256color", "PYTHONPATH": str(REPO), "KTREE_CONFIG": str(tmp_path / "none.toml"),
           "EDITOR": "'sed -i s/kTile/kBlockRows/g'"}
    command = " ".join([f"{k}={v}" for k, v in env.items()]
                       + [sys.executable, "-m", "engine.cli", "--db", str(db), "show", str(sid), "--follow"])
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", command], check=True,
                   cwd=REPO)
    try:
        wait_for(session, "reference softmax")
        subprocess.run(["tmux", "send-keys", "-t", session, "Down", "Down"], check=True)
        wait_for(session, "max abs err")
        subprocess.run(["tmux", "send-keys", "-t", session, "E"], check=True)
        wait_for(session, "Ctrl+S: save and re-queue")
        subprocess.run(["tmux", "send-keys", "-t", session, "C-o"], check=True)
        wait_for(session, "kBlockRows")  # the editor pane shows what $EDITOR wrote
        subprocess.run(["tmux", "send-keys", "-t", session, "C-s"], check=True)
        wait_for(session, "⧗edit")  # marked at once; the command is written just after
        deadline = time.monotonic() + 30
        while True:
            with sqlite3.connect(db) as conn:
                row = conn.execute("SELECT kind, args FROM commands").fetchone()
            if row is not None or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert row is not None, "no command recorded"
        kind, args = row
        assert kind == "edit_variant" and "kBlockRows" in args and "kTile" not in args
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
