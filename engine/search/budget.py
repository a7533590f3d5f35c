"""What a search may spend and what it has spent, in one place: dollars, tokens (input + output
+ reasoning: the one total every screen and budget uses), variants made (a variant node: LLM code,
a fix, or a human edit; counted when the node is made, so `max variants` is a hard cap on the
tree's variants), and this run's wall time.

Every LLM call is charged here and every new variant counted here; `exceeded` and
`variant_limit` are the only answers to "may new work start?" — None, or the reason it may not,
worded as the session's stop reason. A resumed search starts from the store's totals, so a budget
spans every run of the session (the time limit alone is per run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from engine.llm.base import Usage


@dataclass
class Pool:
    """Dollars shared by several searches (a suite's cap over all its problems): each one's
    budget charges it too, and none starts new LLM work once it is spent."""

    usd: float | None = None
    spent_usd: float = 0.0

    def exceeded(self) -> str | None:
        if self.usd is not None and self.spent_usd >= self.usd:
            return f"suite budget reached: ${self.spent_usd:.4f} of ${self.usd:g}"
        return None


@dataclass
class Budget:
    usd: float | None = None
    tokens: int | None = None
    variants: int | None = None
    time_limit_s: float | None = None
    spent_usd: float = 0.0
    spent_tokens: int = 0
    variants_generated: int = 0
    pool: Pool | None = None  # a suite's cap, shared with its other problems

    def charge(self, cost_usd: float, usage: Usage) -> None:
        """One LLM call's bill: its dollars and every token it was billed for."""
        self.spent_usd += cost_usd
        if self.pool is not None:
            self.pool.spent_usd += cost_usd
        self.spent_tokens += usage.input + usage.output + usage.reasoning

    def count_variant(self) -> None:
        self.variants_generated += 1

    def reserve_variants(self, n: int) -> int:
        """Count up to `n` new variants, as their nodes are made (fixes and hand edits are
        variants too); how many the cap allows. The cap is hard: never more nodes than it."""
        allowed = n if self.variants is None else max(0, min(n, self.variants - self.variants_generated))
        self.variants_generated += allowed
        return allowed

    def restore(self, totals: Mapping[str, float], variants_generated: int) -> None:
        """Spending so far, as recorded (`Store.calls.totals`), for a resumed session."""
        self.spent_usd = float(totals["cost_usd"])
        self.spent_tokens = int(totals["tokens"])
        self.variants_generated = variants_generated

    def exceeded(self, elapsed_s: float) -> str | None:
        """Why no new work may start (dollars, tokens or time spent), or None."""
        if self.usd is not None and self.spent_usd >= self.usd:
            return f"budget reached: ${self.spent_usd:.4f} of ${self.usd:g}"
        if self.tokens is not None and self.spent_tokens >= self.tokens:
            return f"budget reached: {self.spent_tokens} of {self.tokens} tokens"
        if self.time_limit_s is not None and elapsed_s >= self.time_limit_s:
            return f"time limit reached: {self.time_limit_s:g} s"
        return self.pool.exceeded() if self.pool is not None else None

    def variant_limit(self) -> str | None:
        """Why no further variant may be generated, or None."""
        if self.variants is not None and self.variants_generated >= self.variants:
            return f"max variants reached: {self.variants_generated}"
        return None
