"""The evaluation subprocess: `python -m engine.evaluate.child JOB.json RESULT.json`.

Runs untrusted generated code, so it lives in its own process (started by `runner`), imports
only torch and the standard library, and reports through a JSON file. Two modes:

- ``compile``: build the solution's extension into the build dir keyed by its source hash, with
  GPUs hidden (many of these run at once);
- ``evaluate``: load the (prebuilt) solution, check it against an fp64 reference on fresh random
  inputs for several trials, then time candidate and reference interleaved.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import platform
import secrets
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from engine.evaluate import checks as checks_module
from engine.evaluate import clocks
from engine.evaluate.jobs import EvalJob
from engine.evaluate.loading import (
    kernel_language,
    load_module_from_file,
    load_module_from_path,
    load_module_from_source,
)
from engine.evaluate.sandbox import TRITON_CACHE
from engine.evaluate.verdict import Verdict, log_tail

TRITON_WARMUP_S = 240.0  # the time limit on a Triton solution's first call: JIT compile + autotune
REVIEW_SPEEDUP = 10.0  # a speedup above this is marked for a human to review
SOL_FLOOR = 1.25  # flagged when faster than this many times the measured speed of light


class EvalFailure(Exception):
    """A failure with a verdict status (compile_error, runtime_error, incorrect)."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


def build_key(job: EvalJob, env: dict[str, str] | None = None) -> str:
    """The build dir's name. (Levers and flags are not in it: ninja rebuilds whatever a changed
    command line touches, so a build dir is always consistent with the last build.) `env`: the
    environment the build runs in, where it is not this process's (the engine asking)."""
    import torch

    parts = [
        job.solution_source,
        job.backend,
        torch.__version__,
        platform.python_version(),
        (os.environ if env is None else env).get("TORCH_CUDA_ARCH_LIST", ""),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


@contextlib.contextmanager
def _build_dir_lock(build_dir: str) -> Iterator[None]:
    """One builder per build dir at a time, under a lock the kernel drops when its holder dies.
    torch's own lock file stays behind when a build is killed (a timeout), and every later build
    of that source would wait on it forever: holding ours, any such file is stale, so remove it."""
    import fcntl
    from pathlib import Path

    path = os.path.join(build_dir, ".ktree-build.lock")
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    except OSError:  # an evaluation, which sees the build dirs read-only: it only loads
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            yield
            return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        for stale in Path(build_dir).glob("*/lock"):
            with contextlib.suppress(OSError):
                stale.unlink(missing_ok=True)
        yield
    finally:
        os.close(fd)  # releases the lock


def load_solution(job: EvalJob) -> Any:
    """Build (or reuse) and import the solution module; classify any failure."""
    from engine.evaluate import fastbuild

    key = build_key(job)
    build_dir = os.path.join(job.cache_dir, key)
    with contextlib.suppress(OSError):  # an evaluation sees the cache read-only: it loads what is there
        os.makedirs(build_dir, exist_ok=True)
    if kernel_language(job.solution_source) == "triton":
        return _load_triton(job, key, build_dir)
    os.environ["TORCH_EXTENSIONS_DIR"] = build_dir
    fastbuild.install(job.cache_dir)  # the same levers in the compile pool and the worker
    # An evaluation loads what the compile pool built (it may not write the build dirs).
    fastbuild.PREBUILT["on"] = job.mode == "evaluate"
    fastbuild.PREBUILT["seen"] = {}
    failed = os.path.join(build_dir, "ktree-compile-error.json")
    levers = list(fastbuild.levers_from_env())
    fastbuild.RETARGETED.clear()
    try:
        with _build_dir_lock(build_dir):
            earlier = _read_json(failed)
            if earlier is not None and earlier.get("levers") == levers:
                raise EvalFailure("compile_error", f"{earlier['log']}\n(this source failed to build"
                                  " before with the same compiler and flags: that result is reused)")
            try:
                module = load_module_from_source(job.solution_source, f"ktree_solution_{key}")
            except Exception as exc:
                if fastbuild.is_build_error(exc) and fastbuild.has_diagnostic(exc):
                    # The compiler said why: the same source fails the same way next time.
                    # (A build that failed without a diagnostic, killed say, is tried again.)
                    _write_json(failed, {"levers": levers, "log": _format_exc(exc)})
                raise
    except EvalFailure:
        raise
    except SyntaxError as exc:
        raise EvalFailure("compile_error", f"Python syntax error: {exc}") from exc
    except Exception as exc:
        status = "compile_error" if fastbuild.is_build_error(exc) else "runtime_error"
        raise EvalFailure(status, _format_exc(exc)) from exc
    if not isinstance(getattr(module, "ModelNew", None), type):
        raise EvalFailure("runtime_error", "the solution defines no class ModelNew")
    return module


def _retarget_note(job: EvalJob) -> dict[str, Any] | None:
    """The arch flags the last solution build rewrote (engine.evaluate.fastbuild.retarget_flags):
    original and new flags and a line for the log; None where none was."""
    from engine.evaluate import fastbuild

    if not fastbuild.RETARGETED:
        return None
    last = fastbuild.RETARGETED[-1]
    return {**last, "note": f"arch retargeted: {' '.join(last['original'])} -> {' '.join(last['flags'])}"
                            f" ({last['why']})"}
def _load_triton(job: EvalJob, key: str, build_dir: str) -> Any:
    """Import a Triton solution from a real file in its build dir (the JIT reads its kernels'
    source lines back). Nothing is compiled here: the JIT compiles on the first call (see
    `_triton_warmup`). Triton's cache is one dir in ktree's build cache, shared by every
    solution: Triton keys each compiled kernel by a hash of its source, options and target, so a
    repeated source costs nothing, and its launcher stubs (C, built by the host compiler once per
    kernel signature) are built once for all variants instead of once per variant. On the cpu
    backend the kernels run under Triton's interpreter."""
    os.environ["TRITON_CACHE_DIR"] = os.path.join(job.cache_dir, TRITON_CACHE)
    if job.backend == "cuda":
        os.environ.pop("TRITON_INTERPRET", None)
    else:  # the evaluator sets it for the whole process; set here too for a child started otherwise
        os.environ["TRITON_INTERPRET"] = "1"
        if "triton" in sys.modules and not _interpreting():
            raise EvalFailure("runtime_error", "triton was imported in this process before"
                              " TRITON_INTERPRET=1 was set: its kernels cannot run on the CPU")
    path = os.path.join(build_dir, "solution.py")
    with _build_dir_lock(build_dir):
        try:
            with open(path) as fh:
                same = fh.read() == job.solution_source
        except OSError:
            same = False
        if not same:
            try:
                with open(f"{path}.tmp", "w") as fh:
                    fh.write(job.solution_source)
                os.replace(f"{path}.tmp", path)
            except OSError:  # a read-only cache with no compile step before: a file of this process
                path = os.path.join(tempfile.mkdtemp(prefix="ktree-triton-"), "solution.py")
                with open(path, "w") as fh:
                    fh.write(job.solution_source)
    try:
        module = load_module_from_file(path, f"ktree_solution_{key}")
    except SyntaxError as exc:
        raise EvalFailure("compile_error", f"Python syntax error: {exc}") from exc
    except ModuleNotFoundError as exc:
        if exc.name == "triton":
            raise EvalFailure("runtime_error", "the solution is written in Triton, which is not"
                              " installed where it runs (pip install triton)") from exc
        raise EvalFailure("runtime_error", _format_exc(exc)) from exc
    except Exception as exc:
        raise EvalFailure(triton_failure_status(exc), _format_exc(exc)) from exc
    if not isinstance(getattr(module, "ModelNew", None), type):
        raise EvalFailure("runtime_error", "the solution defines no class ModelNew")
    if job.backend != "cuda":
        for obj in vars(module).values():
            if type(obj).__name__ == "Autotuner" and getattr(obj, "_do_bench", "") is None:
                obj._do_bench = _interpreted_bench  # no GPU driver to benchmark configs with
    return module


def _interpreting() -> bool:
    """Whether the imported triton made its own language helpers for the interpreter."""
    import triton.language as tl

    return type(getattr(tl, "max", None)).__name__ == "InterpretedFunction"


def _interpreted_bench(kernel_call: Callable[[], Any], quantiles: tuple[float, ...]) -> list[float]:
    """@triton.autotune's benchmark under the interpreter (which has no GPU driver's): the
    quantiles of a few wall-clock calls, in ms."""
    times = []
    for _ in range(3):
        t0 = clocks.perf_counter()
        kernel_call()
        times.append((clocks.perf_counter() - t0) * 1000)
    times.sort()
    return [times[min(len(times) - 1, int(q * len(times)))] for q in quantiles]


def triton_failure_status(exc: BaseException) -> str:
    """compile_error for Triton's compiler failing on a kernel (its frontend, ptxas, resources,
    or, under the interpreter, a language error raised from triton.language), else runtime_error."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        kind = type(e)
        if kind.__module__.startswith("triton") and (
                "Compil" in kind.__name__ or kind.__name__ in ("PTXASError", "OutOfResources",
                                                               "UnsupportedLanguageConstruct")):
            return "compile_error"
        if os.environ.get("TRITON_INTERPRET") == "1" and isinstance(e, (ValueError, TypeError, AttributeError)):
            tb = e.__traceback__
            while tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
            if tb is not None and "/triton/language/" in tb.tb_frame.f_code.co_filename:
                return "compile_error"
        e = e.__cause__ or e.__context__
    return "runtime_error"


class _WarmupTimeout(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise _WarmupTimeout in this (main) thread after `seconds`; no limit off the main thread
    (the runner's own timeout on the whole evaluation still applies)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _WarmupTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _triton_warmup(module: Any, new: Any, problem: Any, device: str, seed: int) -> dict[str, Any]:
    """One call of a Triton solution before anything is checked or timed: the JIT compiles its
    kernels and @triton.autotune benchmarks its configs here, outside the timed window, within
    TRITON_WARMUP_S. Returns what it cost and what autotuning chose."""
    import torch

    torch.manual_seed(seed + 3000)
    inputs = _inputs(problem, device)
    t0 = clocks.perf_counter()
    try:
        with _time_limit(TRITON_WARMUP_S), torch.no_grad():
            new(*inputs)
            if device == "cuda":
                torch.cuda.synchronize()
    except _WarmupTimeout as exc:
        raise EvalFailure("timeout", f"the Triton JIT compile and autotuning of the first call took"
                          f" over {TRITON_WARMUP_S:g} s") from exc
    except Exception as exc:
        raise EvalFailure(triton_failure_status(exc), _format_exc(exc)) from exc
    report: dict[str, Any] = {"jit_s": round(clocks.perf_counter() - t0, 4),
                              "interpreted": device != "cuda"}
    tuned = []
    for name, obj in vars(module).items():
        configs = getattr(obj, "configs", None)
        if type(obj).__name__ == "Autotuner" and isinstance(configs, list):
            best = getattr(obj, "best_config", None)
            timings = getattr(obj, "configs_timings", None) or {}
            tuned.append({"kernel": name, "configs": len(configs),
                          "tried": len(timings) or (1 if best is not None else 0),
                          "chosen": str(best) if best is not None else None,
                          "bench_s": getattr(obj, "bench_time", None)})
    if tuned:
        report["autotune"] = tuned
    return report


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_json(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with contextlib.suppress(OSError):
        with open(tmp, "w") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)


def _format_exc(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    return log_tail(text)


def _flatten(out: Any) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten(o)]
    raise EvalFailure("incorrect", f"output is a {type(out).__name__}, not a tensor")


def compare(out: Any, expected: Any, atol: float, rtol: float,
            dtypes: list[Any] | None = None) -> tuple[bool, dict[str, float], str]:
    """allclose(atol, rtol) AND ||out-ref||/||ref|| <= rtol, per output tensor; NaN/Inf fail;
    shapes must match, and dtypes too where `dtypes` (the reference's, in the problem's own
    precision) is given."""
    import torch

    outs, refs = _flatten(out), _flatten(expected)
    if len(outs) != len(refs):
        return False, {}, f"{len(outs)} outputs, expected {len(refs)}"
    errs = {"max_abs_err": 0.0, "max_rel_err": 0.0, "rel_l2_err": 0.0}
    ok, reason = True, ""
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        if tuple(o.shape) != tuple(r.shape):
            return False, errs, f"output {i} has shape {tuple(o.shape)}, expected {tuple(r.shape)}"
        if dtypes is not None and o.dtype != dtypes[i]:
            return False, errs, f"output {i} has dtype {o.dtype}, expected {dtypes[i]}"
        o64 = o.detach().to(r.device, torch.float64)
        r64 = r.detach().to(torch.float64)
        if not bool(torch.isfinite(o64).all()):
            bad = int((~torch.isfinite(o64)).sum())
            return False, errs, f"output {i} has {bad} NaN/Inf values"
        diff = (o64 - r64).abs()
        max_abs = float(diff.max()) if diff.numel() else 0.0
        # Elementwise |out - ref| / |ref| over every element whose reference is not zero (where it
        # is, only max_abs_err speaks). Not only where |ref| > atol: an output whose reference is
        # small everywhere would report 0 however wrong it is.
        nonzero = r64 != 0
        max_rel = float((diff[nonzero] / r64.abs()[nonzero]).max()) if bool(nonzero.any()) else 0.0
        ref_norm = float(r64.norm())
        rel_l2 = float((o64 - r64).norm()) / ref_norm if ref_norm > 0 else float((o64 - r64).norm())
        errs["max_abs_err"] = max(errs["max_abs_err"], max_abs)
        errs["max_rel_err"] = max(errs["max_rel_err"], max_rel)
        errs["rel_l2_err"] = max(errs["rel_l2_err"], rel_l2)
        if not bool(torch.allclose(o64, r64, atol=atol, rtol=rtol)):
            ok, reason = False, reason or f"output {i}: max abs error {max_abs:.3g} exceeds allclose"
        elif rel_l2 > rtol:
            ok, reason = False, reason or f"output {i}: relative L2 error {rel_l2:.3g} > {rtol:g}"
    return ok, errs, reason


def _to(obj: Any, device: str, dtype: Any = None) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        if dtype is not None and obj.is_floating_point():
            return obj.to(device=device, dtype=dtype)
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(o, device, dtype) for o in obj)
    return obj


PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _cast(job: EvalJob) -> Any:
    """The dtype `job.precision` casts to (None: the problem's own)."""
    import torch

    return getattr(torch, PRECISIONS[job.precision]) if job.precision else None


def _model_to(model: Any, device: str, dtype: Any) -> Any:
    return model.to(device=device, dtype=dtype) if dtype is not None else model.to(device)


def _inputs(problem: Any, device: str, dtype: Any = None) -> Any:
    """The problem's inputs, made on the device itself. A KernelBench get_inputs() builds them
    with factory calls (torch.randn, ...) that would otherwise run on the host: seconds per call
    for a 1 GiB input, four calls per evaluation. Seeded by the caller as before (manual_seed
    seeds every device), and still moved in case get_inputs() builds them elsewhere."""
    import torch

    with torch.device(device):
        return _to(problem.get_inputs(), device, dtype)


def _sync_state(ref: Any, new: Any) -> None:
    """Give ModelNew the reference's parameters where names and shapes match exactly."""
    ref_state = ref.state_dict()
    new_state = new.state_dict()
    shared = {
        k: v for k, v in ref_state.items() if k in new_state and new_state[k].shape == v.shape
    }
    if shared:
        new.load_state_dict(shared, strict=False)


class _Phases:
    """Seconds spent per phase of one evaluation (load, reference, jit, check, time, other),
    from laps: each lap's time goes to the phase it names."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = clocks.perf_counter()

    def lap(self, name: str) -> None:
        now = clocks.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self._last
        self._last = now

    def rounded(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in self.seconds.items()}


def timing_floor_s(stats: Any, trials: int) -> float:
    """The least device time a verdict needs: every warm-up and timed rep of the pair (reference
    and candidate, interleaved) plus one candidate call per check trial."""
    from engine.evaluate import timing

    return ((timing.WARMUP + stats.reps) * (stats.ref.median + stats.new.median)
            + trials * stats.new.median) / 1e3


DEGENERATE_NOTE = ("degenerate problem: the reference output does not depend on its inputs (the same"
                   " answer, within the tolerance, for every input drawn); speedups on it mean little")
_REFERENCE_OPS: dict[tuple[Any, ...], Any] = {}


def _caller(model: Any) -> Callable[..., Any]:
    """`model(*args)` through nn.Module.__call__ as bound at import (engine.evaluate.clocks): a
    candidate that replaces it changes nothing the harness calls."""
    import torch

    if isinstance(model, torch.nn.Module):
        return lambda *args: clocks.module_call(model, *args)
    return model


def _reference_ops(checks: checks_module.ReferenceChecks, ref: Any, device: str) -> Any:
    """The reference forward's aten compute ops and their times (engine.evaluate.integrity), on
    trial 0's inputs, once per reference-check set; taken before the candidate is imported."""
    import torch

    from engine.evaluate import integrity

    hit = _REFERENCE_OPS.get(checks.key)
    if hit is None:
        _REFERENCE_OPS.clear()
        inputs = checks.trial_inputs(0, device)
        call = _caller(ref)
        with torch.no_grad():
            hit = _REFERENCE_OPS[checks.key] = integrity.profile_ops(lambda: call(*inputs), device)
    return hit


def _reference_varies(checks: checks_module.ReferenceChecks, device: str, atol: float,
                      rtol: float) -> dict[str, bool]:
    """Whether the reference's expected outputs change from one trial's inputs to another's:
    at all (at_all), and by more than the check's tolerance (beyond_tolerance: where they do not,
    a constant passes the check, and the problem is degenerate). One trial: taken as varying."""
    trials = len(checks.expected)
    if trials < 2:
        return {"at_all": True, "beyond_tolerance": True}
    first = checks.trial_expected(0, device)
    at_all = beyond = False
    for trial in range(1, trials):
        other = checks.trial_expected(trial, device)
        at_all = at_all or not _same_outputs(first, other)
        beyond = beyond or not compare(other, first, atol, rtol)[0]
    return {"at_all": at_all, "beyond_tolerance": beyond}


def _same_outputs(a: list[Any], b: list[Any]) -> bool:
    import torch

    a, b = _flatten(a), _flatten(b)
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x.detach().to(y.device), y.detach())
                                    for x, y in zip(a, b, strict=True))


def _reference_checks(job: EvalJob, problem: Any, ref: Any, ref64: Any, device: str,
                      cast: Any) -> checks_module.ReferenceChecks:
    """The trials' inputs and fp64 answers for this job (engine.evaluate.checks): keyed by the
    problem file and its contents' time, sizes, precision, device, trials, the weights' seed and
    the input seed (the session's secret where the evaluator gave one, else the job's seed)."""
    try:
        mtime = os.stat(job.problem_path).st_mtime_ns
    except OSError:
        mtime = 0
    seed = job.input_seed if job.input_seed is not None else job.seed
    key = (job.problem_path, mtime, tuple(sorted(job.sizes.items())), job.precision, device, job.trials,
           job.seed, seed)

    def errors(native: Any, expected: Any) -> dict[str, float]:
        return compare(native, expected, float("inf"), float("inf"))[1]

    return checks_module.expected_for(key, job.trials, seed, device, lambda: _inputs(problem, device, cast),
                                      ref, ref64, _flatten, errors)


def run_compile(job: EvalJob) -> dict[str, Any]:
    t0 = clocks.perf_counter()
    try:
        load_solution(job)
    except EvalFailure as exc:
        note = _retarget_note(job)
        log = f"{note['note']}\n{exc}" if note else str(exc)
        return {"status": exc.status, "log": log, "compile_s": clocks.since(t0)}
    return {"status": "compiled", "log": "", "compile_s": clocks.since(t0)}


def run_evaluate(job: EvalJob, on_phase: Callable[[str], None] | None = None) -> Verdict:
    import torch

    from engine.evaluate import gpuload, integrity, noise, timing

    started = clocks.perf_counter()
    device = "cuda" if job.backend == "cuda" else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("backend cuda requested but no GPU is visible")
    num_threads = timing.fix_threads()
    language = kernel_language(job.solution_source)
    base: dict[str, Any] = {"backend": job.backend, "device": timing.device_name(job.backend),
                            "gpu": timing.device_info(job.backend), "sizes": dict(job.sizes),
                            "language": language}

    clock = _Phases()
    problem = load_module_from_path(job.problem_path, job.sizes)
    harness = integrity.capture_harness()  # before the candidate's code runs
    init_inputs = problem.get_init_inputs()
    cast = _cast(job)
    torch.manual_seed(job.seed)
    ref = _model_to(problem.Model(*init_inputs), device, cast).eval()
    ref64 = copy.deepcopy(ref).double()
    clock.lap("load")
    # The trials' inputs and fp64 answers: once per process for this problem, sizes, precision and
    # input seed (engine.evaluate.checks), made before the candidate's code is imported.
    try:
        checks = _reference_checks(job, problem, ref, ref64, device, cast)
    except Exception as exc:
        return Verdict(status="runtime_error", log=f"the reference itself failed: {_format_exc(exc)}", **base)
    checks_cached = checks.uses > 0
    try:
        ref_ops = _reference_ops(checks, ref, device)
    except Exception as exc:
        return Verdict(status="runtime_error", log=f"the reference itself failed: {_format_exc(exc)}", **base)
    varies = _reference_varies(checks, device, job.atol, job.rtol)
    notes: list[str] = [] if varies["beyond_tolerance"] else [DEGENERATE_NOTE]
    clock.lap("reference")
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
            _sync_state(ref, new)
            new = _model_to(new, device, cast).eval()
    except Exception as exc:
        return Verdict(status="runtime_error", log=_format_exc(exc), **base)
    clock.lap("load")
    jit: dict[str, Any] = {}
    if language == "triton":
        try:
            jit = _triton_warmup(solution, new, problem, device, job.seed)
        except EvalFailure as exc:
            return Verdict(status=exc.status, log=str(exc), **base)
        clock.lap("jit")

    errs: dict[str, float] = {}
    native_errs = checks.native_errs
    dtypes: list[Any] = checks.dtypes
    flags: list[str] = []
    first_out: list[Any] | None = None  # trial 0's outputs: the same on every trial is input-independent
    same_out = True
    new_ops: Any = None  # the torch compute ops of one forward (engine.evaluate.integrity.OpProfile)
    forward_s: list[float] = []  # the forward's seconds on the check trials after the first
    call_new = _caller(new)
    limit = job.torch_ops_share if job.torch_ops_share is not None else integrity.TORCH_OPS_SHARE
    phase = on_phase or (lambda name: None)
    phase("checking")
    with torch.no_grad():
        for trial in range(job.trials):
            inputs = checks.trial_inputs(trial, device)
            before = integrity.snapshot(inputs)
            # Every block the caching allocator holds for the output sizes is overwritten with
            # NaN first, so a candidate that returns memory it never wrote cannot pass on
            # whatever was left there (the reference's answer, say).
            integrity.poison_allocator(checks.out_bytes, device)
            threads = integrity.live_threads()
            try:
                out, seconds = integrity.timed_call(lambda: call_new(*inputs), device)  # noqa: B023
                if trial > 0:  # (trial 0 may pay one-time costs)
                    forward_s.append(seconds)
            except Exception as exc:
                return Verdict(status="runtime_error", trials=trial, log=_format_exc(exc), **base)
            flags += integrity.check_threads(threads)
            flags += integrity.check_inputs_unchanged(before, inputs)
            ok, trial_errs, reason = compare(out, checks.trial_expected(trial, device), job.atol, job.rtol,
                                             dtypes)
            if ok:
                flags += integrity.check_outputs(_flatten(out), inputs, device)
            for k, v in trial_errs.items():
                errs[k] = max(errs.get(k, 0.0), v)
            if not ok:
                return Verdict(
                    status="incorrect", trials=trial + 1, log=f"trial {trial + 1}: {reason}",
                    **errs, **base,
                )
            if trial == 0:
                first_out = [t.detach().clone() for t in _flatten(out)]
            else:
                same_out = same_out and _same_outputs(first_out or [], _flatten(out))
            if trial == 0:  # more calls, on a copy of the inputs, watched for torch compute ops
                fresh = integrity.snapshot(before)
                try:
                    new_ops, thread_flags = integrity.check_forward_ops(lambda: call_new(*fresh), device)  # noqa: B023
                except Exception as exc:
                    return Verdict(status="runtime_error", trials=1, log=_format_exc(exc), **base)
                flags += thread_flags
            del out, before
        if new_ops is not None:  # judged against the forward's time without the recorder
            if forward_s:
                new_ops = dataclasses.replace(new_ops, total_s=min(forward_s))
            op_flags, op_notes = integrity.judge_torch_ops(new_ops, ref_ops.main_ops(), limit)
            flags += op_flags
            notes += op_notes
        if same_out and job.trials > 1 and varies["at_all"]:
            flags.append("input-independent: ModelNew returns the same output for every input drawn,"
                         " while the reference's output changes with its inputs")
        del first_out
        clock.lap("check")

        # The timed inputs are a fresh draw from a seed made here and now (no cached answer
        # exists for them): the answer on them, computed live, must be right too.
        torch.manual_seed(secrets.randbits(62))
        inputs = _inputs(problem, device, cast)
        phase("timing")
        try:
            probe = gpuload.probe_for(base["gpu"]) if device == "cuda" else None
            call_ref = _caller(ref)
            settled = noise.settle(lambda: timing.time_pass(
                lambda: call_ref(*inputs), lambda: call_new(*inputs), device,
                budget_s=job.time_budget_s, max_reps=job.max_reps, probe=probe))
            stats = settled.kept.stats
            if device == "cuda":
                flags += timing.check_escaping_work(lambda: call_new(*inputs), stats.new.median)
            ok, _, reason = compare(call_new(*inputs), _caller(ref64)(*_to(inputs, device, torch.float64)),
                                    job.atol, job.rtol, dtypes)
        except Exception as exc:
            return Verdict(status="runtime_error", trials=job.trials, log=_format_exc(exc), **errs, **base)
        clock.lap("time")
        if not ok:
            flags.append(f"recheck: after timing, on the timed inputs: {reason}")
    flags += integrity.check_harness(harness)
    if not checks.intact():
        flags.append("reference-cache: the cached trial inputs or expected outputs changed during this"
                     " evaluation (the candidate wrote memory it does not own)")
        checks_module.drop(checks.key)
    sol_ms = timing.speed_of_light_ms(job.flops, job.bytes, dtypes[0] if dtypes else None,
                                      device, job.cache_dir)
    sol_fraction = sol_ms / stats.new.median if sol_ms and stats.new.median > 0 else None
    if sol_fraction is not None and sol_fraction > SOL_FLOOR:
        flags.append(f"speed of light: {stats.new.median:.4g} ms is below the floor of {sol_ms:.4g} ms"
                     f" for this problem's FLOPs and bytes on this device")
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
    retarget = _retarget_note(job)
    if retarget:
        summary += "\n" + retarget["note"]
    timing_record = noise.summary(settled, num_threads, noise.timer_cores())
    if os.environ.get("KTREE_CPU_CORES"):
        timing_record["pinned"] = True  # the cpu timer on its own cores, the builds on others
    if retarget:
        timing_record["arch_retarget"] = retarget
    clock.lap("other")
    timing_record["phases_s"] = clock.rounded()
    timing_record["floor_s"] = round(timing_floor_s(stats, job.trials), 6)
    timing_record["reference_checks"] = {"cached": checks_cached, "build_s": round(checks.build_s, 4),
                                         "bytes": checks.nbytes, "on_device": checks.on_device}

    return Verdict(
        status=status,
        flags=tuple(flags),
        notes=tuple(dict.fromkeys(notes)),
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


def _reference_on_inputs(job: EvalJob) -> tuple[str, Any, Any]:
    """(device, the reference model, its timing inputs), seeded as the evaluation seeds them."""
    import torch

    device = "cuda" if job.backend == "cuda" else "cpu"
    problem = load_module_from_path(job.problem_path, job.sizes)
    torch.manual_seed(job.seed)
    model = _model_to(problem.Model(*problem.get_init_inputs()), device, _cast(job)).eval()
    torch.manual_seed(job.seed + 2000)
    return device, model, _inputs(problem, device, _cast(job))


def run_reference(job: EvalJob) -> dict[str, Any]:
    """Time the reference eagerly and under torch.compile, interleaved, on the same inputs.
    Mode "warm" stops after compiling: many warm-ups run at once, then each timing alone finds
    torch.compile's caches (FX graph, Triton) filled."""
    import torch

    from engine.evaluate import timing

    device, model, inputs = _reference_on_inputs(job)
    result: dict[str, Any] = {"device": timing.device_name(job.backend), "gpu": timing.device_info(job.backend),
                              "sizes": dict(job.sizes), "torch_version": torch.__version__, "log": ""}
    with torch.no_grad():
        t0 = clocks.perf_counter()
        try:
            compiled = torch.compile(model)
            compiled(*inputs)  # compiles here, outside the timed window
            result["compile_s"] = clocks.perf_counter() - t0
        except Exception as exc:
            compiled = None
            result["log"] = f"torch.compile failed: {_format_exc(exc)}"
        if job.mode == "warm":  # only fill torch.compile's on-disk caches; time later, alone
            return result
        if compiled is None:
            stats = timing.time_pair(lambda: model(*inputs), lambda: model(*inputs), device,
                                     budget_s=job.time_budget_s, max_reps=job.max_reps)
            result.update(eager_ms=stats.ref.median, compile_ms=None)
        else:
            stats = timing.time_pair(lambda: model(*inputs), lambda: compiled(*inputs), device,
                                     budget_s=job.time_budget_s, max_reps=job.max_reps)
            result.update(eager_ms=stats.ref.median, compile_ms=stats.new.median)
    return result


def run_agreement(job: EvalJob) -> dict[str, Any]:
    """The timer checked against itself and against triton's do_bench on the reference: our
    median twice (run to run), do_bench's median (both flush the L2 before every call)."""
    import torch

    from engine.evaluate import timing

    device, model, inputs = _reference_on_inputs(job)
    result: dict[str, Any] = {"device": timing.device_name(job.backend), "sizes": dict(job.sizes)}
    with torch.no_grad():
        def call() -> Any:
            return model(*inputs)

        runs = [timing.time_pair(call, call, device, budget_s=job.time_budget_s, max_reps=job.max_reps)
                for _ in range(2)]
        result["ours_ms"] = [r.new.median for r in runs]
        result["ours_ref_ms"] = [r.ref.median for r in runs]
        try:
            from triton.testing import do_bench
        except ImportError:
            result["do_bench_ms"] = None
        else:
            result["do_bench_ms"] = float(do_bench(call, warmup=25, rep=int(job.time_budget_s * 1000),
                                                   return_mode="median"))
    return result


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


def pin_cores() -> None:
    """Run on the cores the evaluator gave this process (KTREE_CPU_CORES, e.g. "1" or "2,3": the
    cpu backend's pinned timer, engine.evaluate.evaluator.split_cores); whatever it starts
    (compilers, the candidate) inherits them."""
    cores = os.environ.get("KTREE_CPU_CORES", "")
    if cores and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(ValueError, OSError):
            os.sched_setaffinity(0, {int(c) for c in cores.split(",")})


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
    elif job.mode in ("reference", "warm"):
        result = run_reference(job)
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
