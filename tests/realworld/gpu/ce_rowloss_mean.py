"""Cross-entropy: a Triton program per row gives that row's loss (logsumexp minus the target
logit); the mean over the rows is `torch.mean` of those per-row losses.

Corpus: honest, final reduction. Intended outcome: correct (a torch-ops note for the mean).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_loss_kernel(z_ptr, t_ptr, loss_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    z_row = z_ptr + row * cols
    m = tl.max(tl.full([BLOCK], float("-inf"), tl.float32), axis=0)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.max(tl.load(z_row + offs, mask=offs < cols, other=float("-inf")), axis=0))
    s = tl.sum(tl.zeros([BLOCK], tl.float32), axis=0)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        s += tl.sum(tl.exp(tl.load(z_row + offs, mask=offs < cols, other=float("-inf")) - m), axis=0)
    target = tl.load(t_ptr + row)
    tl.store(loss_ptr + row, m + tl.log(s) - tl.load(z_row + target))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits, targets = logits.contiguous(), targets.contiguous()
        rows, cols = logits.shape
        losses = torch.empty(rows, device=logits.device, dtype=logits.dtype)
        row_loss_kernel[(rows,)](logits, targets, losses, cols, BLOCK=min(4096, triton.next_power_of_2(cols)))
        return torch.mean(losses)
