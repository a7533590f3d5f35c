"""One thread per row, three plain passes, in Triton — with a bug: the sum of exp is taken over the
first chunk of the row only (the accumulation loop is missing), so every row is normalized by the
wrong denominator.

Intended outcome: incorrect.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_first_chunk_sum(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * stride
    offs = tl.arange(0, BLOCK)
    m = -float("inf")
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + offs, mask=start + offs < n_cols, other=-float("inf"))
        m = tl.maximum(m, tl.max(x, axis=0))
    x0 = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"))
    s = tl.sum(tl.exp(x0 - m), axis=0)  # only the first chunk
    for start in range(0, n_cols, BLOCK):
        mask = start + offs < n_cols
        x = tl.load(x_row + start + offs, mask=mask, other=-float("inf"))
        tl.store(y_row + start + offs, tl.exp(x - m) / s, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        softmax_first_chunk_sum[(rows,)](x, y, cols, x.stride(0), BLOCK=1024)
        return y
