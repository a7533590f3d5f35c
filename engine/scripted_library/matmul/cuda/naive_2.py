"""One dot product per output element: 16 x 16 thread blocks, K unrolled by four, __ldg loads.

Intended outcome: correct but much slower than PyTorch.

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

// One thread per output element in 16 x 16 blocks, the K loop unrolled by four with read-only
// (__ldg) loads. Still no reuse of anything through shared memory.
__global__ void matmul_naive16_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                      float* __restrict__ C, int M, int K, int N) {
    const int col = blockIdx.x * 16 + threadIdx.x;
    const int row = blockIdx.y * 16 + threadIdx.y;
    if (col >= N || row >= M) return;
    const float* a = A + (long long)row * K;
    float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
    int k = 0;
    for (; k + 4 <= K; k += 4) {
        acc0 += __ldg(a + k) * __ldg(B + (long long)k * N + col);
        acc1 += __ldg(a + k + 1) * __ldg(B + (long long)(k + 1) * N + col);
        acc2 += __ldg(a + k + 2) * __ldg(B + (long long)(k + 2) * N + col);
        acc3 += __ldg(a + k + 3) * __ldg(B + (long long)(k + 3) * N + col);
    }
    for (; k < K; ++k) acc0 += __ldg(a + k) * __ldg(B + (long long)k * N + col);
    C[(long long)row * N + col] = (acc0 + acc1) + (acc2 + acc3);
}

extern "C" int matmul_launch(const float* A, const float* B, float* C, long long M, long long K, long long N,
                             cudaStream_t stream) {
    const dim3 block(16, 16);
    const dim3 grid((unsigned)((N + 15) / 16), (unsigned)((M + 15) / 16));
    matmul_naive16_kernel<<<grid, block, 0, stream>>>(A, B, C, (int)M, (int)K, (int)N);
    return (int)cudaGetLastError();
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_matmul_naive_2_cuda",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_matmul_naive_2_cuda" in p)
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
