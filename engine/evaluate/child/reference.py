"""The reference's own timings (eager and torch.compile), with their noise, taken so that the GPU
is held only while timing: `python -m engine.evaluate.child.evaluation JOB RESULT` in mode "reference".

Before the gate (engine.evaluate.gate; the engine has not taken the GPU's lock yet): torch, the
CUDA context, the model and its inputs, torch.compile's compile and autotuning and one call of
each (caches filled by the "warm" mode in the compile pool make this seconds). After `go`: the
interleaved timing only. The result carries each median with its p10, p90 and ~95 % interval
(`eager_ms`, `eager_p10_ms`, `eager_p90_ms`, `eager_lo_ms`, `eager_hi_ms`; `compile_*` alike),
the seconds set up before the gate (`setup_s`), waited at it (`gate_wait_s`) and held (`held_s`).

Runs the user's problem file (not generated code); torch + stdlib.
"""

from __future__ import annotations

from typing import Any

from engine.evaluate.child.load import format_exc, reference_on_inputs
from engine.evaluate.child.measure import reference_rotation
from engine.evaluate.harness import clocks
from engine.evaluate.jobs import EvalJob


def stats_fields(prefix: str, stats: Any) -> dict[str, float]:
    """`{prefix}_ms`, `_p10_ms`, `_p90_ms`, `_lo_ms`, `_hi_ms` of one side of a timing."""
    return {f"{prefix}_ms": stats.median, f"{prefix}_p10_ms": stats.p10, f"{prefix}_p90_ms": stats.p90,
            f"{prefix}_lo_ms": stats.lo, f"{prefix}_hi_ms": stats.hi}


SETUP_AHEAD_BYTES = 2**30  # inputs over this are drawn after the gate, under the GPU's lock


def large_inputs(job: EvalJob) -> bool:
    """Whether the problem's inputs (their shapes drawn on the meta device) exceed SETUP_AHEAD_BYTES;
    False where they cannot be had that way."""
    import torch

    from engine.evaluate.harness.memory import tensor_bytes
    from engine.evaluate.loading import load_module_from_path

    if job.backend != "cuda":
        return False
    try:
        problem = load_module_from_path(job.problem_path, job.sizes)
        with torch.device("meta"):
            return tensor_bytes(list(problem.get_inputs())) > SETUP_AHEAD_BYTES
    except Exception:
        return False


def run(job: EvalJob) -> dict[str, Any]:
    import torch

    from engine.evaluate import gate
    from engine.evaluate.harness import timing

    t0 = clocks.perf_counter()
    # A problem of gigabytes sets up after the gate, not before it: several processes waiting for
    # one GPU, each holding its inputs and timed sets, would not fit beside the one that holds it.
    # Its setup is then held time.
    waited = gate.wait_for_go("reference set-up") if large_inputs(job) else None
    device, model, inputs = reference_on_inputs(job)
    result: dict[str, Any] = {"device": timing.device_name(job.backend), "gpu": timing.device_info(job.backend),
                              "sizes": dict(job.sizes), "torch_version": torch.__version__, "log": ""}
    with torch.no_grad():
        compiled = None
        t1 = clocks.perf_counter()
        try:
            compiled = torch.compile(model)
            compiled(*inputs)  # compiles (and autotunes) here, before the lock
            compiled(*inputs)
            result["compile_s"] = clocks.perf_counter() - t1
        except Exception as exc:
            compiled = None
            result["log"] = f"torch.compile failed: {format_exc(exc)}"
        model(*inputs)
        # timed as an evaluation times: rotating input sets, drawn before the lock
        feed = reference_rotation(job, device, inputs)
        feed.protect(model)
        if device == "cuda":
            torch.cuda.synchronize()
        result["setup_s"] = round(clocks.perf_counter() - t0, 4)
        result["gate_wait_s"] = round(waited if waited is not None else gate.wait_for_go("reference timing"), 4)
        if waited is not None:
            result["setup_held"] = True
        t2 = clocks.perf_counter()
        other = compiled if compiled is not None else model
        stats = timing.time_pair(lambda *a: model(*a), lambda *a: other(*a), device,
                                 budget_s=job.time_budget_s, max_reps=job.max_reps, feed=feed)
        result["held_s"] = round(clocks.perf_counter() - t2, 4)
    result.update(stats_fields("eager", stats.ref))
    # the reference's time where no candidate ran: an evaluation compares its in-process one to it
    result["eager_stats"] = {"median": stats.ref.median, "p10": stats.ref.p10, "p90": stats.ref.p90,
                             "lo": stats.ref.lo, "hi": stats.ref.hi}
    if compiled is not None:
        result.update(stats_fields("compile", stats.new))
    else:
        result["compile_ms"] = None
    result["reps"] = stats.reps
    return result
