"""Acceptance: a real two-round scripted search on the cpu backend, recorded in SQLite."""

import pytest

from tests.conftest import query


@pytest.mark.slow
def test_recorded_search_holds_everything(recorded_search: dict):
    db, summary = recorded_search["db"], recorded_search["summary"]
    assert summary["status"] == "finished" and summary["scripted"] and summary["rounds"] == 2
    [(sid, status, problem, backend)] = query(db, "SELECT id, status, problem, backend FROM sessions")
    assert (status, problem, backend) == ("finished", "softmax", "cpu")

    ideas = query(db, "SELECT id, round FROM nodes WHERE kind = 'idea' AND status = 'ok'")
    variants = query(db, "SELECT id, status FROM nodes WHERE kind = 'variant'")
    assert len(ideas) >= 3
    assert len(variants) >= 6
    assert {r for _, r in ideas} == {1, 2}
    # The second round's ideas grow from the first round's correct variants.
    second = query(db, "SELECT p.kind, p.status, p.round FROM nodes i JOIN nodes p"
                       " ON i.parent_id = p.id WHERE i.kind = 'idea' AND i.round = 2")
    assert second and all(row == ("variant", "correct", 1) for row in second)

    # One evaluation per variant, at the sizes it ran at; correct ones carry their timings.
    evals = query(db, "SELECT node_id, status, time_ms, ref_ms, speedup, sizes FROM evaluations")
    assert sorted(e[0] for e in evals) == sorted(v[0] for v in variants)
    assert all(e[5] == '{"batch_size": 128, "dim": 4096}' for e in evals)
    correct = [e for e in evals if e[1] == "correct"]
    assert correct
    for _, _, time_ms, ref_ms, speedup, _ in correct:
        assert time_ms > 0 and ref_ms > 0
        assert abs(speedup - ref_ms / time_ms) < 1e-9
    # The tree shows every kind of outcome the scripted library holds.
    assert {"correct", "incorrect", "compile_error"} <= {e[1] for e in evals}
    compile_logs = query(db, "SELECT verdict FROM evaluations WHERE status = 'compile_error'")
    assert all("error" in v[0].lower() for v in compile_logs)

    # An llm_calls row for every scripted answer: one idea call per parent, one per variant
    # (an implementation, or a fix of a variant that failed to compile).
    calls = dict(query(db, "SELECT purpose, COUNT(*) FROM llm_calls GROUP BY purpose"))
    assert calls["implement"] + calls["fix"] == len(variants)
    # Each fix is a child of a variant that failed to compile, and the scripted fix builds.
    fixes = query(db, "SELECT p.status, f.status FROM nodes f JOIN nodes p ON f.parent_id = p.id"
                      " WHERE f.kind = 'variant' AND p.kind = 'variant'")
    assert len(fixes) == calls["fix"] >= 1
    assert all(parent == "compile_error" and child == "correct" for parent, child in fixes)
    parents = query(db, "SELECT COUNT(DISTINCT node_id) FROM llm_calls WHERE purpose = 'idea'")
    assert calls["idea"] == parents[0][0] >= 2
    assert query(db, "SELECT COUNT(*) FROM llm_calls WHERE prompt = '' OR reply = ''") == [(0,)]

    # The summary agrees with the DB.
    assert summary["variants"] == len(variants)
    best = max(e[4] for e in correct)
    assert abs(summary["best"]["speedup_eager"] - best) < 1e-9
    assert query(db, "SELECT best_speedup FROM sessions")[0][0] == summary["best"]["speedup_eager"]
