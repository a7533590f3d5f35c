"""What the engine asks of an evaluation subprocess (JSON-able, frozen)."""

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
    mode: str = "evaluate"  # "compile" | "evaluate"
    atol: float = 1e-2
    rtol: float = 1e-2
    trials: int = 3
    seed: int = 0
    time_budget_s: float = 2.0
    max_reps: int = 100
    flops: float | None = None  # the problem's work at these sizes: the speed-of-light floor
    bytes: float | None = None
    ref_compile_ms: float | None = None  # torch.compile reference time, measured once per problem

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalJob:
        return cls(**d)

    def replace(self, **changes: Any) -> EvalJob:
        return dataclasses.replace(self, **changes)
