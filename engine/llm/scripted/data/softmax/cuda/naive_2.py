"""One thread per row, three plain passes: row statistics kernel + elementwise kernel.

A first kernel gives each row to one thread, which computes the maximum and 1 / sum(exp); a second,
one-thread-per-element kernel (grid-stride) writes the outputs. The write pass is coalesced, but the
statistics kernel is still a serial walk per row.

Intended outcome: correct but slower than PyTorch.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cmath>

// Kernel 1: one thread per row computes the row maximum and 1 / sum(exp(x - max)).
__global__ void row_stats_kernel(const float* __restrict__ x,
                                 float2* __restrict__ stats,
                                 int64_t rows,
                                 int64_t dim) {
    for (int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; row < rows;
         row += (int64_t)gridDim.x * blockDim.x) {
        const float* xr = x + row * dim;
        float m = -INFINITY;
        for (int64_t j = 0; j < dim; ++j) m = fmaxf(m, xr[j]);
        float s = 0.0f;
        for (int64_t j = 0; j < dim; ++j) s += expf(xr[j] - m);
        stats[row] = make_float2(m, 1.0f / s);
    }
}

// Kernel 2: one thread per element (grid-stride), reads the statistics of its row.
__global__ void apply_softmax_kernel(const float* __restrict__ x,
                                     const float2* __restrict__ stats,
                                     float* __restrict__ y,
                                     int64_t total,
                                     int64_t dim) {
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const float2 st = stats[idx / dim];
        y[idx] = expf(x[idx] - st.x) * st.y;
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
    auto stats = torch::empty({rows, 2}, x.options());

    const int stat_threads = 64;
    int64_t stat_blocks = (rows + stat_threads - 1) / stat_threads;
    if (stat_blocks > 65535) stat_blocks = 65535;
    row_stats_kernel<<<(unsigned int)stat_blocks, stat_threads>>>(
        x.data_ptr<float>(), reinterpret_cast<float2*>(stats.data_ptr<float>()), rows, dim);
    cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "row_stats_kernel launch failed: ", cudaGetErrorString(err));

    const int64_t total = rows * dim;
    const int threads = 256;
    int64_t blocks = (total + threads - 1) / threads;
    if (blocks > 65535 * 8) blocks = 65535 * 8;
    apply_softmax_kernel<<<(unsigned int)blocks, threads>>>(
        x.data_ptr<float>(), reinterpret_cast<const float2*>(stats.data_ptr<float>()),
        y.data_ptr<float>(), total, dim);
    err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "apply_softmax_kernel launch failed: ",
                cudaGetErrorString(err));
    return y;
}
"""

cpp_source = "torch::Tensor softmax_forward(torch::Tensor x);"

softmax_ext = load_inline(
    name="ktree_softmax_naive_2_cuda",
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
