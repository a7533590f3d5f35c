"""2D average pooling, 3x3 window, stride 2, padding 1, of a (16, 64, 256, 256) fp32 tensor."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.AvgPool2d(3, stride=2, padding=1) with PyTorch's default count_include_pad=True: windows at
    the border divide by 9 even where they cover padding zeros."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


batch_size = 16
channels = 64
height = 256
width = 256
kernel_size = 3
stride = 2
padding = 1


def get_inputs():
    # A positive offset makes the count_include_pad border rule visible in the output.
    x = 1.0 + torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [kernel_size, stride, padding]


METADATA = {
    "title": "AvgPool2d 3x3, stride 2 (fp32)",
    "level": 1,
    "tags": ["pooling", "memory-bound"],
    "cpu_sizes": {"batch_size": 2, "channels": 16, "height": 96, "width": 80},
    # One add per window tap (the divide is folded into the last one).
    "flops": (
        "kernel_size * kernel_size * batch_size * channels"
        " * ((height + 2 * padding - kernel_size) // stride + 1)"
        " * ((width + 2 * padding - kernel_size) // stride + 1)"
    ),
    "bytes": (
        "4 * (batch_size * channels * height * width"
        " + batch_size * channels * ((height + 2 * padding - kernel_size) // stride + 1)"
        " * ((width + 2 * padding - kernel_size) // stride + 1))"
    ),
}
