"""One row at a time, three plain passes: single-threaded scalar loops with std::exp.

Each row is scanned for its maximum, then for the sum of exp(x - max), then written as exp(x - max)
/ sum, one row after another on one core.

Intended outcome: correct but slower than PyTorch.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <cmath>
#include <limits>

torch::Tensor softmax_naive(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu(), "x must be a CPU tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() == 2, "x must be 2-D (rows, dim)");

    auto y = torch::empty_like(x);
    const int64_t rows = x.size(0);
    const int64_t dim = x.size(1);
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();

    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = xp + r * dim;
        float* yr = yp + r * dim;

        float row_max = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < dim; ++j) {
            if (xr[j] > row_max) row_max = xr[j];
        }

        float row_sum = 0.0f;
        for (int64_t j = 0; j < dim; ++j) {
            row_sum += std::exp(xr[j] - row_max);
        }

        for (int64_t j = 0; j < dim; ++j) {
            yr[j] = std::exp(xr[j] - row_max) / row_sum;
        }
    }
    return y;
}
"""

softmax_ext = load_inline(
    name="ktree_softmax_naive_1_cpu",
    cpp_sources=cpp_source,
    functions=["softmax_naive"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_ext.softmax_naive(x)
