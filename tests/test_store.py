import sqlite3
from pathlib import Path

import pytest

from engine.store import SCHEMA_VERSION, Store, StoreError


async def test_roundtrip_and_schema_version(tmp_path: Path):
    store = await Store.open(tmp_path / "k.db")
    sid = await store.create_session(problem="softmax", problem_path="/p.py", backend="cpu",
                                     strategy="tree", provider="scripted", models=["m"],
                                     config={"rounds": 1}, sizes={"dim": 8})
    root = await store.add_node(session_id=sid, parent_id=None, kind="root", round=0,
                                status="reference")
    var = await store.add_node(session_id=sid, parent_id=root.id, kind="variant", round=1,
                               status="queued", source="code")
    await store.add_evaluation(node_id=var.id, session_id=sid, verdict={
        "status": "correct", "time_ms": 1.0, "ref_eager_ms": 2.0, "speedup_eager": 2.0,
        "backend": "cpu", "device": "x", "sizes": {"dim": 8}})
    await store.update_node(var.id, status="correct", speedup=2.0)
    await store.add_llm_call(session_id=sid, node_id=var.id, provider="scripted", model="m",
                             purpose="implement", prompt="p", reply="r", input_tokens=3,
                             output_tokens=4)
    await store.update_session(sid, status="finished", best_speedup=2.0)
    await store.close()

    store = await Store.open(tmp_path / "k.db")
    [session] = await store.sessions()
    assert session["status"] == "finished" and session["variants"] == 1
    assert session["config"] == {"rounds": 1} and session["sizes"] == {"dim": 8}
    nodes = await store.nodes(sid)
    assert [(n.kind, n.status, n.speedup) for n in nodes] == [
        ("root", "reference", None), ("variant", "correct", 2.0)]
    [ev] = await store.evaluations(sid)
    assert ev["sizes"] == {"dim": 8} and ev["verdict"]["time_ms"] == 1.0
    [call] = await store.llm_calls(sid)
    assert (call["input_tokens"], call["output_tokens"]) == (3, 4)
    await store.close()
    with sqlite3.connect(tmp_path / "k.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT value FROM meta").fetchone()[0] == str(SCHEMA_VERSION)


async def test_newer_schema_is_refused(tmp_path: Path):
    await (await Store.open(tmp_path / "k.db")).close()
    with sqlite3.connect(tmp_path / "k.db") as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="newer ktree"):
        await Store.open(tmp_path / "k.db")


async def test_non_sqlite_and_foreign_databases_are_refused(tmp_path: Path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="not a usable ktree database"):
        await Store.open(junk)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(StoreError, match="not a ktree one"):
        await Store.open(other)
