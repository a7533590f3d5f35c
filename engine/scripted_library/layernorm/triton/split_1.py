"""Split each sample over many blocks, in Triton: a statistics kernel gives every 4096-element chunk
of every sample to its own program (chunk mean and sum of squared deviations, exact within the
chunk); a finalize kernel merges a sample's chunk partials (Chan's parallel formula); an apply
kernel, again one program per chunk, normalizes and applies weight and bias.

Intended outcome: correct.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

CHUNK = 4096


@triton.jit
def chunk_stats(x_ptr, mean_ptr, m2_ptr, n, n_chunks, CHUNK: tl.constexpr):
    c = tl.program_id(0)
    row = tl.program_id(1).to(tl.int64)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    mask = offs < n
    x = tl.load(x_ptr + row * n + offs, mask=mask, other=0.0)
    cnt = tl.minimum(n - c * CHUNK, CHUNK).to(tl.float32)
    mean = tl.sum(x, axis=0) / cnt
    d = tl.where(mask, x - mean, 0.0)
    tl.store(mean_ptr + row * n_chunks + c, mean)
    tl.store(m2_ptr + row * n_chunks + c, tl.sum(d * d, axis=0))


@triton.jit
def finalize(mean_ptr, m2_ptr, stats_ptr, n, n_chunks, eps, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    total = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_chunks, BLOCK):
        idx = start + offs
        cnt = tl.where(idx < n_chunks, tl.minimum(n - idx * CHUNK, CHUNK), 0).to(tl.float32)
        total += cnt * tl.load(mean_ptr + row * n_chunks + idx, mask=idx < n_chunks, other=0.0)
    mean = tl.sum(total, axis=0) / n
    m2 = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_chunks, BLOCK):
        idx = start + offs
        mask = idx < n_chunks
        cnt = tl.where(mask, tl.minimum(n - idx * CHUNK, CHUNK), 0).to(tl.float32)
        cm = tl.load(mean_ptr + row * n_chunks + idx, mask=mask, other=0.0)
        m2 += tl.load(m2_ptr + row * n_chunks + idx, mask=mask, other=0.0) + cnt * (cm - mean) * (cm - mean)
    rstd = 1.0 / tl.sqrt(tl.sum(m2, axis=0) / n + eps)
    tl.store(stats_ptr + row * 2, mean)
    tl.store(stats_ptr + row * 2 + 1, rstd)


@triton.jit
def apply(x_ptr, w_ptr, b_ptr, y_ptr, stats_ptr, n, CHUNK: tl.constexpr):
    c = tl.program_id(0)
    row = tl.program_id(1).to(tl.int64)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    mask = offs < n
    mean = tl.load(stats_ptr + row * 2)
    rstd = tl.load(stats_ptr + row * 2 + 1)
    x = tl.load(x_ptr + row * n + offs, mask=mask, other=0.0, eviction_policy="evict_first")
    w = tl.load(w_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last")
    b = tl.load(b_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last")
    tl.store(y_ptr + row * n + offs, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = self.ln.weight.numel()
        rows = x.numel() // n
        n_chunks = triton.cdiv(n, CHUNK)
        means = torch.empty(rows, n_chunks, device=x.device, dtype=torch.float32)
        m2s = torch.empty_like(means)
        stats = torch.empty(rows, 2, device=x.device, dtype=torch.float32)
        chunk_stats[(n_chunks, rows)](x, means, m2s, n, n_chunks, CHUNK=CHUNK, num_warps=8)
        finalize[(rows,)](means, m2s, stats, n, n_chunks, self.ln.eps, CHUNK=CHUNK, BLOCK=1024)
        apply[(n_chunks, rows)](x, self.ln.weight, self.ln.bias, y, stats, n, CHUNK=CHUNK, num_warps=8)
        return y
