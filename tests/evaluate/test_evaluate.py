"""The evaluator on the cpu backend, with solutions that need no compiler (pure PyTorch
ModelNew), so every status path is exercised in seconds. Compiled kernels are covered by the
recorded scripted search (test_recorded_search.py)."""

from __future__ import annotations

import asyncio
import os
import textwrap
from pathlib import Path

import pytest

from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.verdict import Verdict
from engine.problems import load_problem
from tests.conftest import kernel_flags
from tests.evaluate.helpers import CHEATS, HEADER, model

SOFTMAX = load_problem("softmax")
WORK = {"flops": SOFTMAX.cost("cpu").flops, "bytes": SOFTMAX.cost("cpu").bytes}  # as the search passes them
SCRIPTED = Path(__file__).resolve().parents[2] / "engine" / "scripted_library"


def evaluate(body: str, eval_timeout: float | None = None, **job: object) -> Verdict:
    source = HEADER + textwrap.dedent(body)

    async def go() -> Verdict:
        evaluator = LocalEvaluator("cpu", eval_timeout=eval_timeout, compile_timeout_s=eval_timeout)
        try:
            return await evaluator.evaluate(
                evaluator.job(SOFTMAX.path, source, SOFTMAX.sizes_for("cpu"), **WORK, **job))
        finally:
            await evaluator.close()

    return asyncio.run(go())


@pytest.mark.slow
def test_honest_compiled_kernel_is_correct_and_timed_against_the_reference():
    """A C++ kernel (the scripted library's online softmax): correct, no integrity flag."""
    source = (SCRIPTED / "softmax" / "cpu" / "online_1.py").read_text()

    async def go() -> Verdict:
        evaluator = LocalEvaluator("cpu")
        try:
            return await evaluator.evaluate(
                evaluator.job(SOFTMAX.path, source, SOFTMAX.sizes_for("cpu"), **WORK))
        finally:
            await evaluator.close()

    v = asyncio.run(go())
    assert v.status == "correct", v.log
    assert kernel_flags(v.flags) == []
    assert v.trials == 3
    assert v.max_abs_err is not None and v.max_abs_err < 1e-4
    assert v.time_ms and v.ref_eager_ms and v.time_ms > 0 and v.ref_eager_ms > 0
    if not any(n.startswith("outside-clock:") for n in v.notes):  # (a loaded host: the judge's figure stands)
        assert v.time_p10_ms <= v.time_ms <= v.time_p90_ms
    assert v.speedup_eager == pytest.approx(v.ref_eager_ms / v.time_ms)
    assert v.sizes == {"batch_size": 128, "dim": 4096}  # the CPU preset it ran at
    assert v.backend == "cpu" and v.reps >= 5


@pytest.mark.slow
def test_torch_ops_in_forward_are_flagged_but_still_timed():
    v = evaluate(model("return torch.softmax(x, dim=1)"))
    assert v.status == "flagged"
    assert any(f.startswith("torch-ops") and "aten._softmax" in f for f in v.flags)
    assert v.max_abs_err < 1e-5 and v.time_ms > 0 and v.speedup_eager is not None


@pytest.mark.slow
@pytest.mark.parametrize(("body", "flag"), CHEATS)
def test_integrity_checks_flag_cheats(body: str, flag: str):
    v = evaluate(body)
    assert v.status == "flagged", v.log
    assert any(f.startswith(flag) for f in v.flags), v.flags
    assert flag in v.log


@pytest.mark.slow
@pytest.mark.parametrize(
    ("forward", "reason"),
    [
        ("return torch.softmax(x, dim=0)", "exceeds allclose"),
        ("return torch.zeros_like(x)", "exceeds allclose"),
        ("return torch.softmax(x, dim=1)[:, :-1]", "has shape"),
        ("return torch.full_like(x, float('nan'))", "NaN/Inf"),
        # Within atol everywhere, but 2% off in relative L2: only the norm check catches it.
        ("return torch.softmax(x, dim=1) * 1.02", "relative L2 error"),
        ("return torch.softmax(x, dim=1).double()", "has dtype torch.float64, expected torch.float32"),
        # Memory it never wrote: the reference's freed answer was overwritten with NaN first.
        ("return torch.empty_like(x)", "output 0"),
    ],
)
def test_wrong_answers_are_incorrect(forward: str, reason: str):
    v = evaluate(model(forward))
    assert v.status == "incorrect"
    assert reason in v.log
    assert v.time_ms is None  # an incorrect kernel is never timed


def test_python_syntax_error_is_a_compile_error():
    v = evaluate("class ModelNew(nn.Module:\n    pass\n")
    assert v.status == "compile_error"
    assert "syntax error" in v.log


@pytest.mark.slow
def test_a_compiler_error_is_kept_and_reused_for_the_same_source():
    """A build the compiler rejects with a diagnostic fails the same way next time: the second
    compile of that source reads the kept result instead of running the compiler again. The run's
    build cache (its precompiled header built once), a source no other evaluation has seen."""
    source = HEADER + textwrap.dedent(f"""
    from torch.utils.cpp_extension import load_inline
    ext = load_inline(name="broken_cc", functions=["twice"],
                      cpp_sources="int twice(int x) {{ return 2 * x }}  // {os.urandom(8).hex()}")
    """) + model("return torch.softmax(x, dim=1)")

    async def go() -> list[Verdict]:
        evaluator = LocalEvaluator("cpu")
        try:
            job = evaluator.job(SOFTMAX.path, source, SOFTMAX.sizes_for("cpu"), **WORK)
            return [await evaluator.evaluate(job) for _ in range(2)]
        finally:
            await evaluator.close()

    first, second = asyncio.run(go())
    assert first.status == second.status == "compile_error"
    assert "error:" in first.log and "reused" not in first.log
    assert "error:" in second.log and "failed to build before" in second.log
    assert second.compile_s < first.compile_s


@pytest.mark.parametrize(
    ("log", "names", "fallback"),
    [
        ('k/cuda.cu(41): error: identifier "warp_id" is undefined\n', {"cout"}, False),
        ('k/cuda.cu(7): error: namespace "std" has no member "cout"\n', {"cout"}, True),
        ('k/cuda.cu(3): error: identifier "PYBIND11_MODULE" is undefined\n', {"PYBIND11_MODULE"}, True),
        ('k/cuda.cu(9): error: expected a ";"\n', {"cout"}, True),  # not plainly the source's own
        ('k/cuda.cu(41): error: identifier "warp_id" is undefined\n', None, True),  # no name list
        ("/k/main.cpp:4:40: error: expected ';' before '}' token\n", {"cout"}, False),  # host only
        ("ninja: build stopped: subcommand failed.\n", {"cout"}, True),  # nothing to go on
    ],
)
def test_slim_header_fallback_only_where_the_slim_header_may_be_the_cause(
        log: str, names: set[str] | None, fallback: bool):
    from engine.evaluate.harness.fastbuild import slim_may_explain

    assert slim_may_explain(log, lambda: names) is fallback


def test_extension_identifiers_come_from_the_preprocessed_header(tmp_path: Path):
    from engine.evaluate.harness.fastbuild import extension_identifiers, torch_pch_command

    if torch_pch_command([], []) is None:
        pytest.skip("torch has no PCH command line on this platform")
    names = extension_identifiers(str(tmp_path), [], [])
    assert names is not None
    assert {"cout", "PYBIND11_MODULE", "TORCH_CHECK", "Tensor"} <= names
    assert "warp_id" not in names
    assert extension_identifiers(str(tmp_path), [], []) == names  # kept in the cache


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (model("raise RuntimeError('kernel launch failed: bad grid')"), "runtime_error",
         "bad grid"),
        ("raise ValueError('import went wrong')\n", "runtime_error", "import went wrong"),
        ("class NotIt: pass\n", "runtime_error", "no class ModelNew"),
        ("sys.exit(3)\n", "crashed", "exit code 3"),
        ("os._exit(0)\n", "crashed", "exit code 0"),
        ("import ctypes\nctypes.string_at(0)\n", "crashed", "SIGSEGV"),
    ],
)
def test_faults_become_statuses(body: str, status: str, needle: str):
    v = evaluate(body)
    assert v.status == status
    assert needle in v.log


@pytest.mark.slow
def test_a_hung_kernel_is_killed_at_the_timeout():
    v = evaluate(model("while True: pass"), eval_timeout=20)
    assert v.status == "timeout"
    assert "killed after 20 s" in v.log


@pytest.mark.slow
def test_generated_code_sees_no_secrets(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("GEMINI_API_KEY", "g-secret")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "t-secret")
    body = textwrap.dedent("""
    leaked = [k for k, v in os.environ.items() if 'secret' in v]
    if leaked:
        raise RuntimeError('saw secrets: ' + ','.join(leaked))
    """) + model("return torch.softmax(x, dim=1)")
    v = evaluate(body)
    assert v.status == "flagged" and "saw secrets" not in v.log  # ran to the end: no secret seen
    assert v.time_ms is not None
    assert os.environ["OPENAI_API_KEY"] == "sk-secret"


def test_verdict_json_roundtrip():
    v = Verdict(status="correct", flags=("a",), time_ms=1.0, sizes={"n": 1})
    assert Verdict.from_dict(v.to_dict()) == v
    with pytest.raises(ValueError):
        Verdict(status="great")


@pytest.mark.slow
def test_bench_compile_measures_each_lever_on_this_backend(tmp_path: Path):
    """`ktree bench compile` on the CPU: fresh builds with and without the precompiled header,
    both compiled, timings reported (the lever's effect is measured, not asserted)."""
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "bench", "compile", "--backend", "cpu", "--sources", "1",
         "--concurrent", "0", "--json"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout[-2000:]
    result = json.loads(proc.stdout)
    assert [r["config"] for r in result["configs"]] == ["stock, no lever", "stock + pch"]
    assert all(r["compiled"] == r["builds"] == 1 and r["median_wall_s"] > 0 for r in result["configs"])
    assert result["pch_build_s"] > 0 and result["concurrent"] is None


def test_bench_compile_sources_are_the_structures_they_are_labelled():
    """Each configuration of `ktree bench compile` builds what its label says: stock sources carry
    torch/extension.h and load_inline bindings, the ctypes structure no torch header at all."""
    from engine.bench.compile import CONFIGS, _sources

    for backend, configs in CONFIGS.items():
        for _, structure, _ in configs:
            sources = _sources(backend, structure, 3)
            assert len(sources) == 3
            for src in sources:
                assert "Intended outcome: correct" in src
                if structure == "stock":
                    assert "#include <torch/extension.h>" in src and "functions=" in src
                if structure == "ctypes":
                    assert "torch/" not in src.split('r"""', 1)[1].split('"""', 1)[0]
                    assert "is_python_module=False" in src
