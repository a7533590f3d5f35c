"""LayerNorm over the last three dims, in ktree's fastest-compiling structure (no torch headers).

Three kernels: per-block partial sums (sum, sum of squares) over a slice of each sample, float4
loads; per-sample statistics reduced in double; then the affine normalisation, float4. Raw
pointers through `extern "C"` launchers called with ctypes; workspace allocated in Python.

Intended outcome: correct (an honest fast kernel for the GPU tests).
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kParts = 256;  // blocks per sample for the partial sums

__device__ float2 block_sum2(float2 v, float2* shared) {
    for (int o = 16; o > 0; o >>= 1) {
        v.x += __shfl_xor_sync(0xffffffff, v.x, o);
        v.y += __shfl_xor_sync(0xffffffff, v.y, o);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < kThreads / 32 ? shared[lane] : make_float2(0.f, 0.f);
    for (int o = 16; o > 0; o >>= 1) {
        v.x += __shfl_xor_sync(0xffffffff, v.x, o);
        v.y += __shfl_xor_sync(0xffffffff, v.y, o);
    }
    return v;
}

__global__ void partial_sums(const float4* __restrict__ x, float2* __restrict__ parts, long n4) {
    __shared__ float2 shared[32];
    const long per = (n4 + kParts - 1) / kParts;
    const long begin = blockIdx.x * per;
    const long end = min(begin + per, n4);
    const float4* row = x + (long)blockIdx.y * n4;
    float2 acc = make_float2(0.f, 0.f);
    for (long i = begin + threadIdx.x; i < end; i += kThreads) {
        const float4 v = row[i];
        acc.x += (v.x + v.y) + (v.z + v.w);
        acc.y += (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
    }
    acc = block_sum2(acc, shared);
    if (threadIdx.x == 0) parts[blockIdx.y * kParts + blockIdx.x] = acc;
}

__global__ void sample_stats(const float2* __restrict__ parts, float2* __restrict__ stats, long n, float eps) {
    if (threadIdx.x != 0) return;
    double s = 0.0, ss = 0.0;
    for (int i = 0; i < kParts; ++i) {
        s += parts[blockIdx.x * kParts + i].x;
        ss += parts[blockIdx.x * kParts + i].y;
    }
    const double mean = s / n;
    const double var = ss / n - mean * mean;
    stats[blockIdx.x] = make_float2((float)mean, (float)(1.0 / sqrt(var + eps)));
}

__global__ void normalize(const float4* __restrict__ x, const float4* __restrict__ w,
                          const float4* __restrict__ b, const float2* __restrict__ stats,
                          float4* __restrict__ y, long n4) {
    const long i = (long)blockIdx.x * kThreads + threadIdx.x;
    if (i >= n4) return;
    const float2 st = stats[blockIdx.y];
    const long at = (long)blockIdx.y * n4 + i;
    const float4 v = x[at], ww = w[i], bb = b[i];
    float4 r;
    r.x = (v.x - st.x) * st.y * ww.x + bb.x;
    r.y = (v.y - st.x) * st.y * ww.y + bb.y;
    r.z = (v.z - st.x) * st.y * ww.z + bb.z;
    r.w = (v.w - st.x) * st.y * ww.w + bb.w;
    y[at] = r;
}

extern "C" void layernorm_launch(const float* x, const float* w, const float* b, float* y, float* parts,
                                 float* stats, int batch, long n, float eps, cudaStream_t stream) {
    const long n4 = n / 4;
    partial_sums<<<dim3(kParts, batch), kThreads, 0, stream>>>((const float4*)x, (float2*)parts, n4);
    sample_stats<<<batch, 32, 0, stream>>>((const float2*)parts, (float2*)stats, n, eps);
    normalize<<<dim3((n4 + kThreads - 1) / kThreads, batch), kThreads, 0, stream>>>(
        (const float4*)x, (const float4*)w, (const float4*)b, (const float2*)stats, (float4*)y, n4);
}
"""

_path = load_inline(  # builds and loads the plain shared library; returns its path
    name="ktree_layernorm_ctypes",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_layernorm_ctypes" in p)
_lib = ctypes.CDLL(_path)
_lib.layernorm_launch.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int, ctypes.c_long, ctypes.c_float,
                                                           ctypes.c_void_p]
_lib.layernorm_launch.restype = None
PARTS = 256


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape, eps=1e-5)  # holds weight and bias

    def forward(self, x):
        x = x.contiguous()
        batch, n = x.shape[0], x[0].numel()
        assert n % 4 == 0 and self.ln.weight.numel() == n
        y = torch.empty_like(x)
        parts = torch.empty(batch, PARTS, 2, device=x.device, dtype=torch.float32)
        stats = torch.empty(batch, 2, device=x.device, dtype=torch.float32)
        _lib.layernorm_launch(x.data_ptr(), self.ln.weight.data_ptr(), self.ln.bias.data_ptr(), y.data_ptr(),
                              parts.data_ptr(), stats.data_ptr(), batch, n, self.ln.eps,
                              torch.cuda.current_stream().cuda_stream)
        return y
