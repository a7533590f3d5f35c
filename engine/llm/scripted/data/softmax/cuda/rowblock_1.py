"""One block per row with a tree reduction: 256 threads, shared-memory tree.

The threads of a block stride through the row together (coalesced loads); max and sum are reduced
with a classic shared-memory tree. Three passes over each row (max, sum, write).

Intended outcome: correct (roughly PyTorch speed).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cmath>

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

torch::Tensor softmax_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() == 2, "x must be 2-D (rows, dim)");
    TORCH_CHECK(x.size(0) <= 2147483647LL, "too many rows for a 1-D grid");

    auto y = torch::empty_like(x);
    const int64_t rows = x.size(0);
    const int64_t dim = x.size(1);
    if (rows == 0 || dim == 0) return y;

    softmax_block_per_row_kernel<<<(unsigned int)rows, kThreads>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), dim);
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "softmax kernel launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

cpp_source = "torch::Tensor softmax_forward(torch::Tensor x);"

softmax_ext = load_inline(
    name="ktree_softmax_rowblock_1_cuda",
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
