"""Row softmax in the fast-compiling structure ktree's prompts ask for.

`cuda_sources` include CUDA headers only and export a launcher taking raw pointers and a stream;
the torch-facing wrapper lives in `cpp_sources`, which start with `#include <torch/extension.h>`
(served from ktree's precompiled header), and `no_implicit_headers=True` keeps load_inline from
adding torch headers to the CUDA file. On the H100 box: cuda.cu 1.2 s, main.cpp 9 s.

Intended outcome: correct (used by `ktree bench compile` and the compile-lever tests).
"""

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

void softmax_launch(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    softmax_rows<<<rows, kThreads, 0, stream>>>(x, y, cols);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void softmax_launch(const float* x, float* y, int rows, int cols, cudaStream_t stream);

torch::Tensor softmax(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.scalar_type() == torch::kFloat32, "expects 2-D float32 CUDA");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    softmax_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1),
                   c10::cuda::getCurrentCUDAStream().stream());
    return y;
}
"""

ext = load_inline(
    name="ktree_softmax_fast",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["softmax"],
    no_implicit_headers=True,
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.softmax(x)
