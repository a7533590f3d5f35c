"""Row-wise softmax in the stock KernelBench structure: one block per row, a max pass, a sum pass
and a write pass, block reductions in shared memory.

The structure every published KernelBench solution uses: `torch/extension.h` in the CUDA
source, a host function taking and returning torch::Tensor in it, its declaration in
`cpp_sources`, bindings made by `load_inline`. Kept as the stock CUDA source of `ktree bench
compile` and of the GPU check's cold `ktree eval` (what a KernelBench-format build costs).

Intended outcome: correct.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cfloat>

constexpr int kThreads = 256;

__device__ float block_reduce(float v, float* red, bool is_max) {
    const int tid = threadIdx.x;
    red[tid] = v;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
        if (tid < stride) red[tid] = is_max ? fmaxf(red[tid], red[tid + stride]) : red[tid] + red[tid + stride];
        __syncthreads();
    }
    const float total = red[0];
    __syncthreads();
    return total;
}

__global__ void softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float red[kThreads];
    const float* row = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    float m = -FLT_MAX;
    for (int j = threadIdx.x; j < cols; j += kThreads) m = fmaxf(m, row[j]);
    m = block_reduce(m, red, true);
    float s = 0.f;
    for (int j = threadIdx.x; j < cols; j += kThreads) s += __expf(row[j] - m);
    s = block_reduce(s, red, false);
    const float inv = 1.f / s;
    for (int j = threadIdx.x; j < cols; j += kThreads) out[j] = __expf(row[j] - m) * inv;
}

torch::Tensor softmax_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x: 2-D fp32 on cuda");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int rows = xc.size(0), cols = xc.size(1);
    softmax_rows_kernel<<<rows, kThreads>>>(xc.data_ptr<float>(), y.data_ptr<float>(), cols);
    return y;
}
"""

cpp_source = "torch::Tensor softmax_cuda(torch::Tensor x);"

softmax_ext = load_inline(
    name="softmax_stock",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["softmax_cuda"],
    verbose=False,
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_ext.softmax_cuda(x)
