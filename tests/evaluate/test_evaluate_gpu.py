"""On a CUDA GPU (skipped elsewhere): the scripted CUDA library's kernels get the verdicts their
files declare, at the problems' full sizes, and the timer is fair to identical code.

Each test is marked `gpu` (the default set; see tests/conftest.py), but the KernelBench-format
sweep, marked `gpu_slow` alone. Every CUDA source the default set builds is listed by
`prebuild_sources()`, which scripts/gpu-prebuild builds ahead, all at once, into the tests' build
cache: the tests then only load them. The softmax checks that need no build of their own share
one evaluator (one worker start, one fp64 reference) through the module's `softmax_batch`."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from engine.evaluate.verdict import Verdict
from engine.llm.scripted import load_ideas
from engine.problems import load_problem
from tests.evaluate.helpers import (
    COMPILE_BASELINE,
    LIBRARY_TIMING,
    SMALL,
    evaluate_all,
    intended_status,
    library_subset,
)

SEED_PROBLEMS = ["softmax", "layernorm", "matmul", "conv2d", "conv_relu_maxpool"]


def library_files(problem: str) -> list[Path]:
    """The scripted CUDA library of a problem: every idea's variants, then the fix-prompt answers."""
    files = [f for idea in load_ideas(problem, "cuda") for f in idea.variants]
    return files + sorted(files[0].parent.glob("fixes/*.py"))


needs_compile_baseline = pytest.mark.skipif(
    not COMPILE_BASELINE, reason="the torch.compile baseline is off (KTREE_COMPILE_BASELINE=0)")


def check_library(problem: str, files: list[Path]) -> None:
    sources = [f.read_text() for f in files]
    verdicts = evaluate_all(problem, sources, **LIBRARY_TIMING)
    full = load_problem(problem).sizes
    for path, source, v in zip(files, sources, verdicts, strict=True):
        assert v.status == intended_status(source), f"{path.name}: {v.status} {v.flags}\n{v.log[-2000:]}"
        if v.status == "correct":
            assert v.sizes == full and v.backend == "cuda"
            assert v.time_p10_ms <= v.time_ms <= v.time_p90_ms
            assert v.max_abs_err < 1e-2


# The default set checks softmax and layernorm here; matmul, conv2d and conv_relu_maxpool (tens of
# seconds each at full size) are the slow stage's, and scripts/gpu-check's searches cover them.
DEFAULT_SUBSETS = ["softmax", "layernorm"]


@pytest.mark.gpu
@pytest.mark.parametrize("problem", [*DEFAULT_SUBSETS, *(pytest.param(p, marks=pytest.mark.gpu_slow)
                                                          for p in SEED_PROBLEMS if p not in DEFAULT_SUBSETS)])
def test_scripted_cuda_variant_sets_get_their_intended_verdicts(problem: str):
    """Per seed problem: one idea's variant set and a variant of every other intended outcome."""
    files = library_subset(problem)
    assert len({intended_status(f.read_text()) for f in files}) >= 2
    check_library(problem, files)


@pytest.mark.gpu_slow
@pytest.mark.parametrize("problem", SEED_PROBLEMS)
def test_whole_scripted_cuda_libraries_get_their_intended_verdicts(problem: str):
    check_library(problem, library_files(problem))


EXAMPLES = Path(__file__).resolve().parents[2] / "engine/templates/examples"
FAST = (EXAMPLES / "softmax_fast.py").read_text()

# A ModelNew that calls the very op of the reference.
IDENTICAL = ("import torch\nclass ModelNew(torch.nn.Module):\n"
             "    def forward(self, x):\n        return torch.softmax(x, dim=1)\n")
UNWRITTEN = ("import torch\nclass ModelNew(torch.nn.Module):\n"
             "    def forward(self, x):\n        return torch.empty_like(x)\n")
# The fast softmax kernel, launched on a stream of its own that the timing events never see.
SIDE_STREAM = FAST.replace("c10::cuda::getCurrentCUDAStream().stream()", "side_stream()").replace(
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
HONEST_EXAMPLES = [("softmax", "softmax_fast.py"), ("softmax", "softmax_ctypes.py"),
                   ("layernorm", "layernorm_ctypes.py")]
# KernelBench-format kernels (torch/extension.h in the CUDA sources, bindings by load_inline):
# ~40 s a build alone, ~95 s side by side on the H100 box. Slow stage.
KERNELBENCH_FORMAT = [EXAMPLES / f"layernorm_stock_{k}.py" for k in ("split", "twopass", "onepass")]


def cheat_sources() -> list[tuple[str, str]]:
    """(source, flag) of each integrity cheat of tests/evaluate/test_evaluate.py (pure PyTorch: no build)."""
    from tests.evaluate.helpers import CHEATS, HEADER

    return [(HEADER + textwrap.dedent(body), flag) for body, flag in CHEATS]


def prebuild_sources(slow: bool = False) -> list[tuple[str, str]]:
    """(name, source) of every source with a CUDA build that this module's default tests (and,
    with `slow`, its gpu_slow ones) evaluate: what scripts/gpu-prebuild builds ahead. The whole
    scripted libraries either way (~10 s a build, side by side; the scripted searches of
    scripts/gpu-check build them too)."""
    out = [(f"{p}/{'fixes/' if f.parent.name == 'fixes' else ''}{f.name}", f.read_text())
           for p in SEED_PROBLEMS for f in library_files(p)]
    out += [(f"examples/{name}", (EXAMPLES / name).read_text()) for _, name in HONEST_EXAMPLES]
    out.append(("softmax side stream", SIDE_STREAM))
    if slow:
        out += [(f"examples/{f.name}", f.read_text()) for f in KERNELBENCH_FORMAT]
    return out


@pytest.fixture(scope="module")
def softmax_batch() -> dict[str, Verdict]:
    """The softmax checks of this module on one evaluator: identical code, memory never written,
    the side-stream kernel (at full size), the two honest softmax examples and the integrity
    cheats (at SMALL sizes)."""
    assert SIDE_STREAM != FAST
    sources = {"identical": IDENTICAL, "unwritten": UNWRITTEN, "side": SIDE_STREAM,
               **{name: (EXAMPLES / name).read_text() for p, name in HONEST_EXAMPLES if p == "softmax"},
               **{f"cheat {i}": s for i, (s, _) in enumerate(cheat_sources())}}
    # Full size where the check needs real work: a fair timing of identical code, side-stream work
    # still running when the timer's end event fires (at SMALL sizes it was not flagged on the
    # H100 box), memory never written.
    full = load_problem("softmax").sizes_for("cuda")
    sizes = [full if name in ("identical", "unwritten", "side") else SMALL["softmax"] for name in sources]
    return dict(zip(sources, evaluate_all("softmax", list(sources.values()), sizes), strict=True))


@pytest.mark.gpu
def test_identical_code_times_the_same(softmax_batch: dict[str, Verdict]):
    """A ModelNew that calls the very op of the reference must come out near 1.0x (and is
    flagged for computing with a torch op, but timed all the same)."""
    v = softmax_batch["identical"]
    assert v.status == "flagged" and v.flags[0].startswith("torch-ops")
    assert 0.9 <= v.speedup_eager <= 1.1, v


def check_honest(v: Verdict) -> None:
    assert v.status == "correct", v.log
    assert v.sol_fraction is not None and 0 < v.sol_fraction <= 1.25
    assert v.ref_compile_ms and v.speedup_compile == pytest.approx(v.ref_compile_ms / v.time_ms)


@pytest.mark.gpu
@needs_compile_baseline
@pytest.mark.parametrize("example", [name for p, name in HONEST_EXAMPLES if p == "softmax"])
def test_honest_fast_softmax_kernels_are_correct_with_speed_of_light_and_compile_baseline(
        softmax_batch: dict[str, Verdict], example: str):
    check_honest(softmax_batch[example])


@pytest.mark.gpu
@needs_compile_baseline
def test_honest_fast_layernorm_kernel_is_correct_with_speed_of_light_and_compile_baseline():
    [v] = evaluate_all("layernorm", [(EXAMPLES / "layernorm_ctypes.py").read_text()])
    check_honest(v)


@pytest.mark.gpu
def test_memory_never_written_and_side_stream_work_are_caught(softmax_batch: dict[str, Verdict]):
    nowrite, sneaky = softmax_batch["unwritten"], softmax_batch["side"]
    assert nowrite.status == "incorrect", nowrite.log
    assert sneaky.status == "flagged", (sneaky.status, sneaky.flags, sneaky.log)
    assert any(f.startswith("escaping work") for f in sneaky.flags), sneaky.flags


@pytest.mark.gpu
def test_integrity_cheats_are_flagged_on_cuda_too(softmax_batch: dict[str, Verdict]):
    for i, (_, flag) in enumerate(cheat_sources()):
        v = softmax_batch[f"cheat {i}"]
        assert v.status == "flagged" and any(f.startswith(flag) for f in v.flags), (flag, v.status, v.flags)


@pytest.mark.gpu_slow
def test_kernelbench_format_kernels_get_their_intended_verdicts():
    """The stock KernelBench structure (torch/extension.h in cuda_sources, pybind bindings) builds
    and runs: the three stock layernorm examples, each declared correct."""
    sources = [f.read_text() for f in KERNELBENCH_FORMAT]
    verdicts = evaluate_all("layernorm", sources, **LIBRARY_TIMING)
    for path, source, v in zip(KERNELBENCH_FORMAT, sources, verdicts, strict=True):
        assert v.status == intended_status(source) == "correct", f"{path.name}: {v.status}\n{v.log[-2000:]}"
        assert v.sizes == load_problem("layernorm").sizes and v.max_abs_err < 1e-2
