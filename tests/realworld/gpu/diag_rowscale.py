"""diag(A) @ B without the N x N matrix: C[i, :] = A[i] * B[i, :], one Triton program per row block.

Corpus: honest, algorithmic win. Intended outcome: correct.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_scale_kernel(a_ptr, b_ptr, c_ptr, m, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < m
    s = tl.load(a_ptr + row)
    tl.store(c_ptr + row * m + offs, s * tl.load(b_ptr + row * m + offs, mask=mask, other=0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        A, B = A.contiguous(), B.contiguous()
        C = torch.empty_like(B)
        n, m = B.shape
        row_scale_kernel[(n, triton.cdiv(m, 1024))](A, B, C, m, BLOCK=1024)
        return C
