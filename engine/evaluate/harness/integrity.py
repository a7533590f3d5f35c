"""The detectors behind the integrity checks: ways a candidate can pass the numeric check without
doing the work (the op recorder and its lineage, outputs, inputs, threads, the harness's functions,
precision).

Each returns reasons (strings); any reason makes the verdict `flagged`. The checks that call them,
their names, phases and evidence are in the registry (engine.evaluate.harness.integrity_checks). Imports
only torch and the standard library (runs in the evaluation child).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from engine.evaluate.harness import clocks

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


# A reference op with at least this share of the reference's op time is one of its main ops (the
# costliest op always is).
MAIN_OP_SHARE = 0.2
# torch doing all of the reference's work: the reference's ops the candidate also calls take all but
# this share of the reference's op time (the rest: ops too small to be the candidate's own work).
ALL_WORK_SLACK = 0.01

# aten ops that do the same work under different names (a reference's `nn.Linear` dispatches addmm,
# a candidate's `torch.mm` mm): an op is judged by its family. Any other op is its own family, its
# name without the in-place underscore (relu_ is relu).
OP_FAMILIES: dict[str, frozenset[str]] = {k: frozenset(v.split()) for k, v in {
    "matmul": "_addmm_activation _int_mm _scaled_mm _weight_int8pack_mm addbmm addmm addmv addr baddbmm "
        "bmm chain_matmul dot einsum linear matmul mm multi_dot mv outer tensordot vdot",
    "convolution": "_conv_depthwise2d _convolution _convolution_mode _nnpack_spatial_convolution "
        "_slow_conv2d_forward conv1d conv2d conv3d conv_depthwise3d conv_transpose1d "
        "conv_transpose2d conv_transpose3d convolution convolution_overrideable cudnn_convolution "
        "cudnn_convolution_add_relu cudnn_convolution_relu cudnn_convolution_transpose "
        "miopen_convolution mkldnn_convolution slow_conv3d slow_conv3d_forward slow_conv_dilated2d "
        "slow_conv_dilated3d slow_conv_transpose2d slow_conv_transpose3d thnn_conv2d",
    "softmax": "_log_softmax _safe_softmax _softmax log_softmax softmax",
    "layer_norm": "_fused_rms_norm layer_norm native_layer_norm rms_norm",
    "group_norm": "group_norm native_group_norm",
    "batch_norm": "_batch_norm_impl_index _native_batch_norm_legit _native_batch_norm_legit_functional "
        "_native_batch_norm_legit_no_training batch_norm cudnn_batch_norm instance_norm "
        "miopen_batch_norm native_batch_norm",
    "attention": "_efficient_attention_forward _flash_attention_forward _scaled_dot_product_attention_math "
        "_scaled_dot_product_cudnn_attention _scaled_dot_product_efficient_attention "
        "_scaled_dot_product_flash_attention _scaled_dot_product_flash_attention_for_cpu "
        "_scaled_dot_product_fused_attention_overrideable scaled_dot_product_attention",
    "nll_loss": "cross_entropy_loss nll_loss nll_loss2d_forward nll_loss_forward nll_loss_nd",
    "max_pool": "max_pool1d max_pool1d_with_indices max_pool2d max_pool2d_with_indices max_pool3d "
        "max_pool3d_with_indices mkldnn_max_pool2d mkldnn_max_pool3d quantized_max_pool2d",
    "avg_pool": "_adaptive_avg_pool2d _adaptive_avg_pool3d adaptive_avg_pool1d adaptive_avg_pool2d "
        "adaptive_avg_pool3d avg_pool1d avg_pool2d avg_pool3d mkldnn_adaptive_avg_pool2d",
}.items()}
_FAMILY_OF = {name: family for family, names in OP_FAMILIES.items() for name in names}
# Families that do a problem's heavy work wherever they appear: a candidate that calls one its
# reference does not (an im2col convolution done by torch.mm) leaves heavy work to a library.
HEAVY_FAMILIES = frozenset({"matmul", "convolution", "attention"})


def op_family(name: str) -> str:
    """The family an aten op name belongs to (OP_FAMILIES), else the name without a trailing `_`."""
    return _FAMILY_OF.get(name) or _FAMILY_OF.get(name.rstrip("_")) or name.rstrip("_")


STORAGE_PIECE = 6 * 2**22  # bytes a storage fingerprint sums at once (a multiple of 2 and 3)


def _fingerprint(t: Any) -> Any:
    """Device scalars summarising every byte of `t`'s storage (its byte sum, and the sums of two
    strided subsets, so a permutation of bytes shows too): any write into the storage, by any
    kernel, seen by the dispatcher or not, changes them with overwhelming likelihood."""
    storage = t.untyped_storage()
    if storage.nbytes() == 0:
        return None
    flat = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)
    total = None
    # In pieces: an int64 sum of uint8 bytes makes an int64 copy of what it sums (8x the storage:
    # 48 GiB for a 6 GiB output). A piece's length is a multiple of 6, so the strided
    # subsets keep their phase from piece to piece, and the sums are the whole storage's.
    for start in range(0, storage.nbytes(), STORAGE_PIECE):
        piece = flat[start:start + STORAGE_PIECE]
        sums = torch.stack([piece.sum(dtype=torch.int64), piece[::2].sum(dtype=torch.int64),
                            piece[1::3].sum(dtype=torch.int64)])
        total = sums if total is None else total + sums
    return total


@dataclass
class _Written:
    """What the recorder knows of one storage written during the call: whether its contents trace
    back to work outside the dispatcher (the candidate's own kernels), or came from torch ops on
    data that existed before the call (inputs, weights) and constants; its fingerprint when written
    (None: allocated and never written by a seen op)."""

    own: bool
    fingerprint: Any


ALLOC_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_"})
CONST_OPS = frozenset({"zeros", "zeros_like", "new_zeros", "ones", "ones_like", "full", "full_like", "new_full",
                       "fill", "fill_", "zero_", "arange", "eye", "linspace", "scalar_tensor", "lift_fresh"})
VIEW_OPS = frozenset({"view", "_unsafe_view", "reshape", "as_strided", "t", "transpose", "permute", "expand",
                      "detach", "alias", "select", "slice", "unsqueeze", "squeeze", "unbind", "split",
                      "split_with_sizes", "chunk", "narrow", "flatten", "unflatten", "view_as", "expand_as",
                      "_reshape_alias", "set_", "_local_scalar_dense", "is_same_size", "sym_size", "sym_stride",
                      "sym_numel", "sym_storage_offset", "item", "record_stream",
                      "_has_compatible_shallow_copy_type"})


class _OpRecorder(TorchDispatchMode):
    """Counts the aten compute ops a call dispatches and times each (clocks bound at import,
    engine.evaluate.harness.clocks): wall time on the cpu, CUDA events on the current stream on a GPU.

    With `lineage`, it also follows where each tensor written during the call got its contents:
    torch ops on pre-existing data (inputs, weights, constants), or the candidate's own kernels,
    which the dispatcher never sees (they write into memory torch allocated for them, or into a
    torch op's output after it). Whether an output is torch's work alone is then known without
    timing anything."""

    def __init__(self, device: str = "cpu", lineage: bool = False) -> None:
        super().__init__()
        self.compute: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        self.device = device
        self.lineage = lineage
        self.written: dict[int, _Written] = {}
        self._events: list[tuple[str, Any, Any]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        kwargs = kwargs or {}
        own_in = self._own_inputs(name, args, kwargs) if self.lineage else False
        if name in NON_COMPUTE_OPS:
            out = func(*args, **kwargs)
        else:
            self.compute[name] = self.compute.get(name, 0) + 1
            out = self._timed(name, func, args, kwargs)
        if self.lineage:
            self._wrote(name, out, args, kwargs, own_in)
        return out

    def _timed(self, name: str, func: Any, args: Any, kwargs: Any) -> Any:
        if self.device == "cuda":
            start, end = clocks.timed_event(), clocks.timed_event()
            clocks.event_record(start)
            out = func(*args, **kwargs)
            clocks.event_record(end)
            self._events.append((name, start, end))
            return out
        t0 = clocks.perf_counter()
        out = func(*args, **kwargs)
        self.seconds[name] = self.seconds.get(name, 0.0) + clocks.since(t0)
        return out

    # -- lineage ---------------------------------------------------------------------------

    @staticmethod
    def _tensors(value: Any) -> list[Any]:
        if isinstance(value, torch.Tensor):
            return [value]
        if isinstance(value, (list, tuple)):
            return [t for v in value for t in _OpRecorder._tensors(v)]
        if isinstance(value, dict):
            return [t for v in value.values() for t in _OpRecorder._tensors(v)]
        return []

    def traced_own(self, t: Any) -> bool:
        """Whether `t`'s contents trace back to the candidate's own kernels: its storage was written
        during the call by work the dispatcher did not see, or by a seen op fed by such work. A
        storage the call never wrote (an input, a weight) is not."""
        try:
            key = t.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):
            return True
        seen = self.written.get(key)
        if seen is None:
            return False
        if seen.own or seen.fingerprint is None:
            return True  # fed by own work, or allocated and filled where the dispatcher cannot see
        now = _fingerprint(t)
        return now is None or not bool(torch.equal(now, seen.fingerprint))

    def _own_inputs(self, name: str, args: Any, kwargs: Any) -> bool:
        """Whether what an op reads traces back to own work (its destination excluded where it only
        writes: copy_'s first argument, an `out=` tensor)."""
        if name in ALLOC_OPS or name in VIEW_OPS or name in CONST_OPS:
            return False
        read = list(args[1:]) if name == "copy_" else list(args)
        read_kw = {k: v for k, v in kwargs.items() if k != "out"}
        return any(self.traced_own(t) for t in self._tensors((read, read_kw)))

    def _wrote(self, name: str, out: Any, args: Any, kwargs: Any, own_in: bool) -> None:
        if name in VIEW_OPS:
            return
        outs = self._tensors(out) + self._tensors(kwargs.get("out"))
        if name.endswith("_") and args and isinstance(args[0], torch.Tensor):
            outs = [args[0], *outs]  # in place: the first argument is written
        for t in outs:
            try:
                key = t.untyped_storage().data_ptr()
            except (RuntimeError, NotImplementedError):
                continue
            if name in ALLOC_OPS:
                self.written[key] = _Written(own=False, fingerprint=None)
            else:
                self.written[key] = _Written(own=own_in, fingerprint=_fingerprint(t))

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
    """The aten compute ops of one forward: calls and seconds per op, the forward's own seconds,
    and (where the call's lineage was followed) whether every output is torch's work alone: computed
    by torch ops from the inputs and weights, with nothing of the candidate's own kernels in it."""

    calls: dict[str, int]
    seconds: dict[str, float]
    total_s: float
    torch_alone: bool = False

    def share(self, names: Any = None) -> float:
        """The named ops' (default: all) share of the forward's time, at most 1."""
        picked = self.seconds if names is None else {k: v for k, v in self.seconds.items() if k in names}
        spent = sum(picked.values())
        return min(1.0, spent / self.total_s) if self.total_s > 0 else (1.0 if spent > 0 else 0.0)

    def family_shares(self) -> dict[str, float]:
        """Each op family's share of this forward's op time (OP_FAMILIES); every family 0 where no
        op took measurable time."""
        spent = sum(self.seconds.values())
        shares: dict[str, float] = {}
        for name in self.calls:
            family = op_family(name)
            spent_here = self.seconds.get(name, 0.0) / spent if spent > 0 else 0.0
            shares[family] = shares.get(family, 0.0) + spent_here
        return shares

    def main_families(self) -> frozenset[str]:
        """The families where this (reference) forward's time goes: the costliest, and every family
        with at least MAIN_OP_SHARE of the ops' time."""
        shares = self.family_shares()
        if not shares:
            return frozenset()
        top = max(shares, key=lambda k: shares[k])
        return frozenset({top} | {k for k, v in shares.items() if v >= MAIN_OP_SHARE})

    def main_ops(self) -> frozenset[str]:
        """The aten ops of the main families (main_families)."""
        main = self.main_families()
        return frozenset(k for k in self.calls if op_family(k) in main)


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


def profile_ops(call: Any, device: str = "cpu", lineage: bool = False) -> OpProfile:
    """Each aten compute op's time in one recorded `call()`, against that whole call's (the
    recorder's own overhead included: a caller with plain timings of the same call puts their
    fastest in `total_s` instead); with `lineage`, whether the call's outputs are torch's work
    alone (OpProfile.torch_alone)."""
    recorder = _OpRecorder(device, lineage=lineage)
    with recorder:
        out, total = timed_call(call, device)
    recorder.settle()
    alone = False
    if lineage:
        outs = recorder._tensors(out)
        alone = bool(outs) and bool(recorder.compute) and all(
            _written_by_torch(recorder, t) for t in outs)
    return OpProfile(dict(recorder.compute), dict(recorder.seconds), total, alone)


def _written_by_torch(recorder: _OpRecorder, t: Any) -> bool:
    """`t` was written during the call by seen torch ops, none of them fed by own work."""
    try:
        key = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return False
    return key in recorder.written and not recorder.traced_own(t)


def _named(ops: Any) -> str:
    return ", ".join(f"aten.{k}" for k in ops)


def judge_torch_ops(ops: OpProfile, reference: OpProfile) -> tuple[list[str], list[str], dict[str, Any]]:
    """(flags, notes, library mark) for the torch compute ops of ModelNew.forward, judged by what
    they do of the *reference's* work (its op families' shares of its time), never by their share
    of the candidate's own time (docs/verdicts.md):

    - every output torch's work alone (OpProfile.torch_alone), or torch doing all of the
      reference's work (its families take all but ALL_WORK_SLACK of the reference's op time):
      flagged — a fallback, whatever else the candidate runs;
    - torch doing a main family of the reference (or heavy work the reference does with other ops)
      while the candidate's own kernels do the rest: correct with a library mark and a note;
    - anything else (epilogues, masks, final reductions, casts: ops the reference barely spends
      time on, or does not run at all): a note naming them."""
    if not ops.calls:
        return [], [], {}
    ref_shares = reference.family_shares()
    ref_main = reference.main_families()
    ranked = sorted(ops.calls, key=lambda k: (-ref_shares.get(op_family(k), 0.0), k))
    families = {op_family(k) for k in ops.calls}
    covered = sum(v for f, v in ref_shares.items() if f in families)
    if ops.torch_alone:
        return [f"torch-ops: ModelNew.forward's output is torch's work alone ({_named(ranked[:6])});"
                f" its own kernels contribute nothing to it"], [], {}
    if ref_shares and (covered >= 1 - ALL_WORK_SLACK or families >= set(ref_shares)):
        named = _named(ranked[:6])
        return [f"torch-ops: torch does all of the reference's work ({named}: {100 * covered:.0f} % of the"
                f" reference's time); ModelNew's own kernels do none of it"], [], {}
    library_families = (families & ref_main) | (families & HEAVY_FAMILIES - set(ref_shares))
    library_ops = [k for k in ranked if op_family(k) in library_families]
    rest = [k for k in ranked if k not in library_ops]
    notes: list[str] = []
    mark: dict[str, Any] = {}
    if library_ops:
        share = sum(ref_shares.get(f, 0.0) for f in library_families)
        mark = {"ops": [f"aten.{k}" for k in library_ops], "share": round(share, 4)}
        notes.append(f"library: {_named(library_ops)} by torch or a vendor library does the reference's main"
                     f" work ({100 * share:.0f} % of its time); ModelNew's own kernels do the rest"
                     f" ({100 * (1 - covered):.0f} %)")
    if rest:
        rest_share = sum(ref_shares.get(f, 0.0) for f in {op_family(k) for k in rest})
        notes.append(f"torch-ops: {_named(rest[:6])} besides its kernels ({100 * rest_share:.1f} % of the"
                     f" reference's time: an epilogue, a mask, a final reduction or a layout change);"
                     f" its kernels do the main work")
    return [], notes, mark


def check_forward_ops(call: Any, device: str = "cpu") -> tuple[OpProfile, list[str]]:
    """One call watched for torch compute ops and their lineage (for judge_torch_ops), and for
    Python threads it starts (the recorder is thread-local: torch ops in a helper thread would
    otherwise go unseen: flagged here)."""
    import threading

    started: list[str] = []
    original_start = threading.Thread.start

    def counting_start(thread: threading.Thread) -> None:
        started.append(thread.name)
        original_start(thread)

    threading.Thread.start = counting_start  # type: ignore[method-assign]
    try:
        ops = profile_ops(call, device, lineage=True)
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


def check_refilled_inputs(call: Any, expected: Any, device: str, compare: Any) -> list[str]:
    """The candidate on a copy of trial 1's inputs, then on the same tensors refilled in place with
    trial 2's values (the same pointers, a new version counter), each answer compared: an answer
    kept by the inputs' address is wrong on one of the two calls, wherever the allocator put the
    copy. Skipped (no flag) where a copy of one input set would not fit the rotation's budget
    (engine.evaluate.harness.rotation.lean; there the byte speed of light speaks)."""
    from engine.evaluate.harness import rotation

    plan = getattr(expected, "plan", None)  # engine.evaluate.harness.memory.Plan
    if plan is not None and 3 * (plan.inputs + plan.outputs) > plan.rotation_bytes:
        return []  # two input sets, a copy and their answers would not fit the problem's memory plan
    first, second = expected.trial_inputs(0, device), expected.trial_inputs(1, device)
    if len(first) != len(second) or any(
            isinstance(a, torch.Tensor) and (not isinstance(b, torch.Tensor) or a.shape != b.shape)
            for a, b in zip(first, second, strict=True)):
        return []  # (trials whose inputs differ in shape: no buffer to refill)
    budget = rotation.budget_bytes(device)
    if plan is not None:
        budget = min(budget, plan.rotation_bytes)
    if rotation.lean(rotation.tensor_bytes(first), budget):
        return []
    buffers = snapshot(first)
    del first
    # Both calls' answers are compared: the new buffers may sit where an earlier trial's inputs
    # were (the caching allocator reuses freed blocks), and a memo keyed on that address answers
    # the first call with that trial's outputs.
    which, ok, reason = "", True, ""
    try:
        with torch.no_grad():
            which = "trial 1's values in new buffers"
            out = call(*buffers)
            ok, _, reason = compare(out, expected.trial_expected(0, device))
            del out
            if ok:
                for b, s in zip(buffers, second, strict=True):
                    if isinstance(b, torch.Tensor):
                        b.copy_(s)
                which = "the same buffers refilled in place with trial 2's values"
                out = call(*buffers)
                ok, _, reason = compare(out, expected.trial_expected(1, device))
    except Exception as exc:  # values that passed their own trial
        ok, reason = False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if ok:
        return []
    return [f"refilled-inputs: {which} got a wrong answer ({reason}): an answer kept by the inputs' address"]


# Harness functions the timing and the check rely on; captured before the candidate is imported.
_HARNESS = [
    (torch, "allclose"), (torch, "equal"), (torch, "isfinite"), (torch.Tensor, "norm"),
    (torch.cuda, "synchronize"), (torch.cuda, "Event"), (torch.cuda.Event, "record"),
    (torch.cuda.Event, "elapsed_time"), (time, "perf_counter"), (time, "monotonic"),
    (torch.nn.Module, "__call__"),
    # The harness's own bound clocks (engine.evaluate.harness.clocks): out of reach unless rebound there.
    *((clocks, name) for name in ("perf_counter", "monotonic", "cuda_synchronize", "CudaEvent", "event_record",
                                  "event_synchronize", "event_elapsed_ms", "module_call", "timed_event",
                                  "since")),
]


def harness_overrides(model: Any) -> list[str]:
    """A ModelNew that overrides what the harness calls: `nn.Module.__call__` (the harness calls
    every model through the original, engine.evaluate.harness.clocks.module_call, so the override would
    never run and forward alone would be judged) or `__call__` on a model that is no nn.Module."""
    if not isinstance(model, torch.nn.Module):
        return []
    overridden = [cls.__name__ for cls in type(model).__mro__
                  if cls is not torch.nn.Module and "__call__" in vars(cls)]
    if overridden or "__call__" in vars(model):
        where = overridden[0] if overridden else "the instance"
        return [f"harness: {type(model).__name__} overrides nn.Module.__call__ (in {where}); the harness calls"
                f" every model through nn.Module.__call__ -> forward, so put the work in forward"]
    return []


def bound_forward(model: Any) -> Any:
    """What `model.forward` is now (the instance's own attribute, else its class's function)."""
    if not isinstance(model, torch.nn.Module):
        return None
    own = vars(model).get("forward")
    return own if own is not None else getattr(type(model), "forward", None)


def check_forward_unchanged(model: Any, at_load: Any) -> list[str]:
    """ModelNew.forward replaced while it ran (on the instance or its class): the calls checked and
    the calls timed may not have run the same code."""
    if at_load is None or bound_forward(model) is at_load:
        return []
    return [f"harness: {type(model).__name__}.forward was replaced at run time (the checked and the timed"
            f" calls may have run different code)"]


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


# An fp32 problem's answer within this relative L2 error of fp64 is fp32 work (honest fp32 kernels
# err by 1e-7..1e-5, whatever their order of summation); 16-bit and TF32 arithmetic err by 2e-4
# and more (fp16 and TF32 inputs ~3e-4, bf16 ~2e-3 on softmax, matmul, conv, layernorm).
FP32_REL_L2 = 1e-4
# ... unless the reference itself errs nearly as much (cuDNN's TF32 convolutions): then the candidate
# is flagged only when it errs this many times more than the reference does.
PRECISION_MARGIN = 20.0


def precision_flags(job: Any, errs: dict[str, float], native: dict[str, float],
                    dtypes: list[Any]) -> list[str]:
    """A precision downgrade: an fp32 problem (outputs in fp32, no --precision cast) whose answers
    err against fp64 like 16-bit (or TF32) arithmetic, well beyond the reference's own error in fp32.
    Passing the method's tolerance (1e-2 by default) does not make such work fp32 work."""
    if job.precision not in (None, "fp32") or not dtypes or any(d != torch.float32 for d in dtypes):
        return []
    err, ref_err = errs.get("rel_l2_err", 0.0), native.get("rel_l2_err", 0.0)
    if err > FP32_REL_L2 and err > PRECISION_MARGIN * ref_err:
        return [f"precision: an fp32 problem answered with a relative L2 error of {err:.2g} against fp64,"
                f" that of 16-bit or TF32 arithmetic (fp32 work errs by under {FP32_REL_L2:g}; the"
                f" reference itself by {ref_err:.2g}): compute in fp32"]
    return []
