"""Without a GPU: the CUDA kernels of the matmul, conv2d and conv_relu_maxpool scripted libraries,
run on the CPU under a small emulation of CUDA (tests/cuda_emu), compute what their files declare:
the correct ones match PyTorch at small shapes (odd extents, a channel count that is not a multiple
of the kernels' 16-channel groups), the incorrect ones do not. The GPU test (tests/test_gpu.py)
checks the real thing at full size; this one catches indexing and arithmetic slips anywhere."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
import torch

from engine.llm.scripted import load_ideas
from tests import cuda_emu
from tests.test_gpu import intended_status

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
