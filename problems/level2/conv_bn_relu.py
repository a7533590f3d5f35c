"""Conv2d (64 -> 128, 3x3, padding 1) + BatchNorm2d (inference) + ReLU on a (32, 64, 128, 128) batch."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """conv -> batch norm with running statistics (inference mode) -> ReLU, all fp32.

    The BatchNorm's running mean and variance, weight and bias are drawn at random (under the
    evaluator's seed) so the normalization is far from the identity. The forward always uses the
    running statistics, whatever the module's train/eval mode, so it is a pure function of x.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, padding: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding, bias=True)
        self.bn = nn.BatchNorm2d(out_channels, eps=1e-5)
        with torch.no_grad():
            # The conv output has a variance of ~1/3 (default init, unit inputs): running statistics
            # of that order keep BN's gain moderate, so TF32-level conv error is not blown up.
            self.bn.running_mean.copy_(0.3 * torch.randn(out_channels))
            self.bn.running_var.copy_(0.2 + 0.4 * torch.rand(out_channels))
            self.bn.weight.copy_(1.0 + 0.5 * torch.randn(out_channels))
            self.bn.bias.copy_(0.3 * torch.randn(out_channels))
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y = F.batch_norm(
            y, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias,
            training=False, eps=self.bn.eps,
        )
        return torch.relu(y)


batch_size = 32
in_channels = 64
out_channels = 128
height = 128
width = 128
kernel_size = 3
padding = 1


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding]


METADATA = {
    "title": "Conv2d + BatchNorm (inference) + ReLU (fp32)",
    "level": 2,
    "tags": ["convolution", "fusion", "normalization", "compute-bound"],
    "cpu_sizes": {"batch_size": 2, "in_channels": 16, "out_channels": 24, "height": 40, "width": 48},
    # The convolution (stride 1), then bias, a BN multiply-add and the ReLU per output element.
    "flops": (
        "(2 * in_channels * kernel_size * kernel_size + 4) * batch_size * out_channels"
        " * (height + 2 * padding - kernel_size + 1) * (width + 2 * padding - kernel_size + 1)"
    ),
    "bytes": (
        "4 * (batch_size * in_channels * height * width"
        " + out_channels * in_channels * kernel_size * kernel_size + 5 * out_channels"
        " + batch_size * out_channels"
        " * (height + 2 * padding - kernel_size + 1) * (width + 2 * padding - kernel_size + 1))"
    ),
}
