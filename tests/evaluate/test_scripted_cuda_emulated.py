"""Without a GPU: the CUDA kernels of the layernorm, matmul, conv2d and conv_relu_maxpool scripted
libraries, run on the CPU under a small emulation of CUDA (tests/evaluate/cuda_emu), compute what their files
declare: the correct ones match PyTorch at small shapes (odd extents, a channel count that is not a
multiple of the kernels' 16-channel groups, a normalized size that is not a multiple of 4 or of a
block), the incorrect ones do not. The GPU test (tests/evaluate/test_evaluate_gpu.py) checks the real
thing at full size; this one catches indexing and arithmetic slips anywhere."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest
import torch

from engine.llm.scripted import load_ideas
from tests.evaluate import cuda_emu
from tests.evaluate.helpers import intended_status

pytestmark = pytest.mark.skipif(not cuda_emu.available(), reason="needs g++")


def library(problem: str) -> list[Path]:
    files = [f for idea in load_ideas(problem, "cuda") for f in idea.variants]
    files += sorted(files[0].parent.glob("fixes/*.py"))
    return [f for f in files if intended_status(f.read_text()) != "compile_error"]


def check(path: Path, max_err: float) -> None:
    intended = intended_status(path.read_text())
    if intended == "correct":
        assert max_err < 1e-3, f"{path.name}: declared correct, max abs err {max_err:.3g}"
    else:
        assert max_err > 1e-2, f"{path.name}: declared {intended}, but matches (max abs err {max_err:.3g})"


@pytest.mark.slow
def test_matmul_cuda_kernels_under_emulation(tmp_path: Path):
    torch.manual_seed(0)
    # 256 x 64 x 128 takes the register-blocked path (extents divide its tiles); 72 x 40 x 56 the fallback.
    for m, k, n in [(256, 64, 128), (72, 40, 56)]:
        a, b = torch.randn(m, k), torch.randn(k, n)
        ref = a @ b
        for path in library("matmul"):
            lib = cuda_emu.build(cuda_emu.cuda_source_of(path), tmp_path)
            lib.matmul_launch.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_longlong] * 3 + [ctypes.c_void_p]
            c = torch.full((m, n), float("nan"))
            assert lib.matmul_launch(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, k, n, None) == 0
            err = (c - ref).abs().max().item()
            if (m, k, n) == (256, 64, 128):
                check(path, err)
            else:  # regblock_2's bug lives in the register-blocked path only
                assert err < 1e-3, f"{path.name}: fallback path, max abs err {err:.3g}"


@pytest.mark.slow
@pytest.mark.parametrize("problem", ["conv2d", "conv_relu_maxpool"])
def test_conv_cuda_kernels_under_emulation(problem: str, tmp_path: Path):
    torch.manual_seed(0)
    n, c, h, w, co, k, s, p, pk, ps = 2, 3, 44, 52, 40, 11, 4, 2, 3, 2
    x = torch.randn(n, c, h, w)
    conv = torch.nn.Conv2d(c, co, k, stride=s, padding=p)
    weight, bias = conv.weight.detach().contiguous(), conv.bias.detach().contiguous()
    with torch.no_grad():
        ref = conv(x)
        if problem == "conv_relu_maxpool":
            ref = torch.nn.functional.max_pool2d(torch.relu(ref), pk, ps)
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    for path in library(problem):
        lib = cuda_emu.build(cuda_emu.cuda_source_of(path), tmp_path)
        lib.conv_launch.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_longlong] * 10 + [ctypes.c_void_p]
        y = torch.full(ref.shape, float("nan"))
        scratch, cols = torch.empty(n, co, ho, wo), torch.empty(c * k * k, n * ho * wo)
        pointers = [t.data_ptr() for t in (x, weight, bias, y, scratch, cols)]
        assert lib.conv_launch(*pointers, n, c, h, w, co, k, s, p, pk, ps, None) == 0
        check(path, (y - ref).abs().max().item())


def launcher_scratch(source: str) -> int:
    """How many workspace pointers a layernorm launcher takes: its signature is
    (x, weight, bias, y, workspace..., N, M, stream)."""
    params = re.search(r'extern "C" int layernorm_launch\((.*?)\)\s*\{', source, re.S).group(1).split(",")
    kinds = [" ".join(p.split()[:-1]) for p in params]
    assert kinds[:4] == ["const float*"] * 3 + ["float*"], kinds
    assert kinds[-3:] == ["long long", "long long", "cudaStream_t"], kinds
    assert all(k == "float*" for k in kinds[4:-3]), kinds
    return len(kinds) - 7


@pytest.mark.slow
def test_layernorm_cuda_kernels_under_emulation(tmp_path: Path):
    """Each sample normalized over its last three dims. 3 x (3, 7, 5): 105 elements per sample, the
    scalar paths (not a multiple of 4); 3 x (2, 10, 30): 600, the float4 paths, more than a 512-thread
    block's sweep and no multiple of a block. y lies at the start of a larger NaN-filled buffer, so a
    store past its end is seen: sampleloop_1's (declared a run-time error) must land there, no other's."""
    torch.manual_seed(0)
    for shape in [(3, 7, 5), (2, 10, 30)]:
        n, m = 3, shape[0] * shape[1] * shape[2]
        x = 0.5 + 1.5 * torch.randn(n, *shape)  # mean away from 0 and 1, so E[x^2] - mean is visibly off
        weight, bias = 1.0 + 0.5 * torch.randn(shape), 0.5 * torch.randn(shape)
        ref = torch.nn.functional.layer_norm(x, shape, weight, bias, eps=1e-5)
        for path in library("layernorm"):
            source = cuda_emu.cuda_source_of(path)
            if m % 4 and "if m % 4:" in path.read_text():
                continue  # its ModelNew refuses a normalized size that is not a multiple of 4
            lib = cuda_emu.build(source, tmp_path)
            scratch = [torch.full((4 * n * m + 64,), float("nan")) for _ in range(launcher_scratch(source))]
            lib.layernorm_launch.argtypes = [ctypes.c_void_p] * (4 + len(scratch)) + [ctypes.c_longlong] * 2 + [
                ctypes.c_void_p]
            out = torch.full((n * m + m * m + n,), float("nan"))  # room for a position-major store
            assert lib.layernorm_launch(x.data_ptr(), weight.data_ptr(), bias.data_ptr(), out.data_ptr(),
                                        *[s.data_ptr() for s in scratch], n, m, None) == 0
            past_end = int((~out[n * m:].isnan()).sum())
            if intended_status(path.read_text()) == "runtime_error":
                assert past_end > 0, f"{path.name}: declared a run-time error, no store past the end of y"
                continue
            assert past_end == 0, f"{path.name}: {past_end} stores past the end of y"
            check(path, (out[: n * m].view_as(ref) - ref).abs().max().item())


@pytest.mark.slow
def test_layernorm_modelnew_host_side_under_emulation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Each layernorm file's Python side (its checks, the workspace it allocates, the launcher's
    argument order) against its emulated library: load_inline answers with that library, and the two
    CUDA-only expressions of forward (the tensors' device test, the current stream) are swapped for
    CPU ones. The files that work give ModelNew's output its declared verdict."""
    import torch.utils.cpp_extension

    torch.manual_seed(0)
    swaps = {"x.is_cuda and weight.is_cuda and bias.is_cuda": "True",
             "torch.cuda.current_stream().cuda_stream": "None"}
    for path in library("layernorm"):
        text = path.read_text()
        if intended_status(text) == "runtime_error":
            continue  # its stores land outside y (see the test above)
        for cuda_only, cpu in swaps.items():
            assert text.count(cuda_only) == 1, f"{path.name}: {cuda_only!r}"
            text = text.replace(cuda_only, cpu)
        so = cuda_emu.build(cuda_emu.cuda_source_of(path), tmp_path)._name
        monkeypatch.setattr(torch.utils.cpp_extension, "load_inline", lambda _so=so, **_: _so)
        module: dict = {"__name__": f"emulated_{path.stem}"}
        exec(compile(text, str(path), "exec"), module)
        shape = (2, 10, 30)
        model = module["ModelNew"](shape)
        x = 0.5 + 1.5 * torch.randn(3, *shape)
        with torch.no_grad():
            ref = torch.nn.functional.layer_norm(x, shape, model.ln.weight, model.ln.bias, eps=1e-5)
            check(path, (model(x) - ref).abs().max().item())
