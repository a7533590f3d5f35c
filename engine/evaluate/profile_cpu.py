"""The cpu backend's profile: no counters; the host's measured peaks (copy bandwidth, FP32 matmul
rate), against which the diagnosis puts a kernel's achieved bandwidth and FLOP rate.
"""

from __future__ import annotations

import time
from typing import Any


def cpu_peaks() -> dict[str, Any]:
    """This host's copy bandwidth and FP32 matmul rate (best of several), for the cpu diagnosis."""
    import torch

    def best(fn: Any, reps: int = 5) -> float:
        fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    src = torch.ones(2**25)  # 128 MiB
    dst = torch.empty_like(src)
    peaks = {"bandwidth": 2 * src.numel() * 4 / best(lambda: dst.copy_(src))}
    n = 1024
    a, b = torch.randn(n, n), torch.randn(n, n)
    peaks["fp32"] = 2 * n**3 / best(lambda: a @ b)
    return {"peaks": peaks}

