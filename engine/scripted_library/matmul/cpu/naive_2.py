"""One dot product per output, loops reordered i-k-j (row of C += A[i, k] * row k of B).

Still single-threaded and unblocked, but the inner loop now streams a row of B and a row of C
with unit stride, so it vectorizes.

Intended outcome: correct but slower than PyTorch.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cstdint>

extern "C" void matmul_ikj(const float* A, const float* B, float* C, long long M, long long K, long long N) {
    for (long long i = 0; i < M; ++i) {
        float* __restrict__ c = C + i * N;
        for (long long j = 0; j < N; ++j) c[j] = 0.0f;
        for (long long k = 0; k < K; ++k) {
            const float a = A[i * K + k];
            const float* __restrict__ b = B + k * N;
            for (long long j = 0; j < N; ++j) c[j] += a * b[j];
        }
    }
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_matmul_naive_2_cpu",
    cpp_sources=cpp_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cflags=['-O3', '-march=native'],
    extra_ldflags=[],
    verbose=False,
) or next(p for p in torch.ops.loaded_libraries if "ktree_matmul_naive_2_cpu" in p)
_lib = ctypes.CDLL(_path)
_lib.matmul_ikj.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong,
                       ctypes.c_longlong, ctypes.c_longlong]
_lib.matmul_ikj.restype = None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        if not (A.device.type == "cpu" and B.device.type == "cpu" and A.dtype == torch.float32
                and B.dtype == torch.float32 and A.dim() == 2 and B.dim() == 2 and A.shape[1] == B.shape[0]):
            raise ValueError("A (M, K) and B (K, N) must be float32 CPU matrices")
        A = A.contiguous()
        B = B.contiguous()
        C = torch.empty(A.shape[0], B.shape[1], dtype=torch.float32)
        if C.numel() == 0:
            return C
        _lib.matmul_ikj(A.data_ptr(), B.data_ptr(), C.data_ptr(), A.shape[0], A.shape[1], B.shape[1])
        return C
