"""Split each sample over many blocks: Welford partials, finalize kernel, float4 apply kernel.

32768-element chunks are each reduced by a 256-thread block to a Welford partial (float4 loads); one
block per sample merges the partials in double; the apply kernel loads weight and bias once per
position and loops over the samples with streaming loads and stores.

Built in ktree's fastest-compiling structure: no torch headers; an `extern "C"` launcher
called through ctypes with the tensors' pointers and torch's current stream.

Intended outcome: correct and much faster than PyTorch.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>

constexpr int kStatThreads = 256;
constexpr int kStatWarps = kStatThreads / 32;
constexpr int64_t kChunk = 32768;  // elements of one sample per statistics block (multiple of 4)
constexpr int kFinThreads = 256;
constexpr int kApplyThreads = 256;
constexpr double kEps = 1e-5;

// Chan et al. merge of two (count, mean, M2) triples: works for float and double.
template <typename T>
__device__ __forceinline__ void welford_merge(T& n, T& mean, T& m2, T nb, T mean_b, T m2_b) {
    const T nn = n + nb;
    if (nn == T(0)) return;
    const T delta = mean_b - mean;
    const T frac_b = nb / nn;
    mean += delta * frac_b;
    m2 += m2_b + delta * delta * n * frac_b;
    n = nn;
}

// Kernel 1: grid (chunks, N). Each block reduces one chunk of one sample to (count, mean, M2).
template <bool kVec>
__global__ void __launch_bounds__(kStatThreads)
ln_partial_kernel(const float* __restrict__ x, float4* __restrict__ partials, int64_t M,
                  int chunks) {
    __shared__ float sh_n[kStatWarps];
    __shared__ float sh_mean[kStatWarps];
    __shared__ float sh_m2[kStatWarps];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int64_t sample = blockIdx.y;
    const float* xs = x + sample * M;
    const int64_t begin = (int64_t)blockIdx.x * kChunk;
    const int64_t end = (begin + kChunk < M) ? begin + kChunk : M;

    float n = 0.0f, mean = 0.0f, m2 = 0.0f;
    if (kVec) {
        const float4* xs4 = reinterpret_cast<const float4*>(xs);
#pragma unroll 4
        for (int64_t i = begin / 4 + tid; i < end / 4; i += kStatThreads) {
            const float4 v = xs4[i];
            const float vm = 0.25f * ((v.x + v.y) + (v.z + v.w));
            const float dx = v.x - vm, dy = v.y - vm, dz = v.z - vm, dw = v.w - vm;
            welford_merge(n, mean, m2, 4.0f, vm, (dx * dx + dy * dy) + (dz * dz + dw * dw));
        }
    } else {
        for (int64_t i = begin + tid; i < end; i += kStatThreads) {
            const float v = xs[i];
            n += 1.0f;
            const float d = v - mean;
            mean += d / n;
            m2 += d * (v - mean);
        }
    }

#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float nb = __shfl_xor_sync(0xffffffffu, n, off);
        const float mb = __shfl_xor_sync(0xffffffffu, mean, off);
        const float qb = __shfl_xor_sync(0xffffffffu, m2, off);
        welford_merge(n, mean, m2, nb, mb, qb);
    }
    if (lane == 0) {
        sh_n[warp] = n;
        sh_mean[warp] = mean;
        sh_m2[warp] = m2;
    }
    __syncthreads();
    if (tid == 0) {
        float bn = 0.0f, bmean = 0.0f, bm2 = 0.0f;
#pragma unroll
        for (int k = 0; k < kStatWarps; ++k) {
            welford_merge(bn, bmean, bm2, sh_n[k], sh_mean[k], sh_m2[k]);
        }
        partials[sample * chunks + blockIdx.x] = make_float4(bn, bmean, bm2, 0.0f);
    }
}

// Kernel 2: one block per sample merges that sample's partials in double.
__global__ void __launch_bounds__(kFinThreads)
ln_finalize_kernel(const float4* __restrict__ partials, float2* __restrict__ stats, int chunks) {
    __shared__ double sh_n[kFinThreads];
    __shared__ double sh_mean[kFinThreads];
    __shared__ double sh_m2[kFinThreads];
    const int tid = threadIdx.x;
    const float4* ps = partials + (int64_t)blockIdx.x * chunks;

    double n = 0.0, mean = 0.0, m2 = 0.0;
    for (int p = tid; p < chunks; p += kFinThreads) {
        const float4 q = ps[p];
        welford_merge(n, mean, m2, (double)q.x, (double)q.y, (double)q.z);
    }
    sh_n[tid] = n;
    sh_mean[tid] = mean;
    sh_m2[tid] = m2;
    __syncthreads();
    for (int stride = kFinThreads / 2; stride > 0; stride >>= 1) {
        if (tid < stride) {
            double an = sh_n[tid], amean = sh_mean[tid], am2 = sh_m2[tid];
            welford_merge(an, amean, am2,
                          sh_n[tid + stride], sh_mean[tid + stride], sh_m2[tid + stride]);
            sh_n[tid] = an;
            sh_mean[tid] = amean;
            sh_m2[tid] = am2;
        }
        __syncthreads();
    }
    if (tid == 0) {
        const double var = sh_m2[0] / sh_n[0];
        stats[blockIdx.x] = make_float2((float)sh_mean[0], (float)(1.0 / sqrt(var + kEps)));
    }
}

// Kernel 3: each thread owns one position of the normalized shape (4 floats on the vector
// path), loads weight and bias once and applies them to that position of every sample.
template <bool kVec>
__global__ void __launch_bounds__(kApplyThreads)
ln_apply_kernel(const float* __restrict__ x, const float2* __restrict__ stats,
                const float* __restrict__ w, const float* __restrict__ b,
                float* __restrict__ y, int64_t M, int N) {
    const int64_t stride = (int64_t)gridDim.x * kApplyThreads;
    if (kVec) {
        const int64_t M4 = M / 4;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const float4* w4 = reinterpret_cast<const float4*>(w);
        const float4* b4 = reinterpret_cast<const float4*>(b);
        float4* y4 = reinterpret_cast<float4*>(y);
        for (int64_t i = (int64_t)blockIdx.x * kApplyThreads + threadIdx.x; i < M4; i += stride) {
            const float4 wv = __ldg(w4 + i);
            const float4 bv = __ldg(b4 + i);
#pragma unroll 4
            for (int s = 0; s < N; ++s) {
                const float2 st = __ldg(stats + s);
                const int64_t k = (int64_t)s * M4 + i;
                const float4 v = __ldcs(x4 + k);
                float4 o;
                o.x = (v.x - st.x) * st.y * wv.x + bv.x;
                o.y = (v.y - st.x) * st.y * wv.y + bv.y;
                o.z = (v.z - st.x) * st.y * wv.z + bv.z;
                o.w = (v.w - st.x) * st.y * wv.w + bv.w;
                __stcs(y4 + k, o);
            }
        }
    } else {
        for (int64_t i = (int64_t)blockIdx.x * kApplyThreads + threadIdx.x; i < M; i += stride) {
            const float wv = w[i];
            const float bv = b[i];
            for (int s = 0; s < N; ++s) {
                const float2 st = stats[s];
                const int64_t k = (int64_t)s * M + i;
                y[k] = (x[k] - st.x) * st.y * wv + bv;
            }
        }
    }
}

// Workspace: partials holds N * chunks (count, mean, M2, unused) quadruples, stats N (mean, rstd) pairs,
// chunks = ceil(M / kChunk).
extern "C" int layernorm_launch(const float* xp, const float* wp, const float* bp, float* yp, float* partials,
                                float* stats, long long N, long long M, cudaStream_t stream) {
    const int chunks = (int)((M + kChunk - 1) / kChunk);
    float4* pp = reinterpret_cast<float4*>(partials);
    float2* sp = reinterpret_cast<float2*>(stats);
    const uintptr_t addr_bits = reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(wp) |
                                reinterpret_cast<uintptr_t>(bp) | reinterpret_cast<uintptr_t>(yp);
    const bool vec = (M % 4 == 0) && (addr_bits % 16 == 0);

    const dim3 stat_grid((unsigned int)chunks, (unsigned int)N);
    if (vec) {
        ln_partial_kernel<true><<<stat_grid, kStatThreads, 0, stream>>>(xp, pp, M, chunks);
    } else {
        ln_partial_kernel<false><<<stat_grid, kStatThreads, 0, stream>>>(xp, pp, M, chunks);
    }
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return (int)err;

    ln_finalize_kernel<<<(unsigned int)N, kFinThreads, 0, stream>>>(pp, sp, chunks);
    err = cudaGetLastError();
    if (err != cudaSuccess) return (int)err;

    const int64_t positions = vec ? M / 4 : M;
    int64_t blocks = (positions + kApplyThreads - 1) / kApplyThreads;
    if (blocks > 65535) blocks = 65535;
    if (vec) {
        ln_apply_kernel<true><<<(unsigned int)blocks, kApplyThreads, 0, stream>>>(
            xp, sp, wp, bp, yp, M, (int)N);
    } else {
        ln_apply_kernel<false><<<(unsigned int)blocks, kApplyThreads, 0, stream>>>(
            xp, sp, wp, bp, yp, M, (int)N);
    }
    return (int)cudaGetLastError();
}

// The message of a CUDA error code, for the exception the Python side raises.
extern "C" const char* layernorm_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_layernorm_split_1_cuda",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_layernorm_split_1_cuda" in p)
_lib = ctypes.CDLL(_path)
_lib.layernorm_launch.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_longlong] * 2 + [ctypes.c_void_p]
_lib.layernorm_launch.restype = ctypes.c_int
_lib.layernorm_error_string.argtypes = [ctypes.c_int]
_lib.layernorm_error_string.restype = ctypes.c_char_p
CHUNK = 32768  # kChunk of the CUDA source: elements of one sample per statistics block


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
        if n > 65535:
            raise ValueError("at most 65535 samples (grid y dimension)")
        chunks = (m + CHUNK - 1) // CHUNK
        if chunks > 2**31 - 1:
            raise ValueError("normalized shape too large")
        x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
        y = torch.empty_like(x)
        if n == 0:
            return y
        partials = torch.empty(n, chunks, 4, device=x.device, dtype=torch.float32)
        stats = torch.empty(n, 2, device=x.device, dtype=torch.float32)  # (mean, rstd) per sample
        err = _lib.layernorm_launch(x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(),
                                    partials.data_ptr(), stats.data_ptr(),
                                    n, m, torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"layernorm kernel launch failed: {_lib.layernorm_error_string(err).decode()}")
        return y
