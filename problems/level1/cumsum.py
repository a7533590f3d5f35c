"""Inclusive prefix sum along the rows of a (32768, 4096) fp32 matrix."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y[i, j] = sum_{k <= j} x[i, k] (a scan: each output depends on all earlier ones in its row)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=self.dim)


batch_size = 32768
dim = 4096


def get_inputs():
    # A small positive drift on top of the noise: row sums grow to O(100), so an accumulation
    # in too low a precision, or a scan that drops a block's carry, shows.
    x = 0.05 + torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [1]


METADATA = {
    "title": "Cumulative sum along rows (fp32)",
    "level": 1,
    "tags": ["scan", "memory-bound"],
    "cpu_sizes": {"batch_size": 256, "dim": 1024},
    "flops": "batch_size * dim",
    "bytes": "2 * 4 * batch_size * dim",
}
