"""The one way a variant's evaluation job is built: by the search when it evaluates a variant, and
again when a profile asked for later runs the job that was evaluated."""

from __future__ import annotations

from pathlib import Path

from engine.domain import Node
from engine.evaluate import EvalJob, Evaluator
from engine.search.config import SearchConfig


def variant_job(evaluator: Evaluator, problem_path: str | Path, node: Node, sizes: dict[str, int],
                config: SearchConfig, flops: float | None, bytes: float | None) -> EvalJob:
    """A variant's evaluation job, as the search builds it (and a later profile rebuilds it): its
    source in its kernel language, carried to the evaluation (a node recorded before variants had
    one: the source's)."""
    return evaluator.job(
        str(problem_path), node.source, sizes, flops=flops or None, bytes=bytes or None,
        language=node.language, **config.checks.job_settings())
