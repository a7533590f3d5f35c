"""Conv2d (3 -> 96, 11x11, stride 4, padding 2), ReLU, MaxPool2d(3, stride 2) on a (100, 3, 224, 224) batch."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """The AlexNet stem: nn.Conv2d with bias, ReLU, then 3x3 max pooling with stride 2 (fp32)."""

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int, stride: int, padding: int,
        pool_kernel: int, pool_stride: int,
    ):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=True)
        self.pool = nn.MaxPool2d(pool_kernel, stride=pool_stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.conv(x)))


batch_size = 100
in_channels = 3
out_channels = 96
height = 224
width = 224
kernel_size = 11
stride = 4
padding = 2
pool_kernel = 3
pool_stride = 2


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, pool_kernel, pool_stride]


METADATA = {
    "title": "Conv2d + ReLU + MaxPool (AlexNet stem, fp32)",
    "level": 2,
    "tags": ["convolution", "fusion", "pooling", "compute-bound"],
    "cpu_sizes": {"batch_size": 2, "height": 128, "width": 160},
    # The convolution (multiply-adds and bias) and the ReLU per conv output, then one compare per
    # pooling tap. Conv output: H_c = (height + 2*padding - kernel_size)//stride + 1; pooled output:
    # (H_c - pool_kernel)//pool_stride + 1. Only the pooled tensor is written.
    "flops": (
        "(2 * in_channels * kernel_size * kernel_size + 2) * batch_size * out_channels"
        " * ((height + 2 * padding - kernel_size) // stride + 1)"
        " * ((width + 2 * padding - kernel_size) // stride + 1)"
        " + pool_kernel * pool_kernel * batch_size * out_channels"
        " * (((height + 2 * padding - kernel_size) // stride + 1 - pool_kernel) // pool_stride + 1)"
        " * (((width + 2 * padding - kernel_size) // stride + 1 - pool_kernel) // pool_stride + 1)"
    ),
    "bytes": (
        "4 * (batch_size * in_channels * height * width"
        " + out_channels * in_channels * kernel_size * kernel_size + out_channels"
        " + batch_size * out_channels"
        " * (((height + 2 * padding - kernel_size) // stride + 1 - pool_kernel) // pool_stride + 1)"
        " * (((width + 2 * padding - kernel_size) // stride + 1 - pool_kernel) // pool_stride + 1))"
    ),
}
