"""The evaluation subprocess: `python -m engine.evaluate.child.evaluation JOB.json RESULT.json`.

Runs untrusted generated code, so it lives in its own process (started by `runner`, or the
long-lived `worker_process`), imports only torch and the standard library, and reports through a
JSON file. Two modes:

- ``compile``: build the solution's extension into the build dir keyed by its source hash, with
  GPUs hidden (many of these run at once);
- ``evaluate``: load the (prebuilt) solution, check it against an fp64 reference on fresh random
  inputs for several trials, then time candidate and reference interleaved.

This module is the entry and the evaluation's order of steps; each step lives with its job:
`load` (build and import the solution, make models and inputs), `check` (the check trials against
the fp64 answers, with the integrity checks), `measure` (timing, the reference's own timings).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from engine import settings
from engine.evaluate.child.check import (
    DEGENERATE_NOTE,
    caller,
    check_trials,
    compare,
    reference_checks,
    reference_ops,
    reference_varies,
)
from engine.evaluate.child.load import (
    EvalFailure,
    build_key,
    format_exc,
    load_solution,
    make_reference,
    model_to,
    retarget_note,
    sync_state,
)
from engine.evaluate.child.measure import (
    Phases,
    before_candidate,
    run_agreement,
    run_warm,
    time_candidate,
    timing_floor_s,
)
from engine.evaluate.harness import clocks, expected_cache, fastbuild, integrity_checks, outbox
from engine.evaluate.harness.timing import pin_cores  # (read as child.evaluation.pin_cores too)
from engine.evaluate.jobs import EvalJob
from engine.evaluate.languages import for_job
from engine.evaluate.loading import load_module_from_path
from engine.evaluate.verdict import REFERENCE_FAILED, Verdict

# Imported from here by the engine and the tests (engine.evaluate.host.runner: build_key).
__all__ = ["EvalFailure", "build_key", "compare", "load_solution", "main", "pin_cores", "run_agreement",
           "run_compile", "run_evaluate", "run_warm"]

REVIEW_SPEEDUP = 10.0  # a speedup above this is marked for a human to review
PROBLEM_TOO_LARGE = "ktree cannot evaluate this problem here"


def run_compile(job: EvalJob) -> dict[str, Any]:
    """Mode "compile": the build, and the precompiled headers it went without (`pch_wanted`: the
    engine makes them beside the builds, engine.evaluate.host.pch_ahead)."""
    t0 = clocks.perf_counter()
    fastbuild.PCH_AHEAD["on"] = bool(settings.get("KTREE_PCH_AHEAD"))
    wanted = fastbuild.PCH_AHEAD["wanted"]
    try:
        load_solution(job)
    except EvalFailure as exc:
        note = retarget_note(job)
        log = f"{note['note']}\n{exc}" if note else str(exc)
        return {"status": exc.status, "log": log, "compile_s": clocks.since(t0), "pch_wanted": wanted}
    return {"status": "compiled", "log": "", "compile_s": clocks.since(t0), "pch_wanted": wanted}


def run_evaluate(job: EvalJob, on_phase: Callable[[str], None] | None = None) -> Verdict:
    """One evaluation; an out-of-memory told apart: the candidate's own call's (its runtime_error)
    from ktree's (crashed: "ktree out of memory while ...", harness.expected_cache.label_oom)."""
    import dataclasses

    from engine.evaluate.harness import memory

    device = "cuda" if job.backend == "cuda" else "cpu"
    peaks = memory.Peaks(device) if device != "cuda" or _cuda_ready() else None
    _PLAN.clear()
    AUDIT.clear()
    fastbuild.FAILED_BUILDS.clear()
    try:
        verdict = fastbuild.as_compile_error(_evaluate(job, on_phase))
    except Exception as exc:
        if not expected_cache.is_oom(exc):
            raise
        expected_cache.clear()
        ours = isinstance(exc, expected_cache.KtreeOutOfMemory)
        said = str(exc) if ours else "ktree out of memory while checking"
        verdict = Verdict(status="runtime_error", backend=job.backend, sizes=dict(job.sizes),
                          log=f"{said}\n{format_exc(exc)}")
    finally:
        fastbuild.drop_scratch()  # what this evaluation built for itself (fastbuild.scratch_dir)
    record = dict(_PLAN.get("record") or {})
    if peaks is not None:
        record.update(peaks.record())
    if record:
        verdict = dataclasses.replace(verdict, memory={**record, **(verdict.memory or {})})
    return expected_cache.label_oom(verdict, job)


# The candidate's model and what its calls need, kept after the verdict for the judge's fresh-input
# calls (engine.evaluate.child.audit), which come in the same process.
AUDIT: dict[str, Any] = {}

# The memory plan of the evaluation under way (engine.evaluate.harness.memory.Plan.record), for its verdict.
_PLAN: dict[str, Any] = {}


def _cuda_ready() -> bool:
    import torch

    return torch.cuda.is_available()


def too_large(problem: Any, ref: Any, device: str) -> str | None:
    """Why the problem cannot be evaluated on this GPU at all (its inputs and parameters exceed
    it), from the inputs' shapes drawn on the meta device: before any memory is taken. None where
    it may fit, or where the shapes cannot be had that way (then the evaluation finds out)."""
    import torch

    from engine.evaluate.harness import memory

    if device != "cuda":
        return None
    try:
        with torch.device("meta"):
            inputs = problem.get_inputs()
    except Exception:
        return None
    params = expected_cache.weights(ref)
    return memory.fits_device(memory.tensor_bytes(list(inputs)) + params, 0, memory.gpu_total())


def _evaluate(job: EvalJob, on_phase: Callable[[str], None] | None = None) -> Verdict:
    import torch

    from engine.evaluate.harness import gpuload, integrity, memory, noise, tamper, timing  # noqa: F401  (before the candidate's code)

    started = clocks.perf_counter()
    device = "cuda" if job.backend == "cuda" else "cpu"

    def mark(name: str) -> None:  # each phase's peak, in the verdict's memory record
        memory.mark(name, device)

    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("backend cuda requested but no GPU is visible")
    num_threads = timing.fix_threads()
    language = for_job(job)
    base: dict[str, Any] = {"backend": job.backend, "device": timing.device_name(job.backend),
                            "gpu": timing.device_info(job.backend), "sizes": dict(job.sizes),
                            "language": language.name}

    clock = Phases()
    problem = load_module_from_path(job.problem_path, job.sizes)
    watch = integrity_checks.Watch(job, device)
    # Before the candidate's code runs: the harness's functions, and torch's functions and settings
    # as the reference will find them (engine.evaluate.harness.integrity_checks: harness, tamper).
    integrity_checks.capture("import", watch)
    ref, init_inputs, cast = make_reference(job, problem, device)
    unfit = too_large(problem, ref, device)
    if unfit:  # said before any input is drawn (engine.evaluate.harness.memory)
        return Verdict(status="runtime_error", log=f"{PROBLEM_TOO_LARGE}: {unfit}", **base)
    ref64: Any = expected_cache.Fp64Reference(ref)  # (made only where the answers are fp64)
    clock.lap("load")
    parts = Phases()  # the reference phase's own parts (bench gpu-cost reads them)
    # The trials' inputs and fp64 answers: once per process for this problem, sizes, precision and
    # input seed (engine.evaluate.harness.expected_cache), made before the candidate's code is imported.
    try:
        checks = reference_checks(job, problem, ref, ref64, device, cast)
    except Exception as exc:
        return Verdict(status="runtime_error", log=f"{REFERENCE_FAILED}: {format_exc(exc)}", **base)
    if checks.plan is not None:
        _PLAN["record"] = checks.plan.record()
    if checks.answers != "fp64":
        ref64 = None  # answers in the reference's precision (the plan's): no fp64 copy is kept
    else:
        ref64.model()  # (made before the candidate's code is imported, where the answers were cached)
    mark("answers")
    parts.lap("answers")
    checks_cached = checks.uses > 0
    try:
        ref_ops = reference_ops(checks, ref, device)
    except Exception as exc:
        return Verdict(status="runtime_error", log=f"{REFERENCE_FAILED}: {format_exc(exc)}", **base)
    mark("reference-ops")
    parts.lap("ops")
    varies = reference_varies(checks, device, job.atol, job.rtol)
    mark("reference-varies")
    parts.lap("varies")
    notes: list[str] = [] if varies["beyond_tolerance"] else [DEGENERATE_NOTE]
    try:  # the timed input sets, the reference's clean time, the speed of light: before the candidate
        pre = before_candidate(job, problem, ref, checks, device, cast)
    except Exception as exc:
        return Verdict(status="runtime_error", log=f"{REFERENCE_FAILED}: {format_exc(exc)}", **base)
    clock.lap("reference")
    parts.lap("sets")
    mark("timed-sets")
    outbox.seal()  # what follows may be the candidate's to change: nothing more is told as clean
    t0 = clocks.perf_counter()
    try:
        solution = load_solution(job)
    except EvalFailure as exc:
        return Verdict(status=exc.status, log=str(exc), notes=tuple(notes), **base)
    load_s = clocks.since(t0)

    try:
        torch.manual_seed(job.seed)
        new = solution.ModelNew(*init_inputs)
        if isinstance(new, torch.nn.Module) and isinstance(ref, torch.nn.Module):
            sync_state(ref, new)
            new = model_to(new, device, cast).eval()
    except Exception as exc:
        return Verdict(status="runtime_error", log=format_exc(exc), **base)
    watch.model = new
    AUDIT.update(problem=problem, model=new, device=device, cast=cast)  # (child.audit: fresh-input calls)
    integrity_checks.capture("load", watch)
    tampered = integrity_checks.run("load", watch).flags
    if tampered:  # the harness would not call what the candidate wrote: said, not crashed on
        return Verdict(status="flagged", flags=tuple(tampered), notes=tuple(notes),
                       log="integrity check failed: " + "; ".join(tampered), **base)
    clock.lap("load")
    jit: dict[str, Any] = {}
    try:  # a JIT's first call (Triton), outside the timed window
        first = language.first_call(solution, new, problem, device, job.seed)
    except EvalFailure as exc:
        return Verdict(status=exc.status, log=str(exc), **base)
    if first is not None:
        jit = first
        clock.lap("jit")

    watch.call_new = caller(new)
    watch.ref_ops, watch.varies, watch.expected, watch.sol = ref_ops, varies, checks, pre.sol
    phase = on_phase or (lambda name: None)
    phase("checking")
    mark("load")
    checked = check_trials(job, checks, watch, base)
    mark("check")
    if isinstance(checked, Verdict):
        return checked
    errs, flags = checked.errs, checked.flags
    notes += checked.notes
    native_errs = checks.native_errs
    dtypes: list[Any] = checks.dtypes
    # The trials' own judgements (torch ops, input independence, precision), then what the candidate
    # changed in torch so far is flagged and put back before the reference is timed.
    found = integrity_checks.run("check", watch)
    flags += found.flags
    notes += found.notes
    clock.lap("check")
    mark("check-integrity")
    timing.fix_threads()
    with torch.no_grad():
        # The timed inputs rotate over sets drawn from secret seeds before the candidate was
        # imported; sampled timed outputs are checked against fp64 answers computed after timing.
        phase("timing")
        try:
            settled, timing_flags, timed_record = time_candidate(
                job, ref, ref64, watch, pre, base["gpu"], dtypes)
            flags += timing_flags
            stats = settled.kept.stats
        except Exception as exc:
            return Verdict(status="runtime_error", trials=job.trials, log=format_exc(exc), **errs, **base)
        clock.lap("time")
    mark("recheck")
    found = integrity_checks.run("after", watch)
    flags += found.flags
    notes += found.notes
    sol_fraction = watch.sol_fraction
    flags = list(dict.fromkeys(flags))
    speedup = stats.ref.median / stats.new.median if stats.new.median > 0 else None
    interval = noise.speedup_interval((stats.ref.lo, stats.ref.hi), (stats.new.lo, stats.new.hi))
    status = "flagged" if flags else "correct"
    if speedup is not None and speedup > REVIEW_SPEEDUP:
        flags.append(f"review: speedup {speedup:.1f}x is over {REVIEW_SPEEDUP:g}x")
    flags += settled.flags  # noisy / contended: marked, still correct
    at = f" at {job.precision} (inputs and weights cast)" if job.precision else ""
    summary = (f"{job.trials} trials passed{at} (atol={job.atol:g}, rtol={job.rtol:g});"
               f" {stats.reps} timed reps;"
               f" the reference in {dtypes[0] if dtypes else '?'} itself errs by"
               f" {native_errs.get('max_abs_err', 0):.3g} (max abs) against fp64")
    if status == "flagged":
        summary = "integrity check failed: " + "; ".join(
            f for f in flags if not f.startswith("review") and f not in settled.flags)
    if settled.log:
        summary += "\n" + settled.log
    retarget = retarget_note(job)
    if retarget:
        summary += "\n" + retarget["note"]
    timing_record = noise.summary(settled, num_threads, noise.timer_cores())
    if settings.get("KTREE_CPU_CORES"):
        timing_record["pinned"] = True  # the cpu timer on its own cores, the builds on others
    if retarget:
        timing_record["arch_retarget"] = retarget
    clock.lap("other")
    timing_record["phases_s"] = clock.rounded()
    timing_record["reference_parts_s"] = parts.rounded()
    timing_record["floor_s"] = round(timing_floor_s(stats, job.trials), 6)
    timing_record.update(timed_record)
    timing_record["reference_checks"] = {"cached": checks_cached, "build_s": round(checks.build_s, 4),
                                         "bytes": checks.nbytes, "on_device": checks.on_device,
                                         "placement": checks.placement}

    return Verdict(
        status=status,
        flags=tuple(flags),
        notes=tuple(dict.fromkeys(notes)),
        library=watch.library,
        trials=job.trials,
        time_ms=stats.new.median,
        time_p10_ms=stats.new.p10,
        time_p90_ms=stats.new.p90,
        ref_eager_ms=stats.ref.median,
        ref_p10_ms=stats.ref.p10,
        ref_p90_ms=stats.ref.p90,
        ref_compile_ms=job.ref_compile_ms,
        speedup_eager=speedup,
        speedup_compile=job.ref_compile_ms / stats.new.median
        if job.ref_compile_ms and stats.new.median > 0 else None,
        speedup_lo=interval[0] if interval else None,
        speedup_hi=interval[1] if interval else None,
        timing=timing_record,
        sol_fraction=sol_fraction,
        reps=stats.reps,
        compile_s=load_s + jit.get("jit_s", 0.0),
        jit=jit,
        eval_s=clocks.since(started),
        log=summary,
        **errs,
        **base,
    )


def _die_with_parent() -> None:
    """If the engine dies (even by SIGKILL), take this process group (the candidate's build or
    run) down with it instead of running on as an orphan."""
    import signal
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="ktree-parent-watch").start()


def main(argv: list[str]) -> int:
    _die_with_parent()
    pin_cores()
    job_path, result_path = argv[1], argv[2]
    with open(job_path) as f:
        job = EvalJob.from_dict(json.load(f))
    if job.mode == "evaluate":
        with contextlib.suppress(OSError):
            os.unlink(job_path)  # the job (its input seed) is not left for the candidate to read
    if job.mode == "compile":
        result: dict[str, Any] = run_compile(job)
    elif job.mode == "reference":  # set up before the GPU's lock, timed after (child.reference)
        from engine.evaluate.child import reference as child_reference

        result = child_reference.run(job)
    elif job.mode == "warm":
        result = run_warm(job)
    elif job.mode == "agreement":
        result = run_agreement(job)
    else:
        result = run_evaluate(job).to_dict()
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, result_path)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: a candidate's extension may crash in its destructors.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
