"""Each human command on a real scripted CPU search: recorded in the DB the way the TUI records
it (store.commands.add), picked up by the engine, and its effect checked on the tree and the DB.

Shapes are tiny (1 idea, 1-2 variants) and every source is one of the scripted library's, so the
shared build cache makes each evaluation a few seconds.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

import pytest

from engine.domain import DONE_STATUSES
from engine.llm.scripted import DATA
from engine.problems import load_problem
from engine.record import control
from engine.record.events import (
    CommandApplied,
    Event,
    NodeAdded,
    NodeUpdated,
    Progress,
    RoundDone,
    VerdictReady,
)
from engine.record.store import Store
from tests.conftest import query, run_ktree
from tests.search.helpers import Steered


def variant_added(event: Event) -> bool:
    return isinstance(event, NodeAdded) and event.node.kind == "variant"


def applied(s: Steered) -> list[tuple[str, tuple[int, ...]]]:
    return [(e.kind, e.node_ids) for e in s.of(CommandApplied)]


def pending(db: Path) -> int:
    return query(db, "SELECT COUNT(*) FROM commands WHERE applied_at IS NULL")[0][0]


@pytest.mark.slow
async def test_an_undone_prune_makes_the_node_selectable_again(tmp_path: Path):
    undone: list[int] = []

    async def hook(e: Event, s: Steered) -> None:
        if isinstance(e, VerdictReady) and e.verdict.status == "correct" and not undone:
            undone.append(e.node.id)
            await s.command(control.Prune(e.node.id))
            await s.command(control.Prune(e.node.id, pruned=False))

    s = Steered(tmp_path / "k.db", hook, variants=1)
    summary = await s.run()
    [vid] = undone
    assert summary["status"] == "finished"
    assert query(s.db, "SELECT pruned FROM nodes WHERE id = ?", vid) == [(0,)]
    assert applied(s) == [("prune", (vid,)), ("prune", (vid,))]
    assert [e.parent_ids for e in s.of(RoundDone)] == [(vid,)]  # selected, as if never pruned


@pytest.mark.slow
async def test_prune_cancels_queued_work_and_excludes_from_selection(tmp_path: Path):
    pruned: list[int] = []

    async def hook(e: Event, s: Steered) -> None:
        # The first variant is pruned as soon as it exists (its work is cancelled); the second
        # once it has a verdict (correct, and still never selected).
        if variant_added(e) and not pruned:
            pruned.append(e.node.id)
            await s.command(control.Prune(e.node.id))
        elif isinstance(e, VerdictReady) and len(pruned) == 1:
            pruned.append(e.node.id)
            await s.command(control.Prune(e.node.id))

    s = Steered(tmp_path / "k.db", hook, variants=2)
    summary = await s.run()
    first, second = pruned
    db = s.db
    assert summary["status"] == "finished"
    assert query(db, "SELECT id, pruned FROM nodes WHERE id IN (?, ?) ORDER BY id", first, second) == [
        (first, 1), (second, 1)]
    [(status, text)] = query(db, "SELECT status, text FROM nodes WHERE id = ?", first)
    assert (status, text) == ("cancelled", "cancelled: pruned")
    assert query(db, "SELECT COUNT(*) FROM evaluations WHERE node_id = ?", first) == [(0,)]
    assert query(db, "SELECT status FROM evaluations WHERE node_id = ?", second) == [("correct",)]
    # Neither is a parent: the round kept the reference (nothing correct and unpruned).
    [root] = query(db, "SELECT id FROM nodes WHERE kind = 'root'")[0]
    assert [e.parent_ids for e in s.of(RoundDone)] == [(root,)]
    assert applied(s) == [("prune", (first,)), ("prune", (second,))]
    assert pending(db) == 0
    assert any(isinstance(e, NodeUpdated) and e.node.id == first and e.node.pruned for e in s.events)
    shown = run_ktree("--db", str(db), "show").stdout
    assert f"#{first} variant r1: cancelled [pruned]" in shown and f"#{second} variant r1: correct" in shown


@pytest.mark.slow
async def test_expand_ideas_from_a_variant_now(tmp_path: Path):
    async def hook(e: Event, s: Steered) -> None:
        if isinstance(e, VerdictReady) and not s.of(CommandApplied) and e.node.status == "correct":
            await s.command(control.Expand(e.node.id, ideas=1))

    s = Steered(tmp_path / "k.db", hook)
    assert (await s.run())["status"] == "finished"
    [(kind, ids)] = applied(s)
    [idea_id] = ids
    db = s.db
    # The new idea grows from the variant, in the same round (not the next one), and its own
    # variant was generated and evaluated.
    [(parent_kind, idea_round, idea_status)] = query(
        db, "SELECT p.kind, i.round, i.status FROM nodes i JOIN nodes p ON i.parent_id = p.id WHERE i.id = ?",
        idea_id)
    assert (kind, parent_kind, idea_round, idea_status) == ("expand", "variant", 1, "ok")
    assert query(db, "SELECT COUNT(*) FROM llm_calls WHERE node_id = ? AND purpose = 'idea'", idea_id) == [(1,)]
    [(child, child_status)] = query(db, "SELECT id, status FROM nodes WHERE parent_id = ?", idea_id)
    assert query(db, "SELECT status FROM evaluations WHERE node_id = ?", child) == [(child_status,)]
    assert query(db, "SELECT COUNT(*) FROM nodes WHERE kind = 'idea'") == [(2,)]


@pytest.mark.slow
async def test_expand_variants_of_an_idea_now(tmp_path: Path):
    async def hook(e: Event, s: Steered) -> None:
        if isinstance(e, NodeUpdated) and e.node.kind == "idea" and e.node.status == "ok":
            await s.command(control.Expand(e.node.id, variants=1))

    s = Steered(tmp_path / "k.db", hook)
    assert (await s.run())["status"] == "finished"
    [(kind, ids)] = applied(s)
    [extra] = ids
    db = s.db
    [(idea,)] = query(db, "SELECT id FROM nodes WHERE kind = 'idea'")
    variants = query(db, "SELECT id, round FROM nodes WHERE parent_id = ? ORDER BY id", idea)
    assert kind == "expand" and len(variants) == 2 and extra in {v for v, _ in variants}
    assert {r for _, r in variants} == {1}
    # Both were implemented and evaluated.
    assert query(db, "SELECT COUNT(*) FROM llm_calls WHERE purpose = 'implement'") == [(2,)]
    assert query(db, "SELECT COUNT(DISTINCT node_id) FROM evaluations") == [(2,)]


@pytest.mark.slow
async def test_pin_keeps_a_node_as_a_parent(tmp_path: Path):
    async def hook(e: Event, s: Steered) -> None:
        if isinstance(e, NodeAdded) and e.node.kind == "root":
            await s.command(control.Pin(e.node.id))

    s = Steered(tmp_path / "k.db", hook, rounds=2, top=1)
    assert (await s.run())["status"] == "finished"
    db = s.db
    [(root, pinned)] = query(db, "SELECT id, pinned FROM nodes WHERE kind = 'root'")
    assert pinned == 1 and applied(s) == [("pin", (root,))]
    [(best,)] = query(db, "SELECT id FROM nodes WHERE kind = 'variant' AND round = 1 AND status = 'correct'")
    # Round 2 grows from the pinned reference as well as from round 1's best.
    assert query(db, "SELECT parent_ids FROM rounds WHERE round = 2") == [(f"[{root}, {best}]",)]
    assert sorted(p for (p,) in query(db, "SELECT parent_id FROM nodes WHERE kind = 'idea' AND round = 2")) == [
        root, best]


@pytest.mark.slow
async def test_inject_idea_is_implemented_and_marked_human(tmp_path: Path):
    text = "Vectorized single-pass online softmax\nFuse max and sum with the online recurrence."

    async def hook(e: Event, s: Steered) -> None:
        if isinstance(e, NodeAdded) and e.node.kind == "root":
            await s.command(control.InjectIdea(e.node.id, text))

    s = Steered(tmp_path / "k.db", hook)
    assert (await s.run())["status"] == "finished"
    db = s.db
    [(idea, title, body, status)] = query(
        db, "SELECT id, title, text, status FROM nodes WHERE kind = 'idea' AND origin = 'human'")
    assert (title, body, status) == ("Vectorized single-pass online softmax", text, "ok")
    [(variant, vstatus)] = query(db, "SELECT id, status FROM nodes WHERE parent_id = ?", idea)
    assert applied(s) == [("inject_idea", (idea, variant))]
    [(prompt,)] = query(db, "SELECT prompt FROM llm_calls WHERE node_id = ?", variant)
    assert "Fuse max and sum with the online recurrence." in prompt
    assert query(db, "SELECT status FROM evaluations WHERE node_id = ?", variant) == [(vstatus,)]
    assert vstatus in DONE_STATUSES and vstatus != "failed"  # a verdict, whatever it is


@pytest.mark.slow
async def test_edit_variant_makes_an_evaluated_child(tmp_path: Path):
    edited = (DATA / "softmax" / "cpu" / "online_1.py").read_text()

    async def hook(e: Event, s: Steered) -> None:
        if isinstance(e, VerdictReady) and not s.of(CommandApplied):
            await s.command(control.EditVariant(e.node.id, edited))

    s = Steered(tmp_path / "k.db", hook)
    assert (await s.run())["status"] == "finished"
    [(kind, (child,))] = applied(s)
    db = s.db
    [(parent, origin, source, status)] = query(
        db, "SELECT parent_id, origin, source, status FROM nodes WHERE id = ?", child)
    assert kind == "edit_variant" and origin == "edit" and source == edited
    assert query(db, "SELECT kind FROM nodes WHERE id = ?", parent) == [("variant",)]
    assert query(db, "SELECT status FROM evaluations WHERE node_id = ?", child) == [(status,)]
    assert status == "correct"
    assert query(db, "SELECT COUNT(*) FROM llm_calls WHERE node_id = ?", child) == [(0,)]  # no LLM


@pytest.mark.slow
async def test_pause_holds_new_work_until_resume(tmp_path: Path):
    resumed_at: list[float] = []

    async def hook(e: Event, s: Steered) -> None:
        if isinstance(e, NodeAdded) and e.node.kind == "root":
            await s.command(control.Pause())
        elif isinstance(e, Progress) and e.paused and not resumed_at:
            resumed_at.append(0.0)
            await asyncio.sleep(1.0)  # paused: nothing may start meanwhile
            assert query(s.db, "SELECT COUNT(*) FROM llm_calls") == [(0,)]
            await s.command(control.Resume())
            resumed_at[0] = query(s.db, "SELECT MAX(created_at) FROM commands")[0][0]

    s = Steered(tmp_path / "k.db", hook)
    assert (await s.run())["status"] == "finished"
    db = s.db
    assert [k for k, _ in applied(s)] == ["pause", "resume"]
    [(first_call,)] = query(db, "SELECT MIN(created_at) FROM llm_calls")
    assert first_call > resumed_at[0] > 0
    assert query(db, "SELECT COUNT(*) FROM evaluations") == [(1,)]
    assert any(e.paused for e in s.of(Progress)) and not s.of(Progress)[-1].paused


@pytest.mark.slow
async def test_stop_ends_the_search_and_lets_the_build_in_flight_finish(tmp_path: Path):
    sent: list[int] = []

    async def hook(e: Event, s: Steered) -> None:
        if isinstance(e, NodeUpdated) and e.node.status == "compiling" and not sent:
            sent.append(e.node.id)  # before the await: hooks of other tasks run meanwhile
            await s.command(control.Stop())

    s = Steered(tmp_path / "k.db", hook, rounds=2, variants=2)
    summary = await s.run()
    db = s.db
    assert summary["status"] == "stopped" and summary["stop_reason"] == "stopped by the user"
    assert query(db, "SELECT status, stop_reason FROM sessions") == [("stopped", "stopped by the user")]
    assert applied(s) == [("stop", ())]
    # Nothing was left in flight, nothing started after the stop, and round 2 never began; the
    # variant being built when the stop came finished with its verdict (issue 30.2).
    statuses = query(db, "SELECT status, text FROM nodes WHERE kind = 'variant'")
    assert statuses and all(st == "cancelled" and tx.startswith("cancelled: stopped by the user")
                            or st in ("correct", "incorrect", "compile_error") for st, tx in statuses)
    [(building,)] = query(db, "SELECT status FROM nodes WHERE id = ?", sent[0])
    assert building in ("correct", "incorrect", "compile_error")
    assert query(db, "SELECT MAX(round) FROM rounds") == [(1,)]


@pytest.mark.slow
async def test_a_command_given_after_the_end_runs_on_resume(tmp_path: Path):
    """Steering a finished session from another process: the command waits in the DB, and
    `ktree run --resume` carries it out (and only it)."""
    s = Steered(tmp_path / "k.db", lambda e, s: None)
    assert (await s.run())["status"] == "finished"
    db = s.db
    [(sid,)] = query(db, "SELECT id FROM sessions")
    [(variant,)] = query(db, "SELECT id FROM nodes WHERE kind = 'variant'")
    evaluations = query(db, "SELECT * FROM evaluations")
    store = await Store.open(db)
    edited = (DATA / "softmax" / "cpu" / "rowblock_1.py").read_text()
    await store.commands.add(sid, *control.encode(control.EditVariant(variant, edited)))
    await store.close()

    from engine.cli import build_parser
    from engine.commands.run import prepare_search

    args = build_parser().parse_args(["run", "--resume", str(sid), "--db", str(db), "--headless"])
    prepared = await asyncio.to_thread(prepare_search, args)
    assert prepared.resume == sid
    again = Steered(db, lambda e, s: None, resume=sid)
    summary = await again.run()
    assert summary["status"] == "finished" and summary["resumed"]
    [(child,)] = query(db, "SELECT id FROM nodes WHERE origin = 'edit' AND parent_id = ?", variant)
    assert applied(again) == [("edit_variant", (child,))]
    assert query(db, "SELECT * FROM evaluations")[: len(evaluations)] == evaluations
    assert query(db, "SELECT node_id FROM evaluations")[len(evaluations):] == [(child,)]
    assert query(db, "SELECT COUNT(*) FROM llm_calls WHERE purpose = 'idea'") == [(1,)]  # nothing else


def test_a_command_from_another_process_reaches_a_running_search(tmp_path: Path):
    """A second process (another `ktree`, the TUI following a session) records a stop; the
    engine process picks it up from the DB while its LLM call is still in flight."""
    import subprocess
    import sys
    import time

    db = tmp_path / "k.db"
    env = {**os.environ, "KTREE_SCRIPTED_LATENCY": "3"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "run", "softmax", "--provider", "scripted", "--backend", "cpu",
         "--headless", "--json", "--db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        cwd=Path(__file__).resolve().parents[2])
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            time.sleep(0.2)
            try:
                if db.exists() and query(db, "SELECT COUNT(*) FROM nodes WHERE kind = 'idea'")[0][0]:
                    break
            except sqlite3.OperationalError:  # the file exists, its tables not yet
                continue

        async def stop() -> None:
            store = await Store.open(db)
            [(sid,)] = query(db, "SELECT id FROM sessions")
            await store.commands.add(sid, *control.encode(control.Stop()))
            await store.close()

        asyncio.run(stop())
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "command 1 stop applied" in err
    assert query(db, "SELECT status, stop_reason FROM sessions") == [("stopped", "stopped by the user")]
    # The idea call never completed: it was cancelled, so nothing was recorded for it.
    assert query(db, "SELECT COUNT(*) FROM llm_calls") == [(0,)]
    assert query(db, "SELECT status, text FROM nodes WHERE kind = 'idea'") == [
        ("cancelled", "cancelled: stopped by the user")]


@pytest.mark.slow
async def test_a_session_recorded_before_rounds_were_recorded_resumes_in_its_round(tmp_path: Path):
    """A session interrupted under schema 2 has no `rounds` rows: its round and parents come
    from its idea nodes, and its unfinished variant is finished, not a new round 1 started."""
    db = tmp_path / "k.db"
    store = await Store.open(db)
    problem = load_problem("softmax")
    sid = await store.sessions.create(
        problem="softmax", problem_path=str(problem.path), backend="cpu", strategy="tree",
        provider="scripted", models=["scripted:scripted"], config={"rounds": 1, "ideas": 1, "variants": 1},
        sizes=problem.sizes_for("cpu"))
    root, idea, variant = await store.nodes.add_many(sid, [
        {"parent_id": None, "kind": "root", "round": 0, "status": "reference", "source": problem.source},
        {"parent_id": {"new": 0}, "kind": "idea", "round": 1, "status": "ok",
         "title": "Vectorized single-pass online softmax", "text": "Fuse the passes."},
        {"parent_id": {"new": 1}, "kind": "variant", "round": 1, "status": "generating",
         "title": "Vectorized single-pass online softmax"},
    ])
    await store.close()

    s = Steered(db, lambda e, s: None, resume=sid)
    summary = await s.run()
    assert summary["status"] == "finished" and summary["rounds"] == 1
    assert query(db, "SELECT COUNT(*) FROM nodes WHERE kind = 'idea'") == [(1,)]  # no new round 1
    assert query(db, "SELECT purpose, node_id FROM llm_calls") == [("implement", variant.id)]
    [(status,)] = query(db, "SELECT status FROM nodes WHERE id = ?", variant.id)
    assert query(db, "SELECT status FROM evaluations WHERE node_id = ?", variant.id) == [(status,)]
