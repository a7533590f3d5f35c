"""What a search is asked to do, in parts (engine.options): its shape, budgets, LLM settings and
check settings. Where it runs (the placement) is the evaluator's, recorded beside it.

Recorded in the session's row (`sessions.config`, flat: `record`), so a resume runs the same search.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from engine import options
from engine.options import Budgets, CheckSettings, LLMSettings, Shape

SEARCH_PARTS = ("shape", "budgets", "llm", "checks")
DEFAULT_TOLERANCE = 1e-2  # atol and rtol where none is given


@dataclass(frozen=True)
class SearchConfig:
    shape: Shape = field(default_factory=lambda: options.PARTS["shape"]())
    budgets: Budgets = field(default_factory=lambda: options.PARTS["budgets"]())
    llm: LLMSettings = field(default_factory=lambda: options.PARTS["llm"]())
    checks: CheckSettings = field(default_factory=lambda: options.PARTS["checks"]())

    def __post_init__(self) -> None:
        # A search judges against concrete tolerances: one not given (None: "the problem's own",
        # resolved by engine.launch) is the method's default here.
        checks = self.checks
        if checks.atol is None or checks.rtol is None:
            object.__setattr__(self, "checks", replace(
                checks, atol=DEFAULT_TOLERANCE if checks.atol is None else checks.atol,
                rtol=DEFAULT_TOLERANCE if checks.rtol is None else checks.rtol))

    def record(self) -> dict[str, Any]:
        """The config as the session records it: every part's fields, flat."""
        return options.record(self.shape, self.budgets, self.llm, self.checks)

    @classmethod
    def of(cls, **flat: Any) -> SearchConfig:
        """A config from fields named flat (rounds=1, atol=0.1, ...); a name no part has: TypeError."""
        return cls._built(options.split(flat, _parts(), strict=True))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchConfig:
        """A recorded config (flat, as `record` wrote it, or as older versions did); keys no part
        declares are dropped."""
        return cls._built(options.split(data, _parts()))

    @classmethod
    def _built(cls, given: dict[str, dict[str, Any]]) -> SearchConfig:
        return cls(**{name: options.PARTS[name](**given[name]) for name in SEARCH_PARTS})


def _parts() -> dict[str, type]:
    return {name: options.PARTS[name] for name in SEARCH_PARTS}
