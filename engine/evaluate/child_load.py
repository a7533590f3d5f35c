"""The evaluation child's loading: build (or reuse) and import the candidate's solution, C++ or
Triton (whose JIT compiles on a first call, here, outside the timed window), and make the
problem's models and inputs on the device, cast to the job's precision.

Runs untrusted code in the child's process (engine.evaluate.child); torch and the standard
library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from engine.evaluate import clocks
from engine.evaluate.jobs import EvalJob
from engine.evaluate.loading import (
    kernel_language,
    load_module_from_file,
    load_module_from_path,
    load_module_from_source,
)
from engine.evaluate.sandbox import TRITON_CACHE
from engine.evaluate.verdict import log_tail

TRITON_WARMUP_S = 240.0  # the time limit on a Triton solution's first call: JIT compile + autotune


def cuda_on_cpu_note(job: EvalJob, exc: BaseException) -> str:
    """The first line of a CUDA solution's failure on the cpu backend, where no CUDA toolkit is
    expected ("CUDA_HOME is not set" alone tells a user nothing): what to do instead."""
    text = str(exc)
    cuda = "__global__" in job.solution_source or "cuda_sources" in job.solution_source
    if job.backend != "cuda" and cuda and ("CUDA_HOME" in text or "nvcc" in text or "cuda" in text.lower()):
        return ("a CUDA solution needs the cuda backend (a GPU): on the cpu backend solutions are C++"
                " (load_inline cpp_sources) or Triton, interpreted; see engine/templates/examples/cpu\n")
    return ""


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
                    _write_json(failed, {"levers": levers, "log": format_exc(exc)})
                raise
    except EvalFailure:
        raise
    except SyntaxError as exc:
        raise EvalFailure("compile_error", f"Python syntax error: {exc}") from exc
    except Exception as exc:
        status = "compile_error" if fastbuild.is_build_error(exc) else "runtime_error"
        raise EvalFailure(status, cuda_on_cpu_note(job, exc) + format_exc(exc)) from exc
    if not isinstance(getattr(module, "ModelNew", None), type):
        raise EvalFailure("runtime_error", "the solution defines no class ModelNew")
    return module


def retarget_note(job: EvalJob) -> dict[str, Any] | None:
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
    `triton_warmup`). Triton's cache is one dir in ktree's build cache, shared by every
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
        raise EvalFailure("runtime_error", format_exc(exc)) from exc
    except Exception as exc:
        raise EvalFailure(triton_failure_status(exc), format_exc(exc)) from exc
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


def triton_warmup(module: Any, new: Any, problem: Any, device: str, seed: int) -> dict[str, Any]:
    """One call of a Triton solution before anything is checked or timed: the JIT compiles its
    kernels and @triton.autotune benchmarks its configs here, outside the timed window, within
    TRITON_WARMUP_S. Returns what it cost and what autotuning chose."""
    import torch

    torch.manual_seed(seed + 3000)
    inputs = make_inputs(problem, device)
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
        raise EvalFailure(triton_failure_status(exc), format_exc(exc)) from exc
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


def triton_prewarm(job: EvalJob) -> dict[str, Any]:
    """Before the GPU's lock (the worker's "warm" request): a Triton solution's kernels compiled
    into Triton's cache without running them, so that the warm-up under the lock (triton_warmup)
    only loads their cubins. The model is made on the GPU (copies, no kernel) and called on
    uninitialised inputs of the problem's shapes and dtypes (drawn on the meta device: no kernel)
    with every `@triton.jit` launch turned into a compile-only warm-up and every autotuner
    compiling each of its configs instead of timing them. Whatever fails here (an API this Triton
    lacks, a forward that reads its outputs) is only reported: the warm-up under the lock compiles
    what is left. {} for anything but a Triton solution on cuda."""
    if job.backend != "cuda" or kernel_language(job.solution_source) != "triton":
        return {}
    import torch

    t0 = clocks.perf_counter()
    report: dict[str, Any] = {}
    try:
        problem = load_module_from_path(job.problem_path, job.sizes)
        module = load_solution(job)
        init = problem.get_init_inputs()
        torch.manual_seed(job.seed)
        cast = precision_dtype(job)
        new = module.ModelNew(*init)
        if isinstance(new, torch.nn.Module):
            new = model_to(new, "cuda", cast).eval()
        with torch.device("meta"):
            shapes = problem.get_inputs()
        inputs = [_empty_like_on(t, "cuda", cast) for t in shapes]
        with _compile_only(), _time_limit(TRITON_WARMUP_S), torch.no_grad():
            new(*inputs)
        report["compiled"] = True
    except _WarmupTimeout:
        report["error"] = f"over {TRITON_WARMUP_S:g} s"
    except BaseException as exc:  # noqa: BLE001  (reported; the warm-up under the lock decides)
        report["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        new = inputs = None  # noqa: F841
        import gc

        gc.collect()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    report["jit_s"] = round(clocks.perf_counter() - t0, 4)
    return report


def _empty_like_on(t: Any, device: str, cast: Any) -> Any:
    import torch

    if not isinstance(t, torch.Tensor):
        return t
    dtype = cast if cast is not None and t.is_floating_point() else t.dtype
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=dtype, device=device)


@contextlib.contextmanager
def _compile_only() -> Iterator[None]:
    """Every `@triton.jit` launch compiles and returns without running (JITFunction.run's own
    `warmup`); an autotuner compiles each of its configs the same way instead of benchmarking."""
    from triton.runtime import autotuner, jit

    run = jit.JITFunction.run
    tune = autotuner.Autotuner.run

    def compile_only(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["warmup"] = True
        return run(self, *args, **kwargs)

    def each_config(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.nargs = dict(zip(self.arg_names, args, strict=False))  # (read by prune_configs)
        try:
            configs = self.prune_configs(kwargs) if hasattr(self, "prune_configs") else self.configs
            for config in configs:
                extra = config.all_kwargs() if hasattr(config, "all_kwargs") else dict(config.kwargs)
                self.fn.run(*args, **{**kwargs, **extra})
        finally:
            self.nargs = None
        return None

    jit.JITFunction.run = compile_only  # type: ignore[method-assign]
    autotuner.Autotuner.run = each_config  # type: ignore[method-assign]
    try:
        yield
    finally:
        jit.JITFunction.run = run  # type: ignore[method-assign]
        autotuner.Autotuner.run = tune  # type: ignore[method-assign]


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


def format_exc(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    return log_tail(text)


def to_device(obj: Any, device: str, dtype: Any = None) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        if dtype is not None and obj.is_floating_point():
            return obj.to(device=device, dtype=dtype)
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(o, device, dtype) for o in obj)
    return obj


PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def precision_dtype(job: EvalJob) -> Any:
    """The dtype `job.precision` casts to (None: the problem's own)."""
    import torch

    return getattr(torch, PRECISIONS[job.precision]) if job.precision else None


def model_to(model: Any, device: str, dtype: Any) -> Any:
    return model.to(device=device, dtype=dtype) if dtype is not None else model.to(device)


def make_inputs(problem: Any, device: str, dtype: Any = None) -> Any:
    """The problem's inputs, made on the device itself. A KernelBench get_inputs() builds them
    with factory calls (torch.randn, ...) that would otherwise run on the host: seconds per call
    for a 1 GiB input, four calls per evaluation. Seeded by the caller as before (manual_seed
    seeds every device), and still moved in case get_inputs() builds them elsewhere."""
    import torch

    with torch.device(device):
        return to_device(problem.get_inputs(), device, dtype)


def sync_state(ref: Any, new: Any) -> None:
    """Give ModelNew the reference's parameters where names and shapes match exactly."""
    ref_state = ref.state_dict()
    new_state = new.state_dict()
    shared = {
        k: v for k, v in ref_state.items() if k in new_state and new_state[k].shape == v.shape
    }
    if shared:
        new.load_state_dict(shared, strict=False)


def reference_on_inputs(job: EvalJob) -> tuple[str, Any, Any]:
    """(device, the reference model, its timing inputs), seeded as the evaluation seeds them."""
    import torch

    device = "cuda" if job.backend == "cuda" else "cpu"
    problem = load_module_from_path(job.problem_path, job.sizes)
    torch.manual_seed(job.seed)
    model = model_to(problem.Model(*problem.get_init_inputs()), device, precision_dtype(job)).eval()
    torch.manual_seed(job.seed + 2000)
    return device, model, make_inputs(problem, device, precision_dtype(job))


def model_and_inputs(job: EvalJob) -> tuple[Any, Any, str]:
    """(the model a profile runs: the candidate, else the reference; its inputs; the device),
    seeded as the evaluation seeds them (engine.evaluate.profile.profiler's subprocess side)."""
    import torch

    device = "cuda" if job.backend == "cuda" else "cpu"
    problem = load_module_from_path(job.problem_path, job.sizes)
    init = problem.get_init_inputs()
    torch.manual_seed(job.seed)
    ref = problem.Model(*init)
    if job.solution_source:
        solution = load_solution(job)
        torch.manual_seed(job.seed)
        model = solution.ModelNew(*init)
        if isinstance(model, torch.nn.Module) and isinstance(ref, torch.nn.Module):
            sync_state(ref, model)
            model = model.to(device).eval()
    else:
        model = ref.to(device).eval()
    torch.manual_seed(job.seed + 2000)
    return model, make_inputs(problem, device), device
