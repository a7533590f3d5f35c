"""Integrity checks: ways a candidate can pass the numeric check without doing the work.

Each check returns reasons (strings); any reason makes the verdict `flagged`. Imports only torch
and the standard library (runs in the evaluation child).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from engine.evaluate import clocks

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


# The ops that do a problem's main work when its reference calls them (matched by aten name, as the
# recorder sees them): a candidate calling one of these where its reference's time goes is
# computing the problem with torch, whatever share of its own time that takes.
MAIN_OP_SHARE = 0.2  # a reference op with at least this share of the reference's op time is main
TORCH_OPS_SHARE = 0.10  # default: torch compute ops under this share of forward's time are a note


class _OpRecorder(TorchDispatchMode):
    """Counts the aten compute ops a call dispatches and times each (clocks bound at import,
    engine.evaluate.clocks): wall time on the cpu, CUDA events on the current stream on a GPU."""

    def __init__(self, device: str = "cpu") -> None:
        super().__init__()
        self.compute: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        self.device = device
        self._events: list[tuple[str, Any, Any]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if name in NON_COMPUTE_OPS:
            return func(*args, **(kwargs or {}))
        self.compute[name] = self.compute.get(name, 0) + 1
        if self.device == "cuda":
            start, end = clocks.timed_event(), clocks.timed_event()
            clocks.event_record(start)
            out = func(*args, **(kwargs or {}))
            clocks.event_record(end)
            self._events.append((name, start, end))
            return out
        t0 = clocks.perf_counter()
        out = func(*args, **(kwargs or {}))
        self.seconds[name] = self.seconds.get(name, 0.0) + clocks.since(t0)
        return out

    def settle(self) -> None:
        """Read the CUDA events' times into `seconds` (after the device is synchronized)."""
        for name, start, end in self._events:
            self.seconds[name] = self.seconds.get(name, 0.0) + clocks.event_elapsed_ms(start, end) / 1e3
        self._events.clear()


def torch_compute_ops(call: Any) -> dict[str, int]:
    """The aten compute ops one call of `call()` dispatches (from Python or from C++)."""
    recorder = _OpRecorder()
    with recorder:
        call()
    return recorder.compute


@dataclass(frozen=True)
class OpProfile:
    """The aten compute ops of one forward: calls and seconds per op, and the forward's own
    seconds (timed alone, without the recorder)."""

    calls: dict[str, int]
    seconds: dict[str, float]
    total_s: float

    def share(self, names: Any = None) -> float:
        """The named ops' (default: all) share of the forward's time, at most 1."""
        picked = self.seconds if names is None else {k: v for k, v in self.seconds.items() if k in names}
        spent = sum(picked.values())
        return min(1.0, spent / self.total_s) if self.total_s > 0 else (1.0 if spent > 0 else 0.0)

    def main_ops(self) -> frozenset[str]:
        """The ops where this (reference) forward's time goes: the costliest, and every op with
        at least MAIN_OP_SHARE of the ops' time."""
        spent = sum(self.seconds.values())
        if not self.seconds:
            return frozenset(self.calls)
        top = max(self.seconds, key=lambda k: self.seconds[k])
        return frozenset({top} | {k for k, v in self.seconds.items()
                                   if spent > 0 and v / spent >= MAIN_OP_SHARE})


def timed_call(call: Any, device: str) -> tuple[Any, float]:
    """(result, seconds) of one call: wall on the cpu; CUDA events (device time) on a GPU."""
    if device == "cuda":
        start, end = clocks.timed_event(), clocks.timed_event()
        clocks.event_record(start)
        out = call()
        clocks.event_record(end)
        clocks.cuda_synchronize()
        return out, clocks.event_elapsed_ms(start, end) / 1e3
    t0 = clocks.perf_counter()
    out = call()
    return out, clocks.since(t0)


def profile_ops(call: Any, device: str = "cpu") -> OpProfile:
    """Each aten compute op's time in one recorded `call()`, against that whole call's (the
    recorder's own overhead included: a caller with plain timings of the same call puts their
    fastest in `total_s` instead)."""
    recorder = _OpRecorder(device)
    with recorder:
        _, total = timed_call(call, device)
    recorder.settle()
    return OpProfile(dict(recorder.compute), dict(recorder.seconds), total)


def judge_torch_ops(ops: OpProfile, reference_main: frozenset[str],
                    limit: float = TORCH_OPS_SHARE) -> tuple[list[str], list[str]]:
    """(flags, notes) for the torch compute ops of ModelNew.forward: flagged when they include the
    reference's main ops (a fallback computing the problem with torch) or take `limit` or more of
    forward's time; a note naming them and their share otherwise (an epilogue or a prologue)."""
    if not ops.calls:
        return [], []
    ranked = sorted(ops.calls, key=lambda k: (-ops.seconds.get(k, 0.0), k))
    share = ops.share()
    listed = ", ".join(f"aten.{k} {100 * ops.share([k]):.1f} %" for k in ranked[:6])
    main = sorted(set(ops.calls) & reference_main)
    if main:
        named = ", ".join(f"aten.{k}" for k in main)
        return [f"torch-ops: ModelNew.forward computes the problem's main work with torch ops ({named};"
                f" torch ops take {100 * share:.0f} % of its time: {listed})"], []
    if share >= limit:
        return [f"torch-ops: ModelNew.forward computes with torch ops ({listed}) instead of its kernels:"
                f" {100 * share:.0f} % of its time, over the {100 * limit:g} % allowed"], []
    return [], [f"torch-ops: {100 * share:.1f} % of ModelNew.forward's time in torch ops ({listed}),"
                f" under the {100 * limit:g} % allowed; its kernels do the main work"]


def check_forward_ops(call: Any, device: str = "cpu") -> tuple[OpProfile, list[str]]:
    """One call watched for torch compute ops (their profile, for judge_torch_ops), and for Python
    threads it starts (the recorder is thread-local: torch ops in a helper thread would otherwise
    go unseen: flagged here)."""
    import threading

    started: list[str] = []
    original_start = threading.Thread.start

    def counting_start(thread: threading.Thread) -> None:
        started.append(thread.name)
        original_start(thread)

    threading.Thread.start = counting_start  # type: ignore[method-assign]
    try:
        ops = profile_ops(call, device)
    finally:
        threading.Thread.start = original_start  # type: ignore[method-assign]
    reasons = [f"host threads: ModelNew.forward starts {len(started)} Python thread(s)"] if started else []
    return ops, reasons


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
    (torch.cuda.Event, "elapsed_time"), (time, "perf_counter"), (time, "monotonic"),
    (torch.nn.Module, "__call__"),
    # The harness's own bound clocks (engine.evaluate.clocks): out of reach unless rebound there.
    *((clocks, name) for name in ("perf_counter", "monotonic", "cuda_synchronize", "CudaEvent", "event_record",
                                  "event_synchronize", "event_elapsed_ms", "module_call", "timed_event",
                                  "since")),
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
