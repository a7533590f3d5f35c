"""Register-blocked micro-kernel: 128 x 128 block tiles, the last K slab skipped.

The same kernel as regblock_1, but the slab loop runs `k0 < K - 8`, so the last 8 columns of A
(and rows of B) never enter the sum.

Intended outcome: incorrect: the last K slab is left out of every dot product.

Built in ktree's fastest-compiling structure: no torch headers; an `extern "C"` launcher
called through ctypes with the tensors' pointers and torch's current stream.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

// 32 x 32 tiles of A and B staged in shared memory: each global load feeds 32 multiply-adds.
__global__ void matmul_tiled_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                    float* __restrict__ C, int M, int K, int N) {
    __shared__ float As[32][32];
    __shared__ float Bs[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * 32 + ty, col = blockIdx.x * 32 + tx;
    float acc = 0.0f;
    for (int t0 = 0; t0 < K; t0 += 32) {
        As[ty][tx] = (row < M && t0 + tx < K) ? A[(long long)row * K + t0 + tx] : 0.0f;
        Bs[ty][tx] = (t0 + ty < K && col < N) ? B[(long long)(t0 + ty) * N + col] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int j = 0; j < 32; ++j) acc += As[ty][j] * Bs[j][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[(long long)row * N + col] = acc;
}

// 128 x 128 block tiles, 8-deep K slabs, 256 threads each holding an 8 x 8 block of C in
// registers: per k, 8 + 8 shared loads feed 64 FMAs. Used when the shapes divide evenly and the
// pointers are 16-byte aligned; the 32 x 32 tiled kernel covers every other shape.
__global__ void __launch_bounds__(256) matmul_reg_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                                         float* __restrict__ C, int M, int K, int N) {
    __shared__ float As[8][128];  // As[k][m]: A's tile transposed
    __shared__ float Bs[8][128];
    const int tid = threadIdx.x;
    const int bm = blockIdx.y * 128, bn = blockIdx.x * 128;
    const int tr = (tid / 16) * 8, tc = (tid % 16) * 8;
    const int a_row = tid / 2, a_k = (tid % 2) * 4;
    const int b_k = tid / 32, b_col = (tid % 32) * 4;
    float acc[8][8];
    #pragma unroll
    for (int i = 0; i < 8; ++i)
        #pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K - 8; k0 += 8) {
        const float4 a4 = *reinterpret_cast<const float4*>(A + (long long)(bm + a_row) * K + k0 + a_k);
        As[a_k + 0][a_row] = a4.x;
        As[a_k + 1][a_row] = a4.y;
        As[a_k + 2][a_row] = a4.z;
        As[a_k + 3][a_row] = a4.w;
        *reinterpret_cast<float4*>(&Bs[b_k][b_col]) =
            *reinterpret_cast<const float4*>(B + (long long)(k0 + b_k) * N + bn + b_col);
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
            float a[8], b[8];
            #pragma unroll
            for (int i = 0; i < 8; ++i) a[i] = As[kk][tr + i];
            #pragma unroll
            for (int j = 0; j < 8; ++j) b[j] = Bs[kk][tc + j];
            #pragma unroll
            for (int i = 0; i < 8; ++i)
                #pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < 8; ++i) {
        float* out = C + (long long)(bm + tr + i) * N + bn + tc;
        *reinterpret_cast<float4*>(out) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        *reinterpret_cast<float4*>(out + 4) = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
    }
}

extern "C" int matmul_launch(const float* A, const float* B, float* C, long long M, long long K, long long N,
                             cudaStream_t stream) {
    const bool aligned = ((uintptr_t)A % 16 == 0) && ((uintptr_t)B % 16 == 0) && ((uintptr_t)C % 16 == 0);
    if (aligned && M % 128 == 0 && N % 128 == 0 && K % 8 == 0) {
        const dim3 grid((unsigned)(N / 128), (unsigned)(M / 128));
        matmul_reg_kernel<<<grid, 256, 0, stream>>>(A, B, C, (int)M, (int)K, (int)N);
    } else {
        const dim3 block(32, 32);
        const dim3 grid((unsigned)((N + 31) / 32), (unsigned)((M + 31) / 32));
        matmul_tiled_kernel<<<grid, block, 0, stream>>>(A, B, C, (int)M, (int)K, (int)N);
    }
    return (int)cudaGetLastError();
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_matmul_regblock_2_cuda",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_matmul_regblock_2_cuda" in p)
_lib = ctypes.CDLL(_path)
_lib.matmul_launch.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_longlong] * 3 + [ctypes.c_void_p]
_lib.matmul_launch.restype = ctypes.c_int


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        if not (A.is_cuda and B.is_cuda and A.dtype == torch.float32 and B.dtype == torch.float32
                and A.dim() == 2 and B.dim() == 2 and A.shape[1] == B.shape[0]):
            raise ValueError("A (M, K) and B (K, N) must be float32 CUDA matrices")
        if max(A.shape[0], A.shape[1], B.shape[1]) > 2**15:
            raise ValueError("extents above 32768 would overflow the kernels' int indexing")
        A = A.contiguous()
        B = B.contiguous()
        C = torch.empty(A.shape[0], B.shape[1], dtype=torch.float32, device=A.device)
        if C.numel() == 0:
            return C
        err = _lib.matmul_launch(A.data_ptr(), B.data_ptr(), C.data_ptr(), A.shape[0], A.shape[1], B.shape[1],
                                 torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"matmul kernel launch failed (CUDA error {err})")
        return C
