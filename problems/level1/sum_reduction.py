"""Sum over the middle dim of a (64, 4096, 512) fp32 tensor, keeping the dim."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y[b, 0, j] = sum_r x[b, r, j]: a strided reduction (the reduced dim is not the innermost)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 64
reduce_dim = 4096
inner_dim = 512


def get_inputs():
    x = torch.randn(batch_size, reduce_dim, inner_dim)
    return [x]


def get_init_inputs():
    return [1]


METADATA = {
    "title": "Sum reduction over a middle dim (fp32)",
    "level": 1,
    "tags": ["reduction", "memory-bound"],
    "cpu_sizes": {"batch_size": 8, "reduce_dim": 256, "inner_dim": 96},
    "flops": "batch_size * reduce_dim * inner_dim",
    "bytes": "4 * (batch_size * reduce_dim * inner_dim + batch_size * inner_dim)",
}
