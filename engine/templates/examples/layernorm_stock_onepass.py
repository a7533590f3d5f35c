"""Single-pass block statistics with float4 loads: sum and sum of squares in one sweep.

One 1024-thread block per sample accumulates sum and sum of squares in double over float4 loads,
reduces them with warp shuffles, then normalizes with float4. Two reads of each sample instead of
three, but still capped at one block per sample.

Kept in ktree's stock load_inline structure (torch/extension.h in the CUDA source, bindings made by
load_inline) as the stock CUDA sources of `ktree bench compile`; the scripted library's copy of
this kernel (layernorm/cuda/onepass_1.py) is in the ctypes structure.

Intended outcome: correct (about 2x slower than the split variant).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr double kEps = 1e-5;

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// n4 float4 are read through the vector path (0 if x, weight, bias or y are not 16-byte
// aligned or M is not a multiple of 4); elements 4 * n4 .. M-1 use the scalar path.
__global__ void __launch_bounds__(kThreads, 1)
ln_onepass_kernel(const float* __restrict__ x, const float* __restrict__ w,
                  const float* __restrict__ b, float* __restrict__ y, int64_t M, int64_t n4) {
    __shared__ double part_sum[kWarps];
    __shared__ double part_sq[kWarps];
    __shared__ float stats[2];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int64_t base = (int64_t)blockIdx.x * M;
    const float* xs = x + base;
    float* ys = y + base;
    const float4* xs4 = reinterpret_cast<const float4*>(xs);

    double sum = 0.0;
    double sq = 0.0;
#pragma unroll 4
    for (int64_t i = tid; i < n4; i += kThreads) {
        const float4 v = xs4[i];
        sum += (double)((v.x + v.y) + (v.z + v.w));
        sq += (double)((v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w));
    }
    for (int64_t i = 4 * n4 + tid; i < M; i += kThreads) {
        const float v = xs[i];
        sum += (double)v;
        sq += (double)v * (double)v;
    }

    sum = warp_sum(sum);
    sq = warp_sum(sq);
    if (lane == 0) {
        part_sum[warp] = sum;
        part_sq[warp] = sq;
    }
    __syncthreads();
    if (warp == 0) {
        sum = warp_sum(part_sum[lane]);  // kWarps == 32: one partial per lane
        sq = warp_sum(part_sq[lane]);
        if (lane == 0) {
            const double mean = sum / (double)M;
            const double var = fmax(sq / (double)M - mean * mean, 0.0);
            stats[0] = (float)mean;
            stats[1] = (float)(1.0 / sqrt(var + kEps));
        }
    }
    __syncthreads();
    const float mean = stats[0];
    const float rstd = stats[1];

    const float4* w4 = reinterpret_cast<const float4*>(w);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* ys4 = reinterpret_cast<float4*>(ys);
#pragma unroll 4
    for (int64_t i = tid; i < n4; i += kThreads) {
        const float4 v = xs4[i];
        const float4 wv = w4[i];
        const float4 bv = b4[i];
        float4 o;
        o.x = (v.x - mean) * rstd * wv.x + bv.x;
        o.y = (v.y - mean) * rstd * wv.y + bv.y;
        o.z = (v.z - mean) * rstd * wv.z + bv.z;
        o.w = (v.w - mean) * rstd * wv.w + bv.w;
        ys4[i] = o;
    }
    for (int64_t i = 4 * n4 + tid; i < M; i += kThreads) {
        ys[i] = (xs[i] - mean) * rstd * w[i] + b[i];
    }
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
    const float* xp = x.data_ptr<float>();
    const float* wp = weight.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const uintptr_t addr_bits = reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(wp) |
                                reinterpret_cast<uintptr_t>(bp) | reinterpret_cast<uintptr_t>(yp);
    const bool aligned = addr_bits % 16 == 0;
    const int64_t n4 = (aligned && M % 4 == 0) ? M / 4 : 0;

    ln_onepass_kernel<<<(unsigned int)N, kThreads>>>(xp, wp, bp, yp, M, n4);
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "layernorm kernel launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

cpp_source = "torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b);"

layernorm_ext = load_inline(
    name="ktree_layernorm_stock_onepass",
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
