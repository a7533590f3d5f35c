import sqlite3
from pathlib import Path

import pytest

from engine.evaluate.verdict import Verdict
from engine.record.store import SCHEMA_VERSION, Store, StoreError


async def test_roundtrip_and_schema_version(tmp_path: Path):
    store = await Store.open(tmp_path / "k.db")
    sid = await store.sessions.create(problem="softmax", problem_path="/p.py", backend="cpu",
                                     strategy="tree", provider="scripted", models=["m"],
                                     config={"rounds": 1}, sizes={"dim": 8})
    root = await store.nodes.add(session_id=sid, parent_id=None, kind="root", round=0,
                                status="reference")
    var = await store.nodes.add(session_id=sid, parent_id=root.id, kind="variant", round=1,
                               status="queued", source="code")
    await store.evaluations.add(node_id=var.id, session_id=sid, verdict=Verdict(
        status="correct", time_ms=1.0, ref_eager_ms=2.0, speedup_eager=2.0,
        backend="cpu", device="x", sizes={"dim": 8}))
    await store.nodes.update(var.id, status="correct", speedup=2.0)
    await store.calls.add(session_id=sid, node_id=var.id, provider="scripted", model="m",
                             purpose="implement", prompt="p", reply="r", input_tokens=3,
                             output_tokens=4)
    await store.sessions.update(sid, status="finished", best_speedup=2.0)
    await store.close()

    store = await Store.open(tmp_path / "k.db")
    [session] = await store.sessions.all()
    assert session["status"] == "finished" and session["variants"] == 1
    assert session["config"] == {"rounds": 1} and session["sizes"] == {"dim": 8}
    nodes = await store.nodes.of(sid)
    assert [(n.kind, n.status, n.speedup) for n in nodes] == [
        ("root", "reference", None), ("variant", "correct", 2.0)]
    [ev] = await store.evaluations.of(sid)
    assert ev["sizes"] == {"dim": 8} and ev["verdict"].time_ms == 1.0
    [call] = await store.calls.of(sid)
    assert (call["input_tokens"], call["output_tokens"]) == (3, 4)
    await store.close()
    with sqlite3.connect(tmp_path / "k.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT value FROM meta").fetchone()[0] == str(SCHEMA_VERSION)


async def test_an_old_verdict_row_with_missing_and_unknown_keys_loads(tmp_path: Path):
    """Rows written by an older version come back as Verdicts: missing keys take their defaults,
    keys no longer known are dropped, and the written Verdict reads back equal."""
    store = await Store.open(tmp_path / "k.db")
    sid = await store.sessions.create(problem="softmax", problem_path="/p.py", backend="cpu",
                                     strategy="tree", provider="scripted", models=["m"],
                                     config={}, sizes={})
    root = await store.nodes.add(session_id=sid, parent_id=None, kind="root", round=0, status="reference")
    written = Verdict(status="flagged", flags=("torch-ops",), time_ms=2.0, gpu={"slot": "gpu1"}, device="H200")
    await store.evaluations.add(node_id=root.id, session_id=sid, verdict=written)
    await store.conn.execute(
        "INSERT INTO evaluations(node_id, session_id, status, backend, device, sizes, verdict, created_at)"
        " VALUES (?, ?, 'incorrect', 'cpu', '', '{}', ?, 0)",
        (root.id, sid, '{"time_ms": 1.5, "gone": true}'))
    await store.conn.commit()
    new, old = [e["verdict"] for e in await store.evaluations.of(sid)]
    assert new == written
    assert old == Verdict(status="incorrect", time_ms=1.5)
    await store.close()
    with sqlite3.connect(tmp_path / "k.db") as conn:
        assert conn.execute("SELECT device FROM evaluations ORDER BY id").fetchone()[0] == "gpu1: H200"


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
    sid = await store.sessions.create(problem="p", problem_path="/p.py", backend="cpu",
                                     strategy="tree", provider="x", models=["x:m"], config={},
                                     sizes={})
    root = await store.nodes.add(session_id=sid, parent_id=None, kind="root", round=0, status="r")
    idea = await store.nodes.add(session_id=sid, parent_id=root.id, kind="idea", round=1, status="ok")
    a = await store.nodes.add(session_id=sid, parent_id=idea.id, kind="variant", round=1, status="q")
    b = await store.nodes.add(session_id=sid, parent_id=idea.id, kind="variant", round=1, status="q")
    other = await store.nodes.add(session_id=sid, parent_id=root.id, kind="idea", round=1, status="ok")

    async def call(node_id: int, tin: int, tout: int, cost: float) -> None:
        await store.calls.add(session_id=sid, node_id=node_id, provider="x", model="m",
                                 purpose="implement", prompt="p", reply="r", input_tokens=tin,
                                 output_tokens=tout, reasoning_tokens=1, cost_usd=cost)

    await call(root.id, 100, 10, 0.5)
    await call(a.id, 20, 2, 0.25)
    await call(b.id, 30, 3, 0.125)
    await call(other.id, 7, 7, 1.0)
    session = await store.calls.totals(sid)
    assert (session["calls"], session["input_tokens"], session["cost_usd"]) == (4, 157, 1.875)
    node = await store.calls.totals(sid, a.id)
    assert (node["calls"], node["output_tokens"], node["reasoning_tokens"]) == (1, 2, 1)
    branch = await store.calls.totals(sid, idea.id, subtree=True)
    assert (branch["calls"], branch["input_tokens"], branch["cost_usd"]) == (2, 50, 0.375)
    await store.close()


async def test_a_version_1_database_is_migrated_and_keeps_its_rows(tmp_path: Path):
    store = await Store.open(tmp_path / "k.db")
    sid = await store.sessions.create(problem="p", problem_path="/p.py", backend="cpu",
                                     strategy="tree", provider="x", models=["m"], config={}, sizes={})
    await store.nodes.add(session_id=sid, parent_id=None, kind="root", round=0, status="reference")
    await store.close()
    with sqlite3.connect(tmp_path / "k.db") as conn:  # take it back to what version 1 wrote
        conn.executescript(
            "DROP TABLE commands; ALTER TABLE nodes DROP COLUMN pinned;"
            " ALTER TABLE nodes DROP COLUMN pruned; ALTER TABLE sessions DROP COLUMN pid;"
            " ALTER TABLE sessions DROP COLUMN heartbeat_at;"
            " DROP TABLE rounds; ALTER TABLE nodes DROP COLUMN want; ALTER TABLE nodes DROP COLUMN language;"
            " DROP TABLE suites; ALTER TABLE sessions DROP COLUMN suite_id;"
            " ALTER TABLE nodes DROP COLUMN library; ALTER TABLE nodes DROP COLUMN disturbed;"
            " UPDATE meta SET value = '1' WHERE key = 'schema_version';")

    store = await Store.open(tmp_path / "k.db")
    [root] = await store.nodes.of(sid)
    assert (root.kind, root.pinned, root.pruned, root.language) == ("root", False, False, "")
    await store.nodes.update(root.id, pinned=True)
    assert (await store.nodes.of(sid))[0].pinned is True
    await store.close()
    with sqlite3.connect(tmp_path / "k.db") as conn:
        assert conn.execute("SELECT value FROM meta").fetchone()[0] == str(SCHEMA_VERSION)
        assert conn.execute("SELECT COUNT(*) FROM commands").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM rounds").fetchone()[0] == 0


async def test_the_library_mark_round_trips_and_a_version_7_database_gets_it_from_its_verdicts(tmp_path: Path):
    """Issue 33: Verdict.library is kept in the verdict's JSON and as the node's `library` column;
    a verdict recorded without it reads as no mark; a schema-7 DB is backfilled from its verdicts."""
    from engine.evaluate.verdict import Verdict

    store = await Store.open(tmp_path / "k.db")
    sid = await store.sessions.create(problem="p", problem_path="/p.py", backend="cpu",
                                     strategy="tree", provider="x", models=["m"], config={}, sizes={})
    root = await store.nodes.add(session_id=sid, parent_id=None, kind="root", round=0, status="reference")
    marked = await store.nodes.add(session_id=sid, parent_id=root.id, kind="variant", round=1, status="queued")
    own = await store.nodes.add(session_id=sid, parent_id=root.id, kind="variant", round=1, status="queued")
    library = {"ops": ["aten.convolution"], "share": 0.87}
    await store.evaluations.add(node_id=marked.id, session_id=sid,
                               verdict=Verdict(status="correct", library=library, speedup_eager=2.0))
    await store.evaluations.add(node_id=own.id, session_id=sid, verdict=Verdict(status="correct"))
    await store.nodes.update(marked.id, status="correct", library="aten.convolution")
    verdicts = {e["node_id"]: e["verdict"] for e in await store.evaluations.of(sid)}
    assert verdicts[marked.id].library == library and verdicts[own.id].library == {}
    assert {n.id: n.library for n in await store.nodes.of(sid)}[marked.id] == "aten.convolution"
    await store.close()
    with sqlite3.connect(tmp_path / "k.db") as conn:  # a verdict from before the field; back to schema 7
        conn.execute("UPDATE evaluations SET verdict = json_remove(verdict, '$.library') WHERE node_id = ?",
                     (own.id,))
        conn.executescript("ALTER TABLE nodes DROP COLUMN library; ALTER TABLE nodes DROP COLUMN disturbed;"
                           " UPDATE meta SET value = '7' WHERE key = 'schema_version';")

    store = await Store.open(tmp_path / "k.db")
    assert {n.id: n.library for n in await store.nodes.of(sid)} == {root.id: "", marked.id: "aten.convolution",
                                                                 own.id: ""}
    verdicts = {e["node_id"]: e["verdict"] for e in await store.evaluations.of(sid)}
    assert verdicts[own.id].library == {} and verdicts[marked.id].library == library
    await store.close()


async def test_a_version_8_database_gets_the_disturbed_mark_from_its_verdicts(tmp_path: Path):
    """Issue 36: a variant whose verdict's reference time disagreed with its history
    (`reference-disturbed: ...`) is marked in the node's `disturbed` column, backfilled on migration."""
    from engine.evaluate.verdict import Verdict

    store = await Store.open(tmp_path / "k.db")
    sid = await store.sessions.create(problem="p", problem_path="/p.py", backend="cpu",
                                     strategy="tree", provider="x", models=["m"], config={}, sizes={})
    root = await store.nodes.add(session_id=sid, parent_id=None, kind="root", round=0, status="reference")
    hit = await store.nodes.add(session_id=sid, parent_id=root.id, kind="variant", round=1, status="correct")
    quiet = await store.nodes.add(session_id=sid, parent_id=root.id, kind="variant", round=1, status="correct")
    await store.evaluations.add(node_id=hit.id, session_id=sid, verdict=Verdict(
        status="correct", flags=("noisy", "reference-disturbed: the reference took 15.35 ms here ...")))
    await store.evaluations.add(node_id=quiet.id, session_id=sid,
                               verdict=Verdict(status="correct", flags=("noisy",)))
    await store.close()
    with sqlite3.connect(tmp_path / "k.db") as conn:
        conn.executescript("ALTER TABLE nodes DROP COLUMN disturbed;"
                           " UPDATE meta SET value = '8' WHERE key = 'schema_version';")

    store = await Store.open(tmp_path / "k.db")
    marks = {n.id: n.disturbed for n in await store.nodes.of(sid)}
    assert marks == {root.id: False, hit.id: True, quiet.id: False}
    await store.close()


async def test_commands_are_recorded_in_order_and_marked_applied(tmp_path: Path):
    from engine.record import control

    store = await Store.open(tmp_path / "k.db")
    sid = await store.sessions.create(problem="p", problem_path="/p.py", backend="cpu",
                                     strategy="tree", provider="x", models=["m"], config={}, sizes={})
    first = await store.commands.add(sid, *control.encode(control.Expand(7, variants=2)))
    await store.commands.add(sid, *control.encode(control.InjectIdea(3, "tile it")))
    await store.commands.mark_applied(first)
    [pending] = await store.commands.of(sid, pending_only=True)
    assert control.decode(pending["kind"], pending["args"]) == control.InjectIdea(3, "tile it")
    everything = await store.commands.of(sid)
    assert [c["kind"] for c in everything] == ["expand", "inject_idea"]
    assert control.decode("expand", everything[0]["args"]) == control.Expand(7, ideas=0, variants=2)
    with pytest.raises(ValueError, match="unknown command"):
        control.decode("explode", "{}")
    await store.close()


async def test_a_batch_of_nodes_is_one_transaction(tmp_path: Path):
    """add_nodes writes all or nothing: a failure midway leaves no row of the batch, and the
    command it carries out stays pending."""
    from engine.record import control

    store = await Store.open(tmp_path / "k.db")
    sid = await store.sessions.create(problem="p", problem_path="/p.py", backend="cpu",
                                     strategy="tree", provider="x", models=["m"], config={}, sizes={})
    [root] = await store.nodes.add_many(sid, [{"parent_id": None, "kind": "root", "round": 0,
                                          "status": "reference"}])
    cid = await store.commands.add(sid, *control.encode(control.InjectIdea(root.id, "t")))
    with pytest.raises(sqlite3.IntegrityError):
        await store.nodes.add_many(sid, [
            {"parent_id": root.id, "kind": "idea", "round": 1, "status": "ok", "title": "t"},
            {"parent_id": {"new": 0}, "kind": "not-a-kind", "round": 1, "status": "generating"},
        ], command_id=cid, round_parents=(1, [root.id]))
    assert [n.id for n in await store.nodes.of(sid)] == [root.id]
    assert await store.nodes.rounds(sid) == {}
    assert len(await store.commands.of(sid, pending_only=True)) == 1
    idea, variant = await store.nodes.add_many(sid, [
        {"parent_id": root.id, "kind": "idea", "round": 1, "status": "ok", "title": "t"},
        {"parent_id": {"new": 0}, "kind": "variant", "round": 1, "status": "generating"},
    ], command_id=cid, round_parents=(1, [root.id]))
    assert variant.parent_id == idea.id
    assert await store.nodes.rounds(sid) == {1: [root.id]}
    assert await store.commands.of(sid, pending_only=True) == []
    await store.close()


def test_a_read_only_database_is_read_by_the_commands_that_only_read(tmp_path: Path, monkeypatch, capsys):
    """A database on a read-only filesystem: sessions, show and export read it (SQLite's read-only,
    immutable open), a command that writes says it is read-only, and nothing calls it broken. (The
    tests run as root, whom permission bits do not stop: the filesystem's answer is stood in for.)"""
    import asyncio

    from engine.cli import main
    from engine.record import store as store_module
    from tests.fake_session import write_fake_session

    db = tmp_path / "ro" / "store.db"
    db.parent.mkdir()

    async def make() -> int:
        s = await Store.open(db)
        try:
            return await write_fake_session(s, 20)
        finally:
            await s.close()

    sid = asyncio.run(make())
    for extra in db.parent.glob("store.db-*"):  # as copied onto read-only media: the file alone
        extra.unlink()
    monkeypatch.setattr(store_module, "_unwritable", lambda path: "its folder cannot be written")
    for args in (["sessions"], ["show", str(sid)], ["export", str(sid)]):
        assert main([*args, "--db", str(db)]) == 0, args
        out = capsys.readouterr()
        assert out.out.strip() and "usable" not in out.err
    assert sorted(p.name for p in db.parent.iterdir()) == ["store.db"]  # nothing written beside it
    assert main(["show", str(sid), "--profile", "1", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "is read-only (its folder cannot be written)" in err and "usable" not in err

    async def write() -> None:
        s = await Store.open(db, read_only=True)
        try:
            await s.commands.add(sid, "pause", {})
        finally:
            await s.close()

    with pytest.raises(StoreError, match="open read-only"):
        asyncio.run(write())


def test_a_database_that_cannot_be_opened_leaves_no_thread_failing_later(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch):
    """Issue 56, item 8: `--db /sys/ktree.db run --headless` printed its one-line error, then aiosqlite's
    connection thread answered into the closed loop: a 25-line `RuntimeError: Event loop is closed`."""
    import asyncio
    import threading

    failed: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: failed.append(args.exc_value))
    before = set(threading.enumerate())

    async def open_it() -> None:
        with pytest.raises(StoreError, match="cannot open database"):
            await Store.open(tmp_path / "missing.db", read_only=True)  # SQLite cannot open it

    asyncio.run(open_it())  # the loop ends at once, as a command's does after its error
    for thread in set(threading.enumerate()) - before:
        thread.join(5)
    assert failed == []
