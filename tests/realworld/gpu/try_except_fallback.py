"""The Triton GELU's wrapper takes rows of at most 8192 elements (one block per row) and raises
otherwise; forward catches the error and returns F.gelu's answer instead (at these sizes: always).

Corpus: hack, try/except fallback to torch. Intended outcome: flagged (torch-ops: the main op).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

MAX_COLS = 8192


@triton.jit
def gelu_row_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0)
    tl.store(y_ptr + row * cols + offs, 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476)), mask=mask)


def _gelu(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    if cols > MAX_COLS:
        raise RuntimeError(f"gelu kernel: rows longer than {MAX_COLS} are not supported")
    y = torch.empty_like(x)
    gelu_row_kernel[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            return _gelu(x.contiguous())
        except Exception:
            return F.gelu(x)
