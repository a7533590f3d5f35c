"""Softmax over dim 1 of a (4096, 65536) float32 matrix."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Row-wise softmax: y[i, j] = exp(x[i, j]) / sum_k exp(x[i, k])."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


batch_size = 4096
dim = 65536


def get_inputs():
    # A spread of 5 gives rows whose largest entries carry real mass (outputs up to ~0.5),
    # so an all-zeros answer fails even the absolute tolerance.
    x = torch.randn(batch_size, dim) * 5.0
    return [x]


def get_init_inputs():
    return []


METADATA = {
    "title": "Softmax (row-wise, fp32)",
    "level": 1,
    "tags": ["reduction", "memory-bound"],
    # Sizes the cpu backend runs at (the loader overrides the constants above).
    "cpu_sizes": {"batch_size": 128, "dim": 4096},
    # Speed-of-light: one read and one write of the matrix, ~5 flops per element.
    "flops": "5 * batch_size * dim",
    "bytes": "2 * 4 * batch_size * dim",
}
