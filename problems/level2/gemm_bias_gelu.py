"""Linear layer (GEMM + bias) followed by exact GELU: (4096, 4096) @ (4096, 4096)^T fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = gelu(x @ W^T + b) with nn.Linear's default init and the exact (erf) GELU."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))


batch_size = 4096
in_features = 4096
out_features = 4096


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]


METADATA = {
    "title": "GEMM + bias + GELU (fp32)",
    "level": 2,
    "tags": ["matmul", "gemm", "fusion", "activation", "compute-bound"],
    "cpu_sizes": {"batch_size": 256, "in_features": 320, "out_features": 192},
    # The GEMM, then a bias add and a nominal 8 flops of GELU per output.
    "flops": "2 * batch_size * in_features * out_features + 9 * batch_size * out_features",
    "bytes": "4 * (batch_size * in_features + out_features * in_features + out_features"
    " + batch_size * out_features)",
}
