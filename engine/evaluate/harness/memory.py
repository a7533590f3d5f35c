"""Memory proportional to the problem: what an evaluation may hold beside the problem's
own inputs, outputs and working set, and the streamed helpers that keep it there.

An evaluation's peak stays within `bound` = the reference's own peak + 2 x (inputs + outputs) +
MARGIN at any KernelBench size (inputs up to 16 GB). The `Plan`, made from trial 0's inputs and the
reference's measured peak on them, before anything else is drawn, decides:

- the answers' precision: fp64 where every phase's estimate with fp64 answers fits the bound, else
  the reference's own precision ("native"; the verdict says which: `Verdict.memory["answers"]`);
- whether the check trials' set may be cached on the device (`cache_bytes`: what is left of the
  bound for it), the timing rotation's byte budget (`rotation_bytes`), and whether the copies a
  check keeps of inputs and outputs are whole clones or chunked fingerprints (`LARGE_BYTES`).

Comparisons (`compare_tensors`) and fingerprints (`fingerprint`) stream in pieces of at most
PIECE_ELEMENTS elements: no full-size fp64 copy, no boolean-index scratch. `Peaks` reads what one
evaluation held: the GPU's caching allocator's peak and the process's resident peak (VmHWM, reset
through /proc/self/clear_refs).

Runs in the evaluation child; torch and the standard library only.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

GiB = 2**30
MARGIN = 2 * GiB  # the bound's fixed part (the acceptance's 2 GiB): ktree's scratch must fit in it
SCRATCH = 512 * 2**20  # what ktree's own streamed work may take at once (part of MARGIN)
PIECE_ELEMENTS = 2**23  # a streamed piece: 64 MiB in fp64 per operand
LARGE_BYTES = 256 * 2**20  # over this, a copy kept only to compare is a fingerprint, not a clone
WINDOW_BYTES = 256 * 2**20  # a sampled timed output over this keeps a secret window of this size
MIN_SETS = 2  # the timing rotation's fewest input sets (engine.evaluate.harness.rotation)
SLACK = 256 * 2**20  # kept free beside a full rotation (the GPU libraries' own workspaces)


# -- streaming ----------------------------------------------------------------------------------


def pieces(shape: tuple[int, ...], limit: int = PIECE_ELEMENTS) -> Iterator[tuple[Any, ...]]:
    """Index tuples that cut a tensor of `shape` into row-major pieces of at most `limit` elements
    (a piece may be one element larger than `limit` never: a row longer than it is cut again)."""
    numel = math.prod(shape)
    if not shape or numel <= limit:
        yield ()
        return
    row = math.prod(shape[1:])
    if row == 0:
        yield ()
        return
    if row <= limit:
        step = max(1, limit // row)
        for start in range(0, shape[0], step):
            yield (slice(start, start + step),)
        return
    for i in range(shape[0]):
        for rest in pieces(tuple(shape[1:]), limit):
            yield (i, *rest)


@dataclass
class Errors:
    """One output's comparison, accumulated piece by piece."""

    nonfinite: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    diff_sq: float = 0.0
    ref_sq: float = 0.0
    allclose: bool = True
    # for the error's structure (`systematic`): the count, sum of the reference, of the signed
    # error, and of their product
    n: int = 0
    ref_sum: float = 0.0
    diff_sum: float = 0.0
    diff_ref: float = 0.0

    @property
    def rel_l2(self) -> float:
        ref_norm = math.sqrt(self.ref_sq)
        diff_norm = math.sqrt(self.diff_sq)
        return diff_norm / ref_norm if ref_norm > 0 else diff_norm

    def systematic(self) -> tuple[float, float, float]:
        """The error's affine part: (a, b, share) where out - ref ~ a*ref + b fits best (least
        squares) and `share` is the part of the squared error that fit explains. Rounding errs
        with no such structure (share near 0 on any output of size); a scaled or shifted answer
        has share 1."""
        n, sr, srr, sd, sdr = self.n, self.ref_sum, self.ref_sq, self.diff_sum, self.diff_ref
        if not n or self.diff_sq <= 0:
            return 0.0, 0.0, 0.0
        det = srr * n - sr * sr
        if det > 1e-9 * srr * n:
            a, b = (sdr * n - sr * sd) / det, (srr * sd - sr * sdr) / det
        elif srr > 0:  # (a reference constant everywhere: scale and shift are one)
            a, b = sdr / srr, 0.0
        else:
            a, b = 0.0, sd / n
        return a, b, min(1.0, max(0.0, (a * sdr + b * sd) / self.diff_sq))


def compare_tensors(out: Any, ref: Any, atol: float, rtol: float, limit: int = PIECE_ELEMENTS) -> Errors:
    """`out` against `ref` (same shape) in fp64, piece by piece, on `out`'s device where it is a GPU
    (else `ref`'s): NaN/Inf counted, max abs and max relative error (over the elements whose
    reference is not zero), the squared norms for the relative L2 error, allclose(atol, rtol).
    Holds about six pieces at once, never a full-size copy."""
    import torch

    where = out.device if out.device.type == "cuda" else ref.device
    e = Errors()
    for index in pieces(tuple(out.shape), limit):
        o = out.detach()[index].to(where, torch.float64).reshape(-1)
        r = ref.detach()[index].to(where, torch.float64).reshape(-1)
        if not o.numel():
            continue
        finite = torch.isfinite(o)
        bad = int(o.numel() - int(finite.sum()))
        if bad:
            e.nonfinite += bad
            continue
        del finite
        diff = o - r
        e.n += diff.numel()
        e.ref_sum += float(r.sum())
        e.diff_sum += float(diff.sum())
        e.diff_ref += float(torch.dot(diff, r))
        diff.abs_()
        e.max_abs = max(e.max_abs, float(diff.max()))
        scale = r.abs()
        rel = torch.where(scale != 0, diff / torch.where(scale != 0, scale, 1.0), 0.0)
        e.max_rel = max(e.max_rel, float(rel.max()))
        del rel
        e.diff_sq += float(torch.dot(diff, diff))
        e.ref_sq += float(torch.dot(r, r))
        if e.allclose and not bool(torch.allclose(o, r, atol=atol, rtol=rtol)):
            e.allclose = False
    return e


def fingerprint(tensors: list[Any], key: int | None = None, limit: int = PIECE_ELEMENTS) -> list[str]:
    """Per tensor, two fp64 sums piece by piece: its plain sum and its sum weighted by a pattern
    drawn from `key` (secret to the caller): a write that moves values around without changing
    the plain sum changes the weighted one. As text, so that NaN equals NaN. Holds two pieces."""
    import torch

    key = secrets.randbits(62) if key is None else key
    out = []
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        t = t.detach()
        if not t.numel():
            out.append("0")
            continue
        plain = weighted = 0.0
        for n, index in enumerate(pieces(tuple(t.shape), limit)):
            piece = t[index].reshape(-1)
            piece = piece.to(torch.float64) if not piece.is_complex() else torch.view_as_real(piece).double()
            gen = torch.Generator(device=piece.device).manual_seed((key + n) % 2**62)
            weights = torch.rand(piece.shape, generator=gen, device=piece.device, dtype=torch.float64)
            plain += float(piece.sum())
            weighted += float(torch.dot(piece.reshape(-1), weights.reshape(-1)))
        out.append(f"{plain!r}/{weighted!r}")
    return out


def stream_sum(t: Any, limit: int = PIECE_ELEMENTS) -> float:
    """`t`'s sum in fp64, piece by piece (`torch.sum(t, dtype=torch.float64)` makes a whole fp64
    copy first: 16 GiB for an 8 GiB input)."""
    import torch

    t = t.detach()
    total = 0.0
    for index in pieces(tuple(t.shape), limit):
        piece = t[index]
        if piece.is_complex():
            piece = torch.view_as_real(piece)
        total += float(piece.to(torch.float64).sum()) if piece.numel() else 0.0
    return total


class Kept:
    """A copy of tensors kept only to be compared later: whole clones where small (exact: torch.equal),
    chunked fingerprints where over LARGE_BYTES (no full-size copy)."""

    def __init__(self, tensors: list[Any]):
        import torch

        self.large = tensor_bytes(tensors) > LARGE_BYTES
        self.key = secrets.randbits(62)
        if self.large:
            self.clones: list[Any] = []
            self.sums = fingerprint(tensors, self.key)
            self.shapes = [(tuple(t.shape), t.dtype) for t in tensors if isinstance(t, torch.Tensor)]
        else:
            self.clones = [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in tensors]

    def same(self, tensors: list[Any]) -> bool:
        import torch

        if not self.large:
            a = [t for t in self.clones if isinstance(t, torch.Tensor)]
            b = [t for t in tensors if isinstance(t, torch.Tensor)]
            return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x.to(y.device), y.detach())
                                            for x, y in zip(a, b, strict=True))
        shapes = [(tuple(t.shape), t.dtype) for t in tensors if isinstance(t, torch.Tensor)]
        return shapes == self.shapes and fingerprint(tensors, self.key) == self.sums

    def changed(self, tensors: list[Any]) -> list[int]:
        """The positions (among all of `tensors`) of tensors that differ from what was kept."""
        import torch

        if not self.large:
            return [i for i, (b, a) in enumerate(zip(self.clones, tensors, strict=True))
                    if isinstance(b, torch.Tensor) and not torch.equal(b, a)]
        now = fingerprint(tensors, self.key)
        positions = [i for i, t in enumerate(tensors) if isinstance(t, torch.Tensor)]
        return [positions[j] for j, (b, a) in enumerate(zip(self.sums, now, strict=True)) if b != a]


def tensor_bytes(obj: Any) -> int:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(o) for o in obj)
    return 0


def fp64_bytes(obj: Any) -> int:
    """What `obj`'s tensors take as fp64 copies (floating ones; others as they are)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * 8 if obj.is_floating_point() else obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(fp64_bytes(o) for o in obj)
    return 0


# -- the plan -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What one problem's evaluation may hold (bytes), decided before trial 1 is drawn."""

    inputs: int
    outputs: int
    inputs64: int
    outputs64: int
    reference_peak: int  # the reference's forward on trial 0, its inputs and outputs included
    trials: int
    answers: str  # fp64 | native
    bound: int
    estimate: int  # the largest phase's estimate with these answers
    cache_bytes: int  # what a cached set of the trials may take on the device (0: none)
    rotation_bytes: int  # the timing rotation's byte cap (sets, buffers, sampled outputs)
    phases: dict[str, int]
    weights: int = 0  # the reference's parameters, buffers and plain tensors (in reference_peak)
    weights64: int = 0  # an fp64 copy of them (held with fp64 answers)
    why: str = ""  # why the answers are not what the sizes alone would choose (fp64 failed, say)

    @property
    def workspace(self) -> int:
        return max(0, self.reference_peak - self.inputs - self.outputs - self.weights)

    @property
    def answer_bytes(self) -> int:
        return self.outputs64 if self.answers == "fp64" else self.outputs

    def record(self) -> dict[str, Any]:
        return {"inputs_bytes": self.inputs, "outputs_bytes": self.outputs,
                "reference_peak_bytes": self.reference_peak, "answers": self.answers,
                "bound_bytes": self.bound, "plan_bytes": self.estimate,
                "plan_phases": dict(self.phases), "weights_bytes": self.weights,
                **({"answers_why": self.why} if self.why else {})}


def _compute(inputs: int, outputs: int, inputs64: int, outputs64: int, workspace: int, answers: str) -> int:
    """What computing one set's answers takes (its inputs drawn, the reference's work)."""
    if answers == "fp64":
        return inputs + inputs64 + outputs64 + 2 * workspace  # drawn, fp64 copies, ref64's work
    return inputs + outputs + workspace


def _phases(inputs: int, outputs: int, inputs64: int, outputs64: int, workspace: int, trials: int,
            answers: str, cached: int, weights: int = 0, weights64: int = 0) -> dict[str, int]:
    """Each phase's peak estimate (bytes) with `answers` and a cached set of `cached` bytes; the
    models held in each: the reference (`weights`), its fp64 copy with fp64 answers (`weights64`),
    and from the candidate's load on, the candidate's own (taken as the reference's size)."""
    answer = outputs64 if answers == "fp64" else outputs
    compute = _compute(inputs, outputs, inputs64, outputs64, workspace, answers)
    kept_inputs = 0 if inputs > LARGE_BYTES else inputs  # the inputs-modified copy (else fingerprints)
    problem = inputs + outputs + workspace
    window = min(outputs, WINDOW_BYTES)
    before = weights + (weights64 if answers == "fp64" else 0)  # the reference, its fp64 copy
    models = before + weights  # ... and the candidate
    return {
        # the trials' answers before the candidate: the first and one other, one being computed
        "prepare": before + cached + (0 if cached else 2 * answer) + compute,
        # a check trial: the candidate's inputs and outputs, its kept copy, the answer computed
        # after its outputs exist (or read from the cache), the comparison's pieces
        "check": models + cached + inputs + outputs + kept_inputs + (answer if cached else compute) + SCRATCH,
        # trial 0's extra call, on a copy of its inputs, beside its outputs
        "passed": models + cached + problem + kept_inputs + inputs + outputs,
        # timing (a lean rotation: two sets in place, sampled windows) and the recheck after it
        # (a cached set stays where it is: the next evaluation of the problem uses it)
        "time": models + cached + 2 * inputs + 2 * outputs + workspace + 3 * window,
        "recheck": models + cached + 2 * inputs + 3 * window + compute + SCRATCH,
    }


def make_plan(inputs: int, outputs: int, inputs64: int, outputs64: int, reference_peak: int,
              trials: int, gpu_free: int | None = None, fp64: bool = True, weights: int = 0,
              weights64: int = 0) -> Plan:
    """The answers' precision and the caches' room for a problem of these sizes: fp64 where every
    phase fits the bound with them (and `fp64` is allowed), else native; a device cache of the
    trials where it fits beside the largest phase (and in half of `gpu_free`, when given).
    `weights`: the reference's own tensors (part of `reference_peak`), `weights64` their fp64
    copy's: a weight-heavy model is held by the reference, the candidate, and with fp64 answers
    an fp64 copy, and every phase counts them."""
    reference_peak = max(reference_peak, inputs + outputs + weights)
    workspace = reference_peak - inputs - outputs - weights
    bound = reference_peak + 2 * (inputs + outputs) + MARGIN
    chosen, phases = "native", {}
    models = {"weights": weights, "weights64": weights64}
    for answers in (("fp64", "native") if fp64 else ("native",)):
        phases = _phases(inputs, outputs, inputs64, outputs64, workspace, trials, answers, 0, **models)
        if max(phases.values()) <= bound:
            chosen = answers
            break
    answer = outputs64 if chosen == "fp64" else outputs
    compute = _compute(inputs, outputs, inputs64, outputs64, workspace, chosen)

    def rotation_room(phases: dict[str, int], cached: int) -> int:
        # A full rotation's sets and buffers live from before the candidate to the recheck: beside
        # every check trial, trial 0's extra call, each timed call and the recheck's answers.
        held = 2 * weights + (weights64 if chosen == "fp64" else 0)
        beside = max(phases["check"], phases["passed"], held + cached + outputs + workspace + SCRATCH,
                     held + cached + compute + SCRATCH)
        return max(min(2 * (inputs + outputs) + MARGIN - SCRATCH, bound - beside - SLACK), 0)

    cache = trials * (inputs + answer)
    with_cache = _phases(inputs, outputs, inputs64, outputs64, workspace, trials, chosen, cache, **models)
    full = (MIN_SETS + 2) * inputs  # a rotation that is not lean: its sets and two buffers
    cache_ok = (max(with_cache.values()) <= bound and (gpu_free is None or cache <= gpu_free // 2)
                # the rotation goes first: a cache that would make it lean (its sets passed in
                # place, a memo keyed on their address unseen) stays on the host
                and (rotation_room(with_cache, cache) >= full or rotation_room(phases, 0) < full))
    if cache_ok:
        phases = with_cache
    cached = cache if cache_ok else 0
    rotation = rotation_room(phases, cached)
    if rotation >= full:  # timing and the recheck with a full rotation in place of two sets
        held = 2 * weights + (weights64 if chosen == "fp64" else 0)
        phases = {**phases, "time": max(phases["time"], held + cached + rotation + outputs + workspace),
                  "recheck": max(phases["recheck"], held + cached + rotation + compute + SCRATCH)}
    return Plan(inputs=inputs, outputs=outputs, inputs64=inputs64, outputs64=outputs64,
                reference_peak=reference_peak, trials=trials, answers=chosen, bound=bound,
                estimate=max(phases.values()), cache_bytes=cached,
                rotation_bytes=rotation, phases=phases, weights=weights, weights64=weights64)


def fits_device(inputs: int, outputs: int, total: int) -> str | None:
    """None where a problem's inputs and outputs can be on a GPU of `total` bytes at once, else why
    not (one line): said before any work is done."""
    need = inputs + outputs
    if total and need > total:
        return (f"the problem does not fit this GPU: its inputs ({inputs / GiB:.1f} GiB) and outputs"
                f" ({outputs / GiB:.1f} GiB) take more than its {total / GiB:.1f} GiB")
    return None


# -- measured peaks -----------------------------------------------------------------------------


def proc_kib_field(path: str, field: str) -> int | None:
    """A `Field:   N kB` line of a /proc file, in bytes (None where it cannot be read)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _status_kib(field: str) -> int | None:
    return proc_kib_field("/proc/self/status", field)


# Per phase of the evaluation under way, the peak (bytes) it reached (`mark`), and the highest so far.
PHASES: dict[str, int] = {}
_HIGHEST: dict[str, int] = {"gpu": 0, "host": 0}


def _now_peak(device: str) -> int:
    if device == "cuda":
        import torch

        return int(torch.cuda.max_memory_allocated())
    return _status_kib("VmHWM") or 0


def _reset(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats()
    else:
        Peaks._reset_host()


def mark(name: str, device: str) -> int:
    """The peak since the last mark, recorded as phase `name` (the GPU allocator's on cuda, the
    resident set's on the cpu), folded into the evaluation's highest, and the peak reset."""
    try:
        peak = _now_peak(device)
    except Exception:
        return 0
    PHASES[name] = max(PHASES.get(name, 0), peak)
    key = "gpu" if device == "cuda" else "host"
    _HIGHEST[key] = max(_HIGHEST[key], peak)
    _reset(device)
    return peak


class Peaks:
    """What one evaluation held at most: the GPU's allocator peak (bytes allocated by tensors, the
    process's own) and the host's resident peak (VmHWM, reset where the kernel allows), and the
    peak of each phase marked (`mark`)."""

    def __init__(self, device: str):
        self.device = device
        PHASES.clear()
        _HIGHEST.update(gpu=0, host=0)
        self.host_reset = self._reset_host()
        self.host_start = _status_kib("VmRSS") or 0
        self.gpu_start = 0
        if device == "cuda":
            import torch

            torch.cuda.reset_peak_memory_stats()
            self.gpu_start = torch.cuda.memory_allocated()

    @staticmethod
    def _reset_host() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def gpu_peak(self) -> int | None:
        if self.device != "cuda":
            return None
        import torch

        return max(int(torch.cuda.max_memory_allocated()), _HIGHEST["gpu"])

    def host_peak(self) -> int | None:
        now = _status_kib("VmHWM")
        return None if now is None else max(now, _HIGHEST["host"])

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"peak_gpu_bytes": self.gpu_peak(), "gpu_start_bytes": self.gpu_start or None,
                               "host_peak_bytes": self.host_peak(), "host_start_bytes": self.host_start or None,
                               "phase_peaks": dict(PHASES) or None}
        if not self.host_reset:
            out["host_peak_note"] = "the process's resident peak since it started (VmHWM could not be reset)"
        return {k: v for k, v in out.items() if v is not None}


def host_rss() -> int:
    return _status_kib("VmRSS") or 0


def gpu_total() -> int:
    import torch

    try:
        return int(torch.cuda.get_device_properties(0).total_memory) if torch.cuda.is_available() else 0
    except Exception:
        return 0


