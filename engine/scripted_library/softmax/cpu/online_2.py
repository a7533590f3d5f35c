"""Vectorized single-pass online softmax: 8 interleaved lanes with their own (max, sum).

Rows in parallel; each of 8 lanes keeps a running (max, sum) that is merged at the end of the row.
The merge takes the largest lane max but adds the lane sums as they are, without rescaling each by
exp(lane_max - row_max), so the denominator is too large.

Intended outcome: incorrect: lane merge adds lane sums without rescaling them to the row max.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <limits>

namespace {

constexpr int kLanes = 8;

inline void online_push(float& m, float& s, float v) {
    if (v > m) {
        s *= std::exp(m - v);  // exp(-inf) = 0 while the lane is still empty
        m = v;
    }
    s += std::exp(v - m);
}

void softmax_row_lanes(const float* xr, float* yr, int64_t dim) {
    float m[kLanes];
    float s[kLanes];
    for (int k = 0; k < kLanes; ++k) {
        m[k] = -std::numeric_limits<float>::infinity();
        s[k] = 0.0f;
    }

    int64_t j = 0;
    for (; j + kLanes <= dim; j += kLanes)
        for (int k = 0; k < kLanes; ++k) online_push(m[k], s[k], xr[j + k]);
    for (; j < dim; ++j) online_push(m[0], s[0], xr[j]);

    float row_max = m[0];
    float row_sum = 0.0f;
    for (int k = 0; k < kLanes; ++k) {
        row_max = std::max(row_max, m[k]);
        row_sum += s[k];
    }

    const float inv_sum = 1.0f / row_sum;
    for (int64_t i = 0; i < dim; ++i) yr[i] = std::exp(xr[i] - row_max) * inv_sum;
}

}  // namespace

torch::Tensor softmax_online_lanes(torch::Tensor x) {
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

    at::parallel_for(0, rows, 2, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) softmax_row_lanes(xp + r * dim, yp + r * dim, dim);
    });
    return y;
}
"""

softmax_ext = load_inline(
    name="ktree_softmax_online_2_cpu",
    cpp_sources=cpp_source,
    functions=["softmax_online_lanes"],
    extra_cflags=["-O3", "-march=native", "-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_ext.softmax_online_lanes(x)
