"""Single-pass statistics in SIMD accumulators: samples in parallel, 16-lane sum and sum of squares.

Sum and sum of squares are gathered in one sweep with 16 float lanes flushed to double every 1024
elements; then a parallel normalize runs over fixed-size pieces of all samples.

Intended outcome: correct.
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

namespace {

constexpr int kLanes = 16;
constexpr int64_t kFlush = 1024;  // elements accumulated in float before moving to double

void sample_moments(const float* xs, int64_t M, double& sum_out, double& sq_out) {
    double sum = 0.0, sq = 0.0;
    for (int64_t start = 0; start < M; start += kFlush) {
        const int64_t end = std::min(start + kFlush, M);
        const int64_t vec_end = start + (end - start) / kLanes * kLanes;
        float ls[kLanes] = {};
        float lq[kLanes] = {};
        for (int64_t i = start; i < vec_end; i += kLanes) {
            for (int k = 0; k < kLanes; ++k) {
                const float v = xs[i + k];
                ls[k] += v;
                lq[k] += v * v;
            }
        }
        for (int64_t i = vec_end; i < end; ++i) {
            ls[0] += xs[i];
            lq[0] += xs[i] * xs[i];
        }
        for (int k = 0; k < kLanes; ++k) {
            sum += ls[k];
            sq += lq[k];
        }
    }
    sum_out = sum;
    sq_out = sq;
}

}  // namespace

torch::Tensor layernorm_onepass(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
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

    std::vector<float> mean(N), rstd(N);
    at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
        for (int64_t n = begin; n < end; ++n) {
            double sum, sq;
            sample_moments(xp + n * M, M, sum, sq);
            const double mu = sum / (double)M;
            const double var = std::max(sq / (double)M - mu * mu, 0.0);
            mean[n] = (float)mu;
            rstd[n] = (float)(1.0 / std::sqrt(var + 1e-5));
        }
    });

    // Normalize: parallel over fixed-size pieces of the flattened (N, M) tensor.
    constexpr int64_t kPiece = 4096;
    const int64_t pieces_per_sample = (M + kPiece - 1) / kPiece;
    at::parallel_for(0, N * pieces_per_sample, 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            const int64_t n = t / pieces_per_sample;
            const int64_t i0 = (t % pieces_per_sample) * kPiece;
            const int64_t i1 = std::min(i0 + kPiece, M);
            const float mu = mean[n];
            const float rs = rstd[n];
            const float* xs = xp + n * M;
            float* ys = yp + n * M;
            for (int64_t i = i0; i < i1; ++i) ys[i] = (xs[i] - mu) * rs * w[i] + b[i];
        }
    });
    return y;
}
"""

layernorm_ext = load_inline(
    name="ktree_layernorm_onepass_1_cpu",
    cpp_sources=cpp_source,
    functions=["layernorm_onepass"],
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
        return layernorm_ext.layernorm_onepass(x, self.ln.weight, self.ln.bias)
