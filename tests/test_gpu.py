"""On a CUDA GPU (skipped elsewhere): the scripted CUDA library's kernels get the verdicts their
files declare, at the problems' full sizes, and the timer is fair to identical code."""

from __future__ import annotations

import asyncio
import re
import textwrap
from pathlib import Path

import pytest

from engine.evaluate.evaluator import LocalEvaluator
from engine.evaluate.verdict import Verdict
from engine.llm.scripted import load_ideas
from engine.problems import load_problem

pytestmark = pytest.mark.gpu

INTENDED = {"correct": "correct", "incorrect": "incorrect", "compile error": "compile_error",
            "runtime error": "runtime_error"}


def intended_status(source: str) -> str:
    m = re.search(r"Intended outcome:\s*(correct|incorrect|compile error|runtime error)", source, re.IGNORECASE)
    assert m, "every scripted variant declares its intended outcome"
    return INTENDED[m.group(1).lower()]


def evaluate_all(problem_name: str, sources: list[str]) -> list[Verdict]:
    import os

    problem = load_problem(problem_name)

    async def go() -> list[Verdict]:
        evaluator = LocalEvaluator("cuda", cuda_arch=os.environ.get("TORCH_CUDA_ARCH_LIST") or "9.0")
        cost = problem.cost("cuda")  # as the search passes it: the speed-of-light floor
        jobs = [evaluator.job(problem.path, s, problem.sizes_for("cuda"), flops=cost.flops, bytes=cost.bytes)
                for s in sources]
        try:
            return list(await asyncio.gather(*(evaluator.evaluate(j) for j in jobs)))
        finally:
            await evaluator.close()

    return asyncio.run(go())


@pytest.mark.parametrize("problem", ["softmax", "layernorm", "matmul", "conv2d", "conv_relu_maxpool"])
def test_scripted_cuda_variants_get_their_intended_verdicts(problem: str):
    files = [f for idea in load_ideas(problem, "cuda") for f in idea.variants]
    files += sorted(files[0].parent.glob("fixes/*.py"))  # the fix-prompt answers
    sources = [f.read_text() for f in files]
    verdicts = evaluate_all(problem, sources)
    full = load_problem(problem).sizes
    for path, source, v in zip(files, sources, verdicts, strict=True):
        assert v.status == intended_status(source), f"{path.name}: {v.status} {v.flags}\n{v.log[-2000:]}"
        if v.status == "correct":
            assert v.sizes == full and v.backend == "cuda"
            assert v.time_p10_ms <= v.time_ms <= v.time_p90_ms
            assert v.max_abs_err < 1e-2


def test_identical_code_times_the_same():
    """A ModelNew that calls the very op of the reference must come out near 1.0x (and is
    flagged for computing with a torch op, but timed all the same)."""
    source = ("import torch\nclass ModelNew(torch.nn.Module):\n"
              "    def forward(self, x):\n        return torch.softmax(x, dim=1)\n")
    [v] = evaluate_all("softmax", [source])
    assert v.status == "flagged" and v.flags[0].startswith("torch-ops")
    assert 0.9 <= v.speedup_eager <= 1.1, v


EXAMPLES = Path(__file__).resolve().parents[1] / "engine/templates/examples"
FAST = (EXAMPLES / "softmax_fast.py").read_text()


@pytest.mark.parametrize(("problem", "example"), [
    ("softmax", "softmax_fast.py"), ("softmax", "softmax_ctypes.py"), ("layernorm", "layernorm_ctypes.py")])
def test_honest_fast_kernels_are_correct_with_speed_of_light_and_compile_baseline(problem: str, example: str):
    [v] = evaluate_all(problem, [(EXAMPLES / example).read_text()])
    assert v.status == "correct", v.log
    assert v.sol_fraction is not None and 0 < v.sol_fraction <= 1.25
    assert v.ref_compile_ms and v.speedup_compile == pytest.approx(v.ref_compile_ms / v.time_ms)


def test_memory_never_written_and_side_stream_work_are_caught():
    unwritten = ("import torch\nclass ModelNew(torch.nn.Module):\n"
                 "    def forward(self, x):\n        return torch.empty_like(x)\n")
    # The same kernel, launched on a stream of its own that the timing events never see.
    side = FAST.replace("c10::cuda::getCurrentCUDAStream().stream()", "side_stream()").replace(
        "void softmax_launch(const float* x, float* y, int rows, int cols, cudaStream_t stream);",
        "void softmax_launch(const float* x, float* y, int rows, int cols, cudaStream_t stream);\n"
        # starts after the work already queued (so the answer is right), ends unseen
        "static cudaStream_t side_stream() {\n  static cudaStream_t s = nullptr;\n"
        "  static cudaEvent_t e = nullptr;\n"
        "  if (!s) { cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);\n"
        "            cudaEventCreateWithFlags(&e, cudaEventDisableTiming); }\n"
        "  cudaEventRecord(e, c10::cuda::getCurrentCUDAStream().stream());\n"
        "  cudaStreamWaitEvent(s, e, 0);\n  return s;\n}").replace(
        "ktree_softmax_fast", "ktree_softmax_side")
    assert side != FAST
    nowrite, sneaky = evaluate_all("softmax", [unwritten, side])
    assert nowrite.status == "incorrect", nowrite.log
    assert sneaky.status == "flagged", (sneaky.status, sneaky.flags, sneaky.log)
    assert any(f.startswith("escaping work") for f in sneaky.flags), sneaky.flags


def test_integrity_cheats_are_flagged_on_cuda_too():
    from tests.test_evaluate import CHEATS, HEADER

    verdicts = evaluate_all("softmax", [HEADER + textwrap.dedent(body) for body, _ in CHEATS])
    for (_, flag), v in zip(CHEATS, verdicts, strict=True):
        assert v.status == "flagged" and any(f.startswith(flag) for f in v.flags), (flag, v.status, v.flags)
