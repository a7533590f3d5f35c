"""The evaluation child's timing: the candidate against its reference, interleaved, settled
against noise (engine.evaluate.timing, engine.evaluate.noise), and rechecked on the timed inputs;
the reference alone (eager and torch.compile) and the timer's agreement with itself; the
evaluation's phases and the least device time a verdict needs.

Runs untrusted code in the child's process (engine.evaluate.child); torch and the standard
library only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.evaluate import clocks
from engine.evaluate.child_check import caller, compare
from engine.evaluate.child_load import format_exc, reference_on_inputs, to_device
from engine.evaluate.jobs import EvalJob


class Phases:
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


def run_reference(job: EvalJob) -> dict[str, Any]:
    """Time the reference eagerly and under torch.compile, interleaved, on the same inputs.
    Mode "warm" stops after compiling: many warm-ups run at once, then each timing alone finds
    torch.compile's caches (FX graph, Triton) filled."""
    import torch

    from engine.evaluate import timing

    device, model, inputs = reference_on_inputs(job)
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
            result["log"] = f"torch.compile failed: {format_exc(exc)}"
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

    device, model, inputs = reference_on_inputs(job)
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


def time_candidate(job: EvalJob, ref: Any, ref64: Any, call_new: Callable[..., Any], inputs: Any, device: str,
                   gpu: dict[str, Any] | None, dtypes: list[Any]) -> tuple[Any, list[str], bool, str]:
    """Time the reference and the candidate interleaved on `inputs` (engine.evaluate.noise settles
    the passes; on a GPU, `gpu`'s probe watches other processes), look for work escaping the CUDA
    events, and check the candidate's answer on these inputs against the fp64 reference's.
    (the settled passes, flags, whether the recheck passed, why not). Raises what the candidate
    raises."""
    import torch

    from engine.evaluate import gpuload, noise, timing

    flags: list[str] = []
    probe = gpuload.probe_for(gpu) if device == "cuda" else None
    call_ref = caller(ref)
    settled = noise.settle(lambda: timing.time_pass(
        lambda: call_ref(*inputs), lambda: call_new(*inputs), device,
        budget_s=job.time_budget_s, max_reps=job.max_reps, probe=probe))
    stats = settled.kept.stats
    if device == "cuda":
        flags += timing.check_escaping_work(lambda: call_new(*inputs), stats.new.median)
    ok, _, reason = compare(call_new(*inputs), caller(ref64)(*to_device(inputs, device, torch.float64)),
                            job.atol, job.rtol, dtypes)
    return settled, flags, ok, reason
