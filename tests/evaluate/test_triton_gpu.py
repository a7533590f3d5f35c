"""On a CUDA GPU (skipped elsewhere): the scripted Triton library gets the verdicts its files
declare at the problems' full sizes, its JIT compile and autotuning are recorded outside the timed
window (the autotuned softmax records its choice), Triton twins of the CUDA hacks are flagged (a
side stream too), and the Triton FP16 matmul is correct. No CUDA build: nothing to prebuild.
Marked `gpu`, but the whole-library sweeps (`gpu_slow` alone; see tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.problems import load_problem
from tests.conftest import kernel_flags
from tests.evaluate.helpers import LIBRARY_TIMING, evaluate_all, library_subset
from tests.evaluate.triton_cases import (
    SCRIPTED,
    TRITON_HACKS,
    TRITON_KERNEL,
    intended_status,
    library,
    triton_twin,
)

pytest.importorskip("triton")
AUTOTUNED = SCRIPTED / "softmax/triton/online_1.py"  # an autotuned kernel of the softmax library


@pytest.mark.gpu
@pytest.mark.parametrize("problem", ["softmax", "layernorm"])
def test_scripted_triton_variant_sets_get_their_intended_verdicts(problem: str):
    """Per problem: one idea's variant set and a variant of every other intended outcome (the
    softmax one holds the autotuned kernel)."""
    check_library(problem, library_subset(problem, "triton", intended_status))


@pytest.mark.gpu_slow
@pytest.mark.parametrize("problem", ["softmax", "layernorm"])
def test_whole_scripted_triton_libraries_get_their_intended_verdicts(problem: str):
    check_library(problem, library(problem))


def check_library(problem: str, files: list[Path]) -> None:
    sources = [f.read_text() for f in files]
    verdicts = evaluate_all(problem, sources, **LIBRARY_TIMING)
    full = load_problem(problem).sizes
    for path, source, v in zip(files, sources, verdicts, strict=True):
        want = intended_status(source)
        assert v.status == want, f"{path.name}: {v.status} {v.flags}\n{v.log[-2000:]}"
        assert v.language == "triton"
        if want == "correct":
            assert v.sizes == full and v.backend == "cuda"
            assert v.jit["interpreted"] is False and v.jit["jit_s"] > 0
            assert v.compile_s >= v.jit["jit_s"]
            assert v.time_p10_ms <= v.time_ms <= v.time_p90_ms
            assert v.max_abs_err < 1e-2
            assert kernel_flags(v.flags) == [], (path.name, v.flags)
        if want == "compile_error":
            assert "power of 2" in v.log
        if path == AUTOTUNED:  # the autotuned kernel records its choice
            [tuned] = v.jit["autotune"]
            assert tuned["configs"] == 4 and tuned["tried"] == 4 and "BLOCK: " in tuned["chosen"]
    assert problem != "softmax" or AUTOTUNED in files


SIDE_STREAM = triton_twin("""
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = torch.cuda.Stream()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        # starts after the work already queued (so the answer is right), ends unseen by the timer
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            softmax_online_fixed[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=4096, num_warps=16)
        return y
""")


@pytest.mark.gpu
def test_triton_twins_of_the_cuda_hacks_are_flagged_and_the_honest_kernel_passes():
    sources = [s for s, _ in TRITON_HACKS] + [SIDE_STREAM, TRITON_KERNEL]
    verdicts = evaluate_all("softmax", sources)
    for (_, flag), v in zip([*TRITON_HACKS, (SIDE_STREAM, "escaping work")], verdicts[:-1], strict=True):
        assert v.status == "flagged" and any(f.startswith(flag) for f in v.flags), (flag, v.status, v.flags,
                                                                                    v.log[-800:])
    honest = verdicts[-1]
    assert honest.status == "correct", (honest.flags, honest.log)


@pytest.mark.gpu
def test_triton_fp16_matmul_is_correct_and_timed_against_cublas():
    path = Path(SCRIPTED / "matmul_fp16/triton/tiled_1.py")
    [v] = evaluate_all("matmul_fp16", [path.read_text()])
    assert v.status in ("correct", "flagged"), v.log  # flagged only for a >10x review, never a check
    assert not kernel_flags(v.flags), v.flags
    assert v.time_ms and v.ref_eager_ms
    print(f"triton fp16 matmul: {v.time_ms:.4g} ms vs torch.matmul {v.ref_eager_ms:.4g} ms"
          f" = {v.time_ms / v.ref_eager_ms:.3f} of its time; autotune {v.jit.get('autotune')}")
