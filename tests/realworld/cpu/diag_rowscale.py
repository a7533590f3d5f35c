"""diag(A) @ B without the N x N matrix: C[i, :] = A[i] * B[i, :], one C++ pass over B.

Corpus: honest, algorithmic win. Intended outcome: correct.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
extern "C" void row_scale(const float* a, const float* b, float* c, long long n, long long m) {
    for (long long i = 0; i < n; ++i) {
        const float s = a[i];
        for (long long j = 0; j < m; ++j) c[i * m + j] = s * b[i * m + j];
    }
}
"""

_NAME = "rw_diag_rowscale_cpu"
_path = load_inline(name=_NAME, cpp_sources=cpp_source, is_python_module=False, no_implicit_headers=True,
                    extra_cflags=["-O3"], verbose=False) \
    or next(p for p in torch.ops.loaded_libraries if _NAME in p)
_lib = ctypes.CDLL(_path)
_lib.row_scale.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_longlong] * 2
_lib.row_scale.restype = None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        A, B = A.contiguous(), B.contiguous()
        C = torch.empty_like(B)
        _lib.row_scale(A.data_ptr(), B.data_ptr(), C.data_ptr(), B.shape[0], B.shape[1])
        return C
