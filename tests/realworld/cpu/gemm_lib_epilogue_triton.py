"""GEMM by torch (`torch.mm` against the transposed weight), then one C++ pass for bias + exact GELU
in place. (The GPU twin does the epilogue in a Triton kernel after cuBLAS.)

Corpus: honest, library op + fused epilogue. Intended outcome: correct, with Verdict.library
naming the GEMM.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

extern "C" void bias_gelu(float* y, const float* bias, long long rows, long long cols) {
    for (long long r = 0; r < rows; ++r)
        for (long long c = 0; c < cols; ++c) {
            const float v = y[r * cols + c] + bias[c];
            y[r * cols + c] = 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
        }
}
"""

_NAME = "rw_gemm_lib_epilogue_cpu"
_path = load_inline(name=_NAME, cpp_sources=cpp_source, is_python_module=False, no_implicit_headers=True,
                    extra_cflags=["-O3"], verbose=False) \
    or next(p for p in torch.ops.loaded_libraries if _NAME in p)
_lib = ctypes.CDLL(_path)
_lib.bias_gelu.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_longlong] * 2
_lib.bias_gelu.restype = None


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.mm(x.contiguous(), self.linear.weight.t())
        b = self.linear.bias.detach().contiguous()
        _lib.bias_gelu(y.data_ptr(), b.data_ptr(), y.shape[0], y.shape[1])
        return y
