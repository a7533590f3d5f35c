"""MSE loss in one pass: a grid-stride loop of float4 loads, per-thread fp64 partial sums, a
warp-shuffle and shared-memory block reduction, and one fp64 atomicAdd per block into a
zeroed accumulator; a second one-thread kernel divides by the count and writes the fp32 scalar.

Built in ktree's fastest-compiling structure: no torch headers; `extern "C"` launchers called
through ctypes with the tensors' pointers and torch's current stream.

Intended outcome: correct.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void mse_partial_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                   long long n, double* __restrict__ acc) {
    double sum = 0.0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long n4 = n / 4;
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    for (long long i = start; i < n4; i += stride) {
        const float4 x = a4[i];
        const float4 y = b4[i];
        const float d0 = x.x - y.x, d1 = x.y - y.y, d2 = x.z - y.z, d3 = x.w - y.w;
        sum += (double)(d0 * d0 + d1 * d1) + (double)(d2 * d2 + d3 * d3);
    }
    for (long long i = n4 * 4 + start; i < n; i += stride) {
        const float d = a[i] - b[i];
        sum += (double)(d * d);
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        sum += __shfl_down_sync(0xffffffffu, sum, offset);
    }
    __shared__ double warp_sums[32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        const int warps = (blockDim.x + 31) >> 5;
        double v = lane < warps ? warp_sums[lane] : 0.0;
        for (int offset = 16; offset > 0; offset >>= 1) {
            v += __shfl_down_sync(0xffffffffu, v, offset);
        }
        if (lane == 0) atomicAdd(acc, v);
    }
}

__global__ void mse_finish_kernel(const double* __restrict__ acc, long long n, float* __restrict__ out) {
    out[0] = (float)(acc[0] / (double)n);
}

extern "C" int mse_launch(const float* a, const float* b, long long n, double* acc, float* out,
                          int sms, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(acc, 0, sizeof(double), stream);
    if (err != cudaSuccess) return (int)err;
    const int threads = 512;
    long long blocks = (long long)sms * 8;
    const long long needed = (n / 4 + threads - 1) / threads;
    if (blocks > needed) blocks = needed > 0 ? needed : 1;
    mse_partial_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(a, b, n, acc);
    err = cudaGetLastError();
    if (err != cudaSuccess) return (int)err;
    mse_finish_kernel<<<1, 1, 0, stream>>>(acc, n, out);
    return (int)cudaGetLastError();
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_mse_loss_large_cuda",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_mse_loss_large_cuda" in p)
_lib = ctypes.CDLL(_path)
_lib.mse_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p,
                            ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
_lib.mse_launch.restype = ctypes.c_int


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if not (predictions.is_cuda and predictions.dtype == torch.float32 and targets.dtype == torch.float32
                and predictions.shape == targets.shape):
            raise ValueError("two float32 CUDA tensors of one shape")
        a = predictions.contiguous()
        b = targets.contiguous()
        acc = torch.empty(1, dtype=torch.float64, device=a.device)
        out = torch.empty((), dtype=torch.float32, device=a.device)
        sms = torch.cuda.get_device_properties(a.device).multi_processor_count
        err = _lib.mse_launch(a.data_ptr(), b.data_ptr(), a.numel(), acc.data_ptr(), out.data_ptr(), sms,
                              torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"mse kernel launch failed (CUDA error {err})")
        return out
