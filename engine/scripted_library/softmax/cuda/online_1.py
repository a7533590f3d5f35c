"""Vectorized single-pass online softmax: 1024-thread block per row, float4, shuffle merges.

Pass 1 keeps a running (max, sum) per thread over float4 loads; the pairs are merged with rescaling
through warp shuffles and a 32-entry shared-memory step. Pass 2 re-reads the row (mostly from L2)
with evict-first loads and streaming stores. Two reads and one write per element instead of three
reads and one write.

Built in ktree's fastest-compiling structure: no torch headers; an `extern "C"` launcher
called through ctypes with the tensors' pointers and torch's current stream.

Intended outcome: correct and faster than PyTorch.
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

// (m, s) is a running maximum and the sum of exp(x - m) over the values seen so far.
// A reference of 0 is used while the maximum is still -inf so that no inf - inf appears.
__device__ __forceinline__ float safe_ref(float m) { return m == -INFINITY ? 0.0f : m; }

__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
    const float mn = fmaxf(m, m2);
    const float ref = safe_ref(mn);
    s = s * __expf(m - ref) + s2 * __expf(m2 - ref);
    m = mn;
}

__device__ __forceinline__ void online_add4(float& m, float& s, const float4 v) {
    const float mn = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    const float ref = safe_ref(mn);
    const float e01 = __expf(v.x - ref) + __expf(v.y - ref);
    const float e23 = __expf(v.z - ref) + __expf(v.w - ref);
    s = s * __expf(m - ref) + (e01 + e23);
    m = mn;
}

__device__ __forceinline__ void online_add1(float& m, float& s, const float v) {
    const float mn = fmaxf(m, v);
    const float ref = safe_ref(mn);
    s = s * __expf(m - ref) + __expf(v - ref);
    m = mn;
}

// One block per row. n4 = number of float4 handled by the vector path (0 when the row
// cannot be read as float4); elements from 4 * n4 up to dim take the scalar path.
__global__ void __launch_bounds__(kThreads, 1)
softmax_online_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t dim, int64_t n4) {
    __shared__ float sm_m[kWarps];
    __shared__ float sm_s[kWarps];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int64_t row = blockIdx.x;
    const float* xr = x + row * dim;
    float* yr = y + row * dim;
    const float4* xr4 = reinterpret_cast<const float4*>(xr);
    float4* yr4 = reinterpret_cast<float4*>(yr);

    // Pass 1: running (max, sum) per thread, one sweep over the row.
    float m = -INFINITY;
    float s = 0.0f;
#pragma unroll 4
    for (int64_t i = tid; i < n4; i += kThreads) online_add4(m, s, xr4[i]);
    for (int64_t j = 4 * n4 + tid; j < dim; j += kThreads) online_add1(m, s, xr[j]);

    // Merge inside each warp, then across the warps of the block.
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        online_merge(m, s, m2, s2);
    }
    if (lane == 0) {
        sm_m[warp] = m;
        sm_s[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
        m = (lane < kWarps) ? sm_m[lane] : -INFINITY;
        s = (lane < kWarps) ? sm_s[lane] : 0.0f;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
            const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
            online_merge(m, s, m2, s2);
        }
        if (lane == 0) {
            sm_m[0] = m;
            sm_s[0] = s;
        }
    }
    __syncthreads();
    const float ref = safe_ref(sm_m[0]);
    const float inv_sum = 1.0f / sm_s[0];

    // Pass 2: the input is read for the last time and the output is never re-read here,
    // so both use evict-first (streaming) accesses.
#pragma unroll 4
    for (int64_t i = tid; i < n4; i += kThreads) {
        const float4 v = __ldcs(xr4 + i);
        float4 o;
        o.x = __expf(v.x - ref) * inv_sum;
        o.y = __expf(v.y - ref) * inv_sum;
        o.z = __expf(v.z - ref) * inv_sum;
        o.w = __expf(v.w - ref) * inv_sum;
        __stcs(yr4 + i, o);
    }
    for (int64_t j = 4 * n4 + tid; j < dim; j += kThreads) yr[j] = __expf(xr[j] - ref) * inv_sum;
}

extern "C" int softmax_launch(const float* xp, float* yp, long long rows, long long dim, cudaStream_t stream) {
    const bool aligned = (reinterpret_cast<uintptr_t>(xp) % 16 == 0) &&
                         (reinterpret_cast<uintptr_t>(yp) % 16 == 0);
    const int64_t n4 = (aligned && dim % 4 == 0) ? dim / 4 : 0;
    softmax_online_kernel<<<(unsigned int)rows, kThreads, 0, stream>>>(xp, yp, dim, n4);
    const cudaError_t err = cudaGetLastError();
    return (int)err;
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_softmax_online_1_cuda",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_softmax_online_1_cuda" in p)
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
