"""Memory that holds under concurrency (engine.evaluate.harness: expected_cache, ledger): one
host-wide budget for the cached check sets of every ktree process, sets over it recomputed live
per trial with the same answers and the same verdict, dead processes' claims forgotten, and an
out-of-memory in the candidate's own call told apart from ktree's."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from engine.evaluate.harness import expected_cache, ledger
from engine.evaluate.verdict import REFERENCE_FAILED, Verdict

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _own_ledger(tmp_path, monkeypatch):
    monkeypatch.delenv("KTREE_CHECK_CACHE_HOST_MB", raising=False)
    monkeypatch.delenv("KTREE_MEMORY_LIMIT", raising=False)
    book = ledger.reset(tmp_path / "ledger")
    expected_cache.clear()
    yield book
    expected_cache.clear()
    ledger.reset(None)


def _set(key, trials=3):
    def draw():
        return [torch.randn(64, 32), torch.randint(0, 32, (64,))]

    def ref(x, t):
        return torch.nn.functional.cross_entropy(x, t)

    def flatten(out):
        return [out] if isinstance(out, torch.Tensor) else list(out)

    return expected_cache.expected_for(key, trials, 7, "cpu", draw, ref, ref, flatten, lambda native, exp: {})


def test_a_set_over_the_host_budget_is_recomputed_live_with_the_same_trials(monkeypatch):
    kept = _set(("kept",))
    assert kept.placement == "host" and kept.nbytes > 0 and kept.trials == 3
    assert ledger.ledger().host == kept.nbytes  # claimed in the host-wide ledger
    inputs = [kept.trial_inputs(t, "cpu") for t in range(3)]
    expected = [kept.trial_expected(t, "cpu") for t in range(3)]
    expected_cache.clear()
    assert ledger.ledger().host == 0  # given back with the set

    monkeypatch.setenv("KTREE_CHECK_CACHE_HOST_MB", "0")
    live = _set(("live",))
    assert live.placement == "live" and live.nbytes == 0 and not live.on_device
    assert live.trials == 3 and live.intact()
    assert ledger.ledger().host == 0
    for t in range(3):  # the same draws and the same fp64 answers, made again on demand
        assert all(torch.equal(a, b) for a, b in zip(live.trial_inputs(t, "cpu"), inputs[t], strict=True))
        assert all(torch.equal(a, b) for a, b in zip(live.trial_expected(t, "cpu"), expected[t], strict=True))
    assert not torch.equal(live.trial_inputs(0, "cpu")[0], live.trial_inputs(1, "cpu")[0])


def test_on_a_gpu_a_set_too_large_for_it_goes_live_where_making_its_trials_again_is_cheaper(_own_ledger):
    """A GPU process serves one candidate, so a set kept on the host is used once: placing 2.4 GB
    there held an H200 about 1.8 s, making a layernorm's trials again milliseconds. The host is
    chosen only where making the trials again would cost more (a model whose fp64 forward is slow)."""
    size = 2_400_000_000
    placing_s = size / expected_cache.HOST_PLACE_BYTES_PER_S
    # (no GPU here: the device has no room, as where the set does not fit it)
    assert expected_cache._place(size, "cuda", "gpu0", _own_ledger, live_s=0.05) == "live"
    assert _own_ledger.host == 0  # nothing claimed for a live set
    small = 64 * 2**20
    assert expected_cache._place(small, "cuda", "gpu0", _own_ledger, live_s=2 * placing_s) == "host"
    assert _own_ledger.host == small
    # The cpu backend keeps its rule: the host where the budget has room (sets inherited by a
    # worker's children are reused there).
    assert expected_cache._place(small, "cpu", None, _own_ledger, live_s=0.0) == "host"


def test_the_budget_is_shared_by_every_process_and_a_dead_ones_claim_is_forgotten(tmp_path, monkeypatch):
    where = tmp_path / "ledger"
    # Another process claims 60 MiB of a 100 MiB host budget and stays alive; then it dies.
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from engine.evaluate.harness import ledger
            book = ledger.Ledger({str(where)!r})
            assert book.claim_host(60 * 2**20)
            print("held", flush=True)
            sys.stdin.readline()
        """)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "KTREE_CHECK_CACHE_HOST_MB": "100"})
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setenv("KTREE_CHECK_CACHE_HOST_MB", "100")
        mine = ledger.Ledger(where)
        assert mine.used_by_others() == 60 * 2**20
        assert not mine.claim_host(50 * 2**20)  # 60 + 50 > 100
        assert mine.claim_host(30 * 2**20)
        mine.release(host=30 * 2**20)
    finally:
        holder.kill()  # SIGKILL: no clean-up of its own
        holder.wait()
    assert mine.used_by_others() == 0  # its lock went with it: its entry is gone
    assert mine.claim_host(90 * 2**20)
    mine.close()


def test_a_process_caps_its_own_sets_at_a_share_of_its_memory_limit(monkeypatch):
    monkeypatch.setenv("KTREE_MEMORY_LIMIT", str(100 * 2**20))
    book = ledger.ledger()
    assert book.claim_host(39 * 2**20)
    assert not book.claim_host(2 * 2**20)  # 41 MiB > 40 % of 100 MiB


@pytest.mark.slow
def test_a_live_set_gives_the_same_verdict_as_a_cached_one(monkeypatch):
    from engine.evaluate.host.evaluator import LocalEvaluator
    from engine.problems import load_problem

    softmax = load_problem("softmax")
    source = (REPO / "engine/scripted_library/softmax/cpu/online_1.py").read_text()
    work = {"flops": softmax.cost("cpu").flops, "bytes": softmax.cost("cpu").bytes}

    async def judge() -> Verdict:
        evaluator = LocalEvaluator("cpu", eval_timeout=120, worker=True)
        evaluator._input_seed = 12345  # the same draws both times
        try:
            job = evaluator.job(softmax.path, source, softmax.sizes_for("cpu"), **work)
            return await evaluator.evaluate(job)
        finally:
            await evaluator.close()

    cached = asyncio.run(judge())
    monkeypatch.setenv("KTREE_CHECK_CACHE_HOST_MB", "0")  # reaches the worker (worker.memory_env)
    live = asyncio.run(judge())
    assert (cached.status, live.status) == ("correct", "correct"), (cached.log, live.log)
    assert cached.timing["reference_checks"]["bytes"] > 0
    assert live.timing["reference_checks"]["bytes"] == 0
    assert (live.max_abs_err, live.rel_l2_err) == (cached.max_abs_err, cached.rel_l2_err)


OOM_CANDIDATE = textwrap.dedent("""
    import torch, torch.nn as nn
    class ModelNew(nn.Module):
        def forward(self, x):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")
""")


def test_an_out_of_memory_in_the_candidates_own_call_is_its_runtime_error():
    from engine.evaluate.host.evaluator import LocalEvaluator
    from engine.problems import load_problem

    softmax = load_problem("softmax")

    async def judge() -> Verdict:
        evaluator = LocalEvaluator("cpu", eval_timeout=120, worker=True)
        try:
            return await evaluator.evaluate(evaluator.job(softmax.path, OOM_CANDIDATE, softmax.sizes_for("cpu"),
                                                          flops=None, bytes=None))
        finally:
            await evaluator.close()

    verdict = asyncio.run(judge())
    assert verdict.status == "runtime_error", verdict.log
    assert verdict.log.startswith("out of memory in the candidate"), verdict.log
    assert "ktree out of memory" not in verdict.log


def test_ktrees_own_out_of_memory_is_told_apart():
    job = type("Job", (), {"problem_path": "/p/problem.py"})()
    traceback_of = textwrap.dedent("""
        Traceback (most recent call last):
          File "/repo/engine/evaluate/child/measure.py", line 120, in time_candidate
          File "/repo/engine/evaluate/child/check.py", line 88, in <lambda>
          File "/p/problem.py", line 14, in forward
        torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 GiB
    """)
    ours = expected_cache.label_oom(Verdict(status="runtime_error", log=traceback_of), job)
    assert ours.status == "crashed" and ours.log.startswith("ktree out of memory while checking or timing")
    theirs = expected_cache.label_oom(Verdict(status="runtime_error", log=traceback_of.replace(
        'File "/p/problem.py"', 'File "<ktree_solution_abc>"')), job)
    assert theirs.status == "runtime_error" and theirs.log.startswith("out of memory in the candidate")
    said = (f"{REFERENCE_FAILED}: Traceback ...\nengine.evaluate.harness.expected_cache.KtreeOutOfMemory:"
            " ktree out of memory while preparing the reference (trial 0's inputs and fp64 answers):"
            " CUDA out of memory")
    prep = expected_cache.label_oom(Verdict(status="runtime_error", log=said), job)
    assert prep.status == "crashed"
    assert prep.log.startswith("ktree out of memory while preparing the reference"), prep.log
    other = Verdict(status="runtime_error", log="ValueError: bad shape")
    assert expected_cache.label_oom(other, job) is other


def test_ktrees_own_out_of_memory_raised_while_checking_is_a_crashed_verdict_not_a_dead_worker(monkeypatch):
    """KtreeOutOfMemory from the check trials' fp64 answers (neither the GPU nor this process's host
    share can hold them: measured with the 4 GiB-input MSE loss on an H100) comes back from
    run_evaluate as `crashed` with ktree's own line first, never as an exception that ends the worker."""
    from engine.evaluate.child import evaluation as child

    def out_of_memory(job, on_phase=None):
        raise expected_cache.KtreeOutOfMemory("computing the fp64 answers (neither on the GPU nor within this"
                                      " process's host share: 48.0 GiB)", RuntimeError("CUDA out of memory."))

    monkeypatch.setattr(child, "_evaluate", out_of_memory)
    job = type("Job", (), {"problem_path": "/p/problem.py", "backend": "cuda", "sizes": {}})()
    verdict = child.run_evaluate(job)
    assert verdict.status == "crashed", verdict
    assert verdict.log.startswith("ktree out of memory while computing the fp64 answers"), verdict.log


def test_the_fp64_answers_go_to_the_host_when_they_do_not_fit_the_device(monkeypatch):
    calls = []

    class Ref(torch.nn.Module):
        def forward(self, x):
            calls.append(x.device.type)
            if x.device.type == "meta":
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB")
            return x.sum()

    out = expected_cache.expected64(Ref(), [torch.ones(4)], "meta", lambda o: [o])
    assert calls == ["meta", "cpu"] and out[0].dtype == torch.float64 and float(out[0]) == 4.0
