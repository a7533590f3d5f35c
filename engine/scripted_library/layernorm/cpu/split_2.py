"""Split each sample into chunks, one parallel task per chunk: (sum, sum of squares) partials.

2048-element chunks in parallel produce (sum, sumsq) partials in double; each normalize task re-adds
its sample's partials before writing its chunk. The variance is computed as E[x^2] - mean instead of
E[x^2] - mean^2, about 10% off here.

Intended outcome: incorrect: variance computed as E[x^2] - mean (mean not squared).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <vector>

torch::Tensor layernorm_split_sums(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu() && bias.device().is_cpu(),
                "all tensors must be CPU tensors");
    TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous(),
                "tensors must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
                bias.scalar_type() == torch::kFloat32, "tensors must be float32");
    const int64_t M = weight.numel();
    TORCH_CHECK(M > 0 && bias.numel() == M, "weight and bias must have the same, non-zero size");
    TORCH_CHECK(x.numel() % M == 0, "x is not a whole number of normalized samples");
    const int64_t N = x.numel() / M;

    auto y = torch::empty_like(x);
    if (N == 0) return y;
    const float* xp = x.data_ptr<float>();
    const float* w = weight.data_ptr<float>();
    const float* b = bias.data_ptr<float>();
    float* yp = y.data_ptr<float>();

    constexpr int64_t kChunk = 2048;
    const int64_t chunks = (M + kChunk - 1) / kChunk;
    const int64_t tasks = N * chunks;
    std::vector<double> part_sum(tasks), part_sq(tasks);

    at::parallel_for(0, tasks, 4, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            const int64_t n = t / chunks;
            const int64_t i0 = (t % chunks) * kChunk;
            const int64_t i1 = std::min(i0 + kChunk, M);
            const float* xs = xp + n * M;
            double s = 0.0, q = 0.0;
            for (int64_t i = i0; i < i1; ++i) {
                const double v = xs[i];
                s += v;
                q += v * v;
            }
            part_sum[t] = s;
            part_sq[t] = q;
        }
    });

    at::parallel_for(0, tasks, 4, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            const int64_t n = t / chunks;
            double s = 0.0, q = 0.0;
            for (int64_t c = 0; c < chunks; ++c) {
                s += part_sum[n * chunks + c];
                q += part_sq[n * chunks + c];
            }
            const double mean = s / (double)M;
            const double var = q / (double)M - mean;
            const float mu = (float)mean;
            const float rstd = (float)(1.0 / std::sqrt(std::max(var, 0.0) + 1e-5));

            const int64_t i0 = (t % chunks) * kChunk;
            const int64_t i1 = std::min(i0 + kChunk, M);
            const float* xs = xp + n * M;
            float* ys = yp + n * M;
            for (int64_t i = i0; i < i1; ++i) ys[i] = (xs[i] - mu) * rstd * w[i] + b[i];
        }
    });
    return y;
}
"""

layernorm_ext = load_inline(
    name="ktree_layernorm_split_2_cpu",
    cpp_sources=cpp_source,
    functions=["layernorm_split_sums"],
    extra_cflags=["-O3", "-march=native", "-fopenmp"],
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
        return layernorm_ext.layernorm_split_sums(x, self.ln.weight, self.ln.bias)
