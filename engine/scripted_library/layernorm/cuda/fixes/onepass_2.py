"""Single-pass block statistics with float4 loads: per-thread Welford, Chan merges.

The fix-prompt answer for onepass_2.py: welford_combine has its semicolon back.

Built in ktree's fastest-compiling structure: no torch headers; an `extern "C"` launcher
called through ctypes with the tensors' pointers and torch's current stream.

Intended outcome: correct.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr float kEps = 1e-5f;

// Merge (count_b, mean_b, m2_b) into (count, mean, m2).
__device__ __forceinline__ void welford_combine(float& count, float& mean, float& m2,
                                                float count_b, float mean_b, float m2_b) {
    const float total = count + count_b;
    if (total == 0.0f) return;
    const float delta = mean_b - mean;
    const float frac_b = count_b / total;
    mean += delta * frac_b;
    m2 += m2_b + delta * delta * count * frac_b;
    count = total;
}

__global__ void __launch_bounds__(kThreads)
ln_welford_block_kernel(const float* __restrict__ x, const float* __restrict__ w,
                        const float* __restrict__ b, float* __restrict__ y, int64_t M) {
    __shared__ float sh_count[kWarps];
    __shared__ float sh_mean[kWarps];
    __shared__ float sh_m2[kWarps];
    __shared__ float stats[2];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int64_t base = (int64_t)blockIdx.x * M;
    const float4* xs4 = reinterpret_cast<const float4*>(x + base);
    const int64_t n4 = M / 4;

    float count = 0.0f, mean = 0.0f, m2 = 0.0f;
    for (int64_t i = tid; i < n4; i += kThreads) {
        const float4 v = xs4[i];
        const float vm = 0.25f * ((v.x + v.y) + (v.z + v.w));
        const float dx = v.x - vm, dy = v.y - vm, dz = v.z - vm, dw = v.w - vm;
        welford_combine(count, mean, m2, 4.0f, vm, (dx * dx + dy * dy) + (dz * dz + dw * dw));
    }

#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float cb = __shfl_xor_sync(0xffffffffu, count, off);
        const float mb = __shfl_xor_sync(0xffffffffu, mean, off);
        const float qb = __shfl_xor_sync(0xffffffffu, m2, off);
        welford_combine(count, mean, m2, cb, mb, qb);
    }
    if (lane == 0) {
        sh_count[warp] = count;
        sh_mean[warp] = mean;
        sh_m2[warp] = m2;
    }
    __syncthreads();
    if (tid == 0) {
        float c = 0.0f, mu = 0.0f, q = 0.0f;
        for (int k = 0; k < kWarps; ++k) {
            welford_combine(c, mu, q, sh_count[k], sh_mean[k], sh_m2[k]);
        }
        stats[0] = mu;
        stats[1] = rsqrtf(q / c + kEps);
    }
    __syncthreads();
    const float mu = stats[0];
    const float rstd = stats[1];

    const float4* w4 = reinterpret_cast<const float4*>(w);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* ys4 = reinterpret_cast<float4*>(y + base);
    for (int64_t i = tid; i < n4; i += kThreads) {
        const float4 v = xs4[i];
        const float4 wv = w4[i];
        const float4 bv = b4[i];
        ys4[i] = make_float4((v.x - mu) * rstd * wv.x + bv.x, (v.y - mu) * rstd * wv.y + bv.y,
                             (v.z - mu) * rstd * wv.z + bv.z, (v.w - mu) * rstd * wv.w + bv.w);
    }
}

extern "C" int layernorm_launch(const float* xp, const float* wp, const float* bp, float* yp, long long N,
                                long long M, cudaStream_t stream) {
    ln_welford_block_kernel<<<(unsigned int)N, kThreads, 0, stream>>>(xp, wp, bp, yp, M);
    return (int)cudaGetLastError();
}

// The message of a CUDA error code, for the exception the Python side raises.
extern "C" const char* layernorm_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_layernorm_onepass_2_fix_cuda",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_layernorm_onepass_2_fix_cuda" in p)
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
        if m % 4:
            raise ValueError("the float4 path needs the normalized size to be a multiple of 4")
        if x.numel() % m:
            raise ValueError("x is not a whole number of normalized samples")
        n = x.numel() // m  # samples (N in the kernels)
        x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
        y = torch.empty_like(x)
        if n == 0:
            return y
        err = _lib.layernorm_launch(x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(),
                                    n, m, torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"layernorm kernel launch failed: {_lib.layernorm_error_string(err).decode()}")
        return y
