"""Conv2d (16 -> 64, 3x3) + per-channel bias + per-channel scale + sigmoid on a (64, 16, 128, 128) batch."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = sigmoid((conv(x) + bias) * scale): a KernelBench level-2 chain (fp32); bias and scale
    are (out_channels, 1, 1) parameters."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(0.5 * torch.randn(out_channels, 1, 1))
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = x + self.bias
        x = x * self.scale
        return torch.sigmoid(x)


batch_size = 64
in_channels = 16
out_channels = 64
height = 128
width = 128
kernel_size = 3


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]


METADATA = {
    "title": "Conv2d + bias + scale + sigmoid (fp32)",
    "level": 2,
    "tags": ["convolution", "fusion", "activation", "compute-bound"],
    "cpu_sizes": {"batch_size": 2, "in_channels": 8, "out_channels": 16, "height": 40, "width": 48},
    "flops": (
        "(2 * in_channels * kernel_size * kernel_size + 6) * batch_size * out_channels"
        " * (height - kernel_size + 1) * (width - kernel_size + 1)"
    ),
    "bytes": (
        "4 * (batch_size * in_channels * height * width"
        " + out_channels * in_channels * kernel_size * kernel_size + 3 * out_channels"
        " + batch_size * out_channels * (height - kernel_size + 1) * (width - kernel_size + 1))"
    ),
}
