"""Single-pass statistics in SIMD accumulators: 16-wide lanes, double flushes, one fused normalize sweep.

Each sample's sum and sum of squares in one sweep of 16 float lanes (GCC vector extensions,
-march=native) flushed to double every 1024 elements (the variance E[x^2] - mean^2 taken in
double); then y = (x - mean) * rstd * w + b in one 16-wide sweep. Samples over the cores with
OpenMP. Built in the ctypes structure (no torch headers, no dispatcher).

Intended outcome: correct and faster than PyTorch on the CPU.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

typedef float v16 __attribute__((vector_size(64)));
static inline v16 load(const float* p) { v16 v; std::memcpy(&v, p, sizeof(v)); return v; }
static inline void store(float* p, v16 v) { std::memcpy(p, &v, sizeof(v)); }

// One sample: one sweep for the sum and the sum of squares in 16 float lanes, flushed to double
// every 1024 elements (no lane sums more than 64 values in float), then one fused sweep
// y = (x - mean) * rstd * w + b, 16 wide.
static double lane_total(v16 acc) {
    double t = 0.0;
    for (int l = 0; l < 16; ++l) t += acc[l];
    return t;
}

static void layernorm_sample(const float* x, const float* w, const float* b, float* y, long long d, float eps) {
    const long long vec = d / 16 * 16;
    double sum = 0.0, sq = 0.0;
    for (long long j0 = 0; j0 < vec; j0 += 1024) {
        v16 s1 = v16{}, s2 = v16{};
        const long long j1 = j0 + 1024 < vec ? j0 + 1024 : vec;
        for (long long j = j0; j < j1; j += 16) { const v16 v = load(x + j); s1 += v; s2 += v * v; }
        sum += lane_total(s1);
        sq += lane_total(s2);
    }
    for (long long j = vec; j < d; ++j) { sum += x[j]; sq += (double)x[j] * x[j]; }
    const double mean_d = sum / d;
    const double var = sq / d - mean_d * mean_d;  // in double: no cancellation worth the name at fp32
    const float mean = (float)mean_d;
    const float rstd = (float)(1.0 / std::sqrt((var > 0.0 ? var : 0.0) + eps));

    for (long long j = 0; j < vec; j += 16)
        store(y + j, (load(x + j) - mean) * rstd * load(w + j) + load(b + j));
    for (long long j = vec; j < d; ++j) y[j] = (x[j] - mean) * rstd * w[j] + b[j];
}

extern "C" void layernorm_rows(const float* x, const float* w, const float* b, float* y, long long n, long long d,
                               float eps) {
    // Samples over the cores, unless the input is too small to pay for the fork/join.
    #pragma omp parallel for schedule(static) if (n >= 2 && n * d >= 16384)
    for (long long i = 0; i < n; ++i) layernorm_sample(x + i * d, w, b, y + i * d, d, eps);
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_layernorm_onepass_3_cpu",
    cpp_sources=cpp_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cflags=['-O3', '-march=native', '-fopenmp'],
    extra_ldflags=['-fopenmp'],
    verbose=False,
) or next(p for p in torch.ops.loaded_libraries if "ktree_layernorm_onepass_3_cpu" in p)
_lib = ctypes.CDLL(_path)
_lib.layernorm_rows.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_longlong] * 2 + [ctypes.c_float]
_lib.layernorm_rows.restype = None
_layernorm = _lib.layernorm_rows


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape, eps=1e-5)
        with torch.no_grad():
            self.ln.weight.copy_(1.0 + 0.5 * torch.randn(normalized_shape))
            self.ln.bias.copy_(0.5 * torch.randn(normalized_shape))
        # Plain attributes (looked up without nn.Module's __getattr__): the call is a few
        # microseconds, so the Python around it counts.
        self._shape = tuple(self.ln.normalized_shape)
        self._nd = len(self._shape)
        self._d = self.ln.weight.numel()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ln = self.ln  # its parameters are contiguous: nn.LayerNorm allocates them so
        if x.dtype != torch.float32 or x.device.type != "cpu" or x.shape[x.dim() - self._nd:] != self._shape:
            raise ValueError("x must be a float32 CPU tensor ending in the normalized shape")
        if not x.is_contiguous():
            x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel() // self._d
        if n:
            _layernorm(x.data_ptr(), ln.weight.data_ptr(), ln.bias.data_ptr(), y.data_ptr(), n, self._d, ln.eps)
        return y
