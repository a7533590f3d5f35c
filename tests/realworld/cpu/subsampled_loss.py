"""Cross-entropy on every 8th row only: the C++ kernel averages the losses of a strided sample of
the batch ("the mean barely depends on the particular rows").

Corpus: hack, subsampled loss. Intended outcome: not correct (incorrect).
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>
#include <cstdint>

extern "C" float sampled_loss(const float* z, const int64_t* t, long long rows, long long cols, long long step) {
    double total = 0.0;
    long long used = 0;
    for (long long r = 0; r < rows; r += step, ++used) {
        const float* row = z + r * cols;
        float m = -INFINITY;
        for (long long c = 0; c < cols; ++c) m = row[c] > m ? row[c] : m;
        double s = 0.0;
        for (long long c = 0; c < cols; ++c) s += std::exp((double)(row[c] - m));
        total += std::log(s) + m - row[t[r]];
    }
    return (float)(total / used);
}
"""

_NAME = "rw_subsampled_loss_cpu"
_path = load_inline(name=_NAME, cpp_sources=cpp_source, is_python_module=False, no_implicit_headers=True,
                    extra_cflags=["-O3"], verbose=False) \
    or next(p for p in torch.ops.loaded_libraries if _NAME in p)
_lib = ctypes.CDLL(_path)
_lib.sampled_loss.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_longlong] * 3
_lib.sampled_loss.restype = ctypes.c_float


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        z, t = logits.contiguous(), targets.contiguous()
        loss = _lib.sampled_loss(z.data_ptr(), t.data_ptr(), z.shape[0], z.shape[1], 8)
        return torch.full((), loss, dtype=logits.dtype)
