"""The harness's clocks, bound once, when this module is first imported.

The evaluation child and the long-lived worker import it at start, before any candidate code
runs in the process, and every duration the harness reports (compile and eval seconds, phases,
the reference's and the candidate's timings) is read through these names. A candidate that
rebinds `time.perf_counter`, `time.monotonic`, `torch.cuda.Event` or its methods at import
changes what it sees, not what the harness measures (engine.evaluate.harness.integrity flags it).
"""

from __future__ import annotations

import time
from typing import Any

import torch

perf_counter = time.perf_counter
monotonic = time.monotonic
cuda_synchronize = torch.cuda.synchronize
CudaEvent = torch.cuda.Event
event_record = torch.cuda.Event.record
event_synchronize = torch.cuda.Event.synchronize
event_elapsed_ms = torch.cuda.Event.elapsed_time
module_call = torch.nn.Module.__call__


def timed_event() -> Any:
    """A CUDA event that records time, made by the class bound at import."""
    return CudaEvent(enable_timing=True)


def since(t0: float) -> float:
    """Seconds since `t0` (a perf_counter reading), never negative."""
    return max(0.0, perf_counter() - t0)
