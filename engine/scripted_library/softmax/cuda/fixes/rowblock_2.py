"""One block per row with a tree reduction: 1024 threads, warp shuffles + 32-entry smem step.

The fix-prompt answer for rowblock_2.py: block_reduce_max now indexes shared memory with the `warp` it declared.

Built in ktree's fastest-compiling structure: no torch headers; an `extern "C"` launcher
called through ctypes with the tensors' pointers and torch's current stream.

Intended outcome: correct.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float warp_reduce_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    return v;
}

__device__ __forceinline__ float warp_reduce_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
}

__device__ float block_reduce_max(float v, float* smem) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    v = warp_reduce_max(v);
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    v = (lane < kWarps) ? smem[lane] : -INFINITY;
    v = warp_reduce_max(v);
    __syncthreads();
    return v;
}

__device__ float block_reduce_sum(float v, float* smem) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    v = warp_reduce_sum(v);
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    v = (lane < kWarps) ? smem[lane] : 0.0f;
    v = warp_reduce_sum(v);
    __syncthreads();
    return v;
}

__global__ void __launch_bounds__(kThreads)
softmax_warp_shuffle_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t dim) {
    __shared__ float smem[kWarps];
    const int64_t row = blockIdx.x;
    const float* xr = x + row * dim;
    float* yr = y + row * dim;

    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < dim; j += kThreads) m = fmaxf(m, xr[j]);
    const float row_max = block_reduce_max(m, smem);

    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < dim; j += kThreads) s += __expf(xr[j] - row_max);
    const float inv_sum = 1.0f / block_reduce_sum(s, smem);

    for (int64_t j = threadIdx.x; j < dim; j += kThreads) yr[j] = __expf(xr[j] - row_max) * inv_sum;
}

extern "C" int softmax_launch(const float* xp, float* yp, long long rows, long long dim, cudaStream_t stream) {
    softmax_warp_shuffle_kernel<<<(unsigned int)rows, kThreads, 0, stream>>>(xp, yp, dim);
    const cudaError_t err = cudaGetLastError();
    return (int)err;
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_softmax_rowblock_2_cuda",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_softmax_rowblock_2_cuda" in p)
_lib = ctypes.CDLL(_path)
_lib.softmax_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_longlong,
                                ctypes.c_void_p]
_lib.softmax_launch.restype = ctypes.c_int


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (x.is_cuda and x.dtype == torch.float32 and x.dim() == 2):
            raise ValueError("x must be a 2-D float32 CUDA tensor")
        if x.shape[0] > 2**31 - 1:
            raise ValueError("too many rows for a 1-D grid")
        x = x.contiguous()
        y = torch.empty_like(x)
        if x.numel() == 0:
            return y
        err = _lib.softmax_launch(x.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1],
                                  torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"softmax kernel launch failed (CUDA error {err})")
        return y
