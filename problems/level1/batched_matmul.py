"""Batched FP32 matrix product: 128 independent (512, 1024) @ (1024, 768) products."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """C[b] = A[b] @ B[b] for fp32 A (batch, M, K) and B (batch, K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


batch_size = 128
M = 512
K = 1024
N = 768


def get_inputs():
    A = torch.randn(batch_size, M, K)
    B = torch.randn(batch_size, K, N)
    return [A, B]


def get_init_inputs():
    return []


METADATA = {
    "title": "Batched matrix multiply (fp32)",
    "level": 1,
    "tags": ["matmul", "bmm", "compute-bound"],
    "cpu_sizes": {"batch_size": 8, "M": 64, "K": 128, "N": 96},
    "flops": "2 * batch_size * M * N * K",
    "bytes": "4 * batch_size * (M * K + K * N + M * N)",
}
