"""The check trials' references, computed once per worker (engine.evaluate.harness.expected_cache; on the cpu
by the worker's clean server, inherited by each candidate's process): the second evaluation in a worker
reuses the inputs and fp64 answers of the first and gets the same verdict, whatever the first wrote;
the input seed is the evaluator's secret and no file the candidate can read holds it; the cache
notices a candidate writing into it; GPU-held seconds and per-phase seconds are recorded."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest
import torch

from engine.evaluate.harness import expected_cache
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.problems import load_problem

SOFTMAX = load_problem("softmax")
WORK = {"flops": SOFTMAX.cost("cpu").flops, "bytes": SOFTMAX.cost("cpu").bytes}
SCRIPTED = Path(__file__).resolve().parents[2] / "engine" / "scripted_library"
HONEST = (SCRIPTED / "softmax" / "cpu" / "online_1.py").read_text()  # the same build as test_worker's
# Looks for job files holding an input seed (only an evaluation's job does) under its working dir
# and /tmp, and reports what it found through the error it raises.
SNOOP = textwrap.dedent("""
    import glob, json, torch, torch.nn as nn
    class ModelNew(nn.Module):
        def forward(self, x):
            found = []
            paths = glob.glob("**/job.json", recursive=True) + glob.glob("/tmp/**/job.json", recursive=True)
            for path in paths:
                try:
                    if json.load(open(path)).get("input_seed") is not None:
                        found.append(path)
                except (OSError, ValueError):
                    pass
            raise RuntimeError(f"job files seen: {found}")
""")


# Writes zeros over every cached input and answer it can reach in its own process, then answers
# zeros itself: a set shared with the next candidate's process would mislead that one too.
POISON = textwrap.dedent("""
    import torch, torch.nn as nn
    from engine.evaluate.harness import expected_cache
    for checks in list(expected_cache._CACHE.values()):
        for group in (*checks.inputs, *checks.expected):
            for t in group:
                if isinstance(t, torch.Tensor):
                    t.zero_()
    class ModelNew(nn.Module):
        def forward(self, x):
            return torch.zeros_like(x)
""")


def evaluate_in_one_worker(*sources: str) -> list:
    async def go() -> list:
        evaluator = LocalEvaluator("cpu", eval_timeout=120, worker=True)
        try:
            out = []
            for source in sources:
                job = evaluator.job(SOFTMAX.path, source, SOFTMAX.sizes_for("cpu"), **WORK)
                out.append(await evaluator.evaluate(job))
            return out
        finally:
            await evaluator.close()

    return asyncio.run(go())


def test_each_evaluation_in_a_worker_uses_the_same_references_and_gets_the_same_verdict():
    """Each evaluation runs in a process of its own, forked from the worker's server; on the cpu the
    server made the check set before the first fork (from the evaluator's secret seed), so the second
    evaluation inherits it instead of making it again."""
    first, second = evaluate_in_one_worker(HONEST, HONEST)
    assert (first.status, second.status) == ("correct", "correct"), (first.log, second.log)
    assert first.timing["reference_checks"]["cached"] is True  # (made by the server, before the fork)
    assert second.timing["reference_checks"]["cached"] is True
    assert first.timing["reference_checks"]["bytes"] == second.timing["reference_checks"]["bytes"] > 0
    # The same trials (same inputs, same fp64 answers): the same source errs by the same amounts.
    assert first.max_abs_err == second.max_abs_err and first.rel_l2_err == second.rel_l2_err
    # Where the time went: per phase in the worker, and what the device was held for.
    for v in (first, second):
        phases = v.timing["phases_s"]
        assert {"load", "reference", "check", "time"} <= set(phases)
        held = v.timing["held_s"]
        assert held["total"] >= held["worker"] > 0
        assert v.timing["floor_s"] > 0


def test_a_candidate_zeroing_its_inherited_check_set_misleads_no_later_evaluation():
    """The set a child inherits is its own copy (the fork's): what one candidate writes there is
    gone with its process; the server's set, which the next child inherits, never saw it."""
    poisoned, honest = evaluate_in_one_worker(POISON, HONEST)
    assert poisoned.status in ("incorrect", "flagged"), poisoned.log
    assert honest.status == "correct", honest.log
    assert honest.timing["reference_checks"]["cached"] is True


def test_the_input_seed_is_the_evaluators_secret_and_no_job_file_is_left_to_read():
    a, b = LocalEvaluator("cpu", worker=True), LocalEvaluator("cpu", worker=True)
    assert a._input_seed != b._input_seed  # fresh per evaluator (one session, one eval run)
    job = a.job(SOFTMAX.path, "x", SOFTMAX.sizes_for("cpu"), **WORK)
    assert job.input_seed is None  # set as the job is sent, not in what the search records

    async def go() -> str:
        try:
            verdict = await a.evaluate(a.job(SOFTMAX.path, SNOOP, SOFTMAX.sizes_for("cpu"), **WORK))
        finally:
            await a.close()
            await b.close()
        return verdict.log

    log = asyncio.run(go())
    assert "job files seen: []" in log, log


def test_a_candidate_writing_into_the_cached_references_is_noticed():
    drawn = iter([torch.ones(4), torch.full((4,), 2.0)])
    key = ("test", 1)
    made = expected_cache.expected_for(key, 2, 0, "cpu", lambda: [next(drawn)], lambda x: x * 2,
                                       lambda x: x * 2, lambda out: [out], lambda native, expected: {})
    assert made.intact() and expected_cache.cached(key) is made
    # no redraw
    assert expected_cache.expected_for(key, 2, 0, "cpu", lambda: [], None, None, None, None) is made
    copy = made.trial_inputs(1, "cpu")[0]
    copy.add_(1)  # a copy: the cache is untouched
    assert made.intact() and float(made.inputs[1][0][0]) == 2.0
    made.expected[0][0].zero_()
    assert not made.intact()
    expected_cache.drop(key)
    assert expected_cache.cached(key) is None


@pytest.mark.slow
def test_bench_gpu_cost_reports_held_seconds_by_phase_beside_the_floor():
    from engine.bench.gpu_cost import PHASES, gpu_cost_bench, gpu_cost_table

    result = asyncio.run(gpu_cost_bench("cpu", problems=["softmax"], per_problem=1))
    [row] = result["rows"]
    assert row["status"] == "correct" and row["held_s"] > 0 and row["floor_s"] > 0
    assert row["worker_start_in_lock"] is False  # started before the lock was taken
    parts = [row[f"{p}_s"] for p in PHASES]
    assert all(p is not None and p >= 0 for p in parts)
    assert abs(sum(parts) - row["held_s"]) < 0.01  # the phases add up to the held total
    assert row["audit_s"] > 0  # the judge's fresh-input calls on a correct claim, held time too
    # the reference phase by its parts: the answers, its op profile, its outputs compared, the timed sets
    assert set(row["ref_parts_s"]) == {"answers", "ops", "varies", "sets"}
    assert abs(sum(row["ref_parts_s"].values()) - row["ref_s"]) < 0.01
    [summary] = result["problems"]
    assert abs(summary["goal_s"] - (1.5 * summary["floor_s"] + 0.5)) < 1e-3
    assert "| softmax | 1 |" in gpu_cost_table(result)


def test_bench_gpu_cost_unknown_problem_is_a_usage_error():
    from tests.cli.helpers import assert_one_line_usage_error
    from tests.conftest import run_ktree

    proc = run_ktree("bench", "gpu-cost", "nosuch", "--backend", "cpu")
    assert_one_line_usage_error(proc, "no honest scripted cpu kernels for 'nosuch'")


def test_the_compile_baseline_can_be_skipped_where_nothing_reads_it(monkeypatch):
    assert LocalEvaluator("cpu").compile_baseline is True
    monkeypatch.setenv("KTREE_COMPILE_BASELINE", "0")
    assert LocalEvaluator("cpu").compile_baseline is False
    assert LocalEvaluator("cpu", compile_baseline=True).compile_baseline is True  # an explicit choice wins
