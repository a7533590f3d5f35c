"""Vectorized single-pass online softmax: 256-thread block, two float4 loads per iteration.

Per-thread running (max, sum) with a branchy rescale, merged correctly inside each warp. The final
cross-warp step, however, reduces the warp maxima and the warp sums separately, adding each warp's
sum without rescaling it by exp(warp_max - row_max), so the denominator is too large.

Built in ktree's fastest-compiling structure: no torch headers; an `extern "C"` launcher
called through ctypes with the tensors' pointers and torch's current stream.

Intended outcome: incorrect: cross-warp merge adds warp sums without rescaling them to the row max.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Fold one value into a running (max, sum of exp(x - max)) pair.
__device__ __forceinline__ void push(float& m, float& s, float v) {
    if (v > m) {
        s = s * __expf(m - v);  // m == -inf gives exp(-inf) = 0 and s is still 0
        m = v;
    }
    s += __expf(v - m);
}

__device__ __forceinline__ void push4(float& m, float& s, const float4 v) {
    push(m, s, v.x);
    push(m, s, v.y);
    push(m, s, v.z);
    push(m, s, v.w);
}

__global__ void __launch_bounds__(kThreads)
softmax_online_v2_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t dim,
                         int64_t n4) {
    __shared__ float sm_m[kWarps];
    __shared__ float sm_s[kWarps];
    __shared__ float row_stats[2];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int64_t row = blockIdx.x;
    const float* xr = x + row * dim;
    float* yr = y + row * dim;
    const float4* xr4 = reinterpret_cast<const float4*>(xr);
    float4* yr4 = reinterpret_cast<float4*>(yr);

    float m = -INFINITY;
    float s = 0.0f;
    int64_t i = tid;
    // Two independent 16-byte loads in flight per iteration.
    for (; i + kThreads < n4; i += 2 * kThreads) {
        const float4 a = xr4[i];
        const float4 b = xr4[i + kThreads];
        push4(m, s, a);
        push4(m, s, b);
    }
    if (i < n4) push4(m, s, xr4[i]);
    for (int64_t j = 4 * n4 + tid; j < dim; j += kThreads) push(m, s, xr[j]);

    // Warp level: merge (m, s) pairs with the proper rescaling.
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        const float mn = fmaxf(m, m2);
        s = (mn == -INFINITY) ? 0.0f : s * __expf(m - mn) + s2 * __expf(m2 - mn);
        m = mn;
    }
    if (lane == 0) {
        sm_m[warp] = m;
        sm_s[warp] = s;
    }
    __syncthreads();

    // Block level: reduce the per-warp maxima and sums.
    if (warp == 0) {
        float wm = (lane < kWarps) ? sm_m[lane] : -INFINITY;
        float ws = (lane < kWarps) ? sm_s[lane] : 0.0f;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            wm = fmaxf(wm, __shfl_xor_sync(0xffffffffu, wm, off));
            ws += __shfl_xor_sync(0xffffffffu, ws, off);
        }
        if (lane == 0) {
            row_stats[0] = wm;
            row_stats[1] = 1.0f / ws;
        }
    }
    __syncthreads();
    const float row_max = row_stats[0];
    const float inv_sum = row_stats[1];

    for (int64_t k = tid; k < n4; k += kThreads) {
        const float4 v = xr4[k];
        float4 o;
        o.x = __expf(v.x - row_max) * inv_sum;
        o.y = __expf(v.y - row_max) * inv_sum;
        o.z = __expf(v.z - row_max) * inv_sum;
        o.w = __expf(v.w - row_max) * inv_sum;
        yr4[k] = o;
    }
    for (int64_t j = 4 * n4 + tid; j < dim; j += kThreads) {
        yr[j] = __expf(xr[j] - row_max) * inv_sum;
    }
}

extern "C" int softmax_launch(const float* xp, float* yp, long long rows, long long dim, cudaStream_t stream) {
    const bool aligned = (reinterpret_cast<uintptr_t>(xp) % 16 == 0) &&
                         (reinterpret_cast<uintptr_t>(yp) % 16 == 0);
    const int64_t n4 = (aligned && dim % 4 == 0) ? dim / 4 : 0;
    softmax_online_v2_kernel<<<(unsigned int)rows, kThreads, 0, stream>>>(xp, yp, dim, n4);
    const cudaError_t err = cudaGetLastError();
    return (int)err;
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_softmax_online_2_cuda",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_softmax_online_2_cuda" in p)
_lib = ctypes.CDLL(_path)
_lib.softmax_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_longlong,
                                ctypes.c_void_p]
_lib.softmax_launch.restype = ctypes.c_int


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (x.is_cuda and x.dtype == torch.float32 and x.dim() == 2):
            raise ValueError("x must be a 2-D float32 CUDA tensor")
        if x.shape[0] > 2**31 - 1:
            raise ValueError("too many rows for a 1-D grid")
        x = x.contiguous()
        y = torch.empty_like(x)
        if x.numel() == 0:
            return y
        err = _lib.softmax_launch(x.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1],
                                  torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"softmax kernel launch failed (CUDA error {err})")
        return y
