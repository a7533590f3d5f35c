"""SiLU (swish) on a (8192, 16384) fp32 matrix."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = x * sigmoid(x) = x / (1 + exp(-x))."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


batch_size = 8192
dim = 16384


def get_inputs():
    x = 2.0 * torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []


METADATA = {
    "title": "SiLU / swish (fp32)",
    "level": 1,
    "tags": ["elementwise", "activation", "memory-bound"],
    "cpu_sizes": {"batch_size": 256, "dim": 1024},
    # Nominal: an exp, an add, a divide and a multiply per element.
    "flops": "4 * batch_size * dim",
    "bytes": "2 * 4 * batch_size * dim",
}
