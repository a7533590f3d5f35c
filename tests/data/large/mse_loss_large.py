"""Mean squared error of two (32768, 32768) fp32 tensors: KernelBench level 1's loss problems at
their own sizes (94_MSELoss: 4 GiB per input, 8 GiB of inputs per trial), for the GPU check's
`concurrent` step (scripts/gpu-check): a problem whose check set does not fit the memory budget
and is recomputed live, judged beside seven other evaluations on one 80 GiB GPU."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """loss = mean((predictions - targets) ** 2): a scalar (0-dim) output."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean((predictions - targets) ** 2)


batch_size = 32768
dim = 32768


def get_inputs():
    # A per-draw scale, so that the loss changes with the draw by far more than the tolerance.
    scale = 0.5 + 2.0 * torch.rand(())
    return [scale * torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


METADATA = {
    "title": "MSE loss at KernelBench size (two 4 GiB fp32 inputs)",
    "level": 1,
    "tags": ["loss", "reduction", "memory-bound", "large"],
    "cpu_sizes": {"batch_size": 256, "dim": 1024},
    "flops": "3 * batch_size * dim",
    "bytes": "8 * batch_size * dim + 4",
}
