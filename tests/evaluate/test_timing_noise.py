"""Noise measured and acted on (engine.evaluate.harness.noise), the GPU foreign-load decision
(engine.evaluate.harness.gpuload.judge, with fake driver snapshots), arch retargeting of build flags
(engine.evaluate.harness.fastbuild.retarget_flags), and ties within noise in the choice of parents."""

from __future__ import annotations

import os
import shutil

import pytest

from engine.domain import Node
from engine.evaluate.harness import fastbuild, gpuload, noise, timing
from engine.evaluate.harness.timing import PairStats, Stats
from engine.evaluate.verdict import Verdict
from engine.search.strategies import strategy_for, ties_within_noise


def test_median_interval_by_order_statistics():
    samples = [float(x) for x in range(1, 101)]  # 1..100
    lo, hi = noise.median_ci(samples)
    assert (lo, hi) == (40.0, 61.0)  # the 40th and 61st smallest: the textbook ~95 % interval
    assert noise.median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)  # too few for anything narrower
    s = Stats.of(samples)
    assert s.lo <= s.median <= s.hi and (s.lo, s.hi) == (40.0, 61.0)


def _stats(median: float, spread: float) -> Stats:
    return Stats(median, median * (1 - spread), median * (1 + spread), median * (1 - spread / 2),
                 median * (1 + spread / 2))


def _pass(new_spread: float = 0.01, ref_spread: float = 0.01, wait: float | None = None,
          contention: str | None = None) -> noise.Pass:
    return noise.Pass(PairStats(_stats(2.0, ref_spread), _stats(1.0, new_spread), 50), wait, contention)


def test_a_quiet_pass_is_timed_once_and_not_marked():
    calls = []
    settled = noise.settle(lambda: calls.append(1) or _pass())
    assert len(calls) == 1 and settled.flags == () and settled.log == ""


def test_a_noisy_pass_is_retimed_and_the_quiet_one_kept():
    passes = iter([_pass(new_spread=0.5), _pass()])
    settled = noise.settle(lambda: next(passes))
    assert len(settled.passes) == 2 and settled.kept is settled.passes[1]
    assert settled.flags == ()
    assert "re-timed 1x" in settled.log and "candidate's median" in settled.log


def test_noise_that_stays_is_retimed_at_most_twice_then_marked_noisy():
    calls = []
    settled = noise.settle(lambda: calls.append(1) or _pass(ref_spread=0.4 + 0.1 * len(calls)))
    assert len(calls) == 1 + noise.MAX_RETIMES
    assert settled.flags == ("noisy",)
    assert settled.kept is settled.passes[0]  # the narrowest of the three
    assert "reference's median" in settled.log


def test_the_cpu_timer_waiting_for_a_core_is_noise():
    assert _pass(wait=0.02).noise() == []
    reasons = _pass(wait=0.45).noise()
    assert len(reasons) == 1 and "waited for a core 45%" in reasons[0]
    settled = noise.settle(lambda: _pass(wait=0.45))
    assert settled.flags == ("noisy",) and len(settled.passes) == 3


def test_contention_is_retimed_and_marked_if_it_stays():
    passes = iter([_pass(contention="pid 7 ran kernels"), _pass()])
    assert noise.settle(lambda: next(passes)).flags == ()
    settled = noise.settle(lambda: _pass(contention="pid 7 ran kernels"))
    assert settled.flags == ("contended",)
    assert "contended: pid 7 ran kernels" in settled.log
    record = noise.summary(settled, threads=2, cores=[0, 1])
    assert record["passes"] == 3 and record["contention"] == "pid 7 ran kernels"
    assert record["threads"] == 2 and record["time_ci_ms"] == [0.995, 1.005]


def test_a_cpu_pass_reports_its_intervals_and_wait():
    p = timing.time_pass(lambda: sum(range(200_000)), lambda: sum(range(100_000)), "cpu", budget_s=0.1)
    s = p.stats
    assert s.new.lo <= s.new.median <= s.new.hi and s.ref.lo <= s.ref.median <= s.ref.hi
    assert p.contention is None
    if noise.cpu_waited_s() is not None:
        assert p.cpu_wait is not None and p.cpu_wait >= 0


def test_speedup_interval():
    assert noise.speedup_interval((1.8, 2.2), (0.9, 1.1)) == pytest.approx((1.8 / 1.1, 2.2 / 0.9))
    assert noise.speedup_interval((1.0, 1.0), (0.0, 1.0)) is None


# -- the GPU probe's decision ------------------------------------------------------------------


def _window(before: dict, after: dict, active: dict | None) -> gpuload.Window:
    return gpuload.Window(gpuload.Snapshot(before, 40, 1), gpuload.Snapshot(after, 90, 2), active)


def test_a_foreign_process_running_kernels_contends():
    w = _window({100: 1, 200: 1}, {100: 1, 200: 1}, {100: 95, 200: 30})
    why = gpuload.judge(w, own={100})
    assert why is not None and "pid 200 (SM 30%)" in why and "pid 100" not in why


def test_only_the_timer_running_kernels_is_not_contention():
    assert gpuload.judge(_window({100: 1}, {100: 1}, {100: 97}), own={100}) is None
    # Another process holding a context but idle (another ktree worker waiting for the lock):
    assert gpuload.judge(_window({100: 1, 300: 1}, {100: 1, 300: 1}, {100: 97, 300: 0}), own={100}) is None
    # No per-process samples on this driver: a context is not kernels; nothing is claimed.
    assert gpuload.judge(_window({100: 1, 300: 1}, {100: 1, 300: 1}, None), own={100}) is None


def test_pids_of_another_namespace_are_counted():
    # The driver lists host PIDs; this process (pid 5 in its container) is not among them.
    w = _window({4100: 1, 4200: 1}, {4100: 1, 4200: 1}, {4100: 96, 4200: 40})
    why = gpuload.judge(w, own={5})
    assert why is not None and "2 processes ran kernels" in why
    assert gpuload.judge(_window({4100: 1}, {4100: 1}, {4100: 96}), own={5}) is None


def test_a_probe_without_the_driver_judges_nothing():
    probe = gpuload.Probe(uuid="no-such-gpu", index=None)
    assert not probe.available and probe.why
    assert probe.finish(probe.start()) == (None, probe.why)


# -- arch retargeting ----------------------------------------------------------------------------

NVCC13 = frozenset(range(75, 130))  # nvcc 13 builds sm_75 and up


@pytest.mark.parametrize(("flags", "expected"), [
    (["-O3", "-arch=sm_70", "--use_fast_math"], ["-O3", "-arch=sm_90", "--use_fast_math"]),
    (["--gpu-architecture=compute_70"], ["--gpu-architecture=compute_90"]),
    (["-arch", "sm_70"], ["-arch", "sm_90"]),
    (["-gencode", "arch=compute_70,code=sm_70"], ["-gencode", "arch=compute_90,code=sm_90"]),
    (["-gencode=arch=compute_60,code=[sm_60,compute_60]"],
     ["-gencode=arch=compute_90,code=[sm_90,compute_90]"]),
    (["-arch=sm_80", "-O2"], ["-arch=sm_80", "-O2"]),  # buildable: left alone
    (["-arch=sm_70", "-arch=sm_72"], ["-arch=sm_90"]),  # the same flag once
])
def test_arch_flags_the_toolchain_cannot_build_are_retargeted(flags, expected):
    assert fastbuild.retarget_flags(flags, NVCC13, 90) == expected


def test_retargeting_is_recorded(monkeypatch):
    monkeypatch.setattr(fastbuild, "nvcc_archs", lambda: NVCC13)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    fastbuild.RETARGETED.clear()
    call = {"extra_cuda_cflags": ["-O3", "-arch=sm_70"]}
    fastbuild._retarget(call)
    assert call["extra_cuda_cflags"] == ["-O3", "-arch=sm_90"]
    assert fastbuild.RETARGETED == [{"original": ["-O3", "-arch=sm_70"], "flags": ["-O3", "-arch=sm_90"],
                                     "why": "this nvcc builds sm_75 and up; the device is sm_90"}]
    fastbuild.RETARGETED.clear()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc here")
def test_the_local_nvcc_says_what_it_builds():
    archs = fastbuild.nvcc_archs()
    assert archs and all(a >= 30 for a in archs)
    assert fastbuild.retarget_flags(["-arch=sm_70"], archs, 90) == (
        ["-arch=sm_70"] if 70 in archs else ["-arch=sm_90"])


# -- the verdict and the choice of parents ------------------------------------------------------


def test_verdict_keeps_its_intervals_and_reads_old_rows():
    v = Verdict(status="correct", flags=("noisy",), speedup_eager=1.5, speedup_lo=1.3, speedup_hi=1.7,
                ref_p10_ms=1.0, ref_p90_ms=1.2, timing={"passes": 3, "threads": 2})
    back = Verdict.from_dict(v.to_dict())
    assert back == v and back.speedup_interval == (1.3, 1.7) and back.ok
    assert Verdict.from_dict({"status": "correct", "speedup_eager": 2.0}).speedup_interval is None


def _variant(i: int, speedup: float) -> Node:
    return Node(id=i, session_id=1, parent_id=0, kind="variant", round=1, title=f"v{i}", text="",
                source="", status="correct", origin="llm", speedup=speedup, time_ms=1.0)


def test_a_parent_kept_over_another_within_noise_is_said():
    root = Node(id=0, session_id=1, parent_id=None, kind="root", round=0, title="ref", text="", source="",
                status="reference", origin="llm", speedup=None, time_ms=None)
    nodes = {0: root, 1: _variant(1, 2.0), 2: _variant(2, 1.9), 3: _variant(3, 1.0)}
    intervals = {1: (1.8, 2.2), 2: (1.7, 2.1), 3: (0.95, 1.05)}
    chosen = strategy_for("tree", rounds=2, ideas=2, variants=1, top=1).next_parents(nodes, 1, [0])
    assert chosen == [1]
    ties = ties_within_noise(chosen, nodes, 1, intervals)
    assert ties == ["tie within noise: kept #1 2.00x [1.80-2.20] over #2 1.90x [1.70-2.10]"]
    # Clear intervals: nothing to say.
    assert ties_within_noise(chosen, nodes, 1, {1: (1.95, 2.05), 2: (1.85, 1.94), 3: (0.9, 1.1)}) == []


@pytest.mark.parametrize(("cores", "expected"), [
    ([0, 1], ([1], [0])),
    ([0, 1, 2, 3], ([2, 3], [0, 1])),
    ([0, 1, 2], ([2], [0, 1])),
    ([4, 6, 9, 11], ([9, 11], [4, 6])),
    ([3], None),
])
def test_a_pinned_cpu_timer_splits_the_cores(cores: list[int], expected: object):
    from engine.evaluate.host.devices import split_cores

    assert split_cores(cores) == expected


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two cores")
def test_a_pinned_cpu_timer_times_on_its_own_cores_and_says_so():
    """`pin`: the worker runs on the timer's cores (its threads fixed to their number, both
    recorded), the compile children on the others; no compile slot is held while it times."""
    import asyncio

    from engine.evaluate.host.evaluator import LocalEvaluator
    from engine.problems import load_problem

    problem = load_problem("softmax")
    source = ("import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n"
              "    def forward(self, x):\n        return torch.softmax(x, dim=-1)\n")

    async def go() -> tuple[LocalEvaluator, object]:
        evaluator = LocalEvaluator("cpu", cpu_timer="pin")
        try:
            job = evaluator.job(problem.path, source, problem.sizes_for("cpu"), flops=None, bytes=None)
            return evaluator, await evaluator.evaluate(job)
        finally:
            await evaluator.close()

    evaluator, verdict = asyncio.run(go())
    assert evaluator.cpu_timer == "pin" and evaluator.timer_cores and evaluator.build_cores
    assert not set(evaluator.timer_cores) & set(evaluator.build_cores)
    assert verdict.timing["cores"] == evaluator.timer_cores and verdict.timing["pinned"] is True
    assert verdict.timing["threads"] == len(evaluator.timer_cores)
    assert LocalEvaluator("cpu").cpu_timer == "pause"  # the default
