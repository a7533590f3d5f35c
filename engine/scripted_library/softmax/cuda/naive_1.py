"""One thread per row, three plain passes: one CUDA thread walks each whole row.

Each thread scans its row for the maximum, then for the sum of exp(x - max), then writes exp(x -
max) / sum. Only 4096 threads exist and neighbouring threads read addresses a row apart, so the
loads are uncoalesced.

Built in ktree's fastest-compiling structure: no torch headers; an `extern "C"` launcher
called through ctypes with the tensors' pointers and torch's current stream.

Intended outcome: correct but much slower than PyTorch.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>

// One thread owns one whole row and walks it three times.
__global__ void softmax_thread_per_row_kernel(const float* __restrict__ x,
                                              float* __restrict__ y,
                                              int64_t rows,
                                              int64_t dim) {
    const int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* xr = x + row * dim;
    float* yr = y + row * dim;

    float row_max = -INFINITY;
    for (int64_t j = 0; j < dim; ++j) {
        row_max = fmaxf(row_max, xr[j]);
    }

    float row_sum = 0.0f;
    for (int64_t j = 0; j < dim; ++j) {
        row_sum += expf(xr[j] - row_max);
    }

    const float inv_sum = 1.0f / row_sum;
    for (int64_t j = 0; j < dim; ++j) {
        yr[j] = expf(xr[j] - row_max) * inv_sum;
    }
}

extern "C" int softmax_launch(const float* xp, float* yp, long long rows, long long dim, cudaStream_t stream) {
    const int threads = 128;
    const long long blocks = (rows + threads - 1) / threads;
    softmax_thread_per_row_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(xp, yp, rows, dim);
    const cudaError_t err = cudaGetLastError();
    return (int)err;
}
"""

_path = load_inline(  # a plain shared library: no torch headers, no bindings; returns its path
    name="ktree_softmax_naive_1_cuda",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_softmax_naive_1_cuda" in p)
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
