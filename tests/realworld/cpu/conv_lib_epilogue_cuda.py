"""Conv2d by torch (`F.conv2d`, MKL-DNN here), then one C++ pass fusing the rest of the chain in
place: bias, scale and sigmoid. (The GPU twin fuses them in a CUDA kernel after cuDNN.)

Corpus: honest, library op + fused epilogue. Intended outcome: correct, with Verdict.library
naming aten.convolution.
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
        const float v = (y[i] + bias[c]) * scale[c];
        y[i] = 1.0f / (1.0f + std::exp(-v));
    }
}
"""

_NAME = "rw_conv_lib_epilogue_cpu"
_path = load_inline(name=_NAME, cpp_sources=cpp_source, is_python_module=False, no_implicit_headers=True,
                    extra_cflags=["-O3"], verbose=False) \
    or next(p for p in torch.ops.loaded_libraries if _NAME in p)
_lib = ctypes.CDLL(_path)
_lib.bias_scale_sigmoid.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_longlong] * 3
_lib.bias_scale_sigmoid.restype = None


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.zeros(out_channels, 1, 1))
        self.scale = nn.Parameter(torch.ones(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.conv2d(x, self.conv.weight, self.conv.bias).contiguous()
        bias, scale = self.bias.detach().contiguous(), self.scale.detach().contiguous()
        _lib.bias_scale_sigmoid(y.data_ptr(), bias.data_ptr(), scale.data_ptr(), y.numel(), y.shape[1],
                                y.shape[2] * y.shape[3])
        return y
