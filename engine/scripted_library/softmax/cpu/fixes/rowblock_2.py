"""Rows in parallel, each reduced with pairwise partial sums: 4-row tasks, 4 accumulators per row.

The fix-prompt answer for rowblock_2.py: the row pointer now keeps the `const` of the input pointer.

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
#include <limits>

torch::Tensor softmax_row_blocks(torch::Tensor x) {
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

    at::parallel_for(0, rows, 4, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const float* xr = xp + r * dim;
            float* yr = yp + r * dim;
            const int64_t main_end = dim - dim % 4;

            float m0 = -std::numeric_limits<float>::infinity(), m1 = m0, m2 = m0, m3 = m0;
            for (int64_t j = 0; j < main_end; j += 4) {
                m0 = std::max(m0, xr[j]);
                m1 = std::max(m1, xr[j + 1]);
                m2 = std::max(m2, xr[j + 2]);
                m3 = std::max(m3, xr[j + 3]);
            }
            for (int64_t j = main_end; j < dim; ++j) m0 = std::max(m0, xr[j]);
            const float row_max = std::max(std::max(m0, m1), std::max(m2, m3));

            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
            for (int64_t j = 0; j < main_end; j += 4) {
                s0 += std::exp(xr[j] - row_max);
                s1 += std::exp(xr[j + 1] - row_max);
                s2 += std::exp(xr[j + 2] - row_max);
                s3 += std::exp(xr[j + 3] - row_max);
            }
            for (int64_t j = main_end; j < dim; ++j) s0 += std::exp(xr[j] - row_max);
            const float inv_sum = 1.0f / ((s0 + s1) + (s2 + s3));

            for (int64_t j = 0; j < dim; ++j) yr[j] = std::exp(xr[j] - row_max) * inv_sum;
        }
    });
    return y;
}
"""

softmax_ext = load_inline(
    name="ktree_softmax_rowblock_2_cpu",
    cpp_sources=cpp_source,
    functions=["softmax_row_blocks"],
    extra_cflags=["-O3", "-march=native", "-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_ext.softmax_row_blocks(x)
