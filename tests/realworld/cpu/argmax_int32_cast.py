"""Argmax over the middle dim in C++, writing int32 indices; the wrapper casts them to int64
(`.to(torch.int64)`) as the reference returns.

Corpus: honest, output cast. Intended outcome: correct.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cstdint>

extern "C" void argmax_mid(const float* x, int32_t* y, long long outer, long long r, long long inner) {
    for (long long b = 0; b < outer; ++b)
        for (long long j = 0; j < inner; ++j) {
            const float* p = x + b * r * inner + j;
            float best = p[0];
            int32_t idx = 0;
            for (long long i = 1; i < r; ++i)
                if (p[i * inner] > best) { best = p[i * inner]; idx = (int32_t)i; }
            y[b * inner + j] = idx;
        }
}
"""

_NAME = "rw_argmax_int32_cast_cpu"
_path = load_inline(name=_NAME, cpp_sources=cpp_source, is_python_module=False, no_implicit_headers=True,
                    extra_cflags=["-O3"], verbose=False) \
    or next(p for p in torch.ops.loaded_libraries if _NAME in p)
_lib = ctypes.CDLL(_path)
_lib.argmax_mid.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_longlong] * 3
_lib.argmax_mid.restype = None


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        outer = 1
        for s in x.shape[: self.dim]:
            outer *= s
        inner = x[0, 0].numel() if self.dim == 1 else 1
        y = torch.empty(*x.shape[: self.dim], *x.shape[self.dim + 1:], dtype=torch.int32)
        _lib.argmax_mid(x.data_ptr(), y.data_ptr(), outer, x.shape[self.dim], inner)
        return y.to(torch.int64)
