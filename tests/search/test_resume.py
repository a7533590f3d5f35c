"""A headless scripted search killed with SIGKILL at chosen moments, then `ktree run --resume`.

The kill points are deterministic (engine.record.crash: the engine kills itself at the N-th time it
reaches a named point). Before resuming, each test checks that the kill landed where intended;
after, that the search finished, no LLM call was made twice, and every evaluation committed
before the kill is still there and was not run again.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from engine.domain import DEVICE_PHASES, DONE_STATUSES
from engine.record import control
from engine.record.store import Store
from tests.conftest import query, run_ktree

SHAPE = ["--rounds", "1", "--ideas", "1", "--variants", "2"]


def killed_where(db: Path) -> dict:
    return {
        "calls": query(db, "SELECT id, node_id, purpose, reply FROM llm_calls ORDER BY id"),
        "evaluations": query(db, "SELECT id, node_id, created_at, verdict FROM evaluations ORDER BY id"),
        "nodes": query(db, "SELECT id, kind, status FROM nodes ORDER BY id"),
    }


def without_profile(verdict: str) -> dict:
    data = json.loads(verdict)
    data.pop("profile", None)
    return data


CASES = {
    # During the first implementation call (the scripted model takes 1 s to answer).
    "llm": ("llm:2:0.2", {"KTREE_SCRIPTED_LATENCY": "1"},
            lambda k: len(k["calls"]) == 1 and ("variant", "generating") in [n[1:] for n in k["nodes"]]),
    # As the first variant's build starts (no delay: a source built before by another test is
    # remembered, and its build ends at once: engine.evaluate.host.build_memo).
    "compile": ("compile:1", {},
                lambda k: not k["evaluations"] and any(n[2] == "compiling" for n in k["nodes"])),
    # As the first variant's check starts (no delay: an evaluation takes well under a second now,
    # so a delayed kill could land after it).
    "evaluate": ("evaluate:1", {},
                 lambda k: not k["evaluations"] and any(n[2] in DEVICE_PHASES for n in k["nodes"])),
    # Inside the transaction that turns the ideas reply into idea and variant rows.
    "db-transaction": ("db:4", {},
                       lambda k: len(k["calls"]) == 1 and [n[1:] for n in k["nodes"]] == [
                           ("root", "reference"), ("idea", "generating")]),
    # Between an evaluation's row and its node's update.
    "db-after-evaluation": ("db:5", {},
                            lambda k: len(k["evaluations"]) == 1
                            and dict((n[0], n[2]) for n in k["nodes"])[k["evaluations"][0][1]]
                            not in DONE_STATUSES),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_resume_after_sigkill(tmp_path: Path, case: str):
    point, env, landed = CASES[case]
    db = tmp_path / "k.db"
    killed = run_ktree("run", "softmax", "--provider", "scripted", "--backend", "cpu", "--headless",
                       *SHAPE, "--db", str(db), env={"KTREE_CRASH_AT": point, **env})
    assert killed.returncode == -9, killed.stderr[-2000:]
    before = killed_where(db)
    assert landed(before), before["nodes"]
    [(sid,)] = query(db, "SELECT id FROM sessions")
    assert query(db, "SELECT status FROM sessions") == [("running",)]  # as the kill left it
    listed = run_ktree("--db", str(db), "sessions")
    assert listed.returncode == 0 and listed.stdout.split()[-1] == "interrupted"
    # The best so far is recorded as verdicts come, not only when the search ends.
    best = query(db, "SELECT MAX(n.speedup) FROM nodes n JOIN evaluations e ON e.node_id = n.id"
                     " WHERE n.status = 'correct' AND n.pruned = 0")[0][0]
    assert query(db, "SELECT best_speedup FROM sessions")[0][0] == (
        pytest.approx(best) if best is not None else None)

    # A command given while the engine was dead is honoured on resume.
    async def pin_root() -> None:
        store = await Store.open(db)
        [root] = [n for n in await store.nodes.of(sid) if n.kind == "root"]
        await store.commands.add(sid, *control.encode(control.Pin(root.id)))
        await store.close()

    asyncio.run(pin_root())
    resumed = run_ktree("--db", str(db), "run", "--resume", str(sid), "--headless", "--json")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads(resumed.stdout)
    assert summary["status"] == "finished" and summary["resumed"] and summary["session_id"] == sid
    assert query(db, "SELECT status FROM sessions") == [("finished",)]
    assert query(db, "SELECT pinned FROM nodes WHERE kind = 'root'") == [(1,)]
    assert query(db, "SELECT COUNT(*) FROM commands WHERE applied_at IS NULL") == [(0,)]

    after = killed_where(db)
    # Nothing recorded was lost or changed; no call was made twice.
    assert after["calls"][: len(before["calls"])] == before["calls"]
    keys = [(node, purpose) for _, node, purpose, _ in after["calls"]]
    assert len(keys) == len(set(keys))
    # A profile of the final best may be attached to its verdict later; nothing else changes.
    kept = [(id, node, at, without_profile(verdict)) for id, node, at, verdict in after["evaluations"]]
    assert kept[: len(before["evaluations"])] == [
        (id, node, at, without_profile(verdict)) for id, node, at, verdict in before["evaluations"]]
    evaluated = [node for _, node, _, _ in after["evaluations"]]
    assert len(evaluated) == len(set(evaluated))  # not re-run
    # The search is whole: one idea, two variants (and any fix), each with its verdict.
    variants = query(db, "SELECT id, status, source FROM nodes WHERE kind = 'variant'")
    assert len([v for v in variants]) >= 2
    assert all(status in DONE_STATUSES for _, status, _ in variants)
    assert sorted(evaluated) == sorted(v for v, _, source in variants if source)
    assert query(db, "SELECT COUNT(*) FROM nodes WHERE kind = 'idea' AND status = 'ok'") == [(1,)]
    assert query(db, "SELECT COUNT(*) FROM llm_calls WHERE purpose = 'idea'") == [(1,)]


def test_recovery_restarts_only_the_work_in_flight():
    """What a resume does with each node, from the nodes alone: a recorded result is kept, work
    in flight is restarted once, a pruned node's work is marked cancelled, and a compile error
    of this round whose fix was never recorded gets its fix."""
    from engine.domain import Node
    from engine.search.resume import CANCEL, FIX, IDEAS, VARIANT, recovery

    def n(id: int, kind: str, parent: int | None, status: str, round: int = 2, **extra: object) -> Node:
        return Node(id, 1, parent, kind, round, "", "", "", status, "llm", None, None, **extra)

    nodes = {x.id: x for x in [
        n(1, "root", None, "reference", round=0),
        n(2, "idea", 1, "ok"),
        n(3, "variant", 2, "correct"),
        n(4, "variant", 2, "compile_error"),  # no fix child yet
        n(5, "variant", 2, "compile_error"),
        n(6, "variant", 5, "generating"),  # 5's fix, in flight
        n(7, "idea", 3, "generating"),
        n(8, "variant", 2, "queued", pruned=True),
        n(9, "variant", 2, "compiling"),  # still running (busy)
        n(10, "variant", 2, "compile_error", round=1),  # an earlier round's: left alone
        n(11, "variant", 2, "failed"),
    ]}
    steps = [(step, node.id) for step, node in recovery(nodes, 2, busy={9})]
    assert steps == [(FIX, 4), (VARIANT, 6), (IDEAS, 7), (CANCEL, 8)]
