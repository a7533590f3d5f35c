"""The long-lived evaluation worker: a fork server reused between evaluations, each evaluation in a
process of its own forked from it, the server replaced after a crash, a timeout or a flag (what the
candidate left running goes with it) and after K evaluations; the verdicts are the same as a fresh
process's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.host.worker import GPU_STANDBYS
from engine.problems import load_problem

SOFTMAX = load_problem("softmax")
WORK = {"flops": SOFTMAX.cost("cpu").flops, "bytes": SOFTMAX.cost("cpu").bytes}  # as the search passes them
SCRIPTED = Path(__file__).resolve().parents[2] / "engine" / "scripted_library"
HONEST = (SCRIPTED / "softmax" / "cpu" / "online_1.py").read_text()
WRONG = (SCRIPTED / "softmax" / "cpu" / "online_2.py").read_text()  # declared incorrect
PYTHON_ONLY = """
import os, torch, torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, x):
        {body}
"""


@pytest.mark.slow
def test_one_worker_serves_many_evaluations_each_in_a_process_forked_for_it():
    phases: list[str] = []

    async def on_phase(name: str) -> None:
        phases.append(name)

    async def go() -> tuple[list, list]:
        evaluator = LocalEvaluator("cpu", eval_timeout=60, worker=True, worker_max_jobs=3)
        worker = evaluator.worker
        assert worker is not None
        seen = []

        async def one(source: str) -> None:
            job = evaluator.job(SOFTMAX.path, source, SOFTMAX.sizes_for("cpu"), **WORK)
            verdict = await evaluator.evaluate(job, on_phase)
            seen.append((verdict.status, worker.starts, list(worker.restarts), verdict.log))

        try:
            await one(HONEST)
            await one(WRONG)
            await one(PYTHON_ONLY.format(body="os._exit(3)"))  # the worker dies with it
            await one(HONEST)
            await one(PYTHON_ONLY.format(body="return torch.softmax(x, dim=1)"))  # flagged: torch ops
            await one(HONEST)
            await one(HONEST)
            await one(HONEST)  # the 3rd evaluation of this process: replaced after it
            await one(HONEST)
        finally:
            await evaluator.close()
        return [(s, starts, restarts) for s, starts, restarts, _ in seen], seen

    summary, seen = asyncio.run(go())
    assert [s for s, _, _ in summary] == [
        "correct", "incorrect", "crashed", "correct", "flagged", "correct", "correct", "correct", "correct"]
    assert "exit code 3" in seen[2][3]
    # one server for the first two, a new one after the crash, another after the flag (what either
    # left running goes with its server), and one more after three evaluations in a row
    assert [starts for _, starts, _ in summary] == [1, 1, 1, 2, 2, 3, 3, 3, 4]
    assert summary[-1][2] == ["after crashed", "after flagged", "after 3 evaluations"]
    assert phases.count("checking") == 9 and "timing" in phases and "compiling" in phases


@pytest.mark.slow
def test_a_hung_candidate_is_killed_and_the_next_one_runs_in_a_fresh_worker():
    async def go() -> tuple[str, str, list[str], int]:
        evaluator = LocalEvaluator("cpu", eval_timeout=15, worker=True)
        assert evaluator.worker is not None
        try:
            hung = await evaluator.evaluate(evaluator.job(
                SOFTMAX.path, PYTHON_ONLY.format(body="while True: pass"), SOFTMAX.sizes_for("cpu"), **WORK))
            evaluator.eval_timeout = 300  # the honest one has all the time it needs on a busy machine
            after = await evaluator.evaluate(
                evaluator.job(SOFTMAX.path, HONEST, SOFTMAX.sizes_for("cpu"), **WORK))
            return hung.status, after.status, evaluator.worker.restarts, evaluator.worker.starts
        finally:
            await evaluator.close()

    hung, after, restarts, starts = asyncio.run(go())
    assert (hung, after) == ("timeout", "correct")
    assert restarts == ["timeout"] and starts == 2


def test_a_build_killed_mid_way_leaves_no_lock_that_blocks_the_next(tmp_path):
    """torch's builder leaves its lock file behind when killed (a compile timeout); the next
    evaluation of that source must not wait on it."""
    from engine.evaluate.child.evaluation import build_key

    async def go():
        evaluator = LocalEvaluator("cpu", eval_timeout=120, compile_timeout_s=300, worker=True)
        job = evaluator.job(SOFTMAX.path, HONEST, SOFTMAX.sizes_for("cpu"), **WORK)
        stale = Path(job.cache_dir) / build_key(job) / "ktree_softmax_online_1_cpu" / "lock"
        stale.parent.mkdir(parents=True, exist_ok=True)
        stale.write_text("")  # as a killed build leaves it
        # and no build ended since (else the engine would not start a compile process: build_memo)
        (Path(job.cache_dir) / "compiled" / f"{build_key(job)}.json").unlink(missing_ok=True)
        try:
            return await evaluator.evaluate(job), stale.exists()
        finally:
            await evaluator.close()

    verdict, still_there = asyncio.run(go())
    assert verdict.status == "correct", verdict.log
    assert not still_there


@pytest.mark.slow
def test_a_replaced_worker_hands_over_to_a_standby_started_ahead():
    """A GPU's worker keeps its successor started (prepared) and hands over when it is replaced
    (after a flag as after a planned retirement): no fresh process is
    started then. Forced on here, on the cpu, where the evaluator leaves it off (a start would take
    cores from the timing it overlaps)."""

    async def go() -> tuple[list[str], Any, list[str]]:
        evaluator = LocalEvaluator("cpu", eval_timeout=60, worker=True, worker_max_jobs=2)
        worker = evaluator.worker
        assert worker is not None and not worker.standby  # off on the cpu backend
        worker.standby, worker.standby_depth = "always", GPU_STANDBYS  # as on a GPU
        statuses = []
        flagged = PYTHON_ONLY.format(body="return torch.softmax(x, dim=1)")
        try:
            for source in (HONEST, flagged, HONEST, HONEST, HONEST):
                job = evaluator.job(SOFTMAX.path, source, SOFTMAX.sizes_for("cpu"), **WORK)
                statuses.append((await evaluator.evaluate(job)).status)
        finally:
            await evaluator.close()
        return statuses, (worker.starts, worker._spawned, worker.standby_used), worker.restarts

    statuses, counts, restarts = asyncio.run(go())
    assert statuses == ["correct", "flagged", "correct", "correct", "correct"]
    assert restarts == ["after flagged", "after 2 evaluations"]
    # three processes used, the last two standbys; the first start spawned two standbys, each later
    # start one more to keep two starting or ready (the last two, never used, dropped by close())
    assert GPU_STANDBYS == 2
    assert counts == (3, 5, 2)
