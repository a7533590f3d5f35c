"""Split each sample into chunks, one parallel task per chunk, each with exact partials.

Every (sample, 4096-element chunk) pair is a parallel task producing an exact (count, mean, M2) from
two in-cache sweeps; partials are merged per sample with Chan's formula in double, then chunks are
normalized in parallel.

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

constexpr int64_t kChunk = 4096;
constexpr int kLanes = 16;

struct Partial {
    double count;
    double mean;
    double m2;
};

// Sum of v[i] (or of (v[i] - shift)^2 when squared) with kLanes independent float lanes.
template <bool kSquared>
double lane_sum(const float* v, int64_t n, float shift) {
    float acc[kLanes] = {};
    const int64_t vec_end = n / kLanes * kLanes;
    for (int64_t i = 0; i < vec_end; i += kLanes) {
        for (int k = 0; k < kLanes; ++k) {
            const float d = v[i + k] - shift;
            acc[k] += kSquared ? d * d : d;
        }
    }
    double total = 0.0;
    for (int k = 0; k < kLanes; ++k) total += acc[k];
    for (int64_t i = vec_end; i < n; ++i) {
        const double d = (double)v[i] - shift;
        total += kSquared ? d * d : d;
    }
    return total;
}

}  // namespace

torch::Tensor layernorm_split(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
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

    const int64_t chunks = (M + kChunk - 1) / kChunk;
    const int64_t tasks = N * chunks;

    // Phase 1: one exact (count, mean, M2) per chunk; the chunk stays in cache for the
    // second sweep.
    std::vector<Partial> partials(tasks);
    at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            const int64_t n = t / chunks;
            const int64_t i0 = (t % chunks) * kChunk;
            const int64_t len = std::min(kChunk, M - i0);
            const float* v = xp + n * M + i0;
            const double mean = lane_sum<false>(v, len, 0.0f) / (double)len;
            const double m2 = lane_sum<true>(v, len, (float)mean);
            partials[t] = Partial{(double)len, mean, m2};
        }
    });

    // Phase 2: merge the partials of each sample (Chan et al.).
    std::vector<float> mean(N), rstd(N);
    for (int64_t n = 0; n < N; ++n) {
        double count = 0.0, mu = 0.0, m2 = 0.0;
        for (int64_t c = 0; c < chunks; ++c) {
            const Partial& p = partials[n * chunks + c];
            const double total = count + p.count;
            const double delta = p.mean - mu;
            mu += delta * (p.count / total);
            m2 += p.m2 + delta * delta * count * (p.count / total);
            count = total;
        }
        mean[n] = (float)mu;
        rstd[n] = (float)(1.0 / std::sqrt(m2 / count + 1e-5));
    }

    // Phase 3: normalize chunk by chunk in parallel.
    at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            const int64_t n = t / chunks;
            const int64_t i0 = (t % chunks) * kChunk;
            const int64_t i1 = std::min(i0 + kChunk, M);
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
    name="ktree_layernorm_split_1_cpu",
    cpp_sources=cpp_source,
    functions=["layernorm_split"],
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
        return layernorm_ext.layernorm_split(x, self.ln.weight, self.ln.bias)
