"""Naive two-pass statistics, one block per sample: one fused 1024-thread kernel.

Mean pass, centred variance pass and normalize pass all run inside the sample's block, with warp-
shuffle reductions in float. One block per sample leaves most SMs idle.

Intended outcome: correct but slow (several times slower than the split variants).
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
constexpr float kEps = 1e-5f;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

// Sum over the block; the result is broadcast to every thread through shared memory.
__device__ float block_sum(float v, float* warp_part, float* result) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) warp_part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = (lane < kWarps) ? warp_part[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) *result = t;
    }
    __syncthreads();
    const float total = *result;
    __syncthreads();
    return total;
}

__global__ void __launch_bounds__(kThreads)
ln_fused_block_kernel(const float* __restrict__ x, const float* __restrict__ w,
                      const float* __restrict__ b, float* __restrict__ y, int64_t M) {
    __shared__ float warp_part[kWarps];
    __shared__ float result;
    const int64_t base = (int64_t)blockIdx.x * M;
    const float* xs = x + base;
    float* ys = y + base;
    const float inv_m = 1.0f / (float)M;

    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < M; i += kThreads) acc += xs[i];
    const float mean = block_sum(acc, warp_part, &result) * inv_m;

    acc = 0.0f;
    for (int64_t i = threadIdx.x; i < M; i += kThreads) {
        const float d = xs[i] - mean;
        acc += d * d;
    }
    const float rstd = rsqrtf(block_sum(acc, warp_part, &result) * inv_m + kEps);

    for (int64_t i = threadIdx.x; i < M; i += kThreads) ys[i] = (xs[i] - mean) * rstd * w[i] + b[i];
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
    ln_fused_block_kernel<<<(unsigned int)N, kThreads>>>(
        x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
        y.data_ptr<float>(), M);
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "layernorm kernel launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

cpp_source = "torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b);"

layernorm_ext = load_inline(
    name="ktree_layernorm_twopass_2_cuda",
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
