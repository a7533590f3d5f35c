"""What the engine asks of an evaluation subprocess: the job, JSON-able and frozen.

Both sides read it: the host builds it (with `engine.evaluate.host.make_job.make_job`, the one way to,
so that a job means the same thing wherever it runs) and the evaluation child runs it. The problem's
work (`flops`, `bytes`) comes from the caller: this package never loads a problem's metadata (that
is `engine.problems`, which sits above it), so it stays torch + stdlib and runs on a bare GPU box or
a Ray node.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EvalJob:
    problem_path: str
    solution_source: str
    backend: str  # "cuda" | "cpu"
    cache_dir: str  # root of the build dirs keyed by source hash
    sizes: dict[str, int] = field(default_factory=dict)  # size constants to run at
    mode: str = "evaluate"  # "compile" | "evaluate" | "reference" | "warm" | "agreement"
    atol: float = 1e-2
    rtol: float = 1e-2
    trials: int = 3
    seed: int = 0
    time_budget_s: float = 2.0
    max_reps: int = 100
    flops: float | None = None  # the problem's work at these sizes: the speed-of-light floor
    bytes: float | None = None
    ref_compile_ms: float | None = None  # torch.compile reference time, measured once per problem
    # The reference's eager time measured where no candidate ran (the cuda reference job, or on the
    # cpu the first evaluation of a fresh worker before its candidate was imported), cached per
    # problem: {"median", "p10", "p90", "lo", "hi"} in ms. The evaluation flags an in-process
    # reference time far above it (engine.evaluate.child.measure). None: unknown.
    ref_eager_clean: dict[str, float] | None = None
    # "fp32" | "fp16" | "bf16": floating inputs and both models' weights cast to it, as KernelBench
    # does; None: the problem's own dtypes
    precision: str | None = None
    # The check trials' inputs are drawn from this seed: the evaluator's secret, fresh per session
    # (and per `ktree eval` run), set by the evaluator as it sends the job and never recorded;
    # None: `seed` (a job run outside an evaluator, reproducible).
    input_seed: int | None = None
    # The solution's kernel language (engine.evaluate.languages), decided once where the job is
    # made (`host.make_job.make_job`: the caller's choice, else the source's) and read by the evaluator and the
    # evaluation child alike; "": none decided (a job built by hand), told from the source.
    language: str = ""
    # The seconds this evaluation may hold its device (`--eval-timeout`, options.CheckSettings),
    # read by the evaluator from the job wherever it runs; None: from the problem's reference time
    # (engine.evaluate.host.eval_limit).
    eval_timeout: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalJob:
        return cls(**d)

    def replace(self, **changes: Any) -> EvalJob:
        return dataclasses.replace(self, **changes)
