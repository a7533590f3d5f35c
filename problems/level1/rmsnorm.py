"""RMSNorm over the last dim of (16384 tokens, 8192 hidden) fp32 activations, with a learned scale."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = x / sqrt(mean(x**2 over the row) + eps) * weight, as in LLaMA-style transformer blocks.

    The weight is drawn at random (under the evaluator's seed), so a kernel that ignores it fails.
    """

    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms_inv = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms_inv * self.weight


num_tokens = 16384
hidden = 8192


def get_inputs():
    # Rows of very different scales (log-normal), so skipping the normalization cannot pass.
    row_scale = torch.exp(torch.randn(num_tokens, 1))
    x = row_scale * torch.randn(num_tokens, hidden)
    return [x]


def get_init_inputs():
    return [hidden]


METADATA = {
    "title": "RMSNorm over the hidden dim (fp32)",
    "level": 1,
    "tags": ["normalization", "reduction", "memory-bound"],
    "cpu_sizes": {"num_tokens": 256, "hidden": 1024},
    # Square-and-add for the mean, then two multiplies per element.
    "flops": "4 * num_tokens * hidden",
    "bytes": "4 * (2 * num_tokens * hidden + hidden)",
}
