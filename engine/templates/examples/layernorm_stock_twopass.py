"""Naive two-pass statistics, one block per sample: stats kernel + per-element apply kernel.

A 256-thread block per sample computes the mean, then the centred variance (shared-memory tree in
double); a one-thread-per-element kernel applies (x - mean) * rstd * w + b. Only 16 blocks do the
statistics and each sample is read three times.

Kept in ktree's stock load_inline structure (torch/extension.h in the CUDA source, bindings made by
load_inline) as the stock CUDA sources of `ktree bench compile`; the scripted library's copy of
this kernel (layernorm/cuda/twopass_1.py) is in the ctypes structure.

Intended outcome: correct but slow (several times slower than the split variants).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cmath>

constexpr int kThreads = 256;
constexpr double kEps = 1e-5;

__device__ double block_sum(double v, double* red) {
    const int tid = threadIdx.x;
    red[tid] = v;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
        if (tid < stride) red[tid] += red[tid + stride];
        __syncthreads();
    }
    const double total = red[0];
    __syncthreads();
    return total;
}

// One block per sample: mean first, then the mean of squared deviations.
__global__ void ln_stats_kernel(const float* __restrict__ x, float2* __restrict__ stats,
                                int64_t M) {
    __shared__ double red[kThreads];
    const float* xs = x + (int64_t)blockIdx.x * M;

    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < M; i += kThreads) acc += (double)xs[i];
    const double mean = block_sum(acc, red) / (double)M;

    acc = 0.0;
    for (int64_t i = threadIdx.x; i < M; i += kThreads) {
        const double d = (double)xs[i] - mean;
        acc += d * d;
    }
    const double var = block_sum(acc, red) / (double)M;

    if (threadIdx.x == 0) {
        stats[blockIdx.x] = make_float2((float)mean, (float)(1.0 / sqrt(var + kEps)));
    }
}

// One thread per output element.
__global__ void ln_apply_kernel(const float* __restrict__ x, const float2* __restrict__ stats,
                                const float* __restrict__ w, const float* __restrict__ b,
                                float* __restrict__ y, int64_t M, int64_t total) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return;
    const int64_t n = idx / M;
    const int64_t i = idx - n * M;
    const float2 st = stats[n];
    y[idx] = (x[idx] - st.x) * st.y * w[i] + b[i];
}

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(),
                "all tensors must be CUDA tensors");
    TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous(),
                "tensors must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
                bias.scalar_type() == torch::kFloat32, "tensors must be float32");
    const int64_t M = weight.numel();
    TORCH_CHECK(M > 0 && bias.numel() == M, "weight and bias must have the same, non-zero size");
    TORCH_CHECK(x.numel() % M == 0, "x is not a whole number of normalized samples");
    const int64_t N = x.numel() / M;
    TORCH_CHECK(N <= 2147483647LL, "too many samples");

    auto y = torch::empty_like(x);
    if (N == 0) return y;
    auto stats = torch::empty({N, 2}, x.options());
    float2* st = reinterpret_cast<float2*>(stats.data_ptr<float>());

    ln_stats_kernel<<<(unsigned int)N, kThreads>>>(x.data_ptr<float>(), st, M);
    cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "ln_stats_kernel launch failed: ", cudaGetErrorString(err));

    const int64_t total = N * M;
    const int threads = 256;
    const int64_t blocks = (total + threads - 1) / threads;
    TORCH_CHECK(blocks <= 2147483647LL, "tensor too large for a 1-D grid");
    ln_apply_kernel<<<(unsigned int)blocks, threads>>>(
        x.data_ptr<float>(), st, weight.data_ptr<float>(), bias.data_ptr<float>(),
        y.data_ptr<float>(), M, total);
    err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "ln_apply_kernel launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

cpp_source = "torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b);"

layernorm_ext = load_inline(
    name="ktree_layernorm_stock_twopass",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["layernorm_forward"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape, eps=1e-5)
        with torch.no_grad():
            self.ln.weight.copy_(1.0 + 0.5 * torch.randn(normalized_shape))
            self.ln.bias.copy_(0.5 * torch.randn(normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm_ext.layernorm_forward(x, self.ln.weight, self.ln.bias)
