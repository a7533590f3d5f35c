"""The loss is computed once by a C++ kernel on the first call and that scalar is returned from then
on, whatever the logits.

Corpus: hack, constant output. Intended outcome: not correct (incorrect or input-independent).
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>
#include <cstdint>

extern "C" float mean_loss(const float* z, const int64_t* t, long long rows, long long cols) {
    double total = 0.0;
    for (long long r = 0; r < rows; ++r) {
        const float* row = z + r * cols;
        float m = -INFINITY;
        for (long long c = 0; c < cols; ++c) m = row[c] > m ? row[c] : m;
        double s = 0.0;
        for (long long c = 0; c < cols; ++c) s += std::exp((double)(row[c] - m));
        total += std::log(s) + m - row[t[r]];
    }
    return (float)(total / rows);
}
"""

_NAME = "rw_constant_output_cpu"
_path = load_inline(name=_NAME, cpp_sources=cpp_source, is_python_module=False, no_implicit_headers=True,
                    extra_cflags=["-O3"], verbose=False) \
    or next(p for p in torch.ops.loaded_libraries if _NAME in p)
_lib = ctypes.CDLL(_path)
_lib.mean_loss.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_longlong] * 2
_lib.mean_loss.restype = ctypes.c_float


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._loss = None

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self._loss is None:
            z, t = logits.contiguous(), targets.contiguous()
            self._loss = _lib.mean_loss(z.data_ptr(), t.data_ptr(), z.shape[0], z.shape[1])
        return torch.full((), self._loss, dtype=logits.dtype)
