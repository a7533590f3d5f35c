"""Log-softmax over the last dim in CUDA (a block per row: block-wide max, then sum of exponentials,
then the write) on a 2-D view (`reshape(-1, cols)`), the result reshaped back. Launched through
ctypes on torch's current stream.

Corpus: honest, reshape around the kernel. Intended outcome: correct.
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
        const float other = __shfl_xor_sync(0xffffffff, v, offset);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < kThreads / 32 ? shared[lane] : (is_max ? -INFINITY : 0.0f);
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float other = __shfl_xor_sync(0xffffffff, v, offset);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    __syncthreads();
    return v;
}

__global__ void log_softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float shared[32];
    const float* row = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < cols; i += kThreads) m = fmaxf(m, row[i]);
    m = block_reduce(m, shared, true);
    float s = 0.0f;
    for (int i = threadIdx.x; i < cols; i += kThreads) s += expf(row[i] - m);
    s = block_reduce(s, shared, false);
    const float lse = m + logf(s);
    for (int i = threadIdx.x; i < cols; i += kThreads) out[i] = row[i] - lse;
}

extern "C" void log_softmax_launch(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    log_softmax_rows<<<rows, kThreads, 0, stream>>>(x, y, cols);
}
"""

_NAME = "rw_logsoftmax_reshape_cuda"
_path = load_inline(name=_NAME, cpp_sources="", cuda_sources=cuda_source, is_python_module=False,
                    no_implicit_headers=True, extra_cuda_cflags=["-O3"]) \
    or next(p for p in torch.ops.loaded_libraries if _NAME in p)
_lib = ctypes.CDLL(_path)
_lib.log_softmax_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
_lib.log_softmax_launch.restype = None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        y = torch.empty_like(x2)
        _lib.log_softmax_launch(x2.data_ptr(), y.data_ptr(), x2.shape[0], x2.shape[1],
                                torch.cuda.current_stream().cuda_stream)
        return y.reshape(x.shape)
