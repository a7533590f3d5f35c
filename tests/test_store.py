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


async def test_llm_totals_per_session_node_and_branch(tmp_path: Path):
    store = await Store.open(tmp_path / "k.db")
    sid = await store.create_session(problem="p", problem_path="/p.py", backend="cpu",
                                     strategy="tree", provider="x", models=["x:m"], config={},
                                     sizes={})
    root = await store.add_node(session_id=sid, parent_id=None, kind="root", round=0, status="r")
    idea = await store.add_node(session_id=sid, parent_id=root.id, kind="idea", round=1, status="ok")
    a = await store.add_node(session_id=sid, parent_id=idea.id, kind="variant", round=1, status="q")
    b = await store.add_node(session_id=sid, parent_id=idea.id, kind="variant", round=1, status="q")
    other = await store.add_node(session_id=sid, parent_id=root.id, kind="idea", round=1, status="ok")

    async def call(node_id: int, tin: int, tout: int, cost: float) -> None:
        await store.add_llm_call(session_id=sid, node_id=node_id, provider="x", model="m",
                                 purpose="implement", prompt="p", reply="r", input_tokens=tin,
                                 output_tokens=tout, reasoning_tokens=1, cost_usd=cost)

    await call(root.id, 100, 10, 0.5)
    await call(a.id, 20, 2, 0.25)
    await call(b.id, 30, 3, 0.125)
    await call(other.id, 7, 7, 1.0)
    session = await store.llm_totals(sid)
    assert (session["calls"], session["input_tokens"], session["cost_usd"]) == (4, 157, 1.875)
    node = await store.llm_totals(sid, a.id)
    assert (node["calls"], node["output_tokens"], node["reasoning_tokens"]) == (1, 2, 1)
    branch = await store.llm_totals(sid, idea.id, subtree=True)
    assert (branch["calls"], branch["input_tokens"], branch["cost_usd"]) == (2, 50, 0.375)
    await store.close()
