"""Vectorized single-pass online softmax: 256-element tiles, running max + rescaled sum.

Rows in parallel; each row is swept once in tiles (16-lane tile max and tile sum), and the running
sum is rescaled whenever a tile raises the maximum. A branch-free polynomial exp lets every loop
vectorize; a second sweep writes the output.

Intended outcome: correct (faster than the scalar std::exp variants).
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

constexpr int64_t kTile = 256;
constexpr int kLanes = 16;

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

void softmax_row_online(const float* xr, float* yr, int64_t dim) {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    float m = neg_inf;  // running maximum
    float s = 0.0f;     // running sum of exp(x - m)

    for (int64_t start = 0; start < dim; start += kTile) {
        const int64_t n = std::min(kTile, dim - start);
        const int64_t vec_n = n / kLanes * kLanes;
        const float* t = xr + start;

        float lane_max[kLanes];
        for (int k = 0; k < kLanes; ++k) lane_max[k] = neg_inf;
        for (int64_t j = 0; j < vec_n; j += kLanes)
            for (int k = 0; k < kLanes; ++k) lane_max[k] = std::max(lane_max[k], t[j + k]);
        for (int64_t j = vec_n; j < n; ++j) lane_max[0] = std::max(lane_max[0], t[j]);
        float tile_max = neg_inf;
        for (int k = 0; k < kLanes; ++k) tile_max = std::max(tile_max, lane_max[k]);
        if (tile_max == neg_inf) continue;  // nothing in this tile contributes

        if (tile_max > m) {
            if (m != neg_inf) s *= exp_nonpos(m - tile_max);  // rescale the old sum to the new max
            m = tile_max;
        }

        float lane_sum[kLanes] = {};
        for (int64_t j = 0; j < vec_n; j += kLanes)
            for (int k = 0; k < kLanes; ++k) lane_sum[k] += exp_nonpos(t[j + k] - m);
        for (int64_t j = vec_n; j < n; ++j) lane_sum[0] += exp_nonpos(t[j] - m);
        for (int k = 0; k < kLanes; ++k) s += lane_sum[k];
    }

    const float inv_sum = 1.0f / s;
    for (int64_t j = 0; j < dim; ++j) yr[j] = exp_nonpos(xr[j] - m) * inv_sum;
}

}  // namespace

torch::Tensor softmax_online(torch::Tensor x) {
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
        for (int64_t r = begin; r < end; ++r) softmax_row_online(xp + r * dim, yp + r * dim, dim);
    });
    return y;
}
"""

softmax_ext = load_inline(
    name="ktree_softmax_online_1_cpu",
    cpp_sources=cpp_source,
    functions=["softmax_online"],
    extra_cflags=["-O3", "-march=native", "-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_ext.softmax_online(x)
