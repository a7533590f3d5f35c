"""Shared-memory tiling: 32 x 32 tiles of A and B staged per block, one output per thread.

The fix-prompt answer for tiled_2.py: the barriers are `__syncthreads()`.

Intended outcome: correct.

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

extern "C" int matmul_launch(const float* A, const float* B, float* C, long long M, long long K, long long N,
                             cudaStream_t stream) {
    const dim3 block(32, 32);
    const dim3 grid((unsigned)((N + 31) / 32), (unsigned)((M + 31) / 32));
    matmul_tiled_kernel<<<grid, block, 0, stream>>>(A, B, C, (int)M, (int)K, (int)N);
    return (int)cudaGetLastError();
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_matmul_tiled_2_cuda",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_matmul_tiled_2_cuda" in p)
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
