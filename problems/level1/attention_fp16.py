"""Scaled dot-product attention (non-causal) on fp16 q, k, v of shape (4, 32, 4096, 128)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """out = softmax(q @ k^T / sqrt(head_dim)) @ v per (batch, head), all fp16 in and out.

    The check compares against an fp64 evaluation on the same (fp16) inputs.
    """

    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


batch_size = 4
num_heads = 32
seq_len = 4096
head_dim = 128


def get_inputs():
    # q is scaled so the attention logits have a standard deviation of 3: rows put most of their
    # weight on a few dozen keys, as trained models do, so outputs are O(0.1-1) rather than the
    # near-zero average of v that uniform attention over thousands of keys would give.
    shape = (batch_size, num_heads, seq_len, head_dim)
    q = (3.0 * torch.randn(shape)).to(torch.float16)
    k = torch.randn(shape).to(torch.float16)
    v = torch.randn(shape).to(torch.float16)
    return [q, k, v]


def get_init_inputs():
    return []


METADATA = {
    "title": "Attention, non-causal (SDPA, fp16)",
    "level": 1,
    "tags": ["attention", "fp16", "tensor-core", "compute-bound"],
    "cpu_sizes": {"batch_size": 1, "num_heads": 2, "seq_len": 256, "head_dim": 64},
    # Two matmuls (q @ k^T and p @ v) of 2 * seq_len**2 * head_dim flops each, per (batch, head).
    "flops": "4 * batch_size * num_heads * seq_len * seq_len * head_dim",
    "bytes": "2 * 4 * batch_size * num_heads * seq_len * head_dim",
}
