"""Exact (erf) GELU on a (8192, 16384) fp32 matrix."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2))): the exact form, not the tanh approximation."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


batch_size = 8192
dim = 16384


def get_inputs():
    # A spread of 2 covers the curved region around 0 as well as both nearly linear tails.
    x = 2.0 * torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []


METADATA = {
    "title": "GELU, exact erf form (fp32)",
    "level": 1,
    "tags": ["elementwise", "activation", "memory-bound"],
    "cpu_sizes": {"batch_size": 256, "dim": 1024},
    # Nominal: an erf plus a few multiplies and adds per element.
    "flops": "8 * batch_size * dim",
    "bytes": "2 * 4 * batch_size * dim",
}
