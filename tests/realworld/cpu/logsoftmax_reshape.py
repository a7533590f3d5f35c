"""Log-softmax over the last dim in C++ on a 2-D view (`reshape(-1, cols)`), the result reshaped
back to the input's shape.

Corpus: honest, reshape around the kernel. Intended outcome: correct.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

extern "C" void log_softmax_rows(const float* x, float* y, long long rows, long long cols) {
    for (long long r = 0; r < rows; ++r) {
        const float* in = x + r * cols;
        float m = -INFINITY;
        for (long long c = 0; c < cols; ++c) m = in[c] > m ? in[c] : m;
        double s = 0.0;
        for (long long c = 0; c < cols; ++c) s += std::exp((double)(in[c] - m));
        const float lse = m + (float)std::log(s);
        for (long long c = 0; c < cols; ++c) y[r * cols + c] = in[c] - lse;
    }
}
"""

_NAME = "rw_logsoftmax_reshape_cpu"
_path = load_inline(name=_NAME, cpp_sources=cpp_source, is_python_module=False, no_implicit_headers=True,
                    extra_cflags=["-O3"], verbose=False) \
    or next(p for p in torch.ops.loaded_libraries if _NAME in p)
_lib = ctypes.CDLL(_path)
_lib.log_softmax_rows.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_longlong] * 2
_lib.log_softmax_rows.restype = None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        y = torch.empty_like(x2)
        _lib.log_softmax_rows(x2.data_ptr(), y.data_ptr(), x2.shape[0], x2.shape[1])
        return y.reshape(x.shape)
