"""What a search is asked to do: its shape, strategy, budgets and evaluation settings.

Recorded whole in the session's row (`sessions.config`), so a resume runs the same search.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class SearchConfig:
    rounds: int = 2
    ideas: int = 3
    variants: int = 2
    top: int = 2
    max_output_tokens: int = 16000
    reasoning: str | None = None
    fixes: int = 1  # fix-prompt retries for a variant that fails to compile
    budget_usd: float | None = None
    budget_tokens: int | None = None
    max_variants: int | None = None  # variants generated (LLM code or a human edit)
    time_limit_s: float | None = None  # wall time of this run of the engine
    atol: float = 1e-2
    rtol: float = 1e-2
    trials: int = 3
    seed: int = 0
    strategy: str = "tree"
    llm_concurrency: int = 8  # concurrent calls per provider
    precision: str | None = None  # fp32 | fp16 | bf16: inputs and weights cast (None: the problem's own)
    languages: tuple[str, ...] = ("cuda",)  # kernel languages the variants are spread over
    # allow | exclude: whether a `library`-marked variant (the reference's main op left to a library,
    # still correct) may be a parent and the best (engine.domain.LIBRARY_OPS)
    library_ops: str = "allow"
    # seconds one evaluation may hold its device (--eval-timeout); None: from the problem's reference
    # time (engine.evaluate.eval_limit; each verdict's timing["eval_limit"] says what it was)
    eval_timeout: float | None = None
    isolation: str = ""  # how generated code ran here: strict | basic ("" where each Ray node chose)

    def __post_init__(self) -> None:
        object.__setattr__(self, "languages", tuple(self.languages))  # a recorded config holds a list

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchConfig:
        """A recorded config; keys this version does not know are dropped."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
