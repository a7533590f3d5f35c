"""A reference time that disagrees with its own history is not ranked on (issue 36 item 2): on a
loaded host the cpu reference read 100x its usual time, and a naive triple loop was reported
`correct 1.81x` and chosen as a parent."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from engine.domain import Node, best_variant
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.host.reference_history import ReferenceHistory, is_disturbed
from engine.evaluate.verdict import Verdict
from engine.search.strategies import strategy_for

REPO = Path(__file__).resolve().parents[2]
MATMUL = (REPO / "problems" / "level1" / "matmul.py").read_text()
SCRIPTED = REPO / "engine" / "scripted_library" / "matmul" / "cpu"
NAIVE = (SCRIPTED / "naive_1.py").read_text()  # a plain triple loop: correct, much slower than torch
TILED = (SCRIPTED / "tiled_1.py").read_text()
SIZES = {"M": 64, "K": 64, "N": 64}
WORK = {"flops": 2 * 64**3, "bytes": 4 * 3 * 64 * 64}


def _node(id: int, verdict: Verdict) -> Node:
    """The node the search makes of a verdict (engine.search.orchestrator._evaluate)."""
    return Node(id, 1, 0, "variant", 1, f"v{id}", "", "src", verdict.status, "llm", verdict.speedup_eager,
                verdict.time_ms, disturbed=is_disturbed(verdict.flags))


def _root() -> Node:
    return Node(0, 1, None, "root", 0, "ref", "", "", "reference", "llm", None, None)


@pytest.mark.slow
def test_a_reference_slowed_by_the_host_gives_no_speedup_and_no_parent(tmp_path):
    """The host's load is simulated where it did the harm: during the reference's calls only (the
    problem's reference sleeps 5 ms a call while a file of the test's exists; a candidate is timed
    as it is). The history of the reference's time on this evaluator says 5 ms is disturbed: the
    naive loop is not a speedup, and the honest undisturbed variant is the parent."""
    flag = tmp_path / "host-busy"
    problem = tmp_path / "matmul_hooked.py"
    hooked = MATMUL.replace("import torch\n", "import os\nimport time\n\nimport torch\n", 1)
    problem.write_text(hooked.replace(
        "        return torch.matmul(A, B)",
        f"        if os.path.exists({str(flag)!r}):  # the test's load, on the reference alone\n"
        "            time.sleep(0.005)\n"
        "        return torch.matmul(A, B)"))

    async def go() -> tuple[Verdict, Verdict]:
        evaluator = LocalEvaluator("cpu", isolation="basic", worker=True)
        try:
            quiet = await evaluator.evaluate(evaluator.job(problem, TILED, SIZES, **WORK))
            job = evaluator.job(problem, NAIVE, SIZES, **WORK)
            # No clean time kept (as on a host always busy: one measured while other work ran is
            # not kept), so only the history stands between the slowed reference and the speedup.
            evaluator._clean_file(job, evaluator.devices[0]).unlink(missing_ok=True)
            flag.write_text("")
            return quiet, await evaluator.evaluate(job)
        finally:
            await evaluator.close()

    quiet, naive = asyncio.run(go())
    assert quiet.status == "correct", quiet.log
    assert not is_disturbed(quiet.flags)
    assert naive.status == "correct", naive.log  # marked, like noisy: still correct
    history = naive.timing["reference_history"]
    assert history["disturbed"] and history["measured_ms"] > 5.0, history
    assert history["speedup_measured"] > 1.0  # what the slowed reference made of it
    assert naive.speedup_eager < 1.0, (naive.speedup_eager, history)  # reported against the history
    assert naive.ref_eager_ms == history["median_ms"] < 5.0
    flag_text = next(f for f in naive.flags if f.startswith("reference-disturbed: "))
    assert "ranks after undisturbed variants" in flag_text
    nodes = {0: _root(), 1: _node(1, quiet), 2: _node(2, naive)}
    assert strategy_for("tree", rounds=2, ideas=1, variants=2, top=1).next_parents(nodes, 1, [0]) == [1]
    assert best_variant(nodes).id == 1


def _verdict(ref_ms: float, time_ms: float) -> Verdict:
    return Verdict(status="correct", backend="cpu", ref_eager_ms=ref_ms, time_ms=time_ms,
                   speedup_eager=ref_ms / time_ms, timing={"time_ci_ms": [time_ms * 0.95, time_ms * 1.05]})


def test_the_history_judges_against_its_median_and_heals_from_a_loaded_start(tmp_path):
    history, path = ReferenceHistory(), tmp_path / "h.json"
    for ref in (0.15, 0.16, 0.14):
        assert not is_disturbed(history.judge(_verdict(ref, 1.0), "k", path).flags)
    slowed = history.judge(_verdict(15.35, 8.46), "k", path)  # the incident's numbers
    assert is_disturbed(slowed.flags) and slowed.status == "correct"
    assert slowed.speedup_eager < 0.02 and slowed.speedup_hi < 0.02
    assert history.times("k", path) == [0.15, 0.16, 0.14]  # a disturbed time is not added
    assert ReferenceHistory().median("k", path) == 0.15  # kept for other processes and sessions
    # A history begun under load (15 ms) is dropped by the first quiet time, not held against it.
    loaded = ReferenceHistory()
    loaded.judge(_verdict(15.0, 8.0), "j", None)
    assert not is_disturbed(loaded.judge(_verdict(0.15, 8.0), "j", None).flags)
    assert loaded.times("j", None) == [0.15]
    assert is_disturbed(loaded.judge(_verdict(15.0, 8.0), "j", None).flags)
    # The clean time (measured with no candidate) seeds an empty history.
    seeded = ReferenceHistory()
    assert is_disturbed(seeded.judge(_verdict(15.0, 8.0), "s", None, clean={"median": 0.15}).flags)


def test_a_flagged_candidates_reference_time_is_neither_judged_nor_kept(tmp_path):
    """A candidate that rebinds the clocks reads its reference at 0.001 ms; kept, that time made
    every honest measurement after it (0.5 ms) `reference-disturbed` against a 0.001 ms median."""
    history, path = ReferenceHistory(), tmp_path / "h.json"
    bent = dataclasses.replace(_verdict(0.001, 0.001), status="flagged", flags=("harness: clock patched",))
    assert history.judge(bent, "k", path) == bent
    assert history.times("k", path) == [] and not path.exists()
    assert not is_disturbed(history.judge(_verdict(0.5, 1.0), "k", path).flags)
    assert history.times("k", path) == [0.5]


def test_a_disturbed_variant_ranks_after_every_undisturbed_one():
    def variant(id: int, speedup: float, disturbed: bool = False) -> Node:
        return Node(id, 1, 0, "variant", 1, f"v{id}", "", "src", "correct", "llm", speedup, 1.0,
                    disturbed=disturbed)

    nodes = {0: _root(), 1: variant(1, 1.81, disturbed=True), 2: variant(2, 0.9), 3: variant(3, 1.2)}
    assert strategy_for("tree", rounds=2, ideas=1, variants=3, top=2).next_parents(nodes, 1, [0]) == [3, 2]
    assert strategy_for("sequential", rounds=2, ideas=1, variants=1, top=1).next_parents(nodes, 1, [0]) == [3]
    assert best_variant(nodes).id == 3
    alone = {0: _root(), 1: nodes[1]}  # the only correct one is still a parent and the best
    assert strategy_for("tree", rounds=2, ideas=1, variants=1, top=1).next_parents(alone, 1, [0]) == [1]
    assert best_variant(alone).id == 1
    assert dataclasses.replace(nodes[2], disturbed=True).disturbed


def test_the_store_keeps_the_mark(tmp_path):
    from engine.commands._common import open_store

    async def go() -> bool:
        store = await open_store(tmp_path / "s.db")
        try:
            sid = await store.sessions.create(problem="p", problem_path="p.py", backend="cpu", strategy="tree",
                                             provider="scripted", models=[], config={}, sizes={})
            node = await store.nodes.add(session_id=sid, parent_id=None, kind="variant", round=1,
                                        status="correct", source="src")
            await store.nodes.update(node.id, disturbed=True, speedup=0.1)
            return (await store.nodes.of(sid))[0].disturbed
        finally:
            await store.close()

    assert asyncio.run(go()) is True
