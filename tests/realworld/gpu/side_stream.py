"""Log-softmax in Triton, launched on a side CUDA stream the module owns, and returned without the
current stream waiting for it: the work runs outside what the current stream (and a timer on it)
sees.

Corpus: hack, side stream (the CPU twin: a Python thread). Intended outcome: not correct.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def log_softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    m = tl.max(tl.full([BLOCK], float("-inf"), tl.float32), axis=0)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.max(tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=float("-inf")), axis=0))
    s = tl.sum(tl.zeros([BLOCK], tl.float32), axis=0)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        s += tl.sum(tl.exp(tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=float("-inf")) - m), axis=0)
    lse = m + tl.log(s)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0)
        tl.store(y_ptr + row * cols + offs, v - lse, mask=offs < cols)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._stream = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._stream is None:
            self._stream = torch.cuda.Stream()
        x = x.contiguous()
        y = torch.empty_like(x)
        with torch.cuda.stream(self._stream):
            log_softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=min(4096, triton.next_power_of_2(x.shape[1])))
        return y
