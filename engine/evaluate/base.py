"""The evaluator contract: what the search asks of whatever compiles and times its variants.

Two implementations: `engine.evaluate.host.evaluator.LocalEvaluator` (this host's GPUs or CPU) and
`engine.evaluate.placement.ray_executor.RayEvaluator` (one worker per GPU of a Ray cluster). Like the LLM
`Provider` protocol, it is the plug-in boundary: a new executor implements this and nothing else,
and both build their jobs with `engine.evaluate.host.make_job.make_job` (tests/evaluate/test_self_contained.py
holds the two to this protocol, signature for signature).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from engine.evaluate.jobs import EvalJob
from engine.evaluate.verdict import Verdict

# Called with each phase a job enters: "compiling", "waiting", "checking", "timing", "evaluating"
# (and "profiling", for a profile asked for after the verdict).
PhaseCallback = Callable[[str], Awaitable[None]]


class Gate(Protocol):
    """The search's pause: a job that is built waits at the gate before it takes a device, and a
    device it got while the gate closed goes back until it opens (a paused search checks and
    times nothing new; a job already on its device finishes)."""

    def is_open(self) -> bool: ...

    async def wait(self) -> None:
        """Return once the gate is open."""
        ...


@runtime_checkable
class Evaluator(Protocol):
    backend: str  # "cuda" | "cpu"
    # The physical GPU indices evaluated on (recorded with a session, so a resume uses them
    # again); None where the executor does not choose GPUs by index (cpu, Ray).
    gpus: list[int] | None

    @property
    def waiting(self) -> dict[str, int]:
        """Jobs waiting for a build slot ("compile") and built ones waiting for a device ("device")."""
        ...

    @property
    def compile_workers(self) -> int:
        """Builds that may run at once (across the cluster, for Ray)."""
        ...

    def device_states(self) -> list[dict[str, Any]]:
        """Per evaluation device: name, busy, jobs (finished), busy_s, queue, alive."""
        ...

    def job(self, problem_path: str | os.PathLike[str], source: str, sizes: dict[str, int], *,
            flops: float | None, bytes: float | None, **options: Any) -> EvalJob:
        """The job for one variant; `flops` and `bytes` (the problem's work at these sizes, from
        the caller: the evaluator never loads a problem's metadata) set the speed-of-light floor.
        `options`: any other EvalJob field (atol, rtol, trials, seed, mode, ...)."""
        ...

    async def evaluate(self, job: EvalJob, on_phase: PhaseCallback | None = None,
                       gate: Gate | None = None) -> Verdict:
        """The verdict of one job; `on_phase` hears each phase it enters; with a `gate` (the
        search's pause), nothing is checked or timed while it is closed. Never raises for the
        candidate's faults: they are statuses."""
        ...

    async def profile(self, job: EvalJob, verdict: Verdict,
                      on_phase: PhaseCallback | None = None) -> Verdict:
        """`verdict` (this job's) with the variant's profile attached, taken now on a device held
        as for an evaluation; unchanged when profiling is off or the verdict is not ok. (An
        evaluator made to profile each correct variant has done so in evaluate(); a search's
        profiles only what it reads: its parents, its best, what a person asks for.) Never raises
        for the candidate's faults: a profile that could not be taken says why in its "error"."""
        ...

    async def close(self) -> None:
        """Stop whatever the evaluator started (worker processes, actors)."""
        ...
