"""Split each sample over many blocks: (sum, sum of squares) partials, no finalize kernel.

65536-element chunks are reduced by 512-thread blocks to (sum, sumsq) partials; in a second kernel
every block re-reduces its sample's partials and normalizes its own chunk. The variance is computed
as E[x^2] - mean instead of E[x^2] - mean^2, about 10% off here.

Intended outcome: incorrect: variance computed as E[x^2] - mean (mean not squared).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cmath>

constexpr int kThreads = 512;
constexpr int64_t kChunk = 65536;  // elements per block, a multiple of 4
constexpr float kEps = 1e-5f;

// Kernel 1: grid (chunks, N); block partial sums of x and x^2 (shared-memory tree).
__global__ void __launch_bounds__(kThreads)
ln_partial_sums_kernel(const float* __restrict__ x, float2* __restrict__ partials, int64_t M,
                       int chunks) {
    __shared__ float sh_sum[kThreads];
    __shared__ float sh_sq[kThreads];
    const int tid = threadIdx.x;
    const int64_t sample = blockIdx.y;
    const float4* xs4 = reinterpret_cast<const float4*>(x + sample * M);
    const int64_t begin4 = (int64_t)blockIdx.x * (kChunk / 4);
    const int64_t end4 = (begin4 + kChunk / 4 < M / 4) ? begin4 + kChunk / 4 : M / 4;

    float sum = 0.0f, sq = 0.0f;
    for (int64_t i = begin4 + tid; i < end4; i += kThreads) {
        const float4 v = xs4[i];
        sum += (v.x + v.y) + (v.z + v.w);
        sq += (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
    }
    sh_sum[tid] = sum;
    sh_sq[tid] = sq;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
        if (tid < stride) {
            sh_sum[tid] += sh_sum[tid + stride];
            sh_sq[tid] += sh_sq[tid + stride];
        }
        __syncthreads();
    }
    if (tid == 0) partials[sample * chunks + blockIdx.x] = make_float2(sh_sum[0], sh_sq[0]);
}

// Kernel 2: grid (chunks, N); each block reduces all partials of its sample, then
// normalizes its own chunk.
__global__ void __launch_bounds__(kThreads)
ln_normalize_chunk_kernel(const float* __restrict__ x, const float2* __restrict__ partials,
                          const float* __restrict__ w, const float* __restrict__ b,
                          float* __restrict__ y, int64_t M, int chunks) {
    __shared__ double sh_sum[kThreads];
    __shared__ double sh_sq[kThreads];
    const int tid = threadIdx.x;
    const int64_t sample = blockIdx.y;
    const float2* ps = partials + sample * chunks;

    double sum = 0.0, sq = 0.0;
    for (int p = tid; p < chunks; p += kThreads) {
        const float2 q = ps[p];
        sum += (double)q.x;
        sq += (double)q.y;
    }
    sh_sum[tid] = sum;
    sh_sq[tid] = sq;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
        if (tid < stride) {
            sh_sum[tid] += sh_sum[tid + stride];
            sh_sq[tid] += sh_sq[tid + stride];
        }
        __syncthreads();
    }
    const double mean_d = sh_sum[0] / (double)M;
    const double var_d = sh_sq[0] / (double)M - mean_d;
    const float mean = (float)mean_d;
    const float rstd = rsqrtf(fmaxf((float)var_d, 0.0f) + kEps);

    const float4* xs4 = reinterpret_cast<const float4*>(x + sample * M);
    float4* ys4 = reinterpret_cast<float4*>(y + sample * M);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    const int64_t begin4 = (int64_t)blockIdx.x * (kChunk / 4);
    const int64_t end4 = (begin4 + kChunk / 4 < M / 4) ? begin4 + kChunk / 4 : M / 4;
    for (int64_t i = begin4 + tid; i < end4; i += kThreads) {
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
    TORCH_CHECK(M % 4 == 0, "this kernel needs the normalized size to be a multiple of 4");
    TORCH_CHECK(x.numel() % M == 0, "x is not a whole number of normalized samples");
    const int64_t N = x.numel() / M;
    TORCH_CHECK(N <= 65535, "at most 65535 samples (grid y dimension)");

    auto y = torch::empty_like(x);
    if (N == 0) return y;
    const int chunks = (int)((M + kChunk - 1) / kChunk);
    auto partials = torch::empty({N, (int64_t)chunks, 2}, x.options());
    float2* pp = reinterpret_cast<float2*>(partials.data_ptr<float>());
    const dim3 grid((unsigned int)chunks, (unsigned int)N);

    ln_partial_sums_kernel<<<grid, kThreads>>>(x.data_ptr<float>(), pp, M, chunks);
    cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "ln_partial_sums_kernel launch failed: ",
                cudaGetErrorString(err));

    ln_normalize_chunk_kernel<<<grid, kThreads>>>(x.data_ptr<float>(), pp, weight.data_ptr<float>(),
                                                  bias.data_ptr<float>(), y.data_ptr<float>(), M,
                                                  chunks);
    err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "ln_normalize_chunk_kernel launch failed: ",
                cudaGetErrorString(err));
    return y;
}
"""

cpp_source = "torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b);"

layernorm_ext = load_inline(
    name="ktree_layernorm_split_2_cuda",
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
