"""The one way an evaluator is made, for a search, a suite, `ktree eval` and the benches alike:
the backend (backends.resolve_backend), the GPUs, the isolation level and the executor checked
first, each choice that cannot be met a one-line PlacementError naming its flag."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine import settings
from engine.evaluate.placement.backends import PlacementError, resolve_backend
from engine.evaluate.profile.profiler import PROFILE_MODES

if TYPE_CHECKING:
    from engine.evaluate.base import Evaluator
    from engine.evaluate.host.evaluator import LocalEvaluator

EXECUTORS = ("local", "ray")


def resolve_isolation(requested: str) -> tuple[str, str | None]:
    """(level, note): the isolation level generated code runs under, and, when `auto` had to
    fall back from strict, why, in words. Saying the note is the caller's business: the CLI
    prints it once; the TUI does not (it would garble the screen)."""
    from engine.evaluate.host import sandbox

    if requested == "auto":
        level, why = sandbox.available()
        note = None if level == "strict" else (
            f"{why}; generated code runs with basic isolation"
            " (scrubbed environment, limits, no filesystem or network isolation)")
        return level, note
    try:
        return sandbox.resolve(requested), None
    except (RuntimeError, ValueError) as exc:
        raise PlacementError(str(exc)) from None


def isolation_detail(level: str) -> str:
    """Why strict isolation is not available here, in words (empty where it is, or not asked)."""
    from engine.evaluate.host import sandbox

    return f" ({sandbox.available()[1]})" if level == "strict" else ""


def checked_gpus(backend: str, gpus: Sequence[int] | None) -> list[int] | None:
    """`--gpus` against what this machine has: any on the cpu backend, or one that is not
    visible, is a PlacementError."""
    if gpus is None:
        return None
    if backend != "cuda":
        raise PlacementError("--gpus needs the cuda backend (no GPU in use here)")
    from engine.evaluate.host.devices import check_gpus, visible_gpus

    try:
        check_gpus(list(gpus), visible_gpus())
    except ValueError as exc:
        raise PlacementError(f"--gpus: {exc}") from None
    return list(gpus)


def visible_gpu_indices() -> list[int]:
    """The physical indices of the GPUs this process may use."""
    from engine.evaluate.host.devices import visible_gpus

    return sorted(visible_gpus())


def local_evaluator(backend: str, arch: str | None, gpus: Sequence[int] | None = None,
                    **kw: Any) -> LocalEvaluator:
    """This host's evaluator: one device per chosen GPU (`--gpus`, checked), else every visible one;
    `kw`: the rest of its EvaluatorConfig (isolation, profile, cpu_timer, ...)."""
    from engine.evaluate.host.evaluator import EvaluatorConfig, LocalEvaluator

    return LocalEvaluator(backend, EvaluatorConfig(cuda_arch=arch, gpus=checked_gpus(backend, gpus), **kw))


def check_cpu_timer() -> None:
    """KTREE_CPU_TIMER, if set, names a way the cpu timer gets its cores: else a PlacementError."""
    from engine.evaluate.host.devices import CPU_TIMERS

    value = settings.get("KTREE_CPU_TIMER")
    if value and value not in CPU_TIMERS:
        raise PlacementError(f"KTREE_CPU_TIMER={value!r}: choose from {', '.join(CPU_TIMERS)}")


def check_local_flags(ray_address: str | None, ray_workers: int | None) -> None:
    """The Ray flags mean nothing to the local executor: given without `--executor ray`, say so."""
    for flag, value in (("ray-address", ray_address), ("ray-workers", ray_workers)):
        if value is not None:
            raise PlacementError(f"--{flag} needs --executor ray")


def _choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        shown = ", ".join(map(repr, choices))
        raise PlacementError(f"--{name}: invalid choice: {value!r} (choose from {shown})")


def make_evaluator(requested_backend: str, *, executor: str = "local", gpus: Sequence[int] | None = None,
                   recorded_gpus: Sequence[int] | None = None, compile_workers: int | None = None,
                   isolation: str = "auto", ray_address: str | None = None,
                   ray_workers: int | None = None, profile: str = "off",
                   profile_each: bool = False) -> tuple[str, Evaluator]:
    """The backend and the evaluator asked for: this host's (executor local; on `gpus`, else a
    resumed session's `recorded_gpus`, else every visible GPU) or a Ray cluster's (executor ray:
    joined or started here; `auto` is then the cluster's backend, and each node resolves the
    isolation level for itself).

    Args:
        profile: auto | ncu | torch | off: how correct variants are profiled, on this host or on
            the Ray node that evaluated them.
        profile_each: each correct variant as it is evaluated, else (a search) only those the
            evaluator's profile() is asked for.

    How long an evaluation may hold its device travels in its job (EvalJob.eval_timeout).
    """
    _choice("executor", executor, EXECUTORS)
    _choice("profile", profile, PROFILE_MODES)
    if executor != "ray":
        check_local_flags(ray_address, ray_workers)
        backend, arch = resolve_backend(requested_backend)
        if gpus is None and recorded_gpus and backend == "cuda":
            try:
                gpus = checked_gpus(backend, recorded_gpus)
            except PlacementError as exc:
                ran_on, why = ",".join(map(str, recorded_gpus)), str(exc).removeprefix("--gpus: ")
                raise PlacementError(f"the session ran on GPUs {ran_on}, but {why}; choose others with --gpus"
                                     ) from None
        level, _ = resolve_isolation(isolation)
        return backend, local_evaluator(backend, arch, gpus, compile_workers=compile_workers,
                                        isolation=level, profile=profile, profile_each=profile_each)
    if gpus is not None:
        raise PlacementError("--gpus is for --executor local (ray runs one worker per GPU of the cluster)")
    from engine.evaluate.placement import ray_executor

    connected = ray_executor.connect(ray_address)
    backend = ray_executor.cluster_backend(requested_backend)
    return backend, ray_executor.RayEvaluator(
        backend, workers=ray_workers, compile_workers=compile_workers, isolation=isolation,
        shutdown=connected, profile=profile, profile_each=profile_each)
