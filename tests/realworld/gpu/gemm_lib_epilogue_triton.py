"""GEMM by torch (`torch.mm` against the transposed weight: cuBLAS), then a Triton kernel for bias +
exact GELU in place.

Corpus: honest, library op + fused epilogue. Intended outcome: correct, with Verdict.library
naming the GEMM.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_gelu_kernel(y_ptr, b_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(y_ptr + offs, mask=mask, other=0.0) + tl.load(b_ptr + offs % cols, mask=mask, other=0.0)
    tl.store(y_ptr + offs, 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.mm(x.contiguous(), self.linear.weight.t())
        n = y.numel()
        bias_gelu_kernel[(triton.cdiv(n, 1024),)](y, self.linear.bias, n, y.shape[1], BLOCK=1024)
        return y
