"""Argmax over the middle dim in Triton (a program per batch entry and block of inner columns walks
the reduced dim), writing int32 indices; the wrapper casts them to int64 as the reference returns.

Corpus: honest, output cast. Intended outcome: correct.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def argmax_kernel(x_ptr, y_ptr, r, inner, BLOCK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inner
    base = x_ptr + b * r * inner + cols
    best = tl.load(base, mask=mask, other=float("-inf"))
    idx = tl.zeros([BLOCK], tl.int32)
    for i in range(1, r):
        v = tl.load(base + i * inner, mask=mask, other=float("-inf"))
        better = v > best
        best = tl.where(better, v, best)
        idx = tl.where(better, i, idx)
    tl.store(y_ptr + b * inner + cols, idx, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        outer, r, inner = x.shape  # the problem's (batch, reduce, inner) layout, reduced over dim 1
        y = torch.empty(outer, inner, device=x.device, dtype=torch.int32)
        argmax_kernel[(outer, triton.cdiv(inner, 128))](x, y, r, inner, BLOCK=128)
        return y.to(torch.int64)
