"""Issue 34's hacks on a CUDA GPU (marker `gpu`; skipped without one): the GPU twins of
tests/evaluate/test_timing_hacks.py. Each hack of that module (the timing loop found by its call stack, by
call count, by the time between calls, by a repeated input pointer; a memo keyed on pointer and
version; torch.softmax wrapped; one thread) is wrapped around the scripted library's CUDA and
Triton online softmax kernels (both intended correct) and evaluated at the problem's cuda sizes,
all through one evaluator per language: none ends `correct` where the CPU twin does not, and the
honest kernel stays `correct`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine.evaluate.host.devices import visible_gpus
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.verdict import Verdict
from engine.problems import load_problem
from tests.conftest import gpu_arch, kernel_flags
from tests.evaluate.hacks import hacks

SCRIPTED = Path(__file__).resolve().parents[2] / "engine" / "scripted_library" / "softmax"
KERNELS = {"cuda": (SCRIPTED / "cuda" / "online_1.py").read_text(),
           "triton": (SCRIPTED / "triton" / "online_1.py").read_text()}
SOFTMAX = load_problem("softmax")

pytestmark = pytest.mark.gpu


def prebuild_sources(slow: bool = False) -> list[tuple[str, str]]:
    """(name, source) of the CUDA sources this module evaluates: what scripts/gpu-prebuild builds."""
    return [("timing hack honest cuda", KERNELS["cuda"])] + [
        (f"timing hack {name} cuda", source) for name, source in hacks(KERNELS["cuda"]).items()]


def evaluate_all(sources: list[str]) -> list[Verdict]:
    cost = SOFTMAX.cost("cuda")

    async def go() -> list[Verdict]:
        ev = LocalEvaluator("cuda", cuda_arch=gpu_arch(), gpus=[next(iter(visible_gpus()))])
        try:
            jobs = [ev.job(SOFTMAX.path, source, SOFTMAX.sizes_for("cuda"), flops=cost.flops, bytes=cost.bytes)
                    for source in sources]
            return list(await asyncio.gather(*(ev.evaluate(j) for j in jobs)))
        finally:
            await ev.close()

    return asyncio.run(go())


@pytest.fixture(scope="module", params=["cuda", "triton"])
def verdicts(request: pytest.FixtureRequest) -> tuple[str, dict[str, Verdict]]:
    if request.param == "triton":
        pytest.importorskip("triton")
    wrapped = hacks(KERNELS[request.param])
    names = ["honest", *wrapped]
    found = evaluate_all([KERNELS[request.param], *wrapped.values()])
    return request.param, dict(zip(names, found, strict=True))


def test_the_honest_kernel_stays_correct_with_its_timed_outputs_checked(verdicts):
    language, v = verdicts[0], verdicts[1]["honest"]
    assert v.status == "correct", f"{language}: {v.flags}\n{v.log}"
    assert kernel_flags(v.flags) == [], v.flags
    rotation = v.timing["rotation"]
    assert rotation["sets"] >= 2 and rotation["checked"] >= 1, rotation


@pytest.mark.parametrize("name", ["stack", "count", "between", "repeated"])
def test_a_kernel_that_tells_timing_from_checking_is_not_correct(verdicts, name: str):
    language, v = verdicts[0], verdicts[1][name]
    assert v.status != "correct", f"{language} {name}: {v.flags}\n{v.log}"
    if name == "repeated":  # caught by the check trials every time, not only when a sampled timed rep is
        # one the memo got wrong (on an H100 the samples alone missed it now and then)
        assert v.status == "incorrect" or any(f.startswith("refilled-inputs:") for f in v.flags), (
            v.status, v.flags, v.log)


def test_a_memo_on_pointer_and_version_never_hits(verdicts):
    v, honest = verdicts[1]["memo"], verdicts[1]["honest"]
    assert v.status != "correct" or (v.time_p10_ms or 0) > (honest.time_p10_ms or 0), (
        verdicts[0], v.status, v.time_p10_ms, honest.time_p10_ms)


@pytest.mark.parametrize(("name", "flag"), [
    ("wraps softmax", "tamper: the candidate rebinds torch.softmax"),
    ("one thread", "tamper: the candidate changed torch.get_num_threads()"),
])
def test_a_kernel_that_changes_torch_is_flagged(verdicts, name: str, flag: str):
    language, v = verdicts[0], verdicts[1][name]
    assert v.status == "flagged", f"{language} {name}: {v.flags}\n{v.log}"
    assert any(f.startswith(flag) for f in v.flags), v.flags
