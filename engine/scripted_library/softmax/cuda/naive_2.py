"""One thread per row, three plain passes: row statistics kernel + elementwise kernel.

A first kernel gives each row to one thread, which computes the maximum and 1 / sum(exp); a second,
one-thread-per-element kernel (grid-stride) writes the outputs. The write pass is coalesced, but the
statistics kernel is still a serial walk per row.

Built in ktree's fastest-compiling structure: no torch headers; an `extern "C"` launcher
called through ctypes with the tensors' pointers and torch's current stream.

Intended outcome: correct but slower than PyTorch.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>

// Kernel 1: one thread per row computes the row maximum and 1 / sum(exp(x - max)).
__global__ void row_stats_kernel(const float* __restrict__ x,
                                 float2* __restrict__ stats,
                                 int64_t rows,
                                 int64_t dim) {
    for (int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; row < rows;
         row += (int64_t)gridDim.x * blockDim.x) {
        const float* xr = x + row * dim;
        float m = -INFINITY;
        for (int64_t j = 0; j < dim; ++j) m = fmaxf(m, xr[j]);
        float s = 0.0f;
        for (int64_t j = 0; j < dim; ++j) s += expf(xr[j] - m);
        stats[row] = make_float2(m, 1.0f / s);
    }
}

// Kernel 2: one thread per element (grid-stride), reads the statistics of its row.
__global__ void apply_softmax_kernel(const float* __restrict__ x,
                                     const float2* __restrict__ stats,
                                     float* __restrict__ y,
                                     int64_t total,
                                     int64_t dim) {
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const float2 st = stats[idx / dim];
        y[idx] = expf(x[idx] - st.x) * st.y;
    }
}

extern "C" int softmax_launch(const float* xp, float* yp, long long rows, long long dim, float* stats,
                              cudaStream_t stream) {
    const int stat_threads = 64;
    long long stat_blocks = (rows + stat_threads - 1) / stat_threads;
    if (stat_blocks > 65535) stat_blocks = 65535;
    row_stats_kernel<<<(unsigned int)stat_blocks, stat_threads, 0, stream>>>(
        xp, reinterpret_cast<float2*>(stats), rows, dim);
    cudaError_t first = cudaGetLastError();
    if (first != cudaSuccess) return (int)first;

    const long long total = rows * dim;
    const int threads = 256;
    long long blocks = (total + threads - 1) / threads;
    if (blocks > 65535 * 8) blocks = 65535 * 8;
    apply_softmax_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(
        xp, reinterpret_cast<const float2*>(stats), yp, total, dim);
    const cudaError_t err = cudaGetLastError();
    return (int)err;
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_softmax_naive_2_cuda",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_softmax_naive_2_cuda" in p)
_lib = ctypes.CDLL(_path)
_lib.softmax_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_longlong,
                                ctypes.c_void_p, ctypes.c_void_p]
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
        stats = torch.empty(x.shape[0], 2, device=x.device, dtype=torch.float32)
        err = _lib.softmax_launch(x.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1], stats.data_ptr(),
                                  torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"softmax kernel launch failed (CUDA error {err})")
        return y
