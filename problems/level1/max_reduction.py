"""Row-wise max over the last dim of a (16384, 8192) fp32 matrix."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y[i] = max_j x[i, j] (the values only, not the indices)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=self.dim)


batch_size = 16384
dim = 8192


def get_inputs():
    # Each row gets its own offset and spread, so the row maxima vary widely (the max of plain
    # standard normals would be ~3.8 everywhere: nearly an input-independent answer).
    offset = 4.0 * torch.randn(batch_size, 1)
    spread = 0.25 + 2.0 * torch.rand(batch_size, 1)
    x = offset + spread * torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [1]


METADATA = {
    "title": "Max reduction over rows (fp32)",
    "level": 1,
    "tags": ["reduction", "memory-bound"],
    "cpu_sizes": {"batch_size": 256, "dim": 1024},
    "flops": "batch_size * dim",
    "bytes": "4 * (batch_size * dim + batch_size)",
}
