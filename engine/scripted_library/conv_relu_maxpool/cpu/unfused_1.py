"""Three separate passes: direct convolution, then ReLU, then max pooling, on one core.

The convolution (scalar loops with a bounds test per tap) writes the whole conv output to a
scratch buffer, a second pass applies ReLU, a third pools 3 x 3 windows with stride 2.

Intended outcome: correct but much slower than PyTorch.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cstdint>

static void conv_direct(const float* x, const float* w, const float* bias, float* y, long long n, long long c, long long h, long long wd, long long co, long long k, long long s, long long p) {
    const long long ho = (h + 2 * p - k) / s + 1, wo = (wd + 2 * p - k) / s + 1;

    for (long long oc = 0; oc < co; ++oc)
        for (long long b = 0; b < n; ++b)
            for (long long oy = 0; oy < ho; ++oy)
                for (long long ox = 0; ox < wo; ++ox) {
                    float acc = bias[oc];
                    for (long long ic = 0; ic < c; ++ic)
                        for (long long ky = 0; ky < k; ++ky) {
                            const long long iy = oy * s + ky - p;
                            if (iy < 0 || iy >= h) continue;
                            for (long long kx = 0; kx < k; ++kx) {
                                const long long ix = ox * s + kx - p;
                                if (ix < 0 || ix >= wd) continue;
                                acc += x[((b * c + ic) * h + iy) * wd + ix] * w[((oc * c + ic) * k + ky) * k + kx];
                            }
                        }
                    y[((b * co + oc) * ho + oy) * wo + ox] = acc;
                }
}
#include <algorithm>
#include <cstdlib>

extern "C" void conv_relu_pool(const float* x, const float* w, const float* bias, float* y, long long n, long long c, long long h, long long wd, long long co, long long k, long long s, long long p, long long pk, long long ps) {
    const long long ho = (h + 2 * p - k) / s + 1, wo = (wd + 2 * p - k) / s + 1;
    const long long ph = (ho - pk) / ps + 1, pw = (wo - pk) / ps + 1;
    float* conv = static_cast<float*>(std::malloc(sizeof(float) * n * co * ho * wo));
    conv_direct(x, w, bias, conv, n, c, h, wd, co, k, s, p);
    for (long long i = 0; i < n * co * ho * wo; ++i) conv[i] = conv[i] > 0.0f ? conv[i] : 0.0f;

    for (long long i = 0; i < n * co; ++i)
        for (long long py = 0; py < ph; ++py)
            for (long long px = 0; px < pw; ++px) {
                float best = -3.0e38f;
                for (long long dy = 0; dy < pk; ++dy)
                    for (long long dx = 0; dx < pk; ++dx)
                        best = std::max(best, conv[(i * ho + py * ps + dy) * wo + px * ps + dx]);
                y[(i * ph + py) * pw + px] = best;
            }
    std::free(conv);
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_conv_relu_maxpool_unfused_1_cpu",
    cpp_sources=cpp_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cflags=['-O3'],
    extra_ldflags=[],
    verbose=False,
) or next(p for p in torch.ops.loaded_libraries if "ktree_conv_relu_maxpool_unfused_1_cpu" in p)
_lib = ctypes.CDLL(_path)
_lib.conv_relu_pool.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_longlong] * 8 + [ctypes.c_longlong] * 2
_lib.conv_relu_pool.restype = None


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, pool_kernel, pool_stride):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=True)
        self.pool_kernel, self.pool_stride = pool_kernel, pool_stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (x.device.type == "cpu" and x.dtype == torch.float32 and x.dim() == 4):
            raise ValueError("x must be a 4-D float32 CPU tensor")
        x = x.contiguous()
        w = self.conv.weight.detach().contiguous()
        b = self.conv.bias.detach().contiguous()
        k, s, p = w.shape[2], self.conv.stride[0], self.conv.padding[0]
        n, c, h, wd = x.shape
        ho, wo = (h + 2 * p - k) // s + 1, (wd + 2 * p - k) // s + 1
        ho, wo = (ho - self.pool_kernel) // self.pool_stride + 1, (wo - self.pool_kernel) // self.pool_stride + 1
        y = torch.empty(n, w.shape[0], ho, wo, dtype=torch.float32)
        if y.numel() == 0:
            return y
        _lib.conv_relu_pool(x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), n, c, h, wd, w.shape[0], k, s, p, self.pool_kernel, self.pool_stride)
        return y
