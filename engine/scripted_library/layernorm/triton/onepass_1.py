"""Single-pass block statistics, in Triton: one program per sample accumulates per-lane sums of x
and x*x in one sweep (each lane's values shifted by the sample's first element, which keeps the
sum of squares from cancelling), then one apply sweep: two reads of the sample instead of three.

Intended outcome: correct.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_one_pass(x_ptr, w_ptr, b_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n
    y_row = y_ptr + row * n
    offs = tl.arange(0, BLOCK)
    shift = tl.load(x_row)
    s1 = tl.zeros([BLOCK], tl.float32)
    s2 = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n, BLOCK):
        mask = start + offs < n
        d = tl.where(mask, tl.load(x_row + start + offs, mask=mask, other=0.0) - shift, 0.0)
        s1 += d
        s2 += d * d
    mean_d = tl.sum(s1, axis=0) / n
    var = tl.maximum(tl.sum(s2, axis=0) / n - mean_d * mean_d, 0.0)
    mean = mean_d + shift
    rstd = 1.0 / tl.sqrt(var + eps)
    for start in range(0, n, BLOCK):
        mask = start + offs < n
        x = tl.load(x_row + start + offs, mask=mask, other=0.0)
        w = tl.load(w_ptr + start + offs, mask=mask, other=0.0)
        b = tl.load(b_ptr + start + offs, mask=mask, other=0.0)
        tl.store(y_row + start + offs, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = self.ln.weight.numel()
        layernorm_one_pass[(x.numel() // n,)](x, self.ln.weight, self.ln.bias, y, n, self.ln.eps,
                                              BLOCK=4096, num_warps=16)
        return y
