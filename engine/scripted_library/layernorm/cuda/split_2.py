"""Split each sample over many blocks: (sum, sum of squares) partials, no finalize kernel.

65536-element chunks are reduced by 512-thread blocks to (sum, sumsq) partials; in a second kernel
every block re-reduces its sample's partials and normalizes its own chunk. The variance is computed
as E[x^2] - mean instead of E[x^2] - mean^2, about 10% off here.

Built in ktree's fastest-compiling structure: no torch headers; an `extern "C"` launcher
called through ctypes with the tensors' pointers and torch's current stream.

Intended outcome: incorrect: variance computed as E[x^2] - mean (mean not squared).
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
constexpr int64_t kChunk = 65536;  // elements per block, a multiple of 4
constexpr float kEps = 1e-5f;

// Kernel 1: grid (chunks, N); block partial sums of x and x^2 (shared-memory tree).
__global__ void __launch_bounds__(kThreads)
ln_partial_sums_kernel(const float* __restrict__ x, float2* __restrict__ partials, int64_t M,
                       int chunks) {
    __shared__ float sh_sum[kThreads];
    __shared__ float sh_sq[kThreads];
    const int tid = threadIdx.x;
    const int64_t sample = blockIdx.y;
    const float4* xs4 = reinterpret_cast<const float4*>(x + sample * M);
    const int64_t begin4 = (int64_t)blockIdx.x * (kChunk / 4);
    const int64_t end4 = (begin4 + kChunk / 4 < M / 4) ? begin4 + kChunk / 4 : M / 4;

    float sum = 0.0f, sq = 0.0f;
    for (int64_t i = begin4 + tid; i < end4; i += kThreads) {
        const float4 v = xs4[i];
        sum += (v.x + v.y) + (v.z + v.w);
        sq += (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
    }
    sh_sum[tid] = sum;
    sh_sq[tid] = sq;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
        if (tid < stride) {
            sh_sum[tid] += sh_sum[tid + stride];
            sh_sq[tid] += sh_sq[tid + stride];
        }
        __syncthreads();
    }
    if (tid == 0) partials[sample * chunks + blockIdx.x] = make_float2(sh_sum[0], sh_sq[0]);
}

// Kernel 2: grid (chunks, N); each block reduces all partials of its sample, then
// normalizes its own chunk.
__global__ void __launch_bounds__(kThreads)
ln_normalize_chunk_kernel(const float* __restrict__ x, const float2* __restrict__ partials,
                          const float* __restrict__ w, const float* __restrict__ b,
                          float* __restrict__ y, int64_t M, int chunks) {
    __shared__ double sh_sum[kThreads];
    __shared__ double sh_sq[kThreads];
    const int tid = threadIdx.x;
    const int64_t sample = blockIdx.y;
    const float2* ps = partials + sample * chunks;

    double sum = 0.0, sq = 0.0;
    for (int p = tid; p < chunks; p += kThreads) {
        const float2 q = ps[p];
        sum += (double)q.x;
        sq += (double)q.y;
    }
    sh_sum[tid] = sum;
    sh_sq[tid] = sq;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
        if (tid < stride) {
            sh_sum[tid] += sh_sum[tid + stride];
            sh_sq[tid] += sh_sq[tid + stride];
        }
        __syncthreads();
    }
    const double mean_d = sh_sum[0] / (double)M;
    const double var_d = sh_sq[0] / (double)M - mean_d;
    const float mean = (float)mean_d;
    const float rstd = rsqrtf(fmaxf((float)var_d, 0.0f) + kEps);

    const float4* xs4 = reinterpret_cast<const float4*>(x + sample * M);
    float4* ys4 = reinterpret_cast<float4*>(y + sample * M);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    const int64_t begin4 = (int64_t)blockIdx.x * (kChunk / 4);
    const int64_t end4 = (begin4 + kChunk / 4 < M / 4) ? begin4 + kChunk / 4 : M / 4;
    for (int64_t i = begin4 + tid; i < end4; i += kThreads) {
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
}

// Workspace: partials holds N * chunks (sum, sum of squares) pairs, chunks = ceil(M / kChunk).
extern "C" int layernorm_launch(const float* xp, const float* wp, const float* bp, float* yp, float* partials,
                                long long N, long long M, cudaStream_t stream) {
    const int chunks = (int)((M + kChunk - 1) / kChunk);
    float2* pp = reinterpret_cast<float2*>(partials);
    const dim3 grid((unsigned int)chunks, (unsigned int)N);

    ln_partial_sums_kernel<<<grid, kThreads, 0, stream>>>(xp, pp, M, chunks);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return (int)err;

    ln_normalize_chunk_kernel<<<grid, kThreads, 0, stream>>>(xp, pp, wp, bp, yp, M, chunks);
    return (int)cudaGetLastError();
}

// The message of a CUDA error code, for the exception the Python side raises.
extern "C" const char* layernorm_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_layernorm_split_2_cuda",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_layernorm_split_2_cuda" in p)
_lib = ctypes.CDLL(_path)
_lib.layernorm_launch.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_longlong] * 2 + [ctypes.c_void_p]
_lib.layernorm_launch.restype = ctypes.c_int
_lib.layernorm_error_string.argtypes = [ctypes.c_int]
_lib.layernorm_error_string.restype = ctypes.c_char_p
CHUNK = 65536  # kChunk of the CUDA source: elements per block


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
        if n > 65535:
            raise ValueError("at most 65535 samples (grid y dimension)")
        chunks = (m + CHUNK - 1) // CHUNK
        x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
        y = torch.empty_like(x)
        if n == 0:
            return y
        partials = torch.empty(n, chunks, 2, device=x.device, dtype=torch.float32)
        err = _lib.layernorm_launch(x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(),
                                    partials.data_ptr(), n, m, torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"layernorm kernel launch failed: {_lib.layernorm_error_string(err).decode()}")
        return y
