"""The whole level-2 chain in one CUDA kernel: a direct 3x3 convolution (no padding, stride 1), one
thread per output element, then its bias, the extra bias, the scale and the sigmoid; each output is
written once. Launched through ctypes on torch's current stream.

Corpus: honest, level-2 fusion. Intended outcome: correct.
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>

__global__ void conv_chain(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ cb,
                           const float* __restrict__ bias, const float* __restrict__ scale, float* __restrict__ y,
                           int n, int ci, int h, int wd, int co, int k) {
    const int ho = h - k + 1, wo = wd - k + 1;
    const long long total = (long long)n * co * ho * wo;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int ox = (int)(i % wo);
    const int oy = (int)((i / wo) % ho);
    const int o = (int)((i / ((long long)wo * ho)) % co);
    const int b = (int)(i / ((long long)wo * ho * co));
    float acc = cb[o];
    for (int c = 0; c < ci; ++c) {
        const float* in = x + ((long long)b * ci + c) * h * wd;
        const float* f = w + ((long long)o * ci + c) * k * k;
        for (int ky = 0; ky < k; ++ky)
            for (int kx = 0; kx < k; ++kx) acc += f[ky * k + kx] * in[(oy + ky) * wd + ox + kx];
    }
    const float v = (acc + bias[o]) * scale[o];
    y[i] = 1.0f / (1.0f + __expf(-v));
}

extern "C" void conv_chain_launch(const float* x, const float* w, const float* cb, const float* bias,
                                  const float* scale, float* y, int n, int ci, int h, int wd, int co, int k,
                                  cudaStream_t stream) {
    const long long total = (long long)n * co * (h - k + 1) * (wd - k + 1);
    const int threads = 256;
    conv_chain<<<(unsigned)((total + threads - 1) / threads), threads, 0, stream>>>(x, w, cb, bias, scale, y, n, ci,
                                                                                   h, wd, co, k);
}
"""

_NAME = "rw_conv_chain_fused_cuda"
_path = load_inline(name=_NAME, cpp_sources="", cuda_sources=cuda_source, is_python_module=False,
                    no_implicit_headers=True, extra_cuda_cflags=["-O3"]) \
    or next(p for p in torch.ops.loaded_libraries if _NAME in p)
_lib = ctypes.CDLL(_path)
_lib.conv_chain_launch.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int] * 6 + [ctypes.c_void_p]
_lib.conv_chain_launch.restype = None


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.zeros(out_channels, 1, 1))
        self.scale = nn.Parameter(torch.ones(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w, cb = self.conv.weight.detach().contiguous(), self.conv.bias.detach().contiguous()
        bias, scale = self.bias.detach().contiguous(), self.scale.detach().contiguous()
        n, ci, h, wd = x.shape
        co, k = w.shape[0], w.shape[2]
        y = torch.empty(n, co, h - k + 1, wd - k + 1, device=x.device, dtype=x.dtype)
        _lib.conv_chain_launch(x.data_ptr(), w.data_ptr(), cb.data_ptr(), bias.data_ptr(), scale.data_ptr(),
                               y.data_ptr(), n, ci, h, wd, co, k, torch.cuda.current_stream().cuda_stream)
        return y
