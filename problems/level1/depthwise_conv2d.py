"""Depthwise 3x3 convolution (stride 1, padding 1, no bias) of a (16, 128, 256, 256) fp32 tensor."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.Conv2d with groups == channels: every channel is convolved with its own 3x3 filter."""

    def __init__(self, channels: int, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.conv = nn.Conv2d(
            channels, channels, kernel_size, stride=stride, padding=padding, groups=channels, bias=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


batch_size = 16
channels = 128
height = 256
width = 256
kernel_size = 3
stride = 1
padding = 1


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [channels, kernel_size, stride, padding]


METADATA = {
    "title": "Depthwise conv2d 3x3 (fp32)",
    "level": 1,
    "tags": ["convolution", "depthwise", "memory-bound"],
    "cpu_sizes": {"batch_size": 2, "channels": 16, "height": 96, "width": 80},
    "flops": (
        "2 * kernel_size * kernel_size * batch_size * channels"
        " * ((height + 2 * padding - kernel_size) // stride + 1)"
        " * ((width + 2 * padding - kernel_size) // stride + 1)"
    ),
    "bytes": (
        "4 * (batch_size * channels * height * width + channels * kernel_size * kernel_size"
        " + batch_size * channels * ((height + 2 * padding - kernel_size) // stride + 1)"
        " * ((width + 2 * padding - kernel_size) // stride + 1))"
    ),
}
