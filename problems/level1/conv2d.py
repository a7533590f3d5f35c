"""2D convolution of a (100, 3, 224, 224) fp32 batch: 3 -> 96 channels, 11x11 kernel, stride 4, padding 2."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.Conv2d with bias (an AlexNet-style first layer); weights use PyTorch's default init."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


batch_size = 100
in_channels = 3
out_channels = 96
height = 224
width = 224
kernel_size = 11
stride = 4
padding = 2


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding]


METADATA = {
    "title": "Conv2d 3->96, 11x11, stride 4 (fp32)",
    "level": 1,
    "tags": ["convolution", "compute-bound"],
    "cpu_sizes": {"batch_size": 2, "height": 128, "width": 160},
    # Output is (batch, out_channels, H_out, W_out) with H_out = (height + 2*padding - kernel_size)//stride + 1:
    # 2 flops per multiply-add over in_channels * kernel_size**2 taps, plus the bias add.
    "flops": (
        "(2 * in_channels * kernel_size * kernel_size + 1) * batch_size * out_channels"
        " * ((height + 2 * padding - kernel_size) // stride + 1)"
        " * ((width + 2 * padding - kernel_size) // stride + 1)"
    ),
    "bytes": (
        "4 * (batch_size * in_channels * height * width"
        " + out_channels * in_channels * kernel_size * kernel_size + out_channels"
        " + batch_size * out_channels * ((height + 2 * padding - kernel_size) // stride + 1)"
        " * ((width + 2 * padding - kernel_size) // stride + 1))"
    ),
}
