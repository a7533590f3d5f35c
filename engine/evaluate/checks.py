"""The check trials' inputs and fp64 expected outputs, computed once per worker process.

Within a session every variant of a problem is checked at the same sizes, precision and device,
so the trials' inputs and the reference's fp64 answers on them are the same work for every
variant. `expected_for` draws the inputs from the session's secret input seed (the evaluator's,
never written to a file the candidate can read, nor to the DB), runs the reference in the
problem's own precision (output dtypes and sizes, its own error against fp64) and in fp64 once,
and keeps the result in this process for the next evaluation of the same key.

Where it lives: on the device while the whole set (inputs + fp64 outputs of every trial) is at
most `KTREE_CHECK_CACHE_DEVICE_MB` (default: a quarter of the GPU's memory, at least 2048 MiB;
softmax at its seed sizes, 1 GiB inputs, needs 9 GiB for three trials), else in pinned host
memory (copied to the device per trial; on the cpu backend host memory throughout). Only the
newest key is kept.

What still differs per evaluation: every trial's inputs differ from the other trials' (each is a
separate draw); each evaluation gets fresh copies (a candidate that writes its inputs changes a
copy; one that keys a cache on input pointers sees new ones); the recheck after timing runs on
inputs drawn from a seed made in the worker at that moment and is computed live. A fingerprint
of the cached tensors is taken when they are made and compared after every evaluation: a
candidate that wrote into them is flagged and the set is dropped.

Imports only torch and the standard library.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.evaluate import clocks

DEVICE_BUDGET_MB = 2048.0


@dataclass
class ReferenceChecks:
    """One key's trials: inputs (per trial, the problem's inputs cast to its precision), fp64
    expected outputs (flattened per trial), the reference's own output dtypes and byte sizes in
    its precision, its error against fp64 on trial 0, where the set lives, and what it cost."""

    key: tuple[Any, ...]
    inputs: list[list[Any]]
    expected: list[list[Any]]
    dtypes: list[Any]
    out_bytes: list[int]
    native_errs: dict[str, float]
    on_device: bool
    nbytes: int
    build_s: float
    fingerprint: list[float] = field(default_factory=list)
    uses: int = 0

    def trial_inputs(self, trial: int, device: str) -> list[Any]:
        """Fresh copies of trial `trial`'s inputs on `device` (new memory each evaluation)."""
        import torch

        return [t.to(device, copy=True) if isinstance(t, torch.Tensor) else t for t in self.inputs[trial]]

    def trial_expected(self, trial: int, device: str) -> list[Any]:
        import torch

        return [t.to(device, non_blocking=True) if isinstance(t, torch.Tensor) else t
                for t in self.expected[trial]]

    def intact(self) -> bool:
        """The cached tensors still hold what they held when made."""
        return _fingerprint(self) == self.fingerprint


_CACHE: dict[tuple[Any, ...], ReferenceChecks] = {}


def _tensors(checks: ReferenceChecks) -> list[Any]:
    import torch

    return [t for group in (*checks.inputs, *checks.expected) for t in group if isinstance(t, torch.Tensor)]


def _fingerprint(checks: ReferenceChecks) -> list[float]:
    import torch

    sums = [t.detach().to(torch.float64).sum() if t.is_floating_point() else t.detach().sum().to(torch.float64)
            for t in _tensors(checks)]
    return torch.stack(sums).tolist() if sums else []


def device_budget_bytes() -> int:
    """KTREE_CHECK_CACHE_DEVICE_MB, else a quarter of the GPU's memory (at least DEVICE_BUDGET_MB)."""
    raw = os.environ.get("KTREE_CHECK_CACHE_DEVICE_MB")
    if raw:
        try:
            return int(float(raw) * 2**20)
        except ValueError:
            pass
    import torch

    total = torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else 0
    return max(int(DEVICE_BUDGET_MB * 2**20), total // 4)


def cached(key: tuple[Any, ...]) -> ReferenceChecks | None:
    return _CACHE.get(key)


def drop(key: tuple[Any, ...]) -> None:
    _CACHE.pop(key, None)


def expected_for(key: tuple[Any, ...], trials: int, seed: int, device: str,
                 draw: Callable[[], list[Any]], ref: Any, ref64: Any,
                 flatten: Callable[[Any], list[Any]],
                 errors: Callable[[Any, Any], dict[str, float]]) -> ReferenceChecks:
    """The cached set for `key`, or a new one: `trials` draws of `draw()` (seeded seed + 1000 +
    trial), the reference `ref` (problem precision) and `ref64` (fp64) on each. `errors(native,
    expected)`: the reference's own error against fp64 (trial 0)."""
    import torch

    hit = _CACHE.get(key)
    if hit is not None:
        hit.uses += 1
        return hit
    _CACHE.clear()  # one key at a time: a worker serves one problem at a time
    t0 = clocks.perf_counter()
    inputs, expected = [], []
    dtypes: list[Any] = []
    out_bytes: list[int] = []
    native_errs: dict[str, float] = {}
    with torch.no_grad():
        for trial in range(trials):
            torch.manual_seed(seed + 1000 + trial)
            drawn = list(draw())
            native = flatten(ref(*[_clone(t) for t in drawn]))
            exp = [t.detach() for t in flatten(ref64(*[_to64(t, device) for t in drawn]))]
            if trial == 0:
                dtypes = [t.dtype for t in native]
                out_bytes = [t.numel() * t.element_size() for t in native]
                native_errs = errors(native, exp)
            del native
            inputs.append(drawn)
            expected.append(exp)
    nbytes = sum(t.numel() * t.element_size() for group in (*inputs, *expected) for t in group
                 if isinstance(t, torch.Tensor))
    on_device = device == "cpu" or nbytes <= device_budget_bytes()
    if not on_device:  # too big to keep on the GPU: pinned host memory, copied per trial
        inputs = [[_pinned(t) for t in group] for group in inputs]
        expected = [[_pinned(t) for t in group] for group in expected]
        torch.cuda.empty_cache()
    checks = ReferenceChecks(key=key, inputs=inputs, expected=expected, dtypes=dtypes, out_bytes=out_bytes,
                             native_errs=native_errs, on_device=on_device, nbytes=nbytes,
                             build_s=clocks.perf_counter() - t0)
    checks.fingerprint = _fingerprint(checks)
    _CACHE[key] = checks
    return checks


def _clone(t: Any) -> Any:
    import torch

    return t.detach().clone() if isinstance(t, torch.Tensor) else t


def _to64(t: Any, device: str) -> Any:
    import torch

    if isinstance(t, torch.Tensor):
        return t.to(device=device, dtype=torch.float64) if t.is_floating_point() else t.to(device)
    return t


def _pinned(t: Any) -> Any:
    import torch

    if not isinstance(t, torch.Tensor):
        return t
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t)
    return host
