"""The backend evaluations run on, by one rule for this host and a Ray cluster alike: `cuda` where
a GPU is there (asked for, or `auto`), else `cpu`; and the one-line error a placement that cannot be
met raises."""

from __future__ import annotations

import os


class PlacementError(ValueError):
    """Evaluations cannot run where or how they were asked to (no GPU, an unknown choice, a cluster
    out of reach): one line that names the flag."""


def pick_backend(requested: str, has_gpu: bool, no_gpu: str = "no CUDA GPU is visible") -> str:
    """`cuda` or `cpu` for `requested` (auto | cuda | cpu) where GPUs are (`has_gpu`) or are not;
    `cuda` asked for with none: a PlacementError saying `no_gpu`."""
    if requested == "cuda" and not has_gpu:
        raise PlacementError(f"--backend cuda: {no_gpu}")
    return "cuda" if requested == "cuda" or (requested == "auto" and has_gpu) else "cpu"


def resolve_backend(requested: str) -> tuple[str, str | None]:
    """(backend, cuda arch list) on this host: `auto` picks cuda when a GPU is visible."""
    import torch

    backend = pick_backend(requested, torch.cuda.is_available())
    arch = None
    if backend == "cuda":
        arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
        if not arch:
            major, minor = torch.cuda.get_device_capability(0)
            arch = f"{major}.{minor}"
    return backend, arch
