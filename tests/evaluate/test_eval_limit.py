"""The evaluation's time limit follows the problem, is a flag, and a candidate past it holds the
device no longer than it (issue 36 item 3)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from engine.cli import build_parser
from engine.evaluate import languages
from engine.evaluate.host import eval_limit as limits
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.problems import load_problem

SOFTMAX = load_problem("softmax")
WORK = {"flops": SOFTMAX.cost("cpu").flops, "bytes": SOFTMAX.cost("cpu").bytes}
SCRIPTED = Path(__file__).resolve().parents[2] / "engine" / "scripted_library"
HONEST = (SCRIPTED / "softmax" / "cpu" / "online_1.py").read_text()
LOOPING = """
import torch, torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            pass
"""


def test_the_limit_follows_the_reference_within_a_floor_and_a_cap():
    fast = limits.eval_limit("cpu", 0.15, time_budget_s=2.0, trials=3)
    assert (fast.seconds, fast.source) == (60.0, "auto")  # 3 passes of 2 s, x4: under the floor
    assert "0.15 ms" in fast.why and "--eval-timeout" in fast.why
    slow = limits.eval_limit("cpu", 500.0, time_budget_s=2.0, trials=3)  # 0.5 s a call: 10.5 s a pair
    assert slow.source == "auto" and 60.0 < slow.seconds <= limits.CAP_S
    assert limits.eval_limit("cpu", 1e5, time_budget_s=2.0, trials=3).seconds == limits.CAP_S
    assert limits.eval_limit("cuda", 0.01, time_budget_s=2.0, trials=3).seconds == 120.0
    triton = languages.get("triton").eval_floor_s  # its JIT, and its interpreter on the cpu
    assert limits.eval_limit("cuda", 0.01, time_budget_s=2.0, trials=3, floor_s=triton).seconds == 300.0
    assert limits.eval_limit("cpu", 0.01, time_budget_s=2.0, trials=3, floor_s=triton).seconds == 300.0
    unknown = limits.eval_limit("cpu", None, time_budget_s=2.0, trials=3)
    assert (unknown.seconds, unknown.source) == (300.0, "unknown")
    given = limits.eval_limit("cpu", 0.15, time_budget_s=2.0, trials=3, eval_timeout=7)
    assert (given.seconds, given.source) == (7.0, "flag")
    assert given.killed().startswith("killed after 7 s: the evaluation's time limit (--eval-timeout 7)")


@pytest.mark.parametrize("command", [["run", "softmax"], ["suite", "level1"], ["eval", "softmax", "x.py"]])
def test_eval_timeout_is_a_flag_of_every_command_that_evaluates(command):
    args = build_parser().parse_args([*command, "--eval-timeout", "45"])
    assert args.eval_timeout == 45.0
    assert build_parser().parse_args(command).eval_timeout is None


def test_the_flag_travels_in_the_job_and_the_evaluator_reads_it_there():
    """--eval-timeout is declared once (options.CheckSettings): it is recorded with the session,
    each variant's job carries it (wherever the job runs: this host, a Ray node), and the evaluator
    takes its limit from the job; its own is only the default for a job that carries none."""
    from engine.commands._common import run_request
    from engine.launch import make_evaluator
    from engine.launch.run import _search_config

    args = build_parser().parse_args(["run", "softmax", "--eval-timeout", "45", "--backend", "cpu"])
    request = run_request(args)
    config = _search_config(request, SOFTMAX)
    assert config.checks.eval_timeout == 45.0  # recorded with the session
    _, evaluator = make_evaluator("cpu")
    assert evaluator.eval_timeout is None  # not the evaluator's: the job's
    job = evaluator.job(SOFTMAX.path, HONEST, SOFTMAX.sizes_for("cpu"), **WORK, **config.checks.job_settings())
    assert job.eval_timeout == 45.0 and type(job).from_dict(job.to_dict()).eval_timeout == 45.0
    limit = evaluator._limit(job, evaluator.devices[0])
    assert (limit.seconds, limit.source) == (45.0, "flag")
    plain = evaluator.job(SOFTMAX.path, HONEST, SOFTMAX.sizes_for("cpu"), **WORK)
    assert plain.eval_timeout is None and evaluator._limit(plain, evaluator.devices[0]).source != "flag"
    evaluator.eval_timeout = 30.0  # a default, for the jobs that carry none
    assert evaluator._limit(plain, evaluator.devices[0]).seconds == 30.0
    assert evaluator._limit(job, evaluator.devices[0]).seconds == 45.0


@pytest.mark.slow
@pytest.mark.alone  # (how soon the waiting one is judged: the host to itself)
def test_a_looping_candidate_is_killed_at_its_own_limit_and_the_next_waiting_evaluation_runs_right_after(
        monkeypatch):
    """A looping solution holds the cpu's host lock; another ktree process's evaluation (here a
    second evaluator: its own lock handle) waits for it. With the limit from the problem (its floor
    lowered to 20 s for the test) the looping one is killed at 20 s, not 300 s, and the waiting
    one is judged right after."""
    from engine.evaluate.host.runner import run_child

    monkeypatch.setitem(limits.FLOOR_S, "cpu", 20.0)
    monkeypatch.setattr(limits, "CAP_S", 20.0)  # 20 s whatever the loaded host makes of the reference
    sizes = SOFTMAX.sizes_for("cpu")
    clean = {k: 0.2 for k in ("median", "p10", "p90", "lo", "hi")}  # a later job carries the kept clean time

    async def go() -> dict:
        first, other = LocalEvaluator("cpu", worker=True), LocalEvaluator("cpu", worker=True)
        waited: list[str] = []
        other.on_note = waited.append
        out: dict = {}
        try:
            honest = other.job(SOFTMAX.path, HONEST, sizes, **WORK)
            # built, and the other's worker started, beforehand: it reaches the device while the
            # looping one holds it
            built = await run_child(honest.replace(mode="compile"), 600, other._compile_env, other.sandbox)
            assert built[1] and built[1]["status"] == "compiled", built
            assert await other.worker.ready(honest.problem_path) is None
            holding = asyncio.Event()

            async def on_phase(name: str) -> None:
                if name == "checking":
                    holding.set()  # the looping candidate runs, holding the host lock

            job = first.job(SOFTMAX.path, LOOPING, sizes, **WORK).replace(ref_eager_clean=clean)
            looping = asyncio.ensure_future(first.evaluate(job, on_phase))
            await asyncio.wait_for(holding.wait(), 240)
            t0 = time.monotonic()
            out["honest"] = await other.evaluate(honest)
            out["honest_s"] = time.monotonic() - t0
            out["looping"] = await looping
            out["waited"] = waited
        finally:
            await first.close()
            await other.close()
        return out

    out = asyncio.run(go())
    print(f"the waiting honest evaluation took {out['honest_s']:.1f} s; notes: {out['waited']}")
    looping = out["looping"]
    assert looping.status == "timeout"
    assert looping.log.startswith("killed after 20 s: the evaluation's time limit (auto: 4x the "), looping.log
    assert looping.timing["eval_limit"] == {**looping.timing["eval_limit"], "s": 20.0, "source": "auto"}
    honest = out["honest"]
    assert honest.status == "correct", honest.log
    # it did wait behind the looping one (for the cpu's lock, or the host's timing cores: host/admission.py)
    waited = out["waited"]
    assert any(n.startswith(("waiting for cpu0", "waiting for the cores")) for n in waited), waited
    # killed at 20 s; the honest one then runs (its worker was started while it waited): well
    # under the old 300 s even on a loaded 2-core host (~25 s idle)
    assert out["honest_s"] < 20 + 150, out["honest_s"]


def test_a_large_problems_limit_grows_with_its_bytes_and_says_so():
    """Drawing, answering and comparing gigabytes takes time of its own (issue 44 item 4)."""
    from engine.evaluate.host.eval_limit import eval_limit, size_s

    small = eval_limit("cuda", 1.0, time_budget_s=1.0, trials=3, nbytes=1e6)
    large = eval_limit("cuda", 1.0, time_budget_s=1.0, trials=3, nbytes=12.9e9)
    assert large.seconds == pytest.approx(small.seconds + size_s("cuda", 12.9e9), abs=0.2)
    assert "for its 12.9 GB" in large.why and " GB" not in small.why
    unknown = eval_limit("cuda", None, time_budget_s=1.0, trials=3, nbytes=12.9e9)
    assert unknown.seconds > 300 and "12.9 GB" in unknown.why
    assert eval_limit("cuda", 1.0, time_budget_s=1.0, trials=3, eval_timeout=50, nbytes=12.9e9).seconds == 50
