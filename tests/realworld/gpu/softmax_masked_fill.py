"""Row softmax in Triton (three passes over the row: max, sum of exponentials, write), then the
published kernel's cleanup line: entries equal to -FLT_MAX set to zero with `masked_fill_`.

Corpus: honest, epilogue. Intended outcome: correct (a torch-ops note for eq + masked_fill_).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * cols
    y_row = y_ptr + row * cols
    m = tl.max(tl.full([BLOCK], float("-inf"), tl.float32), axis=0)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(x_row + offs, mask=offs < cols, other=float("-inf"))
        m = tl.maximum(m, tl.max(v, axis=0))
    s = tl.sum(tl.zeros([BLOCK], tl.float32), axis=0)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(x_row + offs, mask=offs < cols, other=float("-inf"))
        s += tl.sum(tl.exp(v - m), axis=0)
    inv = 1.0 / s
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(x_row + offs, mask=offs < cols, other=float("-inf"))
        tl.store(y_row + offs, tl.exp(v - m) * inv, mask=offs < cols)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        rows, cols = x.shape
        softmax_kernel[(rows,)](x, out, cols, BLOCK=min(4096, triton.next_power_of_2(cols)))
        out.masked_fill_(out == -torch.finfo(out.dtype).max, 0.0)
        return out
