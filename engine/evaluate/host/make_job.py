"""The one way to build an evaluation job (an `engine.evaluate.jobs.EvalJob`).

Every evaluator (local, Ray) and every other launcher (`ktree bench compile`, scripts/gpu-prebuild)
builds its jobs with `make_job`, so a job means the same thing wherever it runs. It runs on the
host's side: it tells a source's kernel language (engine.evaluate.languages), which the job then
carries to the evaluation child, so it sits above the languages and the job's record stays at
engine/evaluate/'s top, below them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from engine.evaluate.jobs import EvalJob
from engine.evaluate.languages import kernel_language


def make_job(problem_path: str | os.PathLike[str], source: str, sizes: dict[str, int], *,
             backend: str, cache_dir: str, flops: float | None, bytes: float | None,
             **options: Any) -> EvalJob:
    """The job for one variant (or, with `mode`, one reference timing or build).

    `flops` and `bytes` are required, None where unknown: the caller (the search, from
    `problem.cost(backend)`) knows the problem's work, and forgetting to pass it would silently
    lose the speed-of-light fraction. Zero counts as unknown, as the cost model means it.
    `options`: any other EvalJob field (atol, rtol, trials, seed, mode, ...); an unknown one is
    a TypeError. The problem path is made absolute (the job runs in another working dir); an
    empty one (a build with no problem) stays empty. `language`: the caller's choice (the search:
    its variant's); none given, the one the source is written in, told here once for the job's
    whole way (the evaluator and the evaluation child read it from the job)."""
    path = str(Path(problem_path).resolve()) if str(problem_path) else ""
    language = options.pop("language", None) or kernel_language(source)
    return EvalJob(problem_path=path, solution_source=source, backend=backend, cache_dir=cache_dir,
                   sizes=dict(sizes), flops=float(flops) if flops else None,
                   bytes=float(bytes) if bytes else None, language=language, **options)
