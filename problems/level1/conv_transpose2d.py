"""Transposed 2D convolution (2x upsampling): (16, 128, 128, 128) -> (16, 64, 256, 256) fp32, 4x4 kernel."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.ConvTranspose2d with bias, kernel 4, stride 2, padding 1 (the usual decoder upsampling)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.conv_t = nn.ConvTranspose2d(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=True
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_t(x)


batch_size = 16
in_channels = 128
out_channels = 64
height = 128
width = 128
kernel_size = 4
stride = 2
padding = 1


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding]


METADATA = {
    "title": "ConvTranspose2d 128->64, 4x4, stride 2 (fp32)",
    "level": 1,
    "tags": ["convolution", "transposed", "compute-bound"],
    "cpu_sizes": {"batch_size": 2, "in_channels": 32, "out_channels": 16, "height": 32, "width": 48},
    # Every input pixel scatters in_channels x out_channels x kernel_size**2 multiply-adds; then
    # the bias is added to each output, of H_out = (height - 1) * stride - 2 * padding + kernel_size.
    "flops": (
        "2 * batch_size * in_channels * height * width * out_channels * kernel_size * kernel_size"
        " + batch_size * out_channels * ((height - 1) * stride - 2 * padding + kernel_size)"
        " * ((width - 1) * stride - 2 * padding + kernel_size)"
    ),
    "bytes": (
        "4 * (batch_size * in_channels * height * width"
        " + in_channels * out_channels * kernel_size * kernel_size + out_channels"
        " + batch_size * out_channels * ((height - 1) * stride - 2 * padding + kernel_size)"
        " * ((width - 1) * stride - 2 * padding + kernel_size))"
    ),
}
