"""One dot product per output, plain triple loop: C[i, j] = sum_k A[i, k] * B[k, j].

Single-threaded i-j-k loops: the inner loop walks a column of B, N floats apart, so every load
misses the cache line it just used and nothing vectorizes.

Intended outcome: correct but much slower than PyTorch.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cstdint>

extern "C" void matmul_ijk(const float* A, const float* B, float* C, long long M, long long K, long long N) {
    for (long long i = 0; i < M; ++i) {
        for (long long j = 0; j < N; ++j) {
            float acc = 0.0f;
            for (long long k = 0; k < K; ++k) acc += A[i * K + k] * B[k * N + j];
            C[i * N + j] = acc;
        }
    }
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_matmul_naive_1_cpu",
    cpp_sources=cpp_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cflags=['-O3'],
    extra_ldflags=[],
    verbose=False,
) or next(p for p in torch.ops.loaded_libraries if "ktree_matmul_naive_1_cpu" in p)
_lib = ctypes.CDLL(_path)
_lib.matmul_ijk.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong,
                       ctypes.c_longlong, ctypes.c_longlong]
_lib.matmul_ijk.restype = None


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
        _lib.matmul_ijk(A.data_ptr(), B.data_ptr(), C.data_ptr(), A.shape[0], A.shape[1], B.shape[1])
        return C
