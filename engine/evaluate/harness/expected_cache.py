"""The check trials' inputs and fp64 expected outputs, computed once per worker process when they
fit the host-wide memory budget, else recomputed live per trial. (The integrity checks are
elsewhere: engine.evaluate.harness.integrity_checks.)

Within a session every variant of a problem is checked at the same sizes, precision and device,
so the trials' inputs and the reference's fp64 answers on them are the same work for every
variant. `expected_for` draws the inputs from the session's secret input seed (the evaluator's,
never written to a file the candidate can read, nor to the DB), runs the reference in the
problem's own precision (output dtypes and sizes, its own error against fp64) and in fp64, and
keeps the result in this process for the next evaluation of the same key.

Where it lives (decided from trial 0's size, before any further trial is drawn; engine.evaluate.
ledger keeps the budgets host-wide, shared by every ktree process):
- `device`: the whole set (inputs + fp64 outputs of every trial) fits the GPU's share
  (`KTREE_CHECK_CACHE_DEVICE_MB`, default a quarter of the GPU's memory, all processes together)
  and half of what is free on it now;
- `host`: else pinned host memory within the host budget (`KTREE_CHECK_CACHE_HOST_MB`, default a
  quarter of the host's memory, all processes together; at most 40 % of the process's own memory
  limit), copied to the device per trial; on a GPU only where drawing and answering every trial again
  (twice: the reference's variation and the check trials) would cost more than placing the set there
  (HOST_PLACE_BYTES_PER_S; trial 0's cost is measured as it is made). Every GPU evaluation process
  serves one candidate (engine.evaluate.child.worker_process), so the set is used once: placing 2.4 GB
  on the host held the GPU about 1.8 s on an H200 (2.8-3.6 s in pageable memory) for a layernorm
  whose trials cost milliseconds each to make again;
- `live`: else nothing is kept: each trial's inputs are drawn again from the seed and its fp64
  answers are computed live from the reference (on the device, else on the host where the fp64
  copies do not fit), only after the candidate's outputs exist.
Only the newest key is kept. After each evaluation (`after_evaluation`, before the engine lets the
GPU's lock go) a GPU process drops its sets and gives the caching allocator's free blocks back to the
driver: the process is about to end (it served its one candidate), and the judge's fresh-input calls
that follow get the memory.

What still differs per evaluation: every trial's inputs differ from the other trials' (each is a
separate draw); each evaluation gets fresh copies (a candidate that writes its inputs changes a
copy; one that keys a cache on input pointers sees new ones); the recheck after timing runs on
inputs drawn from a seed made in the worker at that moment and is computed live. A fingerprint
of the cached tensors is taken when they are made and compared after every evaluation: a
candidate that wrote into them is flagged and the set is dropped.

ktree's own out-of-memory (while preparing the reference) raises `KtreeOutOfMemory`, told apart
from the candidate's (engine.evaluate.child.evaluation: `describe_oom`).

Imports only torch and the standard library.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine import settings
from engine.evaluate.harness import clocks, memory
from engine.evaluate.harness import ledger as ledger_module
from engine.evaluate.harness.fp64_model import Fp64Reference, fp64_copy, weights, weights64  # noqa: F401

DEVICE_BUDGET_MB = ledger_module.DEVICE_FLOOR_MB
FREE_SHARE = 0.5  # a device-resident set takes at most this share of the GPU's free memory
# What placing a set in pinned host memory costs, from the GPU: 2.4 GB in about 1.8 s on an H200
# (page-locking, then the copy). A set whose trials are cheaper to draw and answer again is live.
HOST_PLACE_BYTES_PER_S = 1.3e9


class KtreeOutOfMemory(Exception):
    """ktree itself (not the candidate) ran out of memory; `what` it was doing."""

    def __init__(self, what: str, exc: BaseException):
        said = str(exc).splitlines()[0][:300] if str(exc) else repr(exc)
        super().__init__(f"ktree out of memory while {what}: {said} (not the candidate's doing)")
        self.what = what


def is_oom(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, KtreeOutOfMemory):
        return True
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(exc, oom)) or (
        isinstance(exc, (RuntimeError, MemoryError)) and "out of memory" in str(exc).lower())


@dataclass
class ReferenceChecks:
    """One key's trials: inputs (per trial, the problem's inputs cast to its precision), fp64
    expected outputs (flattened per trial), the reference's own output dtypes and byte sizes in
    its precision, its error against fp64 on trial 0, where the set lives (`placement`: device,
    host or live), and what it cost. A live set keeps no tensor: its trials are drawn and
    answered again on demand."""

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
    fingerprint_pid: int = 0  # the process that took it
    uses: int = 0
    placement: str = "device"  # device | host | live
    trial_bytes: int = 0  # one trial's inputs + fp64 answers
    gpu: str | None = None  # the ledger's key of the GPU it was made on
    seed: int = 0
    live_fns: tuple[Any, ...] = ()  # (draw, answer, device): a live set's way to its trials
    plan: Any = None  # engine.evaluate.harness.memory.Plan: the answers' precision, the caches' room
    # per output, the reference's own relative L2 error against fp64 on trial 0 (fp64 answers only):
    # an output of noise around zero errs by more than its norm (engine.evaluate.child.check.noise_outputs)
    native_rel_l2: list[float] = field(default_factory=list)

    @property
    def answers(self) -> str:
        """The answers' precision: fp64, or native (the reference's own, where fp64 does not fit)."""
        return self.plan.answers if self.plan is not None else "fp64"

    @property
    def live(self) -> bool:
        return self.placement == "live"

    @property
    def trials(self) -> int:
        return len(self.expected)

    def trial_inputs(self, trial: int, device: str) -> list[Any]:
        """Fresh copies of trial `trial`'s inputs on `device` (new memory each evaluation); a
        live set draws them again from the seed."""
        import torch

        if self.live:
            draw = self.live_fns[0]
            torch.manual_seed(self.seed + 1000 + trial)
            return [t.to(device) if isinstance(t, torch.Tensor) else t for t in draw()]
        return [t.to(device, copy=True) if isinstance(t, torch.Tensor) else t for t in self.inputs[trial]]

    def trial_expected(self, trial: int, device: str) -> list[Any]:
        """Trial `trial`'s fp64 answers (a live set computes them now, from the seed's inputs and
        the reference: never from anything the candidate made)."""
        import torch

        if self.live:
            draw, answer, _ = self.live_fns
            with torch.no_grad():
                torch.manual_seed(self.seed + 1000 + trial)
                drawn = list(draw())
                try:
                    return answer(drawn)
                finally:
                    del drawn
        return [t.to(device, non_blocking=True) if isinstance(t, torch.Tensor) else t
                for t in self.expected[trial]]

    def intact(self) -> bool:
        """The cached tensors still hold what they held when made."""
        return _fingerprint(self) == self.fingerprint


_CACHE: dict[tuple[Any, ...], ReferenceChecks] = {}


def _tensors(checks: ReferenceChecks) -> list[Any]:
    import torch

    return [t for group in (*checks.inputs, *checks.expected) for t in group if isinstance(t, torch.Tensor)]


SAMPLED_BYTES = 64 * 2**20  # a host tensor larger than this is fingerprinted on a strided sample


def _fingerprint(checks: ReferenceChecks) -> list[float]:
    """A sum per cached tensor (fp64): whole on the device; on the host, where summing gigabytes
    would cost seconds per evaluation, a large tensor's sum over a strided sample and its ends."""
    import torch

    sums = []
    for t in _tensors(checks):
        t = t.detach()
        if t.device.type == "cpu" and t.numel() * t.element_size() > SAMPLED_BYTES:
            flat = t.reshape(-1)
            step = max(1, flat.numel() // (SAMPLED_BYTES // 8))
            t = torch.cat([flat[::step], flat[:4096], flat[-4096:]])
        sums.append(memory.stream_sum(t))  # (in pieces: no whole fp64 copy)
    return sums


def _gpu_total() -> int:
    import torch

    return torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else 0


def device_budget_bytes() -> int:
    """KTREE_CHECK_CACHE_DEVICE_MB, else a quarter of the GPU's memory (at least DEVICE_BUDGET_MB),
    for every ktree process's device-resident sets on that GPU together."""
    return ledger_module.device_budget_bytes(_gpu_total())


def gpu_key() -> str:
    """This process's GPU as the ledger knows it: its UUID, else its name and index."""
    import torch

    try:
        props = torch.cuda.get_device_properties(0)
    except Exception:
        return "gpu?"
    uuid = getattr(props, "uuid", None)
    return str(uuid) if uuid else f"{props.name}-{settings.get('KTREE_DEVICE_INDEX', '0')}"


def cached(key: tuple[Any, ...]) -> ReferenceChecks | None:
    return _CACHE.get(key)


def held() -> list[tuple[Any, ...]]:
    """The keys of the sets this process holds."""
    return list(_CACHE)


def _forget(checks: ReferenceChecks) -> None:
    """Drop a set's tensors and give back its ledger claims."""
    book = ledger_module.ledger()
    if checks.placement == "device":
        book.release(gpu=checks.gpu, device=checks.nbytes)
    elif checks.placement == "host":
        book.release(host=checks.nbytes)
    checks.inputs = [[] for _ in checks.inputs]
    checks.expected = [[] for _ in checks.expected]


def drop(key: tuple[Any, ...]) -> None:
    checks = _CACHE.pop(key, None)
    if checks is not None:
        _forget(checks)
        _free_memory()


def clear() -> None:
    for key in list(_CACHE):
        drop(key)


def _free_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def after_evaluation() -> dict[str, Any]:
    """What a GPU process keeps after its evaluation, before the engine lets the GPU's lock go:
    nothing. Its sets are dropped (their ledger claims given back) and the caching allocator's free
    blocks go back to the driver: the process served its one candidate (a fork server's child,
    engine.evaluate.child.worker_process), so a set kept, or moved to host memory as it once was,
    would serve no other evaluation. Returns what it did."""
    import torch

    done: dict[str, Any] = {}
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return done
    dropped = sum(checks.nbytes for checks in _CACHE.values())
    clear()
    if dropped:
        done["dropped"] = dropped
    _free_memory()
    done["device_reserved"] = torch.cuda.memory_reserved()
    return done


def expected64(ref64: Any, drawn: list[Any], device: str, flatten: Callable[[Any], list[Any]]) -> list[Any]:
    """The reference's fp64 outputs on `drawn` (flattened, detached): on `device`, else, where its
    fp64 copies do not fit there, on the host (a copy of the fp64 reference moved there)."""
    import copy

    import torch

    try:
        return [t.detach() for t in flatten(ref64(*[_to64(t, device) for t in drawn]))]
    except Exception as caught:
        if device == "cpu" or not is_oom(caught):
            raise
        exc = caught
    _free_memory()  # ktree's fp64 copies did not fit on the GPU: on the host instead, if there
    need = 3 * sum(t.numel() * 8 for t in drawn if isinstance(t, torch.Tensor))  # copies + temporaries
    cap = ledger_module.process_host_cap_bytes()
    if cap is not None and need > cap:
        raise KtreeOutOfMemory(f"computing the fp64 answers (neither on the GPU nor within this process's"
                               f" host share: {need / 2**30:.1f} GiB)", exc)
    if isinstance(ref64, Fp64Reference):
        ref64 = ref64.model()
    host_ref = copy.deepcopy(ref64).to("cpu") if isinstance(ref64, torch.nn.Module) else ref64
    try:
        return [t.detach() for t in flatten(host_ref(*[_to64(t, "cpu") for t in drawn]))]
    finally:
        del host_ref


def expected_for(key: tuple[Any, ...], trials: int, seed: int, device: str,
                 draw: Callable[[], list[Any]], ref: Any, ref64: Any,
                 flatten: Callable[[Any], list[Any]],
                 errors: Callable[[Any, Any], dict[str, float]]) -> ReferenceChecks:
    """The cached set for `key`, or a new one: `trials` draws of `draw()` (seeded seed + 1000 +
    trial), the reference `ref` (problem precision) and `ref64` (fp64) on each, placed where the
    budget has room (device, host) or kept live. `errors(native, expected)`: the reference's own
    error against fp64 (trial 0). Raises KtreeOutOfMemory where even the live set cannot be
    started (trial 0 does not fit)."""
    import torch

    hit = _CACHE.get(key)
    if hit is not None:
        hit.uses += 1
        if hit.fingerprint_pid != os.getpid():  # made before a fork (a worker's server), on its own
            hit.fingerprint = _fingerprint(hit)  # thread count: sums that may differ in their last bits
            hit.fingerprint_pid = os.getpid()
        return hit
    clear()  # one key at a time: a worker serves one problem at a time
    t0 = clocks.perf_counter()
    gpu = gpu_key() if device != "cpu" else None
    book = ledger_module.ledger()
    try:
        with torch.no_grad():
            t_trial = clocks.perf_counter()  # (trial 0's cost: drawn, answered; the live set's price)
            torch.manual_seed(seed + 1000)
            base = _allocated(device)
            drawn = list(draw())
            clones = [_clone(t) for t in drawn]
            memory.mark("draw", device)  # (the reference's own peak is read from here)
            native = [t.detach() for t in flatten(ref(*clones))]
            # The reference's own peak on these inputs: its inputs, outputs and working set (the
            # clone it ran on stands for the inputs; the drawn originals are ktree's).
            reference_peak = max(0, memory.mark("reference", device) - base - memory.tensor_bytes(drawn)) \
                + weights(ref)
            del clones
            dtypes = [t.dtype for t in native]
            out_bytes = [t.numel() * t.element_size() for t in native]
            plan = memory.make_plan(memory.tensor_bytes(drawn), sum(out_bytes), memory.fp64_bytes(drawn),
                                    memory.fp64_bytes(native), reference_peak, trials, _gpu_free(device),
                                    fp64=settings.get("KTREE_CHECK_ANSWERS", "auto") != "native",
                                    weights=weights(ref), weights64=weights64(ref))
            if settings.get("KTREE_CHECK_ANSWERS") == "fp64" and plan.answers != "fp64":
                plan = dataclasses.replace(plan, answers="fp64")
            native_rel: list[float] = []
            exp = None
            if plan.answers == "fp64":
                try:
                    exp = expected64(ref64, drawn, device, flatten)
                except Exception as caught:
                    if is_oom(caught):
                        raise
                    # The reference fails in fp64 (state that .double() left in its precision, an op
                    # without fp64) where it ran in its own: its own answers, said in the verdict.
                    plan = dataclasses.replace(plan, answers="native", why=(
                        f"the reference fails in fp64 ({_last_line(str(caught)) or type(caught).__name__});"
                        f" answers in its own precision"))
                if exp is not None and [t.shape for t in exp] != [t.shape for t in native]:
                    exp, plan = None, dataclasses.replace(plan, answers="native", why=(
                        "the reference's fp64 outputs differ in shape from its own;"
                        " answers in its own precision"))
            if exp is not None:
                native_errs = errors(native, exp)
                native_rel = [memory.compare_tensors(n, e, math.inf, math.inf).rel_l2
                              for n, e in zip(native, exp, strict=True)]
            else:  # the reference's own answers: its error against fp64 is not measured
                exp, native_errs = native, {}
            del native
            if device != "cpu":
                torch.cuda.synchronize()
            trial_s = clocks.perf_counter() - t_trial
    except Exception as exc:
        if is_oom(exc):
            _free_memory()
            raise KtreeOutOfMemory("preparing the reference (trial 0's inputs and answers)", exc) from exc
        raise

    def answer(inputs: list[Any]) -> list[Any]:
        """The answers on `inputs` in the plan's precision (the inputs themselves are not changed:
        a reference that writes its inputs writes a copy)."""
        if plan.answers == "fp64":
            return expected64(ref64, inputs, device, flatten)
        return [t.detach() for t in flatten(ref(*[_clone(t) for t in inputs]))]

    def live_answer(inputs: list[Any]) -> list[Any]:  # (inputs drawn for this call alone)
        if plan.answers == "fp64":
            return expected64(ref64, inputs, device, flatten)
        return [t.detach() for t in flatten(ref(*inputs))]

    trial_bytes = _nbytes(drawn) + _nbytes(exp)
    total = trial_bytes * trials
    # A live set draws and answers each trial again where it is used: the reference's variation and
    # the check trials (the cost of trial 0 as made above stands for each).
    placement = _place(total, device, gpu, book, plan, live_s=2 * trials * trial_s)
    checks = ReferenceChecks(key=key, inputs=[], expected=[], dtypes=dtypes, out_bytes=out_bytes,
                             native_errs=native_errs, on_device=placement == "device" or (
                                 device == "cpu" and placement == "host"), nbytes=total,
                             build_s=0.0, placement=placement, trial_bytes=trial_bytes, gpu=gpu, seed=seed,
                             live_fns=(draw, live_answer, device), plan=plan, native_rel_l2=native_rel)
    if placement == "live":
        del drawn, exp
        _free_memory()
        checks.inputs = [[] for _ in range(trials)]
        checks.expected = [[] for _ in range(trials)]
        checks.nbytes = 0
    else:
        try:
            with torch.no_grad():
                checks.inputs.append(_put(drawn, placement))
                checks.expected.append(_put(exp, placement))
                del drawn, exp
                for trial in range(1, trials):
                    torch.manual_seed(seed + 1000 + trial)
                    more = list(draw())
                    checks.expected.append(_put(answer(more), placement))
                    checks.inputs.append(_put(more, placement))
                    del more
        except Exception as exc:
            if not is_oom(exc):
                _forget(checks)
                raise
            _forget(checks)  # it did not fit after all (others took the memory): live instead
            _free_memory()
            checks.placement, checks.on_device, checks.nbytes = "live", False, 0
            checks.inputs = [[] for _ in range(trials)]
            checks.expected = [[] for _ in range(trials)]
        if placement == "host":
            _free_memory()
    checks.build_s = clocks.perf_counter() - t0
    checks.fingerprint = _fingerprint(checks)
    checks.fingerprint_pid = os.getpid()
    _CACHE[key] = checks
    return checks


def _allocated(device: str) -> int:
    """Bytes held now: the GPU's allocator's, else the process's resident set."""
    import torch

    from engine.evaluate.harness import memory

    if device != "cpu":
        return int(torch.cuda.memory_allocated())
    return memory.host_rss()


def _gpu_free(device: str) -> int | None:
    import torch

    if device == "cpu":
        return None
    try:
        return int(torch.cuda.mem_get_info()[0])
    except Exception:
        return None


def _place(total: int, device: str, gpu: str | None, book: ledger_module.Ledger, plan: Any = None,
           live_s: float | None = None) -> str:
    """device | host | live for a set of `total` bytes, with its claim made in the ledger; on the
    device only where the memory plan leaves it room (engine.evaluate.harness.memory.Plan.cache_bytes);
    on a GPU's host side only where `live_s` (what making the trials again would cost) is more than
    placing the set there (HOST_PLACE_BYTES_PER_S)."""
    import torch

    room = plan.cache_bytes if plan is not None else total
    if device == "cpu":  # (the cpu backend's "device" is the host: the plan bounds it the same way)
        return "host" if total <= room and book.claim_host(total) else "live"
    free = 0
    try:
        free, _ = torch.cuda.mem_get_info()
    except Exception:
        pass
    if (gpu is not None and total <= room and total <= free * FREE_SHARE
            and book.claim_device(gpu, total, _gpu_total())):
        return "device"
    if live_s is not None and live_s < total / HOST_PLACE_BYTES_PER_S:
        return "live"
    if book.claim_host(total):
        return "host"
    return "live"


def _put(group: list[Any], placement: str) -> list[Any]:
    if placement == "host":
        return [_pinned(t) for t in group]
    return group


def _nbytes(group: list[Any]) -> int:
    import torch

    return sum(t.numel() * t.element_size() for t in group if isinstance(t, torch.Tensor))


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
    if t.device.type == "cpu" and not torch.cuda.is_available():
        return t  # the cpu backend: host memory throughout
    try:
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    except RuntimeError:
        host = torch.empty(t.shape, dtype=t.dtype)
    host.copy_(t)
    return host


OOM_PATTERN = re.compile(r"OutOfMemoryError|CUDA out of memory|out of memory", re.IGNORECASE)
_FRAME = re.compile(r'File "([^"]+)", line \d+')


def describe_oom(log: str, problem_path: str = "") -> str | None:
    """For a runtime error's log (a formatted traceback): "candidate" where an out-of-memory was
    raised inside the candidate's own code (a frame of its module: `<ktree_solution_...>` or its
    file `solution.py`), "ktree" where it was raised with no candidate frame (ktree's own
    recheck, the reference), None where the log shows no out-of-memory."""
    if not OOM_PATTERN.search(log or ""):
        return None
    files = _FRAME.findall(log)
    if any(f.startswith("<ktree_solution_") or os.path.basename(f) == "solution.py" for f in files):
        return "candidate"
    return "ktree" if files else "candidate"


def label_oom(verdict: Any, job: Any) -> Any:
    """A verdict with an out-of-memory in its log, said for what it is: the candidate's own
    (runtime_error, "out of memory in the candidate: ...") or ktree's (crashed, "ktree out of
    memory while ...: ... (not the candidate's doing)"); any other verdict unchanged."""
    import dataclasses

    from engine.evaluate.verdict import REFERENCE_FAILED

    log = verdict.log or ""
    if verdict.status != "runtime_error" or not OOM_PATTERN.search(log):
        return verdict
    if log.startswith(REFERENCE_FAILED) or "ktree out of memory" in log:
        found = re.search(r"ktree out of memory while [^\n]*", log)
        first = found.group(0) if found else ("ktree out of memory while preparing the reference: "
                                              + _last_line(log) + " (not the candidate's doing)")
        return dataclasses.replace(verdict, status="crashed", log=f"{first}\n{log}")
    if describe_oom(log, job.problem_path) == "candidate":
        return dataclasses.replace(verdict, log=f"out of memory in the candidate: its own call raised"
                                   f" {_last_line(log)}\n{log}")
    return dataclasses.replace(verdict, status="crashed", log=f"ktree out of memory while checking or timing"
                               f" (ktree's own fp64 recheck or the reference, not the candidate's doing):"
                               f" {_last_line(log)}\n{log}")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
