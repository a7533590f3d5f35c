"""The whole level-2 chain in one C++ kernel: a direct 3x3 convolution (no padding, stride 1), its
bias, the extra bias, the scale and the sigmoid, each output written once.

Corpus: honest, level-2 fusion. Intended outcome: correct.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

extern "C" void conv_chain(const float* x, const float* w, const float* cb, const float* bias,
                           const float* scale, float* y, long long n, long long ci, long long h,
                           long long wd, long long co, long long k) {
    const long long ho = h - k + 1, wo = wd - k + 1;
    for (long long b = 0; b < n; ++b)
        for (long long o = 0; o < co; ++o) {
            float* out = y + (b * co + o) * ho * wo;
            for (long long p = 0; p < ho * wo; ++p) out[p] = cb[o];
            for (long long c = 0; c < ci; ++c) {
                const float* in = x + (b * ci + c) * h * wd;
                const float* f = w + (o * ci + c) * k * k;
                for (long long ky = 0; ky < k; ++ky)
                    for (long long kx = 0; kx < k; ++kx) {
                        const float wv = f[ky * k + kx];
                        for (long long oy = 0; oy < ho; ++oy) {
                            const float* row = in + (oy + ky) * wd + kx;
                            float* orow = out + oy * wo;
                            for (long long ox = 0; ox < wo; ++ox) orow[ox] += wv * row[ox];
                        }
                    }
            }
            for (long long p = 0; p < ho * wo; ++p) {
                const float v = (out[p] + bias[o]) * scale[o];
                out[p] = 1.0f / (1.0f + std::exp(-v));
            }
        }
}
"""

_NAME = "rw_conv_chain_fused_cpu"
_path = load_inline(name=_NAME, cpp_sources=cpp_source, is_python_module=False, no_implicit_headers=True,
                    extra_cflags=["-O3"], verbose=False) \
    or next(p for p in torch.ops.loaded_libraries if _NAME in p)
_lib = ctypes.CDLL(_path)
_lib.conv_chain.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_longlong] * 6
_lib.conv_chain.restype = None


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.zeros(out_channels, 1, 1))
        self.scale = nn.Parameter(torch.ones(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w, cb = self.conv.weight.detach().contiguous(), self.conv.bias.detach().contiguous()
        bias, scale = self.bias.detach().contiguous(), self.scale.detach().contiguous()
        n, ci, h, wd = x.shape
        co, k = w.shape[0], w.shape[2]
        y = torch.empty(n, co, h - k + 1, wd - k + 1, dtype=x.dtype)
        _lib.conv_chain(x.data_ptr(), w.data_ptr(), cb.data_ptr(), bias.data_ptr(), scale.data_ptr(), y.data_ptr(),
                        n, ci, h, wd, co, k)
        return y
