"""The evaluation child's checking: the candidate's outputs against the reference's fp64 answers
on every trial's inputs (engine.evaluate.harness.expected_cache caches them), allclose and relative L2 error,
with the integrity checks of engine.evaluate.harness.integrity_checks watching each call.

Runs untrusted code in the child's process (engine.evaluate.child.evaluation); torch and the standard
library only.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Collection
from typing import Any

from engine.evaluate.child.load import EvalFailure, format_exc, make_inputs
from engine.evaluate.harness import clocks, expected_cache, integrity_checks, memory
from engine.evaluate.jobs import EvalJob
from engine.evaluate.verdict import Verdict


def flatten(out: Any) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flatten(o)]
    raise EvalFailure("incorrect", f"output is a {type(out).__name__}, not a tensor")


# A systematic error: an fp32 output whose error is mostly (this share of its square) a scale or a
# shift of the answer, and that part alone over this relative L2 size, is a wrong answer even inside
# the tolerance (issue: a 1 % scale passed as "precision"). Rounding has no such structure: 16-bit
# round-to-nearest errs by at most 2^-9 of each value, without bias (share ~0); 16-bit truncation by
# up to 2^-8, biased but with share ~0.72 on spread values (both measured on 2M normal values).
SYSTEMATIC_SHARE = 0.9
SYSTEMATIC_REL = 2.0 ** -9


def compare(out: Any, expected: Any, atol: float, rtol: float, dtypes: list[Any] | None = None,
            systematic: bool = False, noise: Collection[int] = ()) -> tuple[bool, dict[str, float], str]:
    """allclose(atol, rtol) AND ||out-ref||/||ref|| <= rtol, per output tensor; NaN/Inf fail;
    shapes must match, and dtypes too where `dtypes` (the reference's, in the problem's own
    precision) is given; with `systematic`, an fp32/fp64 output whose error is a scale or shift of
    the answer fails too (SYSTEMATIC_SHARE, SYSTEMATIC_REL). An output in `noise` (its reference is
    noise around zero at its own precision: `noise_outputs`) is judged by allclose alone, as
    KernelBench judges every output: no relative L2 error (nor its structure) is measured against
    a norm that is rounding error, and it is left out of `rel_l2_err`."""
    import torch

    outs, refs = flatten(out), flatten(expected)
    if len(outs) != len(refs):
        return False, {}, f"{len(outs)} outputs, expected {len(refs)}"
    errs = {"max_abs_err": 0.0, "max_rel_err": 0.0, "rel_l2_err": 0.0}
    ok, reason = True, ""
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        if tuple(o.shape) != tuple(r.shape):
            return False, errs, f"output {i} has shape {tuple(o.shape)}, expected {tuple(r.shape)}"
        if dtypes is not None and o.dtype != dtypes[i]:
            return False, errs, f"output {i} has dtype {o.dtype}, expected {dtypes[i]}"
        e = memory.compare_tensors(o, r, atol, rtol)  # streamed: no full-size fp64 copy
        if e.nonfinite:
            return False, errs, f"output {i} has {e.nonfinite} NaN/Inf values"
        # max_rel: elementwise |out - ref| / |ref| over every element whose reference is not zero
        # (where it is, only max_abs_err speaks). Not only where |ref| > atol: an output whose
        # reference is small everywhere would report 0 however wrong it is.
        rel_l2 = e.rel_l2
        errs["max_abs_err"] = max(errs["max_abs_err"], e.max_abs)
        errs["max_rel_err"] = max(errs["max_rel_err"], e.max_rel)
        if i not in noise:
            errs["rel_l2_err"] = max(errs["rel_l2_err"], rel_l2)
        if not e.allclose:
            ok, reason = False, reason or f"output {i}: max abs error {e.max_abs:.3g} exceeds allclose"
        elif i in noise:
            continue  # (allclose alone: the reference's own scale, element by element)
        elif rel_l2 > rtol:
            ok, reason = False, reason or f"output {i}: relative L2 error {rel_l2:.3g} > {rtol:g}"
        elif systematic and o.dtype in (torch.float32, torch.float64):
            a, b, share = e.systematic()
            if share >= SYSTEMATIC_SHARE and rel_l2 * share ** 0.5 > SYSTEMATIC_REL:
                ok, reason = False, reason or (
                    f"output {i}: a systematic error, not rounding: {_affine(a, b, e)} ({share:.0%} of"
                    f" the error; relative L2 error {rel_l2:.3g}, inside the tolerance)")
    return ok, errs, reason


def _affine(a: float, b: float, e: Any) -> str:
    """`out ~ answer x (1+a) + b` in words, leaving out a term too small to matter."""
    rms = (e.ref_sq / e.n) ** 0.5 if e.n else 0.0
    scale = abs(a) * rms >= 0.1 * abs(b) or not b
    shift = abs(b) >= 0.1 * abs(a) * rms and b
    return "it is the answer" + (f" x {1 + a:.4g}" if scale else "") + (
        f" {'+' if b > 0 else '-'} {abs(b):.3g}" if shift else "")


# An output whose reference errs against fp64 by more than this share of the tolerance (relative L2)
# is noise around zero at its own precision (a mean of group-normalised values: ~1e-8 in fp32 where
# fp64 gives ~1e-17): its relative L2 error measures rounding, not work, and honest kernels err as
# much as the reference or a few times more (another order of summation), so it is judged by allclose
# alone, on the reference's own scale element by element, as KernelBench judges every output.
NOISE_SHARE = 0.25


def noise_outputs(checks: Any, rtol: float) -> frozenset[int]:
    """The outputs (by position) whose reference is noise around zero: its own relative L2 error
    against fp64 on trial 0 over NOISE_SHARE x `rtol` (none with native answers: not measured)."""
    own = getattr(checks, "native_rel_l2", None) or []
    return frozenset(i for i, err in enumerate(own) if err > NOISE_SHARE * rtol)


def noise_note(checks: Any, noise: frozenset[int], atol: float, rtol: float) -> str:
    own = checks.native_rel_l2
    which = ", ".join(f"output {i} (the reference in {checks.dtypes[i]} errs by {own[i]:.3g} relative L2"
                      f" against fp64)" for i in sorted(noise))
    return (f"noise around zero: {which}: its values are rounding error at the reference's own precision,"
            f" judged by allclose alone (atol={atol:g}, rtol={rtol:g}) as KernelBench judges; a constant"
            f" near zero passes that numeric check")


DEGENERATE_NOTE = ("degenerate problem: the reference output does not depend on its inputs (the same"
                   " answer, within the tolerance, for every input drawn); speedups on it mean little")
_REFERENCE_OPS: dict[tuple[Any, ...], Any] = {}


def caller(model: Any) -> Callable[..., Any]:
    """`model(*args)` through nn.Module.__call__ as bound at import (engine.evaluate.harness.clocks): a
    candidate that replaces it changes nothing the harness calls."""
    import torch

    if isinstance(model, torch.nn.Module):
        return lambda *args: clocks.module_call(model, *args)
    return model


def reference_ops(checks: expected_cache.ReferenceChecks, ref: Any, device: str) -> Any:
    """The reference forward's aten compute ops and their times (engine.evaluate.harness.integrity), on
    trial 0's inputs, once per reference-check set; taken before the candidate is imported."""
    import torch

    from engine.evaluate.harness import integrity

    hit = _REFERENCE_OPS.get(checks.key)
    if hit is None:
        _REFERENCE_OPS.clear()
        inputs = checks.trial_inputs(0, device)
        call = caller(ref)
        with torch.no_grad():
            hit = _REFERENCE_OPS[checks.key] = integrity.profile_ops(lambda: call(*inputs), device)
    return hit


def reference_varies(checks: expected_cache.ReferenceChecks, device: str, atol: float,
                     rtol: float) -> dict[str, bool]:
    """Whether the reference's expected outputs change from one trial's inputs to another's:
    at all (at_all), and by more than the check's tolerance (beyond_tolerance: where they do not,
    a constant passes the check, and the problem is degenerate). One trial: taken as varying."""
    trials = len(checks.expected)
    if trials < 2:
        return {"at_all": True, "beyond_tolerance": True}
    first = checks.trial_expected(0, device)
    noise = noise_outputs(checks, rtol)
    at_all = beyond = False
    for trial in range(1, trials):
        other = checks.trial_expected(trial, device)
        at_all = at_all or not same_outputs(first, other)
        beyond = beyond or not compare(other, first, atol, rtol, noise=noise)[0]
    return {"at_all": at_all, "beyond_tolerance": beyond}


def same_outputs(a: list[Any], b: list[Any]) -> bool:
    import torch

    a, b = flatten(a), flatten(b)
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x.detach().to(y.device), y.detach())
                                    for x, y in zip(a, b, strict=True))


def weights_digest(ref: Any) -> str:
    """A digest of the reference's weights and buffers (a strided sample of each): on the cpu the
    check set may come from the worker's server, which made its own reference from the same seed
    (engine.evaluate.child.worker_process); a reference whose weights differ there (drawn from
    another generator than torch's) gets a set of its own."""
    import hashlib

    import torch

    digest = hashlib.sha1()
    try:
        if isinstance(ref, torch.nn.Module):
            for name, t in ref.state_dict(keep_vars=False).items():
                flat = t.detach().reshape(-1)
                sample = flat[:: max(1, flat.numel() // 4096)].to("cpu").contiguous()
                digest.update(f"{name}{tuple(t.shape)}{t.dtype}".encode())
                digest.update(sample.view(torch.uint8).numpy().tobytes() if sample.numel() else b"")
    except Exception:  # noqa: BLE001  (weights it cannot read: a set of this process's own)
        digest.update(f"pid{os.getpid()}".encode())
    return digest.hexdigest()


def checks_key(job: EvalJob, device: str, digest: str = "") -> tuple[Any, ...]:
    """A check set's key: the problem file and its contents' time, sizes, precision, device, trials,
    the weights' seed, the input seed and (on the cpu) the reference's weights' digest, last."""
    try:
        mtime = os.stat(job.problem_path).st_mtime_ns
    except OSError:
        mtime = 0
    seed = job.input_seed if job.input_seed is not None else job.seed
    return (job.problem_path, mtime, tuple(sorted(job.sizes.items())), job.precision, device, job.trials,
            job.seed, seed, digest)


def reference_checks(job: EvalJob, problem: Any, ref: Any, ref64: Any, device: str,
                     cast: Any) -> expected_cache.ReferenceChecks:
    """The trials' inputs and fp64 answers for this job (engine.evaluate.harness.expected_cache): keyed by the
    problem file and its contents' time, sizes, precision, device, trials, the weights' seed and
    the input seed (the session's secret where the evaluator gave one, else the job's seed)."""
    key = checks_key(job, device, weights_digest(ref) if device == "cpu" else "")

    def errors(native: Any, expected: Any) -> dict[str, float]:
        return compare(native, expected, float("inf"), float("inf"))[1]

    seed = job.input_seed if job.input_seed is not None else job.seed
    return expected_cache.expected_for(key, job.trials, seed, device,
                                       lambda: make_inputs(problem, device, cast), ref, ref64, flatten, errors)


@dataclasses.dataclass
class Checked:
    """What the check trials found on a candidate that passed them: its worst errors (the rest of
    what they saw is on the watch, for the checks of the next phases)."""

    errs: dict[str, float]
    flags: list[str]
    notes: list[str] = dataclasses.field(default_factory=list)


def check_trials(job: EvalJob, checks: expected_cache.ReferenceChecks, watch: integrity_checks.Watch,
                 base: dict[str, Any]) -> Checked | Verdict:
    """The candidate (`watch.call_new`) on every check trial's inputs against the cached fp64 answers,
    watched by the integrity checks of the `trial` and `passed` phases (harness.integrity_checks:
    inputs unchanged, threads, outputs, trial 0's torch compute ops); its outputs poisoned first, and
    whether they are the same on every trial kept on the watch. A Verdict (runtime_error, incorrect;
    with `base`) where it fails."""
    import torch

    from engine.evaluate.harness import integrity

    errs: dict[str, float] = {}
    dtypes: list[Any] = checks.dtypes
    device = watch.device
    call_new = watch.call_new
    assert call_new is not None
    found = integrity_checks.Finding()
    noise = noise_outputs(checks, job.rtol)
    notes = [noise_note(checks, noise, job.atol, job.rtol)] if noise else []
    if checks.plan is not None and checks.plan.why:
        notes.append(f"answers: {checks.plan.why}")
    first_out: memory.Kept | None = None  # trial 0's outputs: the same on every trial is input-independent
    watch.compare = lambda out, expected: compare(out, expected, job.atol, job.rtol, dtypes, noise=noise)
    with torch.no_grad():
        for trial in range(job.trials):
            inputs = checks.trial_inputs(trial, device)
            watch.trial, watch.inputs = trial, inputs
            integrity_checks.capture("trial", watch)  # what the call may change: inputs, threads
            # Every block the caching allocator holds for the output sizes is overwritten with
            # NaN first, so a candidate that returns memory it never wrote cannot pass on
            # whatever was left there (the reference's answer, say).
            integrity.poison_allocator(checks.out_bytes, device)
            try:
                out, seconds = integrity.timed_call(lambda: call_new(*inputs), device)  # noqa: B023
                if trial > 0:  # (trial 0 may pay one-time costs)
                    watch.forward_s.append(seconds)
            except Exception as exc:
                return Verdict(status="runtime_error", trials=trial, log=format_exc(exc), **base)
            found.add(integrity_checks.run("trial", watch))
            ok, trial_errs, reason = compare(out, checks.trial_expected(trial, device), job.atol, job.rtol,
                                             dtypes, systematic=True, noise=noise)
            for k, v in trial_errs.items():
                errs[k] = max(errs.get(k, 0.0), v)
            if not ok:
                return Verdict(
                    status="incorrect", trials=trial + 1, log=f"trial {trial + 1}: {reason}",
                    notes=tuple(notes), **errs, **base,
                )
            watch.outputs = flatten(out)
            if trial == 0:  # (a clone where small, else chunked fingerprints: engine.evaluate.harness.memory)
                first_out = memory.Kept(watch.outputs)
            else:
                watch.same_out = watch.same_out and first_out is not None and first_out.same(watch.outputs)
            memory.mark("check-trial", device)
            try:  # (trial 0: one more call, on a copy of its inputs, watched for torch compute ops)
                found.add(integrity_checks.run("passed", watch))
                memory.mark("check-passed", device)
            except Exception as exc:
                return Verdict(status="runtime_error", trials=trial + 1, log=format_exc(exc), **base)
            # (let go before the next trial is drawn: never two trials' inputs at once)
            watch.outputs, watch.inputs, inputs = [], [], []
            watch.captured.pop("inputs-modified", None)
            del out
        del first_out
    watch.errs, watch.native_errs, watch.dtypes = errs, checks.native_errs, dtypes
    return Checked(errs, found.flags, notes + found.notes)
