"""Naive two-pass statistics, one sample at a time: plain single-threaded loops.

For each sample: a mean pass, a centred variance pass and a normalize pass, all accumulated in
double, on one core.

Intended outcome: correct but slower than PyTorch.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor layernorm_twopass(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
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
    const double eps = 1e-5;

    for (int64_t n = 0; n < N; ++n) {
        const float* xs = xp + n * M;
        float* ys = yp + n * M;

        double sum = 0.0;
        for (int64_t i = 0; i < M; ++i) sum += xs[i];
        const double mean = sum / (double)M;

        double sq = 0.0;
        for (int64_t i = 0; i < M; ++i) {
            const double d = (double)xs[i] - mean;
            sq += d * d;
        }
        const double rstd = 1.0 / std::sqrt(sq / (double)M + eps);

        for (int64_t i = 0; i < M; ++i) {
            ys[i] = (float)(((double)xs[i] - mean) * rstd) * w[i] + b[i];
        }
    }
    return y;
}
"""

layernorm_ext = load_inline(
    name="ktree_layernorm_twopass_1_cpu",
    cpp_sources=cpp_source,
    functions=["layernorm_twopass"],
    extra_cflags=["-O3"],
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
        return layernorm_ext.layernorm_twopass(x, self.ln.weight, self.ln.bias)
