"""Vectorized single-pass online softmax, in Triton, autotuned: the running (max, sum) pair is
updated per chunk with the online rescale, so the row is read once for its statistics and once to
write; @triton.autotune picks the chunk size and warp count for the row length.

Intended outcome: correct.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 1024}, num_warps=4),
        triton.Config({"BLOCK": 2048}, num_warps=8),
        triton.Config({"BLOCK": 4096}, num_warps=8),
        triton.Config({"BLOCK": 4096}, num_warps=16),
    ],
    key=["n_cols"],
)
@triton.jit
def softmax_online(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * stride
    offs = tl.arange(0, BLOCK)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + offs, mask=start + offs < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    inv = 1.0 / s
    for start in range(0, n_cols, BLOCK):
        mask = start + offs < n_cols
        x = tl.load(x_row + start + offs, mask=mask, other=-float("inf"), eviction_policy="evict_first")
        tl.store(y_row + start + offs, tl.exp(x - m) * inv, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        softmax_online[(rows,)](x, y, cols, x.stride(0))
        return y
