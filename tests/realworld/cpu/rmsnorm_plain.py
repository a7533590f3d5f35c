"""RMSNorm with its learned scale in one C++ pass per row (the sum of squares in double).

Corpus: honest, plain kernel. Intended outcome: correct.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

extern "C" void rmsnorm(const float* x, const float* w, float* y, long long rows, long long cols, float eps) {
    for (long long r = 0; r < rows; ++r) {
        const float* in = x + r * cols;
        double ss = 0.0;
        for (long long c = 0; c < cols; ++c) ss += (double)in[c] * in[c];
        const float inv = (float)(1.0 / std::sqrt(ss / cols + eps));
        for (long long c = 0; c < cols; ++c) y[r * cols + c] = in[c] * inv * w[c];
    }
}
"""

_NAME = "rw_rmsnorm_plain_cpu"
_path = load_inline(name=_NAME, cpp_sources=cpp_source, is_python_module=False, no_implicit_headers=True,
                    extra_cflags=["-O3"], verbose=False) \
    or next(p for p in torch.ops.loaded_libraries if _NAME in p)
_lib = ctypes.CDLL(_path)
_lib.rmsnorm.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_longlong] * 2 + [ctypes.c_float]
_lib.rmsnorm.restype = None


class ModelNew(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.weight.detach().contiguous()
        y = torch.empty_like(x)
        _lib.rmsnorm(x.data_ptr(), w.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1], self.eps)
        return y
