"""diag(A) @ B: a diagonal matrix built from a vector, times a (4096, 4096) fp32 matrix (KernelBench style)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """C = diag(A) @ B: the reference builds the N x N diagonal matrix and multiplies it out; the
    answer is B with row i scaled by A[i]."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.diag(A) @ B


N = 4096
M = 4096


def get_inputs():
    A = torch.randn(N)
    B = torch.randn(N, M)
    return [A, B]


def get_init_inputs():
    return []


METADATA = {
    "title": "diag(A) @ B (fp32)",
    "level": 1,
    "tags": ["matmul", "algorithmic", "memory-bound"],
    "cpu_sizes": {"N": 384, "M": 320},
    # What the problem needs (a row scaling), not what the reference spends.
    "flops": "N * M",
    "bytes": "4 * (N + 2 * N * M)",
}
