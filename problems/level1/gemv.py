"""Matrix-vector product y = A @ x of an (8192, 16384) fp32 matrix and a (16384, 1) vector."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y[i] = sum_k A[i, k] * x[k]; x is a column (K, 1), so y is (M, 1). Memory-bound: A is read once."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, x)


M = 8192
K = 16384


def get_inputs():
    A = torch.randn(M, K)
    x = torch.randn(K, 1)
    return [A, x]


def get_init_inputs():
    return []


METADATA = {
    "title": "Matrix-vector multiply (fp32)",
    "level": 1,
    "tags": ["gemv", "matmul", "memory-bound"],
    "cpu_sizes": {"M": 512, "K": 1024},
    "flops": "2 * M * K",
    "bytes": "4 * (M * K + K + M)",
}
