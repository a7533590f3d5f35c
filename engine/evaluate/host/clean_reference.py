"""The reference's eager time measured where no candidate ran, kept for later jobs.

On cuda the reference job (engine.evaluate.child.reference: its own process, no candidate) returns
it as `eager_stats`, cached with the torch.compile time, where the torch.compile baseline is taken.
Elsewhere (the cpu; cuda without the baseline) an evaluation whose job brings no clean time times the
reference alone before its candidate is imported (engine.evaluate.child.measure.before_candidate) and
tells the judge then (engine.evaluate.harness.outbox), with `measured` true when no other work slowed
it; the evaluator keeps it here, beside the reference's other cached times, and gives it to every
later job (`EvalJob.ref_eager_clean`): each evaluation runs in a fresh process, which would time it again.

Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any

from engine import settings

FIELDS = ("median", "p10", "p90", "lo", "hi")


def path_for(reference_file: Path, cores: str) -> Path:
    """The clean time's file beside the reference's cached times (`reference_file`: the
    evaluator's key for the problem, sizes, precision and host), per set of timer cores."""
    timer = f"{cores or 'all'}-t{settings.get('KTREE_THREADS', '')}"
    return reference_file.with_name(f"{reference_file.stem}-clean-{re.sub(r'[^0-9a-zA-Z_-]', '_', timer)}.json")


def read(path: Path) -> dict[str, float] | None:
    """The kept clean time, else None (the evaluation measures it where it can)."""
    with contextlib.suppress(OSError, ValueError, TypeError):
        kept = json.loads(path.read_text())
        if isinstance(kept, dict) and kept.get("median"):
            return {k: float(v) for k, v in kept.items() if k in FIELDS}
    return None


def keep(path: Path, job: Any, timing: dict[str, Any] | None, told: dict[str, Any] | None = None) -> None:
    """Keep the clean time an evaluation's process told the judge before its candidate was imported
    (`told`: engine.evaluate.harness.outbox; never the verdict's own record, which the candidate's
    code may have written), unless its job brought one; drop a kept one the evaluation found
    stale (far slower than a quiet in-process time: `timing`, the verdict's record: at worst a
    candidate has it measured again, before the next candidate)."""
    if ((timing or {}).get("reference_clean") or {}).get("stale"):
        with contextlib.suppress(OSError):
            path.unlink()
        return
    clean = told or {}
    if job.ref_eager_clean is not None or not clean.get("measured"):
        return
    with contextlib.suppress(OSError, TypeError, ValueError, KeyError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({k: float(clean[k]) for k in FIELDS}))
        os.replace(tmp, path)
