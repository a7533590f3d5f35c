"""Mean cross-entropy loss of (4096 tokens, 32768 classes) fp32 logits against int64 targets."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """loss = mean_i (logsumexp_c logits[i, c] - logits[i, targets[i]]): a scalar (0-dim) output."""

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


batch_size = 4096
num_classes = 32768


def get_inputs():
    # The mean over thousands of rows barely depends on the particular draw, so each call picks
    # its own logit scale (0.5 to 4.5): the loss then ranges from ~log(num_classes) to well above,
    # and a kernel that returns a fixed guess fails. An all-zeros answer is off by ~log(num_classes).
    scale = 0.5 + 4.0 * torch.rand(())
    logits = scale * torch.randn(batch_size, num_classes)
    targets = torch.randint(0, num_classes, (batch_size,), dtype=torch.int64)
    return [logits, targets]


def get_init_inputs():
    return []


METADATA = {
    "title": "Cross-entropy loss, mean reduction (fp32 logits, int64 targets)",
    "level": 1,
    "tags": ["loss", "reduction", "softmax", "memory-bound"],
    "cpu_sizes": {"batch_size": 256, "num_classes": 2048},
    # Nominal: a max, a subtract, an exp and an add per logit.
    "flops": "4 * batch_size * num_classes",
    "bytes": "4 * batch_size * num_classes + 8 * batch_size + 4",
}
