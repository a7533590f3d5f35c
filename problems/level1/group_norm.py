"""GroupNorm (8 groups of 8 channels) of a (16, 64, 256, 256) fp32 tensor with a random affine."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.GroupNorm: each sample's channels are split into groups, each normalized over its
    (channels / groups, H, W) block, then scaled and shifted per channel.

    The affine parameters are drawn at random (under the evaluator's seed), so a kernel that
    ignores them cannot pass.
    """

    def __init__(self, num_groups: int, channels: int):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups, channels, eps=1e-5)
        with torch.no_grad():
            self.gn.weight.copy_(1.0 + 0.5 * torch.randn(channels))
            self.gn.bias.copy_(0.5 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)


batch_size = 16
channels = 64
num_groups = 8
height = 256
width = 256


def get_inputs():
    # Per-channel offsets and scales, so each group has its own statistics.
    offset = 2.0 * torch.randn(1, channels, 1, 1)
    scale = 0.5 + 2.0 * torch.rand(1, channels, 1, 1)
    x = offset + scale * torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [num_groups, channels]


METADATA = {
    "title": "GroupNorm, 8 groups (fp32)",
    "level": 1,
    "tags": ["normalization", "reduction", "memory-bound"],
    "cpu_sizes": {"batch_size": 2, "channels": 32, "height": 48, "width": 40},
    "flops": "8 * batch_size * channels * height * width",
    "bytes": "4 * (2 * batch_size * channels * height * width + 2 * channels)",
}
