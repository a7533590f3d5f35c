"""(x @ W^T + b).sum(dim=1) as x @ (W summed over its rows) + sum(b): a Triton kernel sums W's
columns (program 0 also sums the bias), a second is the GEMV, one program per row of x.

Corpus: honest, algorithmic win. Intended outcome: correct.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def colsum_kernel(w_ptr, b_ptr, wsum_ptr, bsum_ptr, out_f, in_f, BLOCK_K: tl.constexpr, BLOCK_B: tl.constexpr):
    pid = tl.program_id(0)
    ks = pid * BLOCK_K + tl.arange(0, BLOCK_K)
    kmask = ks < in_f
    acc = tl.zeros([BLOCK_K], tl.float32)
    for j in range(0, out_f):
        acc += tl.load(w_ptr + j * in_f + ks, mask=kmask, other=0.0)
    tl.store(wsum_ptr + ks, acc, mask=kmask)
    if pid == 0:
        bacc = tl.zeros([BLOCK_B], tl.float32)
        for start in range(0, out_f, BLOCK_B):
            offs = start + tl.arange(0, BLOCK_B)
            bacc += tl.load(b_ptr + offs, mask=offs < out_f, other=0.0)
        tl.store(bsum_ptr, tl.sum(bacc, axis=0))


@triton.jit
def gemv_kernel(x_ptr, wsum_ptr, bsum_ptr, y_ptr, in_f, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, in_f, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < in_f
        acc += tl.load(x_ptr + row * in_f + offs, mask=mask, other=0.0) * tl.load(wsum_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0) + tl.load(bsum_ptr))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w, b = self.linear.weight, self.linear.bias
        out_f, in_f = w.shape
        wsum = torch.empty(in_f, device=x.device, dtype=torch.float32)
        bsum = torch.empty(1, device=x.device, dtype=torch.float32)
        colsum_kernel[(triton.cdiv(in_f, 128),)](w, b, wsum, bsum, out_f, in_f, BLOCK_K=128, BLOCK_B=1024)
        y = torch.empty(x.shape[0], 1, device=x.device, dtype=x.dtype)
        gemv_kernel[(x.shape[0],)](x, wsum, bsum, y, in_f, BLOCK=1024)
        return y
