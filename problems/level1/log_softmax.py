"""Log-softmax over dim 1 of a (4096, 32768) fp32 matrix."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y[i, j] = x[i, j] - log(sum_k exp(x[i, k])), computed stably (max-subtracted)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=1)


batch_size = 4096
dim = 32768


def get_inputs():
    # Outputs are O(-10) per element (about -log(dim)), so the rtol part of the check allows a
    # row offset error of only ~0.1: the logsumexp must be accurate, not just stable.
    x = 3.0 * torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []


METADATA = {
    "title": "Log-softmax (row-wise, fp32)",
    "level": 1,
    "tags": ["reduction", "softmax", "memory-bound"],
    "cpu_sizes": {"batch_size": 128, "dim": 4096},
    "flops": "5 * batch_size * dim",
    "bytes": "2 * 4 * batch_size * dim",
}
