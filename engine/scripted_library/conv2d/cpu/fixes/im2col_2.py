"""im2col + GEMM: unfold the input patches into a (taps x pixels) matrix, then multiply.

The fix-prompt answer for im2col_2.py: the column being filled is a plain (writable) `float*`.

Intended outcome: correct.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

static float* padded(const float* x, long long n, long long c, long long h, long long wd, long long p,
                     long long hp, long long wp) {
    float* xp = static_cast<float*>(std::calloc(n * c * hp * wp, sizeof(float)));
    #pragma omp parallel for collapse(2)
    for (long long i = 0; i < n * c; ++i)
        for (long long r = 0; r < h; ++r)
            std::memcpy(xp + (i * hp + r + p) * wp + p, x + (i * h + r) * wd, sizeof(float) * wd);
    return xp;
}

// im2col: column (ic, ky, kx) x pixel (oy, ox) of one image, then C[oc, pixel] = W[oc, :] @ cols,
// the GEMM's inner loop streaming a row of cols with unit stride.
extern "C" void conv_im2col(const float* x, const float* w, const float* bias, float* y, long long n, long long c, long long h, long long wd, long long co, long long k, long long s, long long p) {
    const long long ho = (h + 2 * p - k) / s + 1, wo = (wd + 2 * p - k) / s + 1;
    const long long hp = h + 2 * p, wp = wd + 2 * p, taps = c * k * k, pix = ho * wo;
    float* xp = padded(x, n, c, h, wd, p, hp, wp);
    float* cols = static_cast<float*>(std::malloc(sizeof(float) * taps * pix));
    for (long long b = 0; b < n; ++b) {
        #pragma omp parallel for
        for (long long t = 0; t < taps; ++t) {
            const long long ic = t / (k * k), ky = t / k % k, kx = t % k;
            float* col = cols + t * pix;
            for (long long oy = 0; oy < ho; ++oy)
                for (long long ox = 0; ox < wo; ++ox)
                    col[oy * wo + ox] = xp[((b * c + ic) * hp + oy * s + ky) * wp + ox * s + kx];
        }
        #pragma omp parallel for
        for (long long oc = 0; oc < co; ++oc) {
            float* out = y + (b * co + oc) * pix;
            for (long long q = 0; q < pix; ++q) out[q] = bias[oc];
            for (long long t = 0; t < taps; ++t) {
                const float wv = w[oc * taps + t];
                const float* col = cols + t * pix;
                for (long long q = 0; q < pix; ++q) out[q] += wv * col[q];
            }
            // (fixed: col is writable)
        }
    }
    std::free(cols);
    std::free(xp);
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_conv2d_im2col_2_cpu",
    cpp_sources=cpp_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cflags=['-O3', '-march=native', '-fopenmp'],
    extra_ldflags=['-fopenmp'],
    verbose=False,
) or next(p for p in torch.ops.loaded_libraries if "ktree_conv2d_im2col_2_cpu" in p)
_lib = ctypes.CDLL(_path)
_lib.conv_im2col.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_longlong] * 8
_lib.conv_im2col.restype = None


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (x.device.type == "cpu" and x.dtype == torch.float32 and x.dim() == 4):
            raise ValueError("x must be a 4-D float32 CPU tensor")
        x = x.contiguous()
        w = self.conv.weight.detach().contiguous()
        b = self.conv.bias.detach().contiguous()
        k, s, p = w.shape[2], self.conv.stride[0], self.conv.padding[0]
        n, c, h, wd = x.shape
        ho, wo = (h + 2 * p - k) // s + 1, (wd + 2 * p - k) // s + 1
        y = torch.empty(n, w.shape[0], ho, wo, dtype=torch.float32)
        if y.numel() == 0:
            return y
        _lib.conv_im2col(x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), n, c, h, wd, w.shape[0], k, s, p)
        return y
