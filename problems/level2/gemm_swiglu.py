"""SwiGLU gate of an LLM MLP: silu(x @ Wg^T) * (x @ Wu^T), x (2048, 4096), 4096 -> 11008, fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """h = silu(gate(x)) * up(x) with two bias-free nn.Linear layers (default init) of the same
    shape, as in the first half of a LLaMA-style feed-forward block."""

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.gate(x)) * self.up(x)


num_tokens = 2048
hidden = 4096
intermediate = 11008


def get_inputs():
    # nn.Linear's default init maps unit-variance inputs to outputs of std ~0.58; inputs of std 2
    # give gate values of std ~1.2, across SiLU's curved region, and a product of O(1).
    x = 2.0 * torch.randn(num_tokens, hidden)
    return [x]


def get_init_inputs():
    return [hidden, intermediate]


METADATA = {
    "title": "GEMM + SwiGLU gate (two GEMMs, SiLU, product; fp32)",
    "level": 2,
    "tags": ["matmul", "gemm", "fusion", "activation", "compute-bound"],
    "cpu_sizes": {"num_tokens": 128, "hidden": 256, "intermediate": 320},
    # Two GEMMs, then a nominal 5 flops of SiLU and product per output.
    "flops": "4 * num_tokens * hidden * intermediate + 5 * num_tokens * intermediate",
    "bytes": "4 * (num_tokens * hidden + 2 * intermediate * hidden + num_tokens * intermediate)",
}
