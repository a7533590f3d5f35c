"""Vectorized over output channels: the weight transpose swaps ky and kx.

The same register-tiled kernel as vector_1, but the transpose reads the weight of tap (ky, kx)
from position (kx, ky), i.e. it convolves with the transposed filter.

Intended outcome: incorrect: the filter's ky and kx are swapped in the weight transpose.
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
#include <vector>

// Vectorized over output channels: the weights transposed to [ic][ky][kx][oc] so 32 output
// channels are two 16-float vectors; a tile of 13 neighbouring output pixels x 32 channels is
// held in 26 vector registers while all the taps are summed (per tap: 2 weight loads, 13
// broadcasts of the input, 26 FMAs). 13 divides this problem's 39 output columns, so no tile
// computes padding pixels; other widths get a short last tile.
typedef float v16 __attribute__((vector_size(64)));
constexpr long long CB = 32, PX = 13, NV = CB / 16;

static inline v16 load(const float* p) { v16 v; std::memcpy(&v, p, sizeof(v)); return v; }

// A padded copy of the input (so no tap needs a bounds test), in a buffer reused across calls;
// each padded row is written once (zeros and the copied row), in parallel.
static const float* padded(const float* x, long long n, long long c, long long h, long long wd, long long p,
                           long long hp, long long wp) {
    static thread_local std::vector<float> buf;
    if ((long long)buf.size() < n * c * hp * wp) buf.resize(n * c * hp * wp);
    float* xp = buf.data();
    #pragma omp parallel for collapse(2)
    for (long long i = 0; i < n * c; ++i)
        for (long long r = 0; r < hp; ++r) {
            float* dst = xp + (i * hp + r) * wp;
            if (r < p || r >= h + p) {
                std::memset(dst, 0, sizeof(float) * wp);
                continue;
            }
            std::memset(dst, 0, sizeof(float) * p);
            std::memcpy(dst + p, x + (i * h + r - p) * wd, sizeof(float) * wd);
            std::memset(dst + p + wd, 0, sizeof(float) * (wp - p - wd));
        }
    return xp;
}

static const float* transposed(const float* w, long long co, long long c, long long k, long long cop) {
    static thread_local std::vector<float> buf;
    if ((long long)buf.size() < c * k * k * cop) buf.resize(c * k * k * cop);
    float* wt = buf.data();
    #pragma omp parallel for
    for (long long t = 0; t < c * k * k; ++t)
        for (long long oc = 0; oc < cop; ++oc) wt[t * cop + oc] = oc < co ? w[oc * c * k * k + (t / (k * k)) * k * k + (t % k) * k + t / k % k] : 0.0f;
    return wt;
}

// out[q][j]: the conv (bias included) of pixel ox0 + q of row oy, channel cb * CB + j.
static inline void conv_tile(const float* xp, const float* wt, const float* bias, long long c, long long k,
                             long long s, long long hp, long long wp, long long cop, long long co, long long oy,
                             long long ox0, long long npx, long long cb, float out[PX][CB]) {
    v16 acc[PX][NV];
    for (int q = 0; q < PX; ++q)
        for (int v = 0; v < NV; ++v) acc[q][v] = v16{};
    long long col[PX];  // each pixel's first input column (a short tile repeats its last pixel)
    for (int q = 0; q < PX; ++q) col[q] = std::min<long long>(ox0 + q, ox0 + npx - 1) * s;
    for (long long ic = 0; ic < c; ++ic)
        for (long long ky = 0; ky < k; ++ky) {
            const float* row = xp + (ic * hp + oy * s + ky) * wp;
            const float* wr = wt + ((ic * k + ky) * k) * cop + cb * CB;
            for (long long kx = 0; kx < k; ++kx) {
                v16 wv[NV];
                for (int v = 0; v < NV; ++v) wv[v] = load(wr + kx * cop + 16 * v);
                #pragma GCC unroll 16
                for (int q = 0; q < PX; ++q) {
                    const float xv = row[col[q] + kx];
                    for (int v = 0; v < NV; ++v) acc[q][v] += xv * wv[v];
                }
            }
        }
    for (int q = 0; q < PX; ++q) {
        std::memcpy(out[q], acc[q], sizeof(float) * CB);
        for (long long j = 0; j < CB; ++j) out[q][j] += cb * CB + j < co ? bias[cb * CB + j] : 0.0f;
    }
}

extern "C" void conv_vector(const float* x, const float* w, const float* bias, float* y, long long n, long long c, long long h, long long wd, long long co, long long k, long long s, long long p) {
    const long long ho = (h + 2 * p - k) / s + 1, wo = (wd + 2 * p - k) / s + 1;
    const long long hp = h + 2 * p, wp = wd + 2 * p, cop = (co + CB - 1) / CB * CB;
    const float* xp = padded(x, n, c, h, wd, p, hp, wp);
    const float* wt = transposed(w, co, c, k, cop);
    #pragma omp parallel for collapse(2) schedule(static)
    for (long long b = 0; b < n; ++b)
        for (long long oy = 0; oy < ho; ++oy) {
            float out[PX][CB];
            for (long long cb = 0; cb < cop / CB; ++cb)
                for (long long ox0 = 0; ox0 < wo; ox0 += PX) {
                    const long long npx = std::min(PX, wo - ox0);
                    conv_tile(xp + b * c * hp * wp, wt, bias, c, k, s, hp, wp, cop, co, oy, ox0, npx, cb, out);
                    for (long long j = 0; j < CB && cb * CB + j < co; ++j)
                        for (long long q = 0; q < npx; ++q)
                            y[((b * co + cb * CB + j) * ho + oy) * wo + ox0 + q] = out[q][j];
                }
        }
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_conv2d_vector_2_cpu",
    cpp_sources=cpp_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cflags=['-O3', '-march=native', '-fopenmp'],
    extra_ldflags=['-fopenmp'],
    verbose=False,
) or next(p for p in torch.ops.loaded_libraries if "ktree_conv2d_vector_2_cpu" in p)
_lib = ctypes.CDLL(_path)
_lib.conv_vector.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_longlong] * 8
_lib.conv_vector.restype = None


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
        _lib.conv_vector(x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), n, c, h, wd, w.shape[0], k, s, p)
        return y
