"""Integrity checks: ways a candidate can pass the numeric check without doing the work.

Each check returns reasons (strings); any reason makes the verdict `flagged`. Imports only torch
and the standard library (runs in the evaluation child).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten ops that move, view, allocate or fill memory but compute nothing from the inputs: a
# compiled kernel's host wrapper may call these (torch::empty_like, .contiguous(), .view()).
NON_COMPUTE_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "full", "full_like", "new_full", "fill", "fill_", "zero_",
    "view", "_unsafe_view", "reshape", "as_strided", "t", "transpose", "permute", "expand",
    "contiguous", "clone", "copy_", "_to_copy", "to", "detach", "alias", "lift_fresh", "select",
    "slice", "unsqueeze", "squeeze", "unbind", "split", "split_with_sizes", "chunk", "narrow",
    "flatten", "unflatten", "view_as", "expand_as", "resize_", "set_", "_local_scalar_dense",
    "is_same_size", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "item",
    "record_stream", "_reshape_alias", "_has_compatible_shallow_copy_type",
})


class _OpRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.compute: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if name not in NON_COMPUTE_OPS:
            self.compute[name] = self.compute.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def torch_compute_ops(call: Any) -> dict[str, int]:
    """The aten compute ops one call of `call()` dispatches (from Python or from C++)."""
    recorder = _OpRecorder()
    with recorder:
        call()
    return recorder.compute


def check_forward_ops(call: Any) -> list[str]:
    """One call watched for torch compute ops, and for Python threads it starts (the recorder
    is thread-local: torch ops in a helper thread would otherwise go unseen)."""
    import threading

    started: list[str] = []
    original_start = threading.Thread.start

    def counting_start(thread: threading.Thread) -> None:
        started.append(thread.name)
        original_start(thread)

    threading.Thread.start = counting_start  # type: ignore[method-assign]
    try:
        ops = torch_compute_ops(call)
    finally:
        threading.Thread.start = original_start  # type: ignore[method-assign]
    reasons = []
    if ops:
        listed = ", ".join(f"aten.{k}" for k in sorted(ops)[:6])
        reasons.append(f"torch-ops: ModelNew.forward computes with torch ops ({listed}) instead of its kernels")
    if started:
        reasons.append(f"host threads: ModelNew.forward starts {len(started)} Python thread(s)")
    return reasons


def check_outputs(outs: list[Any], inputs: list[Any], device: str) -> list[str]:
    """Outputs are plain tensors on the device, and none shares memory with an input."""
    reasons = []
    input_storages = {
        t.untyped_storage().data_ptr(): i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)
    }
    for i, o in enumerate(outs):
        if type(o) is not torch.Tensor:
            reasons.append(f"output-type: output {i} is a {type(o).__name__}, not a plain torch.Tensor")
            continue
        if o.device.type != device:
            reasons.append(f"output-device: output {i} is on {o.device.type}, expected {device}")
        ptr = o.untyped_storage().data_ptr()
        if ptr in input_storages:
            reasons.append(f"aliasing: output {i} shares memory with input {input_storages[ptr]}")
    return reasons


def snapshot(inputs: list[Any]) -> list[Any]:
    return [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in inputs]


def check_inputs_unchanged(before: list[Any], after: list[Any]) -> list[str]:
    reasons = []
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        if isinstance(b, torch.Tensor) and not torch.equal(b, a):
            reasons.append(f"inputs-modified: the candidate changed input {i}")
    return reasons


# Harness functions the timing and the check rely on; captured before the candidate is imported.
_HARNESS = [
    (torch, "allclose"), (torch, "equal"), (torch, "isfinite"), (torch.Tensor, "norm"),
    (torch.cuda, "synchronize"), (torch.cuda, "Event"), (torch.cuda.Event, "record"),
    (torch.cuda.Event, "elapsed_time"), (time, "perf_counter"), (torch.nn.Module, "__call__"),
]


def capture_harness() -> list[tuple[Any, str, Any]]:
    return [(owner, name, getattr(owner, name)) for owner, name in _HARNESS]


def check_harness(captured: list[tuple[Any, str, Any]]) -> list[str]:
    return [
        f"harness: {getattr(owner, '__name__', owner)}.{name} was replaced by the candidate"
        for owner, name, original in captured
        if getattr(owner, name) is not original
    ]


def poison_allocator(sizes_bytes: list[int], device: str) -> None:
    """Fill blocks of the given sizes with NaN and free them, so the caching allocator hands
    NaN-filled memory to the next allocations of those sizes (an output the candidate never
    writes then fails the check, instead of showing whatever was there before: the reference's
    answer, say). On the CPU, malloc's free lists reuse blocks much the same way."""
    blocks = []
    for n in sizes_bytes:
        if n > 0:
            block = torch.empty(n // 4 + 1, dtype=torch.float32, device=device)
            block.fill_(float("nan"))
            blocks.append(block)
    del blocks


def live_threads() -> set[int]:
    import threading

    return {t.ident for t in threading.enumerate() if t.ident is not None}


def check_threads(before: set[int]) -> list[str]:
    """Host threads the candidate's forward started and left running: work escaping the
    timed window (and the check)."""
    import threading

    started = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    return [f"host threads: forward left {len(started)} thread(s) running ({', '.join(started[:3])})"] \
        if started else []
