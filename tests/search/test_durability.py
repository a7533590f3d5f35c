"""Durability: what an event announces is already in the DB (a second process sees it), a reader
never blocks the writer, a crashing variant inside a real search leaves the search going, and a
damaged DB file is one line, not a traceback."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from engine.cli import build_parser
from engine.commands.run import prepare_search
from engine.record.events import EventBus, LLMCallDone, NodeAdded, NodeUpdated, SessionDone, VerdictReady
from engine.record.store import Store
from tests.conftest import run_ktree
from tests.llm_server import LLMServer

IDEA_JSON = '[{"title": "Anything at all", "description": "Whatever compiles."}]'
SEGFAULT = ("```python\nimport ctypes, torch\nctypes.string_at(0)\n"
            "class ModelNew(torch.nn.Module):\n    pass\n```")
HONEST = ("```python\nimport torch\nclass ModelNew(torch.nn.Module):\n"
          "    def forward(self, x):\n        return torch.softmax(x, dim=1)\n```")


def test_every_event_is_committed_first_and_a_crashing_variant_does_not_stop_the_search(tmp_path: Path):
    """A search whose first variant segfaults: that node is `crashed`, the next one is evaluated,
    the search finishes. Each event is checked against the DB through a separate connection —
    what a second `ktree` would see — at the moment it is published."""
    db = tmp_path / "k.db"
    checked: list[str] = []

    def row(sql: str, *params: object) -> tuple | None:
        with sqlite3.connect(db) as conn:  # a fresh connection: sees only what is committed
            return conn.execute(sql, params).fetchone()

    def check(event: object) -> None:
        if isinstance(event, (NodeAdded, NodeUpdated)):
            assert row("SELECT status FROM nodes WHERE id = ?", event.node.id) == (event.node.status,)
        elif isinstance(event, VerdictReady):
            assert row("SELECT status FROM evaluations WHERE node_id = ?", event.node.id) == (
                event.verdict.status,)
        elif isinstance(event, LLMCallDone):
            assert row("SELECT status FROM llm_calls WHERE id = ?", event.call_id) == (event.status,)
        elif isinstance(event, SessionDone):
            assert row("SELECT status FROM sessions WHERE id = ?", event.session_id) == (event.status,)
        else:
            return
        checked.append(type(event).__name__)

    with LLMServer() as server:
        server.push(text=IDEA_JSON)
        server.push(text=SEGFAULT)
        server.push(text=HONEST)
        args = build_parser().parse_args([
            "run", "softmax", "--provider", "openai-compatible", "--base-url", server.url,
            "--model", "m", "--backend", "cpu", "--rounds", "1", "--ideas", "1", "--variants", "2",
            "--fixes", "0", "--headless"])

        async def go() -> dict:
            store = await Store.open(db)
            bus = EventBus()
            bus.subscribe(check)
            try:
                return await prepare_search(args, db).search(store, bus).run()
            finally:
                await store.close()

        summary = asyncio.run(go())
    assert summary["status"] == "finished"
    with sqlite3.connect(db) as conn:
        statuses = sorted(s for (s,) in conn.execute("SELECT status FROM nodes WHERE kind = 'variant'"))
        [(log,)] = conn.execute("SELECT verdict FROM evaluations WHERE status = 'crashed'")
    assert statuses == ["crashed", "flagged"]  # the honest one ran to the end after the crash
    assert "SIGSEGV" in log
    for kind in ("NodeAdded", "NodeUpdated", "VerdictReady", "LLMCallDone", "SessionDone"):
        assert kind in checked


READER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN")
before = conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0]
print("reading", flush=True)
time.sleep(float(sys.argv[2]))
after = conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0]  # same snapshot, still open
conn.execute("COMMIT")
now = conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0]
print(before, after, now, flush=True)
"""


def test_a_reader_in_another_process_never_blocks_the_writer(tmp_path: Path):
    db = tmp_path / "k.db"

    async def go() -> list[float]:
        store = await Store.open(db)
        sid = await store.sessions.create(problem="softmax", problem_path="/p.py", backend="cpu",
                                         strategy="tree", provider="scripted", models=["m"],
                                         config={}, sizes={})
        reader = subprocess.Popen([sys.executable, "-c", READER, str(db), "4"], stdout=subprocess.PIPE,
                                  text=True)
        assert reader.stdout is not None
        assert reader.stdout.readline().strip() == "reading"  # its read transaction is open
        took = []
        for i in range(20):
            t0 = time.monotonic()
            await store.nodes.add(session_id=sid, parent_id=None, kind="root", round=0,
                                 status="reference", title=f"n{i}")
            took.append(time.monotonic() - t0)
        await store.close()
        out, _ = reader.communicate(timeout=30)
        assert out.split() == ["0", "0", "20"]  # it held its snapshot across all 20 commits
        return took

    took = asyncio.run(go())
    assert max(took) < 1.0 and sum(took) < 3.0  # no write waited for the reader (WAL)


def _damaged(tmp_path: Path, how: str) -> Path:
    """A real ktree DB with rows, then damaged: `late` garbles pages that opening never reads,
    `truncated` cuts the file to a third."""
    good = tmp_path / "good.db"

    async def fill() -> None:
        store = await Store.open(good)
        for _ in range(2):
            sid = await store.sessions.create(problem="softmax", problem_path="/p.py", backend="cpu",
                                             strategy="tree", provider="scripted", models=["m"],
                                             config={}, sizes={})
            for _ in range(40):
                await store.nodes.add(session_id=sid, parent_id=None, kind="root", round=0,
                                     status="reference", source="x" * 3000)
        await store.close()

    asyncio.run(fill())
    data = bytearray(good.read_bytes())
    if how == "late":
        for page in range(len(data) // 4096 // 2, len(data) // 4096):
            data[page * 4096: page * 4096 + 300] = b"\xde\xad" * 150
    else:
        data = data[: len(data) // 3]
    bad = tmp_path / f"{how}.db"
    bad.write_bytes(bytes(data))
    return bad


def test_damaged_databases_are_one_line_errors(tmp_path: Path):
    for how in ("late", "truncated"):
        db = _damaged(tmp_path, how)
        for command in ("sessions", "show"):
            proc = run_ktree("--db", str(db), command)
            assert proc.returncode == 2, proc.stderr
            assert "Traceback" not in proc.stderr
            [line] = proc.stderr.strip().splitlines()
            assert str(db) in line and ("damaged" in line or "not a usable ktree database" in line)
