"""Vectorized single-pass online softmax, in Triton, with a fixed large chunk: one program per row
keeps the running (max, sum) pair, updated per 4096-element chunk, then writes the row.

Intended outcome: correct.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_online_fixed(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * stride + start + offs, mask=start + offs < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    for start in range(0, n_cols, BLOCK):
        mask = start + offs < n_cols
        x = tl.load(x_ptr + row * stride + start + offs, mask=mask, other=-float("inf"))
        tl.store(y_ptr + row * stride + start + offs, tl.exp(x - m) / s, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        softmax_online_fixed[(rows,)](x, y, cols, x.stride(0), BLOCK=4096, num_warps=16)
        return y
