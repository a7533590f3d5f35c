"""Issue 54's attacks on a CUDA GPU (marker `gpu`; skipped without one): the twins of
tests/evaluate/test_judge_outside.py, each wrapped around the scripted library's CUDA online softmax
(intended correct) and evaluated at the problem's cuda sizes through one evaluator: none earns a
speedup, an honest kernel after a hooking candidate gets its verdict alone, and peaks a candidate
wrote where it could mislead no later evaluation."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from engine.evaluate.host.devices import visible_gpus
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.host.sandbox import available
from engine.evaluate.verdict import Verdict
from engine.problems import load_problem
from tests.conftest import gpu_arch, kernel_flags
from tests.evaluate.hacks import attacks, earned_nothing

KERNEL = (Path(__file__).resolve().parents[2] / "engine" / "scripted_library" / "softmax" / "cuda"
          / "online_1.py").read_text()
SOFTMAX = load_problem("softmax")

pytestmark = pytest.mark.gpu


def prebuild_sources(slow: bool = False) -> list[tuple[str, str]]:
    """(name, source) of the CUDA sources this module evaluates: what scripts/gpu-prebuild builds."""
    return [("judge honest cuda", KERNEL)] + [(f"judge {name} cuda", source)
                                               for name, source in attacks(KERNEL).items()]


def evaluate_in_turn(sources: list[str]) -> list[Verdict]:
    """One evaluator, the sources one after another (as one `ktree eval` call of several files)."""
    cost = SOFTMAX.cost("cuda")

    async def go() -> list[Verdict]:
        ev = LocalEvaluator("cuda", cuda_arch=gpu_arch(), gpus=[next(iter(visible_gpus()))])
        try:
            return [await ev.evaluate(ev.job(SOFTMAX.path, source, SOFTMAX.sizes_for("cuda"), flops=cost.flops,
                                             bytes=cost.bytes)) for source in sources]
        finally:
            await ev.close()

    return asyncio.run(go())


@pytest.fixture(scope="module")
def verdicts() -> dict[str, Verdict]:
    wrapped = attacks(KERNEL)
    order = ["honest", "forged verdict", "frame walk", "lazy", "hook", "honest after hook", "peaks",
             "honest after peaks"]
    sources = {**wrapped, "honest": KERNEL, "honest after hook": KERNEL, "honest after peaks": KERNEL}
    return dict(zip(order, evaluate_in_turn([sources[n] for n in order]), strict=True))


@pytest.mark.parametrize("name", ["forged verdict", "frame walk", "lazy", "hook"])
def test_an_attack_on_the_harness_earns_no_speedup(verdicts: dict[str, Verdict], name: str):
    v = verdicts[name]
    assert earned_nothing(v), (v.status, v.speedup_eager, v.flags, (v.timing or {}).get("judge"), v.log[:600])


def test_the_honest_kernel_is_correct_alone_and_after_each_attack(verdicts: dict[str, Verdict]):
    for name in ("honest", "honest after hook", "honest after peaks"):
        v = verdicts[name]
        assert v.status == "correct", (name, v.flags, v.log[:600])
        assert kernel_flags(v.flags) == [], (name, v.flags)
        assert (v.timing or {}).get("judge", {}).get("calls"), name  # checked from outside


@pytest.mark.skipif(available()[0] != "strict", reason="a candidate under basic isolation can write anywhere")
def test_peaks_a_candidate_wrote_mislead_no_later_evaluation(verdicts: dict[str, Verdict]):
    before, after = verdicts["honest"], verdicts["honest after peaks"]
    assert after.sol_fraction * after.time_ms == pytest.approx(before.sol_fraction * before.time_ms, rel=0.5)
    cache = Path(os.environ["KTREE_CACHE_DIR"])
    for path in (cache / "judge" / "peaks").glob("*.json"):
        assert json.loads(path.read_text())["bandwidth"] < 1e13, path
