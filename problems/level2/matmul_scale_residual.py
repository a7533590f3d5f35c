"""Residual linear block y = x + 0.5 * (x @ W^T + b) on (4096, 4096) fp32 activations."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = x + scale * linear(x): a square nn.Linear (default init) whose output is scaled and
    added back onto its own input."""

    def __init__(self, features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(features, features, bias=True)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.scale * self.linear(x)


batch_size = 4096
features = 4096
scaling_factor = 0.5


def get_inputs():
    x = torch.randn(batch_size, features)
    return [x]


def get_init_inputs():
    return [features, scaling_factor]


METADATA = {
    "title": "GEMM + bias, scale, residual add (fp32)",
    "level": 2,
    "tags": ["matmul", "gemm", "fusion", "residual", "compute-bound"],
    "cpu_sizes": {"batch_size": 256, "features": 320},
    # The GEMM, then bias add, scale and residual add per output.
    "flops": "2 * batch_size * features * features + 3 * batch_size * features",
    "bytes": "4 * (2 * batch_size * features + features * features + features)",
}
