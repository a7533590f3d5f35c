"""One block per row with a tree reduction: 256 threads, shared-memory tree.

The threads of a block stride through the row together (coalesced loads); max and sum are reduced
with a classic shared-memory tree. Three passes over each row (max, sum, write).

Built in ktree's fastest-compiling structure: no torch headers; an `extern "C"` launcher
called through ctypes with the tensors' pointers and torch's current stream.

Intended outcome: correct (roughly PyTorch speed).
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>

constexpr int kThreads = 256;

// Classic shared-memory tree reduction; every thread gets the result.
template <bool kIsMax>
__device__ float block_reduce(float v, float* red) {
    const int tid = threadIdx.x;
    red[tid] = v;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
        if (tid < stride) {
            red[tid] = kIsMax ? fmaxf(red[tid], red[tid + stride]) : red[tid] + red[tid + stride];
        }
        __syncthreads();
    }
    const float result = red[0];
    __syncthreads();  // red is reused by the next reduction
    return result;
}

__global__ void __launch_bounds__(kThreads)
softmax_block_per_row_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t dim) {
    __shared__ float red[kThreads];
    const int64_t row = blockIdx.x;
    const float* xr = x + row * dim;
    float* yr = y + row * dim;
    const int tid = threadIdx.x;

    float m = -INFINITY;
    for (int64_t j = tid; j < dim; j += kThreads) m = fmaxf(m, xr[j]);
    const float row_max = block_reduce<true>(m, red);

    float s = 0.0f;
    for (int64_t j = tid; j < dim; j += kThreads) s += expf(xr[j] - row_max);
    const float row_sum = block_reduce<false>(s, red);

    const float inv_sum = 1.0f / row_sum;
    for (int64_t j = tid; j < dim; j += kThreads) yr[j] = expf(xr[j] - row_max) * inv_sum;
}

extern "C" int softmax_launch(const float* xp, float* yp, long long rows, long long dim, cudaStream_t stream) {
    softmax_block_per_row_kernel<<<(unsigned int)rows, kThreads, 0, stream>>>(xp, yp, dim);
    const cudaError_t err = cudaGetLastError();
    return (int)err;
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_softmax_rowblock_1_cuda",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_softmax_rowblock_1_cuda" in p)
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
