"""LayerNorm over the last three dims of a (16, 64, 256, 256) float32 tensor."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm with a per-element affine weight and bias over (features, dim1, dim2).

    The affine parameters are drawn at random (under the evaluator's seed), so a kernel
    that ignores them cannot pass.
    """

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape, eps=1e-5)
        with torch.no_grad():
            self.ln.weight.copy_(1.0 + 0.5 * torch.randn(normalized_shape))
            self.ln.bias.copy_(0.5 * torch.randn(normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 16
features = 64
dim1 = 256
dim2 = 256


def get_inputs():
    x = 2.0 + 3.0 * torch.randn(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [(features, dim1, dim2)]


METADATA = {
    "title": "LayerNorm over (C, H, W), fp32",
    "level": 1,
    "tags": ["normalization", "reduction", "memory-bound"],
    "cpu_sizes": {"batch_size": 4, "features": 8, "dim1": 32, "dim2": 32},
    # Read x, write y (weight and bias are read once per sample, counted once here).
    "flops": "8 * batch_size * features * dim1 * dim2",
    "bytes": "(2 * batch_size + 2) * 4 * features * dim1 * dim2",
}
