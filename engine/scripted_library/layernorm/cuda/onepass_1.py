"""Single-pass block statistics with float4 loads: sum and sum of squares in one sweep.

One 1024-thread block per sample accumulates sum and sum of squares in double over float4 loads,
reduces them with warp shuffles, then normalizes with float4. Two reads of each sample instead of
three, but still capped at one block per sample.

Built in ktree's fastest-compiling structure: no torch headers; an `extern "C"` launcher
called through ctypes with the tensors' pointers and torch's current stream.

Intended outcome: correct (about 2x slower than the split variant).
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr double kEps = 1e-5;

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// n4 float4 are read through the vector path (0 if x, weight, bias or y are not 16-byte
// aligned or M is not a multiple of 4); elements 4 * n4 .. M-1 use the scalar path.
__global__ void __launch_bounds__(kThreads, 1)
ln_onepass_kernel(const float* __restrict__ x, const float* __restrict__ w,
                  const float* __restrict__ b, float* __restrict__ y, int64_t M, int64_t n4) {
    __shared__ double part_sum[kWarps];
    __shared__ double part_sq[kWarps];
    __shared__ float stats[2];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int64_t base = (int64_t)blockIdx.x * M;
    const float* xs = x + base;
    float* ys = y + base;
    const float4* xs4 = reinterpret_cast<const float4*>(xs);

    double sum = 0.0;
    double sq = 0.0;
#pragma unroll 4
    for (int64_t i = tid; i < n4; i += kThreads) {
        const float4 v = xs4[i];
        sum += (double)((v.x + v.y) + (v.z + v.w));
        sq += (double)((v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w));
    }
    for (int64_t i = 4 * n4 + tid; i < M; i += kThreads) {
        const float v = xs[i];
        sum += (double)v;
        sq += (double)v * (double)v;
    }

    sum = warp_sum(sum);
    sq = warp_sum(sq);
    if (lane == 0) {
        part_sum[warp] = sum;
        part_sq[warp] = sq;
    }
    __syncthreads();
    if (warp == 0) {
        sum = warp_sum(part_sum[lane]);  // kWarps == 32: one partial per lane
        sq = warp_sum(part_sq[lane]);
        if (lane == 0) {
            const double mean = sum / (double)M;
            const double var = fmax(sq / (double)M - mean * mean, 0.0);
            stats[0] = (float)mean;
            stats[1] = (float)(1.0 / sqrt(var + kEps));
        }
    }
    __syncthreads();
    const float mean = stats[0];
    const float rstd = stats[1];

    const float4* w4 = reinterpret_cast<const float4*>(w);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* ys4 = reinterpret_cast<float4*>(ys);
#pragma unroll 4
    for (int64_t i = tid; i < n4; i += kThreads) {
        const float4 v = xs4[i];
        const float4 wv = w4[i];
        const float4 bv = b4[i];
        float4 o;
        o.x = (v.x - mean) * rstd * wv.x + bv.x;
        o.y = (v.y - mean) * rstd * wv.y + bv.y;
        o.z = (v.z - mean) * rstd * wv.z + bv.z;
        o.w = (v.w - mean) * rstd * wv.w + bv.w;
        ys4[i] = o;
    }
    for (int64_t i = 4 * n4 + tid; i < M; i += kThreads) {
        ys[i] = (xs[i] - mean) * rstd * w[i] + b[i];
    }
}

extern "C" int layernorm_launch(const float* xp, const float* wp, const float* bp, float* yp, long long N,
                                long long M, cudaStream_t stream) {
    const uintptr_t addr_bits = reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(wp) |
                                reinterpret_cast<uintptr_t>(bp) | reinterpret_cast<uintptr_t>(yp);
    const bool aligned = addr_bits % 16 == 0;
    const int64_t n4 = (aligned && M % 4 == 0) ? M / 4 : 0;

    ln_onepass_kernel<<<(unsigned int)N, kThreads, 0, stream>>>(xp, wp, bp, yp, M, n4);
    return (int)cudaGetLastError();
}

// The message of a CUDA error code, for the exception the Python side raises.
extern "C" const char* layernorm_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_layernorm_onepass_1_cuda",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_layernorm_onepass_1_cuda" in p)
_lib = ctypes.CDLL(_path)
_lib.layernorm_launch.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_longlong] * 2 + [ctypes.c_void_p]
_lib.layernorm_launch.restype = ctypes.c_int
_lib.layernorm_error_string.argtypes = [ctypes.c_int]
_lib.layernorm_error_string.restype = ctypes.c_char_p


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape, eps=1e-5)
        with torch.no_grad():
            self.ln.weight.copy_(1.0 + 0.5 * torch.randn(normalized_shape))
            self.ln.bias.copy_(0.5 * torch.randn(normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.ln.weight, self.ln.bias
        if not (x.is_cuda and weight.is_cuda and bias.is_cuda):
            raise ValueError("all tensors must be CUDA tensors")
        if not (x.dtype == weight.dtype == bias.dtype == torch.float32):
            raise ValueError("tensors must be float32")
        m = weight.numel()  # elements per normalized sample (M in the kernels)
        if m == 0 or bias.numel() != m:
            raise ValueError("weight and bias must have the same, non-zero size")
        if x.numel() % m:
            raise ValueError("x is not a whole number of normalized samples")
        n = x.numel() // m  # samples (N in the kernels)
        if n > 2**31 - 1:
            raise ValueError("too many samples")
        x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
        y = torch.empty_like(x)
        if n == 0:
            return y
        err = _lib.layernorm_launch(x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(),
                                    n, m, torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"layernorm kernel launch failed: {_lib.layernorm_error_string(err).decode()}")
        return y
