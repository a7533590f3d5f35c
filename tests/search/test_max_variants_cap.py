"""`--max-variants N` is a hard cap (issue 30.3): a search never has more than N variant nodes,
fixes and hand edits included (they are variants too), where it used to make every variant an
idea reply asked for (4 allowed, 6 in the tree) and cancel the ones past the cap. An evaluator
that builds nothing: each variant's verdict is instant."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine.llm.scripted import ScriptedProvider
from engine.problems import load_problem
from engine.record.events import EventBus
from engine.record.store import Store
from engine.search import Search, SearchConfig
from tests.conftest import query
from tests.search.helpers import InstantEvaluator


async def _search(db: Path, correct: bool, **shape) -> dict:
    store = await Store.open(db)
    search = Search(store, EventBus(), [(ScriptedProvider("softmax", "cpu", seed=0), "scripted")],
                    InstantEvaluator(correct), load_problem("softmax"), SearchConfig.of(**shape))
    try:
        return await asyncio.wait_for(search.run(), timeout=60)
    finally:
        await store.close()


@pytest.mark.parametrize("correct, shape", [
    (True, {"rounds": 1, "ideas": 3, "variants": 2, "fixes": 0}),  # one idea reply asks for 6
    (True, {"rounds": 3, "ideas": 1, "variants": 3, "top": 1, "fixes": 0}),  # 3 a round
    (False, {"rounds": 2, "ideas": 1, "variants": 2, "top": 1, "fixes": 2}),  # fixes count
])
async def test_max_variants_is_a_hard_cap(tmp_path: Path, correct: bool, shape: dict):
    db = tmp_path / "k.db"
    summary = await _search(db, correct, max_variants=4, **shape)
    variants = query(db, "SELECT status, origin FROM nodes WHERE kind = 'variant'")
    assert len(variants) == 4, variants
    assert all(status != "cancelled" for status, _ in variants), variants  # none made only to be cut
    assert query(db, "SELECT COUNT(*) FROM llm_calls WHERE purpose IN ('implement', 'fix')") == [(4,)]
    assert summary["status"] == "stopped" and summary["stop_reason"] == "max variants reached: 4"
    if not correct:
        assert [s for s, origin in variants if origin == "fix"] == ["failed", "failed"]  # no code came


async def test_a_cap_the_search_does_not_reach_changes_nothing(tmp_path: Path):
    summary = await _search(tmp_path / "k.db", True, rounds=1, ideas=2, variants=2, fixes=0, max_variants=4)
    assert summary["status"] == "finished" and summary["stop_reason"] is None
    assert query(tmp_path / "k.db", "SELECT COUNT(*) FROM nodes WHERE kind = 'variant'") == [(4,)]
