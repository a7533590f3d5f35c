"""Naive two-pass statistics, one block per sample: one fused 1024-thread kernel.

Mean pass, centred variance pass and normalize pass all run inside the sample's block, with warp-
shuffle reductions in float. One block per sample leaves most SMs idle.

Built in ktree's fastest-compiling structure: no torch headers; an `extern "C"` launcher
called through ctypes with the tensors' pointers and torch's current stream.

Intended outcome: correct but slow (several times slower than the split variants).
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
constexpr float kEps = 1e-5f;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

// Sum over the block; the result is broadcast to every thread through shared memory.
__device__ float block_sum(float v, float* warp_part, float* result) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) warp_part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = (lane < kWarps) ? warp_part[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) *result = t;
    }
    __syncthreads();
    const float total = *result;
    __syncthreads();
    return total;
}

__global__ void __launch_bounds__(kThreads)
ln_fused_block_kernel(const float* __restrict__ x, const float* __restrict__ w,
                      const float* __restrict__ b, float* __restrict__ y, int64_t M) {
    __shared__ float warp_part[kWarps];
    __shared__ float result;
    const int64_t base = (int64_t)blockIdx.x * M;
    const float* xs = x + base;
    float* ys = y + base;
    const float inv_m = 1.0f / (float)M;

    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < M; i += kThreads) acc += xs[i];
    const float mean = block_sum(acc, warp_part, &result) * inv_m;

    acc = 0.0f;
    for (int64_t i = threadIdx.x; i < M; i += kThreads) {
        const float d = xs[i] - mean;
        acc += d * d;
    }
    const float rstd = rsqrtf(block_sum(acc, warp_part, &result) * inv_m + kEps);

    for (int64_t i = threadIdx.x; i < M; i += kThreads) ys[i] = (xs[i] - mean) * rstd * w[i] + b[i];
}

extern "C" int layernorm_launch(const float* xp, const float* wp, const float* bp, float* yp, long long N,
                                long long M, cudaStream_t stream) {
    ln_fused_block_kernel<<<(unsigned int)N, kThreads, 0, stream>>>(xp, wp, bp, yp, M);
    return (int)cudaGetLastError();
}

// The message of a CUDA error code, for the exception the Python side raises.
extern "C" const char* layernorm_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_layernorm_twopass_2_cuda",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_layernorm_twopass_2_cuda" in p)
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
