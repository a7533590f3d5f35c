"""The evaluator contract: what the search asks of whatever compiles and times its variants.

Two implementations: `engine.evaluate.evaluator.LocalEvaluator` (this host's GPUs or CPU) and
`engine.executors.ray_executor.RayEvaluator` (one worker per GPU of a Ray cluster). Like the LLM
`Provider` protocol, it is the plug-in boundary: a new executor implements this and nothing else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from engine.evaluate.jobs import EvalJob
from engine.evaluate.verdict import Verdict

# Called with each phase a job enters: "compiling", "waiting", "checking", "timing", "evaluating".
PhaseCallback = Callable[[str], Awaitable[None]]


@runtime_checkable
class Evaluator(Protocol):
    backend: str  # "cuda" | "cpu"

    @property
    def waiting(self) -> dict[str, int]:
        """Jobs waiting for a build slot ("compile") and built ones waiting for a device ("device")."""
        ...

    @property
    def compile_workers(self) -> int: ...

    def device_states(self) -> list[dict[str, Any]]:
        """Per evaluation device: name, busy, jobs (finished), busy_s, queue, alive."""
        ...

    def job(self, problem_path: str, source: str, sizes: dict[str, int], *, flops: float | None,
            bytes: float | None, **kw: Any) -> EvalJob:
        """The job for one variant; `flops` and `bytes` (the problem's work at these sizes, from
        the caller: the evaluator never loads a problem's metadata) set the speed-of-light floor."""
        ...

    async def evaluate(self, job: EvalJob, on_phase: PhaseCallback | None = None) -> Verdict: ...

    async def close(self) -> None: ...
