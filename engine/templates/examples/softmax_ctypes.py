"""Row softmax in ktree's fastest-compiling structure: no torch headers anywhere.

`cuda_sources` include CUDA headers only and export `extern "C"` launchers taking raw pointers and
a stream; there are no `cpp_sources` bindings (`is_python_module=False`), and Python calls the
launcher through ctypes with the tensors' data pointers and torch's current stream. The output is
allocated in Python (`torch.empty_like`: an allocation, not a compute op).

Intended outcome: correct (used by `ktree bench compile` and the compile-lever tests).
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <math.h>

constexpr int kThreads = 256;

__device__ float block_reduce(float v, float* shared, bool is_max) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        float other = __shfl_xor_sync(0xffffffff, v, offset);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < kThreads / 32 ? shared[lane] : (is_max ? -INFINITY : 0.0f);
    for (int offset = 16; offset > 0; offset >>= 1) {
        float other = __shfl_xor_sync(0xffffffff, v, offset);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    __syncthreads();
    return v;
}

__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float shared[32];
    const float* row = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < cols; i += kThreads) m = fmaxf(m, row[i]);
    m = block_reduce(m, shared, true);
    float s = 0.0f;
    for (int i = threadIdx.x; i < cols; i += kThreads) s += __expf(row[i] - m);
    s = block_reduce(s, shared, false);
    const float inv = 1.0f / s;
    for (int i = threadIdx.x; i < cols; i += kThreads) out[i] = __expf(row[i] - m) * inv;
}

extern "C" void softmax_launch(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    softmax_rows<<<rows, kThreads, 0, stream>>>(x, y, cols);
}
"""

_path = load_inline(  # builds and loads the plain shared library; returns its path
    name="ktree_softmax_ctypes",
    cpp_sources="",
    cuda_sources=cuda_source,
    is_python_module=False,
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
) or next(p for p in torch.ops.loaded_libraries if "ktree_softmax_ctypes" in p)
_lib = ctypes.CDLL(_path)
_lib.softmax_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
_lib.softmax_launch.restype = None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _lib.softmax_launch(x.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1],
                            torch.cuda.current_stream().cuda_stream)
        return y
