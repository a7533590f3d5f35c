"""Rows in parallel, each reduced with pairwise partial sums: 8 lanes combined by a pairwise tree.

Rows run in parallel with at::parallel_for; each row's max and sum use 8 independent partial
accumulators combined by a pairwise tree, and a branch-free polynomial exp lets the loops vectorize.
Three SIMD sweeps per row.

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
#include <cstdint>
#include <cstring>
#include <limits>

namespace {

constexpr int kLanes = 8;

// exp(x) for x <= 0 (softmax always exponentiates x - max). Branch-free so that the loops
// calling it vectorize: Cody-Waite range reduction x = n ln2 + r, a degree-6 polynomial
// for exp(r) on |r| <= ln2 / 2, and 2^n built directly in the exponent bits.
// Relative error about 2e-7; arguments below -87 are clamped (result ~1e-38 instead of 0).
inline float exp_nonpos(float x) {
    x = std::max(x, -87.0f);
    const float t = x * 1.44269504088896341f;
    const float n = (t + 12582912.0f) - 12582912.0f;  // round to nearest via 1.5 * 2^23
    float r = x - n * 0.693145751953125f;             // ln2, high part
    r = r - n * 1.428606765330187e-06f;                // ln2, low part
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof(scale));
    return p * scale;
}

// Pairwise (tree) combination of the 8 lane partials.
inline float tree_max(float* p) {
    for (int width = kLanes / 2; width > 0; width /= 2)
        for (int k = 0; k < width; ++k) p[k] = std::max(p[k], p[k + width]);
    return p[0];
}

inline float tree_sum(float* p) {
    for (int width = kLanes / 2; width > 0; width /= 2)
        for (int k = 0; k < width; ++k) p[k] = p[k] + p[k + width];
    return p[0];
}

void softmax_row(const float* xr, float* yr, int64_t dim) {
    const int64_t main_end = dim - dim % kLanes;

    float pm[kLanes];
    for (int k = 0; k < kLanes; ++k) pm[k] = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < main_end; j += kLanes)
        for (int k = 0; k < kLanes; ++k) pm[k] = std::max(pm[k], xr[j + k]);
    for (int64_t j = main_end; j < dim; ++j) pm[0] = std::max(pm[0], xr[j]);
    const float row_max = tree_max(pm);

    float ps[kLanes] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t j = 0; j < main_end; j += kLanes)
        for (int k = 0; k < kLanes; ++k) ps[k] += exp_nonpos(xr[j + k] - row_max);
    for (int64_t j = main_end; j < dim; ++j) ps[0] += exp_nonpos(xr[j] - row_max);
    const float inv_sum = 1.0f / tree_sum(ps);

    for (int64_t j = 0; j < dim; ++j) yr[j] = exp_nonpos(xr[j] - row_max) * inv_sum;
}

}  // namespace

torch::Tensor softmax_rows_parallel(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu(), "x must be a CPU tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() == 2, "x must be 2-D (rows, dim)");

    auto y = torch::empty_like(x);
    const int64_t rows = x.size(0);
    const int64_t dim = x.size(1);
    if (rows == 0 || dim == 0) return y;
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();

    at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) softmax_row(xp + r * dim, yp + r * dim, dim);
    });
    return y;
}
"""

softmax_ext = load_inline(
    name="ktree_softmax_rowblock_1_cpu",
    cpp_sources=cpp_source,
    functions=["softmax_rows_parallel"],
    extra_cflags=["-O3", "-march=native", "-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_ext.softmax_rows_parallel(x)
