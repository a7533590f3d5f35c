"""The scripted CPU libraries of matmul, conv2d and conv_relu_maxpool get the verdicts their files
declare, at the problems' CPU sizes. They are in the ctypes structure (no torch headers), so each
build takes seconds, not the ~25 s of a torch-extension build; the session's build cache keeps
reruns free."""

from __future__ import annotations

import asyncio

import pytest

from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.verdict import Verdict
from engine.llm.scripted import load_ideas
from engine.problems import load_problem
from tests.evaluate.helpers import intended_status


def evaluate_cpu(problem_name: str, sources: list[str]) -> list[Verdict]:
    problem = load_problem(problem_name)

    async def go() -> list[Verdict]:
        evaluator = LocalEvaluator("cpu")
        cost = problem.cost("cpu")
        jobs = [evaluator.job(problem.path, s, problem.sizes_for("cpu"), flops=cost.flops, bytes=cost.bytes)
                for s in sources]
        try:
            return list(await asyncio.gather(*(evaluator.evaluate(j) for j in jobs)))
        finally:
            await evaluator.close()

    return asyncio.run(go())


@pytest.mark.slow
@pytest.mark.parametrize("problem", ["matmul", "conv2d", "conv_relu_maxpool"])
def test_scripted_cpu_variants_get_their_intended_verdicts(problem: str):
    files = [f for idea in load_ideas(problem, "cpu") for f in idea.variants]
    files += sorted(files[0].parent.glob("fixes/*.py"))  # the fix-prompt answers
    sources = [f.read_text() for f in files]
    verdicts = evaluate_cpu(problem, sources)
    statuses = {path.name if path.parent.name == "cpu" else f"fixes/{path.name}": v.status
                for path, v in zip(files, verdicts, strict=True)}
    for path, source, v in zip(files, sources, verdicts, strict=True):
        assert v.status == intended_status(source), f"{path.name}: {v.status} {v.flags}\n{v.log[-2000:]}"
        if v.status == "correct":
            assert v.backend == "cpu" and v.sizes == load_problem(problem).sizes_for("cpu")
    # Every kind of outcome the demo is meant to show is there.
    assert {"correct", "incorrect", "compile_error"} <= set(statuses.values()), statuses


@pytest.mark.parametrize(("problem", "name"), [("softmax", "rowblock_3.py"), ("layernorm", "onepass_3.py")])
def test_the_ctypes_cpu_kernels_of_softmax_and_layernorm_get_their_intended_verdicts(problem: str, name: str):
    """The two libraries' newest CPU kernels (the ones meant to beat eager) are in the ctypes
    structure too; the rest of those libraries are torch-extension builds (~25 s each)."""
    [path] = [f for idea in load_ideas(problem, "cpu") for f in idea.variants if f.name == name]
    source = path.read_text()
    [v] = evaluate_cpu(problem, [source])
    assert v.status == intended_status(source) == "correct", f"{v.status} {v.flags}\n{v.log[-2000:]}"
