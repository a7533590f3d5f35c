"""On a CUDA GPU (skipped elsewhere): the scripted CUDA library's kernels get the verdicts their
files declare, at the problems' full sizes, and the timer is fair to identical code."""

from __future__ import annotations

import asyncio
import re

import pytest

from engine.evaluate.evaluator import Evaluator
from engine.evaluate.verdict import Verdict
from engine.llm.scripted import load_ideas
from engine.problems import load_problem

pytestmark = pytest.mark.gpu

INTENDED = {"correct": "correct", "incorrect": "incorrect", "compile error": "compile_error"}


def intended_status(source: str) -> str:
    m = re.search(r"Intended outcome:\s*(correct|incorrect|compile error)", source, re.IGNORECASE)
    assert m, "every scripted variant declares its intended outcome"
    return INTENDED[m.group(1).lower()]


def evaluate_all(problem_name: str, sources: list[str]) -> list[Verdict]:
    import os

    problem = load_problem(problem_name)

    async def go() -> list[Verdict]:
        evaluator = Evaluator("cuda", cuda_arch=os.environ.get("TORCH_CUDA_ARCH_LIST") or "9.0")
        jobs = [evaluator.job(problem.path, s, problem.sizes_for("cuda")) for s in sources]
        return list(await asyncio.gather(*(evaluator.evaluate(j) for j in jobs)))

    return asyncio.run(go())


@pytest.mark.parametrize("problem", ["softmax", "layernorm"])
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
