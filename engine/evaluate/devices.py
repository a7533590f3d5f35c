"""Which devices an evaluator may use and how it shares this host's cores: the visible GPUs and
a check of a choice of them, the compile pool's default size, the pinned cpu timer's cores."""

from __future__ import annotations

import os


def default_compile_workers() -> int:
    """Cores minus two (for the engine and the timer), or every core on a small machine."""
    cores = os.cpu_count() or 1
    return cores - 2 if cores > 4 else cores


def visible_gpus() -> dict[int, str]:
    """The GPUs this process may use: physical index -> the CUDA_VISIBLE_DEVICES entry that shows
    a worker that GPU alone. With CUDA_VISIBLE_DEVICES set, the indices it names (entries that are
    not numbers, UUIDs or MIG names, are numbered by their place in it); else 0..count-1."""
    import torch

    count = torch.cuda.device_count()
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return {i: str(i) for i in range(count)}
    entries = [e.strip() for e in spec.split(",") if e.strip()][:count]
    if all(e.isdigit() for e in entries):
        return {int(e): e for e in entries}
    return dict(enumerate(entries))


def split_cores(cores: list[int]) -> tuple[list[int], list[int]] | None:
    """(the timer's cores, the builds') for a pinned cpu timer: the upper half for the timer (at
    least one), the rest for the builds; None with a single core (nothing to split)."""
    if len(cores) < 2:
        return None
    timer = cores[len(cores) // 2:] if len(cores) % 2 == 0 else cores[len(cores) // 2 + 1:]
    return timer, cores[:len(cores) - len(timer)]


def check_gpus(chosen: list[int], visible: dict[int, str]) -> None:
    """ValueError, in words, for a choice of GPUs this process cannot use."""
    shown = ",".join(map(str, visible)) or "none"
    if not visible:
        raise ValueError("no CUDA GPU is visible")
    if not chosen:
        raise ValueError("no GPU chosen")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"GPU {next(g for g in chosen if chosen.count(g) > 1)} is chosen twice")
    for g in chosen:
        if g not in visible:
            raise ValueError(f"GPU {g} is not visible (visible: {shown})")
