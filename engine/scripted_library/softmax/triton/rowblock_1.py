"""One block per row with a tree reduction, in Triton: per-lane running maxima and sums over the
row's chunks (online rescaling per lane), one tree reduction of the lanes at the end, then the
write pass. Two reads of the row instead of three.

Intended outcome: correct.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_lanes(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * stride
    offs = tl.arange(0, BLOCK)
    m_lane = tl.full([BLOCK], -float("inf"), tl.float32)
    s_lane = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + offs, mask=start + offs < n_cols, other=-float("inf"))
        m_new = tl.maximum(m_lane, x)
        # lanes that have seen nothing yet keep m = -inf: guard the rescale against inf - inf
        scale = tl.where(m_lane == -float("inf"), 0.0, tl.exp(m_lane - m_new))
        s_lane = s_lane * scale + tl.where(x == -float("inf"), 0.0, tl.exp(x - m_new))
        m_lane = m_new
    m = tl.max(m_lane, axis=0)
    s = tl.sum(tl.where(m_lane == -float("inf"), 0.0, s_lane * tl.exp(m_lane - m)), axis=0)
    inv = 1.0 / s
    for start in range(0, n_cols, BLOCK):
        mask = start + offs < n_cols
        x = tl.load(x_row + start + offs, mask=mask, other=-float("inf"))
        tl.store(y_row + start + offs, tl.exp(x - m) * inv, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        softmax_lanes[(rows,)](x, y, cols, x.stride(0), BLOCK=2048, num_warps=8)
        return y
