"""Argmax over the middle dim of a (64, 4096, 512) fp32 tensor; int64 indices out."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y[b, j] = argmax_r x[b, r, j] (int64). Inputs are continuous, so ties have probability ~0."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=self.dim)


batch_size = 64
reduce_dim = 4096
inner_dim = 512


def get_inputs():
    x = torch.randn(batch_size, reduce_dim, inner_dim)
    return [x]


def get_init_inputs():
    return [1]


METADATA = {
    "title": "Argmax over a middle dim (fp32 in, int64 out)",
    "level": 1,
    "tags": ["reduction", "argmax", "memory-bound"],
    "cpu_sizes": {"batch_size": 8, "reduce_dim": 256, "inner_dim": 96},
    "flops": "batch_size * reduce_dim * inner_dim",
    "bytes": "4 * batch_size * reduce_dim * inner_dim + 8 * batch_size * inner_dim",
}
