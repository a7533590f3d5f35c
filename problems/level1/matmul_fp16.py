"""Square FP16 matrix product C = A @ B at 8192 x 8192 x 8192 (fp16 in, fp16 out)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B for row-major fp16 A (M, K) and B (K, N); the result is fp16.

    The check compares against an fp64 product of the same (fp16) inputs, so a kernel must
    accumulate in fp32 (as tensor cores do); only the final rounding to fp16 is free.
    """

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 8192
K = 8192
N = 8192


def get_inputs():
    # Entries of std K**-0.25 in both factors give products of unit scale whatever K is:
    # far from fp16 overflow, and large enough that an all-zeros answer fails.
    scale = K ** -0.25
    A = (torch.randn(M, K) * scale).to(torch.float16)
    B = (torch.randn(K, N) * scale).to(torch.float16)
    return [A, B]


def get_init_inputs():
    return []


METADATA = {
    "title": "Matrix multiply (square, fp16)",
    "level": 1,
    "tags": ["matmul", "gemm", "fp16", "tensor-core", "compute-bound"],
    "cpu_sizes": {"M": 256, "K": 320, "N": 192},
    "flops": "2 * M * N * K",
    "bytes": "2 * (M * K + K * N + M * N)",
}
