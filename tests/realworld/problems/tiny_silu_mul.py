"""silu(a) * b on two (16, 256) fp32 tensors: so small that launching a kernel costs more than its work."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = silu(a) * b (a SwiGLU gate on one short sequence)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.silu(a) * b


rows = 16
cols = 256


def get_inputs():
    return [2.0 * torch.randn(rows, cols), torch.randn(rows, cols)]


def get_init_inputs():
    return []


METADATA = {
    "title": "Tiny SiLU-and-multiply (fp32, launch-bound)",
    "level": 1,
    "tags": ["elementwise", "activation", "launch-bound"],
    "flops": "6 * rows * cols",
    "bytes": "3 * 4 * rows * cols",
}
