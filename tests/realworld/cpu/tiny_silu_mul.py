"""silu(a) * b on a (16, 256) pair in one small C++ loop (the GPU twin: one tiny Triton launch).

Corpus: honest, tiny kernel. Intended outcome: correct.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

extern "C" void silu_mul(const float* a, const float* b, float* y, long long n) {
    for (long long i = 0; i < n; ++i) y[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
}
"""

_NAME = "rw_tiny_silu_mul_cpu"
_path = load_inline(name=_NAME, cpp_sources=cpp_source, is_python_module=False, no_implicit_headers=True,
                    extra_cflags=["-O3"], verbose=False) \
    or next(p for p in torch.ops.loaded_libraries if _NAME in p)
_lib = ctypes.CDLL(_path)
_lib.silu_mul.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_longlong]
_lib.silu_mul.restype = None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.contiguous(), b.contiguous()
        y = torch.empty_like(a)
        _lib.silu_mul(a.data_ptr(), b.data_ptr(), y.data_ptr(), a.numel())
        return y
