"""One thread per row, three plain passes, in Triton: one program per row walks the row in chunks
three times (maximum, sum of exp, write).

The Triton form of the naive idea: a program handles a whole row, so the rows are the only
parallelism, but each chunk load is a contiguous vector (coalesced), which Triton gives for free.

Intended outcome: correct.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_three_pass(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * stride
    offs = tl.arange(0, BLOCK)
    m = -float("inf")
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + offs, mask=start + offs < n_cols, other=-float("inf"))
        m = tl.maximum(m, tl.max(x, axis=0))
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + offs, mask=start + offs < n_cols, other=-float("inf"))
        s += tl.sum(tl.exp(x - m), axis=0)
    for start in range(0, n_cols, BLOCK):
        mask = start + offs < n_cols
        x = tl.load(x_row + start + offs, mask=mask, other=-float("inf"))
        tl.store(y_row + start + offs, tl.exp(x - m) / s, mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    rows, cols = x.shape
    softmax_three_pass[(rows,)](x, y, cols, x.stride(0), BLOCK=1024)
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax(x)
