"""Conv2d by torch (`F.conv2d`: cuDNN), then one CUDA kernel fusing the rest of the chain in place:
bias, scale and sigmoid. CUDA headers only in `cuda_sources`; the launcher is called through ctypes
on torch's current stream.

Corpus: honest, library op + fused epilogue. Intended outcome: correct, with Verdict.library
naming aten.convolution.
"""

import ctypes

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>

__global__ void bias_scale_sigmoid(float* __restrict__ y, const float* __restrict__ bias,
                                   const float* __restrict__ scale, long long n, int channels, long long plane) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int c = (int)((i / plane) % channels);
    const float v = (y[i] + bias[c]) * scale[c];
    y[i] = 1.0f / (1.0f + __expf(-v));
}

extern "C" void bias_scale_sigmoid_launch(float* y, const float* bias, const float* scale, long long n,
                                          int channels, long long plane, cudaStream_t stream) {
    const int threads = 256;
    const long long blocks = (n + threads - 1) / threads;
    bias_scale_sigmoid<<<(unsigned)blocks, threads, 0, stream>>>(y, bias, scale, n, channels, plane);
}
"""

_NAME = "rw_conv_lib_epilogue_cuda"
_path = load_inline(name=_NAME, cpp_sources="", cuda_sources=cuda_source, is_python_module=False,
                    no_implicit_headers=True, extra_cuda_cflags=["-O3"]) \
    or next(p for p in torch.ops.loaded_libraries if _NAME in p)
_lib = ctypes.CDLL(_path)
_lib.bias_scale_sigmoid_launch.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_longlong, ctypes.c_int,
                                                                   ctypes.c_longlong, ctypes.c_void_p]
_lib.bias_scale_sigmoid_launch.restype = None


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.zeros(out_channels, 1, 1))
        self.scale = nn.Parameter(torch.ones(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.conv2d(x, self.conv.weight, self.conv.bias).contiguous()
        bias, scale = self.bias.detach().contiguous(), self.scale.detach().contiguous()
        _lib.bias_scale_sigmoid_launch(y.data_ptr(), bias.data_ptr(), scale.data_ptr(), y.numel(), y.shape[1],
                                       y.shape[2] * y.shape[3], torch.cuda.current_stream().cuda_stream)
        return y
