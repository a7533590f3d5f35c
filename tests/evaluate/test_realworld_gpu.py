"""On a CUDA GPU (skipped elsewhere): the real-world verdict corpus' CUDA and Triton files
(tests/realworld/, issue 33) at the problems' full sizes: every honest kernel ends `correct` (with
the mark its case names), every hack does not. One `ktree bench verdicts --backend cuda` run for
the module; its CUDA sources are ctypes-style (CUDA headers only) but for the at:: extension.
Marked `gpu_slow`: scripts/gpu-check's `verdicts` step runs the same bench (with its table) in the
default check, so the default GPU tests do not run it twice."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine.bench.verdicts import load_cases, verdicts_bench
from tests.conftest import gpu_arch

CASES = load_cases()


def prebuild_sources(slow: bool = False) -> list[tuple[str, str]]:
    """(name, source) of the corpus' GPU files: what scripts/gpu-prebuild builds ahead (it keeps
    the CUDA ones; Triton compiles in the evaluation)."""
    return [(f"realworld {c.name}", c.gpu.read_text()) for c in CASES]


@pytest.fixture(scope="module")
def bench() -> dict[str, Any]:
    return asyncio.run(verdicts_bench("cuda", gpu_arch(), log=False))


@pytest.mark.gpu_slow
@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_a_case_gets_its_intended_verdict_on_the_gpu(bench: dict[str, Any], name: str):
    case = next(c for c in CASES if c.name == name)
    r = next(r for r in bench["rows"] if r["case"] == name)
    if case.kind == "hack":
        assert r["status"] != "correct", r
        return
    assert r["status"] == "correct", f"{r['flags']}\n{r['log']}"
    if case.expect == "library":
        assert r["library"] and r["library"].get("ops"), r
    elif case.expect == "note":
        assert any(n.startswith("torch-ops") for n in r["notes"]), r["notes"]
