"""A second opinion on a variant's source: GPU MODE's static hack rules (the `kernelguard` package).

kernelguard reads the source only (regular expressions and the AST, no build, no run) and classifies
it: "hacked" (a rule it trusts enough to filter a leaderboard entry matched: a rebound timer, an
output replayed from a cache keyed on the input's pointer, ...), "suspicious", "low_confidence" or
"valid". Its "hacked" flags the verdict (a `correct` one becomes `flagged`); "suspicious" and
"low_confidence" are notes, never flags; "valid" says nothing. The harness's own checks
(engine.evaluate.harness.integrity, tamper, timing) still judge what the variant *does*; this catches
what it *says*, before it runs.

It runs on the host, in a thread beside the variant's build (evaluator.evaluate): 10-60 ms of pure
Python per source, never on the device's held path. The package is optional: engine.evaluate runs on
bare GPU boxes and Ray nodes with torch and the standard library only; where it is absent, nothing is
flagged and one note says the rules did not run. An error inside it is a note, never a crash.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.evaluate.verdict import Verdict

PREFIX = "kernelguard: "
ABSENT_NOTE = PREFIX + "the static rules did not run (the kernelguard package is not installed here)"
DECISIVE_SEVERITIES = ("critical", "high")  # the patterns a "hacked" flag names
EVIDENCE_CHARS = 160


@dataclass(frozen=True)
class StaticOpinion:
    """What the rules said of one source: flags (only for "hacked"), notes, and the record kept in
    the verdict's timing as "static_rules" (classification, patterns, seconds)."""

    flags: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    record: dict[str, Any] = field(default_factory=dict)


def _analyzer() -> Callable[..., dict[str, Any]] | None:
    """kernelguard's analyze_code, None where the package cannot be imported."""
    try:
        import kernelguard
    except Exception:  # absent, or broken on import
        return None
    return getattr(kernelguard, "analyze_code", None)


@functools.cache
def _version() -> str:
    try:
        from importlib.metadata import version

        return version("kernelguard")
    except Exception:
        return ""


def _short(text: Any) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 3] + "..."


def _named(patterns: list[dict[str, Any]]) -> tuple[str, str]:
    """The decisive patterns' names (high or critical severity; all where none is) and the first
    one's evidence, shortened."""
    decisive = [p for p in patterns if str(p.get("severity")) in DECISIVE_SEVERITIES] or patterns
    names = ", ".join(dict.fromkeys(str(p.get("pattern", "?")) for p in decisive))
    evidence = _short(decisive[0].get("evidence")) if decisive else ""
    return names, evidence


def check(source: str) -> StaticOpinion:
    """The rules' opinion of one variant's source. Never raises."""
    t0 = time.perf_counter()
    analyze = _analyzer()
    if analyze is None:
        return StaticOpinion(notes=(ABSENT_NOTE,), record={"classification": None, "patterns": [],
                                                           "error": "kernelguard is not installed"})
    t1 = time.perf_counter()
    try:
        result = analyze(source, compute_structural_hash=False)
        classification = str(result.get("classification") or "")
        patterns = [dict(p) for p in result.get("matched_patterns") or []]
    except Exception as exc:  # the rules' own fault, never the variant's
        why = f"{type(exc).__name__}: {_short(exc)}"
        return StaticOpinion(notes=(f"{PREFIX}the static rules failed on this source ({why})",),
                             record={"classification": None, "patterns": [], "error": why,
                                     "s": round(time.perf_counter() - t1, 4)})
    record = {
        "classification": classification,
        "patterns": [{"pattern": p.get("pattern"), "severity": p.get("severity"),
                      "evidence": _short(p.get("evidence"))} for p in patterns],
        "s": round(time.perf_counter() - t1, 4),  # the analysis alone
        "import_s": round(t1 - t0, 4),  # the package's import (once per process)
        "version": _version(),
    }
    names, evidence = _named(patterns)
    if classification == "hacked":
        return StaticOpinion(flags=(f"{PREFIX}{names or 'hacked'}: {evidence}",), record=record)
    if classification == "suspicious":
        return StaticOpinion(notes=(f"{PREFIX}suspicious ({names or 'no pattern named'}): {evidence}"
                                    " (GPU MODE's rules would not filter it)",), record=record)
    if classification == "low_confidence":
        return StaticOpinion(notes=(f"{PREFIX}low confidence ({names or 'no pattern named'}): {evidence}",),
                             record=record)
    return StaticOpinion(record=record)


def merge(verdict: Verdict, opinion: StaticOpinion) -> Verdict:
    """`verdict` with the opinion in it: its record in timing["static_rules"] always; its flags and
    notes only on a `correct` or `flagged` verdict (a failed build or run, an incorrect answer, keep
    what they said). A flag makes a `correct` verdict `flagged`."""
    timing = {**(verdict.timing or {}), "static_rules": opinion.record}
    if verdict.status not in ("correct", "flagged"):
        return dataclasses.replace(verdict, timing=timing)
    status, log = verdict.status, verdict.log
    if status == "correct" and opinion.flags:
        status = "flagged"
        log = "integrity check failed: " + "; ".join(opinion.flags) + (f"\n{log}" if log else "")
    return dataclasses.replace(verdict, status=status, log=log, timing=timing,
                               flags=tuple(dict.fromkeys(verdict.flags + opinion.flags)),
                               notes=tuple(dict.fromkeys(verdict.notes + opinion.notes)))


def start(source: str, mode: str) -> asyncio.Future[StaticOpinion] | None:
    """The rules run on `source` in a thread (the event loop keeps turning), beside the build; None
    for a job that judges no variant (a reference timing, the timer's agreement)."""
    if mode != "evaluate":
        return None
    return asyncio.ensure_future(asyncio.to_thread(check, source))


async def judged(verdict: Verdict, pending: asyncio.Future[StaticOpinion] | None) -> Verdict:
    """`verdict` merged with the opinion started by start() (unchanged where none was)."""
    return verdict if pending is None else merge(verdict, await pending)
