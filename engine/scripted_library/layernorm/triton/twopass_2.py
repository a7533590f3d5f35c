"""Naive two-pass statistics, one block per sample, in Triton — with a bug: the bias is loaded but
never added (the bias pointer goes unused), so every output is off by it.

Intended outcome: incorrect.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_per_sample(x_ptr, w_ptr, b_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n
    y_row = y_ptr + row * n
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n, BLOCK):
        acc += tl.load(x_row + start + offs, mask=start + offs < n, other=0.0)
    mean = tl.sum(acc, axis=0) / n
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n, BLOCK):
        mask = start + offs < n
        d = tl.where(mask, tl.load(x_row + start + offs, mask=mask, other=0.0) - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n + eps)
    for start in range(0, n, BLOCK):
        mask = start + offs < n
        x = tl.load(x_row + start + offs, mask=mask, other=0.0)
        w = tl.load(w_ptr + start + offs, mask=mask, other=0.0)
        tl.store(y_row + start + offs, (x - mean) * rstd * w, mask=mask)  # the bias is never added


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = self.ln.weight.numel()
        layernorm_per_sample[(x.numel() // n,)](x, self.ln.weight, self.ln.bias, y, n, self.ln.eps,
                                                BLOCK=2048, num_warps=8)
        return y
