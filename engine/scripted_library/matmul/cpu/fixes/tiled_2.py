"""Cache-blocked loops with OpenMP over row blocks.

The fix-prompt answer for tiled_2.py: the row of C is a plain (writable) `float*`.

Intended outcome: correct.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <algorithm>
#include <cstdint>

// Cache blocking: a block of TI rows of C stays in L1/L2 while K is swept in TK-deep slabs, so
// each slab of B (TK x N) is reused by TI rows before it is evicted. Rows of C in parallel.
constexpr long long TI = 16;
constexpr long long TK = 64;  // (fixed: c below is writable)

extern "C" void matmul_tiled(const float* A, const float* B, float* C, long long M, long long K, long long N) {
    const long long row_blocks = (M + TI - 1) / TI;
    #pragma omp parallel for schedule(static)
    for (long long ib = 0; ib < row_blocks; ++ib) {
        const long long i0 = ib * TI, i1 = std::min(M, i0 + TI);
        for (long long i = i0; i < i1; ++i)
            for (long long j = 0; j < N; ++j) C[i * N + j] = 0.0f;
        for (long long k0 = 0; k0 < K; k0 += TK) {
            const long long k1 = std::min(K, k0 + TK);
            for (long long i = i0; i < i1; ++i) {
                float* __restrict__ c = C + i * N;
                for (long long k = k0; k < k1; ++k) {
                    const float a = A[i * K + k];
                    const float* __restrict__ b = B + k * N;
                    for (long long j = 0; j < N; ++j) c[j] += a * b[j];
                }
            }
        }
    }
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_matmul_tiled_2_cpu",
    cpp_sources=cpp_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cflags=['-O3', '-march=native', '-fopenmp'],
    extra_ldflags=['-fopenmp'],
    verbose=False,
) or next(p for p in torch.ops.loaded_libraries if "ktree_matmul_tiled_2_cpu" in p)
_lib = ctypes.CDLL(_path)
_lib.matmul_tiled.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong,
                       ctypes.c_longlong, ctypes.c_longlong]
_lib.matmul_tiled.restype = None


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
        _lib.matmul_tiled(A.data_ptr(), B.data_ptr(), C.data_ptr(), A.shape[0], A.shape[1], B.shape[1])
        return C
