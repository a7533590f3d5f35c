"""One block per row with a tree reduction: 1024 threads, warp shuffles + 32-entry smem step.

The fix-prompt answer for rowblock_2.py: block_reduce_max now indexes shared memory with the `warp` it declared.

Intended outcome: correct.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cmath>

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

torch::Tensor softmax_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() == 2, "x must be 2-D (rows, dim)");

    auto y = torch::empty_like(x);
    const int64_t rows = x.size(0);
    const int64_t dim = x.size(1);
    if (rows == 0 || dim == 0) return y;

    softmax_warp_shuffle_kernel<<<(unsigned int)rows, kThreads>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), dim);
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "softmax kernel launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

cpp_source = "torch::Tensor softmax_forward(torch::Tensor x);"

softmax_ext = load_inline(
    name="ktree_softmax_rowblock_2_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["softmax_forward"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_ext.softmax_forward(x)
