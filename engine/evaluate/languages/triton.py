"""Triton: a solution whose kernels are `@triton.jit` functions in the Python file itself.

Imported from a real file in its build dir (Triton's JIT reads its kernels' source lines back);
nothing is compiled at load: the JIT compiles on the first call, outside the timed window
(`first_call`), and on cuda before the GPU's lock where it can (`prewarm`). On the cpu backend the
kernels run under Triton's interpreter (TRITON_INTERPRET=1, set for the whole worker process).

Runs in the child's process; torch, triton (where the solution is Triton) and the standard library.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from engine.evaluate.jobs import EvalJob
from engine.evaluate.languages.base import Language
from engine.evaluate.languages.common import (
    EvalFailure,
    WarmupTimeout,
    build_dir_lock,
    format_exc,
    make_inputs,
    model_to,
    precision_dtype,
    solution_build_dir,
    time_limit,
)
from engine.evaluate.loading import load_module_from_file, load_module_from_path


def clocks() -> Any:
    """The harness's clocks (bound where the evaluation's process started, before any candidate's
    import); imported here on first use, so that loading this module does not import torch."""
    from engine.evaluate.harness import clocks as bound

    return bound


TRITON_CACHE = "triton-cache"  # Triton's JIT cache inside the build cache (the sandbox keeps it writable)
TRITON_WARMUP_S = 240.0  # the time limit on a Triton solution's first call: JIT compile + autotune
_TRITON = re.compile(r"^[ \t]*(?:import triton\b|from triton\b|@triton\.(?:jit|autotune)\b)", re.MULTILINE)


class Triton(Language):
    name = "triton"
    title = "Triton"
    mark = "[triton]"
    python_only = True
    requires = "triton"
    contract_mark = "Write the kernels in Triton"  # engine/templates/contract_triton.txt
    first_call_limit_s = TRITON_WARMUP_S
    build_words = "import + JIT + autotune"
    eval_floor_s = 300.0  # its JIT and autotuning on a GPU, its interpreter (slow) on the cpu
    fix_words = ("failed: Triton's JIT compiler rejected one of its kernels at the first call",
                 "Triton JIT error (tail)")

    def detects(self, source: str) -> bool:
        return bool(_TRITON.search(source))

    def contract_template(self, backend: str) -> str:
        return "contract_triton.txt"  # either backend: on the cpu one the kernels are interpreted

    def process_env(self, backend: str) -> dict[str, str]:
        # Set before anything imports triton (torch may, in a worker that evaluated other variants
        # first): triton.language's helpers are made for the interpreter at import.
        return {} if backend == "cuda" else {"TRITON_INTERPRET": "1"}

    def label(self, backend: str) -> str:
        return self.title

    def load(self, job: EvalJob, key: str, build_dir: str) -> Any:
        return _load_triton(job, key, build_dir)

    def first_call(self, module: Any, new: Any, problem: Any, device: str, seed: int) -> dict[str, Any] | None:
        return triton_warmup(module, new, problem, device, seed)

    def prewarm(self, job: EvalJob) -> dict[str, Any]:
        return triton_prewarm(job)

    def prewarms(self, backend: str) -> bool:
        return backend == "cuda"

    def failure_status(self, exc: BaseException) -> str:
        return triton_failure_status(exc)


LANGUAGE = Triton()


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
    with build_dir_lock(build_dir):
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
        t0 = clocks().perf_counter()
        kernel_call()
        times.append((clocks().perf_counter() - t0) * 1000)
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


def triton_warmup(module: Any, new: Any, problem: Any, device: str, seed: int) -> dict[str, Any]:
    """One call of a Triton solution before anything is checked or timed: the JIT compiles its
    kernels and @triton.autotune benchmarks its configs here, outside the timed window, within
    TRITON_WARMUP_S. Returns what it cost and what autotuning chose."""
    import torch

    torch.manual_seed(seed + 3000)
    inputs = make_inputs(problem, device)
    t0 = clocks().perf_counter()
    try:
        with time_limit(TRITON_WARMUP_S), torch.no_grad():
            new(*inputs)
            if device == "cuda":
                torch.cuda.synchronize()
    except WarmupTimeout as exc:
        raise EvalFailure("timeout", f"the Triton JIT compile and autotuning of the first call took"
                          f" over {TRITON_WARMUP_S:g} s") from exc
    except Exception as exc:
        raise EvalFailure(triton_failure_status(exc), format_exc(exc)) from exc
    report: dict[str, Any] = {"jit_s": round(clocks().perf_counter() - t0, 4),
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
    from engine.evaluate.languages import for_job

    if job.backend != "cuda" or for_job(job).name != LANGUAGE.name:
        return {}
    import torch

    t0 = clocks().perf_counter()
    report: dict[str, Any] = {}
    try:
        problem = load_module_from_path(job.problem_path, job.sizes)
        module = _load_triton(job, *solution_build_dir(job))
        init = problem.get_init_inputs()
        torch.manual_seed(job.seed)
        cast = precision_dtype(job)
        new = module.ModelNew(*init)
        if isinstance(new, torch.nn.Module):
            new = model_to(new, "cuda", cast).eval()
        with torch.device("meta"):
            shapes = problem.get_inputs()
        inputs = [_empty_like_on(t, "cuda", cast) for t in shapes]
        with _compile_only(), time_limit(TRITON_WARMUP_S), torch.no_grad():
            new(*inputs)
        report["compiled"] = True
    except WarmupTimeout:
        report["error"] = f"over {TRITON_WARMUP_S:g} s"
    except BaseException as exc:  # noqa: BLE001  (reported; the warm-up under the lock decides)
        report["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        new = inputs = None  # noqa: F841
        import gc

        gc.collect()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    report["jit_s"] = round(clocks().perf_counter() - t0, 4)
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

