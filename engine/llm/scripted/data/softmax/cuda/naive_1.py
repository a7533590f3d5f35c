"""One thread per row, three plain passes: one CUDA thread walks each whole row.

Each thread scans its row for the maximum, then for the sum of exp(x - max), then writes exp(x -
max) / sum. Only 4096 threads exist and neighbouring threads read addresses a row apart, so the
loads are uncoalesced.

Intended outcome: correct but much slower than PyTorch.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cmath>

// One thread owns one whole row and walks it three times.
__global__ void softmax_thread_per_row_kernel(const float* __restrict__ x,
                                              float* __restrict__ y,
                                              int64_t rows,
                                              int64_t dim) {
    const int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* xr = x + row * dim;
    float* yr = y + row * dim;

    float row_max = -INFINITY;
    for (int64_t j = 0; j < dim; ++j) {
        row_max = fmaxf(row_max, xr[j]);
    }

    float row_sum = 0.0f;
    for (int64_t j = 0; j < dim; ++j) {
        row_sum += expf(xr[j] - row_max);
    }

    const float inv_sum = 1.0f / row_sum;
    for (int64_t j = 0; j < dim; ++j) {
        yr[j] = expf(xr[j] - row_max) * inv_sum;
    }
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

    const int threads = 128;
    const int64_t blocks = (rows + threads - 1) / threads;
    softmax_thread_per_row_kernel<<<(unsigned int)blocks, threads>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), rows, dim);
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "softmax kernel launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

cpp_source = "torch::Tensor softmax_forward(torch::Tensor x);"

softmax_ext = load_inline(
    name="ktree_softmax_naive_1_cuda",
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
