"""FP32 matrix product with a transposed left operand: C = A.T @ B, A (8192, 2048), B (8192, 4096)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """C[i, j] = sum_k A[k, i] * B[k, j]: A is stored (K, M), i.e. column-major as the left factor."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A.T, B)


M = 2048
K = 8192
N = 4096


def get_inputs():
    A = torch.randn(K, M)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []


METADATA = {
    "title": "Matrix multiply A.T @ B (fp32)",
    "level": 1,
    "tags": ["matmul", "gemm", "transpose", "compute-bound"],
    "cpu_sizes": {"M": 192, "K": 320, "N": 256},
    "flops": "2 * M * N * K",
    "bytes": "4 * (K * M + K * N + M * N)",
}
