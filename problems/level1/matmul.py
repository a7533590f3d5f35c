"""Square FP32 matrix product C = A @ B at 4096 x 4096 x 4096."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """C[i, j] = sum_k A[i, k] * B[k, j] for row-major fp32 A (M, K) and B (K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 4096
K = 4096
N = 4096


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []


METADATA = {
    "title": "Matrix multiply (square, fp32)",
    "level": 1,
    "tags": ["matmul", "gemm", "compute-bound"],
    # Three different extents on the cpu backend, so a kernel that mixes up M, K and N fails.
    "cpu_sizes": {"M": 256, "K": 320, "N": 192},
    "flops": "2 * M * N * K",
    "bytes": "4 * (M * K + K * N + M * N)",
}
