"""Linear layer then a sum over its features: (x @ W^T + b).sum(dim=1), x (4096, 4096), W (8192, 4096), fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y[i] = sum_j (x @ W^T + b)[i, j], kept as an (batch, 1) column (KernelBench level-2 style)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(self.linear(x), dim=1, keepdim=True)


batch_size = 4096
in_features = 4096
out_features = 8192


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]


METADATA = {
    "title": "GEMM + bias + sum over features (fp32)",
    "level": 2,
    "tags": ["matmul", "gemm", "reduction", "algorithmic"],
    "cpu_sizes": {"batch_size": 256, "in_features": 320, "out_features": 384},
    # What the answer needs, not what the reference spends: W's column sums (one add per weight),
    # then a GEMV of x against them (the reference's GEMM is 2 * batch * in * out). A speed-of-light
    # floor from the reference's FLOPs would flag the algorithmic rewrite as impossible.
    "flops": "in_features * out_features + 2 * batch_size * in_features",
    "bytes": "4 * (batch_size * in_features + out_features * in_features + out_features + batch_size)",
}
