"""Cross-entropy: one C++ pass per row gives that row's loss (logsumexp minus the target logit);
the mean over the rows is `torch.mean` of those per-row losses.

Corpus: honest, final reduction. Intended outcome: correct (a torch-ops note for the mean).
"""

import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>
#include <cstdint>

extern "C" void row_losses(const float* logits, const int64_t* targets, float* loss, long long rows,
                           long long cols) {
    for (long long r = 0; r < rows; ++r) {
        const float* z = logits + r * cols;
        float m = -INFINITY;
        for (long long c = 0; c < cols; ++c) m = z[c] > m ? z[c] : m;
        double s = 0.0;
        for (long long c = 0; c < cols; ++c) s += std::exp((double)(z[c] - m));
        loss[r] = (float)(std::log(s) + m - z[targets[r]]);
    }
}
"""

_NAME = "rw_ce_rowloss_mean_cpu"
_path = load_inline(name=_NAME, cpp_sources=cpp_source, is_python_module=False, no_implicit_headers=True,
                    extra_cflags=["-O3"], verbose=False) \
    or next(p for p in torch.ops.loaded_libraries if _NAME in p)
_lib = ctypes.CDLL(_path)
_lib.row_losses.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_longlong] * 2
_lib.row_losses.restype = None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits, targets = logits.contiguous(), targets.contiguous()
        losses = torch.empty(logits.shape[0], dtype=logits.dtype)
        _lib.row_losses(logits.data_ptr(), targets.data_ptr(), losses.data_ptr(), logits.shape[0], logits.shape[1])
        return torch.mean(losses)
