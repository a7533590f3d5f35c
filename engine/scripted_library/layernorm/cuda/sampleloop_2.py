"""Weight and bias reused across samples: a stats kernel per sample, then one thread per position
that loops over the samples, storing at `y[n * M + i]` (warps stay coalesced).

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

constexpr int kThreads = 256;
constexpr double kEps = 1e-5;

__device__ double block_sum(double v, double* red) {
    const int tid = threadIdx.x;
    red[tid] = v;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
        if (tid < stride) red[tid] += red[tid + stride];
        __syncthreads();
    }
    const double total = red[0];
    __syncthreads();
    return total;
}

// One block per sample: mean first, then the mean of squared deviations.
__global__ void ln_stats_kernel(const float* __restrict__ x, float2* __restrict__ stats,
                                int64_t M) {
    __shared__ double red[kThreads];
    const float* xs = x + (int64_t)blockIdx.x * M;

    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < M; i += kThreads) acc += (double)xs[i];
    const double mean = block_sum(acc, red) / (double)M;

    acc = 0.0;
    for (int64_t i = threadIdx.x; i < M; i += kThreads) {
        const double d = (double)xs[i] - mean;
        acc += d * d;
    }
    const double var = block_sum(acc, red) / (double)M;

    if (threadIdx.x == 0) {
        stats[blockIdx.x] = make_float2((float)mean, (float)(1.0 / sqrt(var + kEps)));
    }
}

// One thread per position i; it loops over the samples n.
__global__ void ln_apply_kernel(const float* __restrict__ x, const float2* __restrict__ stats,
                                const float* __restrict__ w, const float* __restrict__ b,
                                float* __restrict__ y, int64_t N, int64_t M) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M) return;
    const float wi = w[i];
    const float bi = b[i];
    for (int64_t n = 0; n < N; ++n) {
        const float2 st = stats[n];
        y[n * M + i] = (x[n * M + i] - st.x) * st.y * wi + bi;
    }
}

// stats: N (mean, rstd) pairs of workspace.
extern "C" int layernorm_launch(const float* xp, const float* wp, const float* bp, float* yp, float* stats,
                                long long N, long long M, cudaStream_t stream) {
    float2* st = reinterpret_cast<float2*>(stats);
    ln_stats_kernel<<<(unsigned int)N, kThreads, 0, stream>>>(xp, st, M);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return (int)err;

    const int threads = 256;
    const int64_t blocks = (M + threads - 1) / threads;
    ln_apply_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(xp, st, wp, bp, yp, N, M);
    return (int)cudaGetLastError();
}

// The message of a CUDA error code, for the exception the Python side raises.
extern "C" const char* layernorm_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_layernorm_sampleloop_2_cuda",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3", "-lineinfo"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_layernorm_sampleloop_2_cuda" in p)
_lib = ctypes.CDLL(_path)
_lib.layernorm_launch.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_longlong] * 2 + [ctypes.c_void_p]
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
        if (m + 255) // 256 > 2**31 - 1:
            raise ValueError("tensor too large for a 1-D grid")
        x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
        y = torch.empty_like(x)
        if n == 0:
            return y
        stats = torch.empty(n, 2, device=x.device, dtype=torch.float32)  # (mean, rstd) per sample
        err = _lib.layernorm_launch(x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(),
                                    stats.data_ptr(), n, m, torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"layernorm kernel launch failed: {_lib.layernorm_error_string(err).decode()}")
        return y
