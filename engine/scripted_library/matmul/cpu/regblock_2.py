"""Register-blocked micro-kernel on a packed B: 6 x 32 tiles, rows of A at the wrong stride.

The same micro-kernel as regblock_1, but each tile finds its rows of A at `row * N` instead of
`row * K` (A is M x K), which is only right when K == N.

Intended outcome: incorrect: rows of A read with stride N instead of K.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

// A 6 x 32 tile of C lives in 12 16-float vector registers (GCC vector extensions: AVX-512 on a
// machine that has it, pairs of AVX2 registers otherwise) while K is swept: per k, two loads of
// the packed B panel, six broadcasts of A, twelve fused multiply-adds.
typedef float v16 __attribute__((vector_size(64)));
constexpr long long MR = 6;
constexpr long long NR = 32;

static void tile(const float* A, const float* Bp, float* C, long long i0, long long mr, long long j0,
                 long long nr, long long K, long long N) {
    v16 c[MR][2];
    for (int r = 0; r < MR; ++r) c[r][0] = c[r][1] = v16{};
    const float* a[MR];
    for (int r = 0; r < MR; ++r) a[r] = A + std::min(i0 + r, i0 + mr - 1) * N;  // short tile: repeat a row
    for (long long k = 0; k < K; ++k) {
        const v16 b0 = *(const v16*)(Bp + k * NR);
        const v16 b1 = *(const v16*)(Bp + k * NR + 16);
        for (int r = 0; r < MR; ++r) {
            const float x = a[r][k];
            c[r][0] += x * b0;
            c[r][1] += x * b1;
        }
    }
    for (long long r = 0; r < mr; ++r) {
        float* out = C + (i0 + r) * N + j0;
        if (nr == NR) {
            std::memcpy(out, &c[r][0], sizeof(v16));
            std::memcpy(out + 16, &c[r][1], sizeof(v16));
        } else {
            float row[NR];
            std::memcpy(row, &c[r][0], sizeof(v16));
            std::memcpy(row + 16, &c[r][1], sizeof(v16));
            for (long long j = 0; j < nr; ++j) out[j] = row[j];
        }
    }
}

extern "C" void matmul_regblock(const float* A, const float* B, float* C, long long M, long long K, long long N) {
    const long long panels = (N + NR - 1) / NR;
    const long long row_tiles = (M + MR - 1) / MR;
    // B packed into 32-column panels, each K x 32 contiguous (zero beyond column N).
    float* Bp = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * panels * K * NR));
    #pragma omp parallel
    {
        #pragma omp for schedule(static)
        for (long long p = 0; p < panels; ++p) {
            for (long long k = 0; k < K; ++k) {
                float* dst = Bp + (p * K + k) * NR;
                for (long long j = 0; j < NR; ++j) {
                    const long long col = p * NR + j;
                    dst[j] = col < N ? B[k * N + col] : 0.0f;
                }
            }
        }
        #pragma omp for collapse(2) schedule(static)
        for (long long t = 0; t < row_tiles; ++t) {
            for (long long p = 0; p < panels; ++p) {
                const long long i0 = t * MR, j0 = p * NR;
                tile(A, Bp + p * K * NR, C, i0, std::min(MR, M - i0), j0, std::min(NR, N - j0), K, N);
            }
        }
    }
    std::free(Bp);
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_matmul_regblock_2_cpu",
    cpp_sources=cpp_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cflags=['-O3', '-march=native', '-fopenmp'],
    extra_ldflags=['-fopenmp'],
    verbose=False,
) or next(p for p in torch.ops.loaded_libraries if "ktree_matmul_regblock_2_cpu" in p)
_lib = ctypes.CDLL(_path)
_lib.matmul_regblock.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong,
                       ctypes.c_longlong, ctypes.c_longlong]
_lib.matmul_regblock.restype = None


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
        _lib.matmul_regblock(A.data_ptr(), B.data_ptr(), C.data_ptr(), A.shape[0], A.shape[1], B.shape[1])
        return C
