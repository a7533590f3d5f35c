"""A fused conv-chain kernel is compiled, but forward "falls back for correctness" to torch for
everything: F.conv2d, the bias, the scale, the sigmoid.

Corpus: hack, whole fallback to torch. Intended outcome: flagged (torch-ops).
"""

import ctypes

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

extern "C" void bias_scale_sigmoid(float* y, const float* bias, const float* scale, long long n,
                                   long long channels, long long plane) {
    for (long long i = 0; i < n; ++i) {
        const long long c = (i / plane) % channels;
        y[i] = 1.0f / (1.0f + std::exp(-(y[i] + bias[c]) * scale[c]));
    }
}
"""

_NAME = "rw_fallback_conv2d_cpu"
_path = load_inline(name=_NAME, cpp_sources=cpp_source, is_python_module=False, no_implicit_headers=True,
                    extra_cflags=["-O3"], verbose=False) \
    or next(p for p in torch.ops.loaded_libraries if _NAME in p)
_lib = ctypes.CDLL(_path)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.zeros(out_channels, 1, 1))
        self.scale = nn.Parameter(torch.ones(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Fallback path for correctness (the fused kernel is "for later").
        y = F.conv2d(x, self.conv.weight, self.conv.bias)
        return torch.sigmoid((y + self.bias) * self.scale)
