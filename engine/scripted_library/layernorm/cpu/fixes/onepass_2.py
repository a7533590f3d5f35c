"""Single-pass statistics: one task per sample with a Welford update in double.

The fix-prompt answer for onepass_2.py: the Welford update has its semicolon back.

Intended outcome: correct.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor layernorm_welford(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
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
    const float* xp = x.data_ptr<float>();
    const float* w = weight.data_ptr<float>();
    const float* b = bias.data_ptr<float>();
    float* yp = y.data_ptr<float>();

    at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
        for (int64_t n = begin; n < end; ++n) {
            const float* xs = xp + n * M;
            float* ys = yp + n * M;

            double count = 0.0, mean = 0.0, m2 = 0.0;
            for (int64_t i = 0; i < M; ++i) {
                const double v = xs[i];
                count += 1.0;
                const double delta = v - mean;
                mean += delta / count;
                m2 += delta * (v - mean);
            }
            const float mu = (float)mean;
            const float rstd = (float)(1.0 / std::sqrt(m2 / count + 1e-5));

            for (int64_t i = 0; i < M; ++i) ys[i] = (xs[i] - mu) * rstd * w[i] + b[i];
        }
    });
    return y;
}
"""

layernorm_ext = load_inline(
    name="ktree_layernorm_onepass_2_cpu",
    cpp_sources=cpp_source,
    functions=["layernorm_welford"],
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
        return layernorm_ext.layernorm_welford(x, self.ln.weight, self.ln.bias)
