"""Causal scaled dot-product attention on fp16 q, k, v of shape (4, 32, 4096, 128)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """out = softmax(mask(q @ k^T / sqrt(head_dim))) @ v with a causal mask (query i sees keys <= i).

    All fp16 in and out; the check compares against an fp64 evaluation on the same inputs.
    """

    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


batch_size = 4
num_heads = 32
seq_len = 4096
head_dim = 128


def get_inputs():
    # Logits of standard deviation 3, as in attention_fp16: peaked rows, outputs of O(0.1-1).
    shape = (batch_size, num_heads, seq_len, head_dim)
    q = (3.0 * torch.randn(shape)).to(torch.float16)
    k = torch.randn(shape).to(torch.float16)
    v = torch.randn(shape).to(torch.float16)
    return [q, k, v]


def get_init_inputs():
    return []


METADATA = {
    "title": "Attention, causal (SDPA, fp16)",
    "level": 1,
    "tags": ["attention", "causal", "fp16", "tensor-core", "compute-bound"],
    "cpu_sizes": {"batch_size": 1, "num_heads": 2, "seq_len": 256, "head_dim": 64},
    # Only the seq_len * (seq_len + 1) / 2 unmasked (query, key) pairs count (about half the
    # non-causal work): 4 * head_dim flops each (a multiply-add in q @ k^T and one in p @ v).
    "flops": "2 * batch_size * num_heads * seq_len * (seq_len + 1) * head_dim",
    "bytes": "2 * 4 * batch_size * num_heads * seq_len * head_dim",
}
