"""One block per row with a tree reduction, in Triton — written with a block size that is not a
power of two (tl.arange needs one), so the kernel does not compile. fixes/rowblock_2.py is the
corrected file (the fix prompt's answer).

Intended outcome: compile error.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
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
        softmax_rows[(rows,)](x, y, cols, x.stride(0), BLOCK=1000)
        return y
