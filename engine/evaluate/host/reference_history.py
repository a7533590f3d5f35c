"""The reference's eager times as evaluations measured them, per problem, sizes, precision and
device, and the judgement of a new one against them.

Candidate and reference are timed interleaved, in one process, on the same inputs; still, other
work on the host does not slow both alike. On a loaded 2-core host the reference's eager time read
15.35 ms against its usual 0.15 ms (torch's intra-op threads wait on each other when a core is
taken away; a single-threaded loop only waits its turn), so a naive triple loop at 8.46 ms was
`correct 1.81x` and became a parent. So every measurement of the reference the speedup is taken
against is set against its own history: the median of the earlier ones (in memory for this
evaluator, and in a file beside the reference's cached times, for every process and session on
the host). One over DISTURBED_X times that median (or over the history's own spread, max / min,
where that is wider) is *disturbed*:

- the verdict gets the flag `reference-disturbed: ...` (it stays `correct`, like `noisy`);
- its speedup is taken against the history's median instead (a lower bound of the true speedup:
  load only slows, so the candidate's own time is no faster than it would be on a quiet host);
  what was measured stays in `timing["reference_history"]`;
- the search ranks it after every undisturbed correct variant (engine.search.strategies), and it
  is not the session's best while an undisturbed one is;
- the measurement is not added to the history.

Only `correct` verdicts are judged or recorded: a flagged candidate may have rebound the clocks, or
loaded the host, while its reference was timed, and one such measurement would skew every later
judgement.

A measurement under 1 / band of the median means the history was taken under load: the entries
over band x it are dropped. With no history yet, the cpu reference's clean time (measured with no
candidate, on a quiet host: engine.evaluate.host.clean_reference) seeds it; else the first
measurement does (one disturbed first measurement is caught by the next quiet one).

Standard library only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
from pathlib import Path
from typing import Any

from engine import settings
from engine.evaluate.verdict import REFERENCE_DISTURBED

DISTURBED_X = 3.0
KEEP = 32  # measurements kept per key (the latest)
FLAG = REFERENCE_DISTURBED


def path_for(reference_file: Path, cores: str) -> Path:
    """The history's file beside the reference's cached times, per set of timer cores."""
    timer = f"{cores or 'all'}-t{settings.get('KTREE_THREADS', '')}".replace(",", "_")
    return reference_file.with_name(f"{reference_file.stem}-history-{timer}.json")


def _read(path: Path | None) -> list[float]:
    if path is None:
        return []
    with contextlib.suppress(OSError, ValueError, TypeError):
        kept = json.loads(path.read_text())
        return [float(v) for v in kept if float(v) > 0][-KEEP:]
    return []


def _write(path: Path | None, times: list[float]) -> None:
    if path is None:
        return
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(times[-KEEP:]))
        os.replace(tmp, path)


def band(times: list[float]) -> float:
    """How far a measurement may stray from the history's median: DISTURBED_X, or the history's own
    spread (max / min) where that is wider."""
    return max(DISTURBED_X, max(times) / min(times)) if times else DISTURBED_X


class ReferenceHistory:
    """One evaluator's histories, keyed by the reference's file key (problem, sizes, precision,
    device model, torch) and timer cores; each read from its file on first use."""

    def __init__(self) -> None:
        self._times: dict[str, list[float]] = {}

    def times(self, key: str, path: Path | None) -> list[float]:
        if key not in self._times:
            self._times[key] = _read(path)
        return self._times[key]

    def median(self, key: str, path: Path | None) -> float | None:
        times = self.times(key, path)
        return statistics.median(times) if times else None

    def judge(self, verdict: Any, key: str, path: Path | None,
              clean: dict[str, float] | None = None) -> Any:
        """The verdict, judged against the history (and the history updated): unchanged where its
        reference time agrees; flagged, its speedup taken against the history's median, where it
        is disturbed. `clean`: the reference's clean time, which seeds an empty history."""
        measured = verdict.ref_eager_ms
        if verdict.status != "correct" or not measured or not verdict.time_ms:
            return verdict  # a flagged candidate may have bent the clocks its reference was timed by
        times = self.times(key, path)
        if not times and clean and clean.get("median"):
            times.append(float(clean["median"]))
        if not times:
            times.append(float(measured))
            _write(path, times)
            return verdict
        median, width = statistics.median(times), band(times)
        record = {"measured_ms": round(measured, 6), "median_ms": round(median, 6), "n": len(times),
                  "band": round(width, 3)}
        if measured <= median * width:
            if measured * width < median:  # the history was taken under load: its slow entries go
                times[:] = [t for t in times if t <= measured * width]
            times.append(float(measured))
            del times[:-KEEP]
            _write(path, times)
            return dataclasses.replace(verdict, timing={**(verdict.timing or {}), "reference_history": record})
        return disturbed(verdict, record, min(times), max(times))


def disturbed(verdict: Any, record: dict[str, Any], lo: float, hi: float) -> Any:
    """The verdict of a disturbed reference measurement: flagged, its speedup against the
    history's median (its interval against the history's range)."""
    median, measured = record["median_ms"], record["measured_ms"]
    timing = dict(verdict.timing or {})
    new_lo, new_hi = (timing.get("time_ci_ms") or [verdict.time_ms, verdict.time_ms])[:2]
    flag = (f"{FLAG}: the reference took {measured:.4g} ms here against a median of {median:.4g} ms"
            f" over its {record['n']} earlier measurement(s), over {record['band']:.3g}x (other work on"
            f" the host?): the speedup is taken against {median:.4g} ms, and it ranks after undisturbed"
            f" variants")
    timing["reference_history"] = {**record, "disturbed": True, "speedup_measured": verdict.speedup_eager,
                                   "ref_ci_measured_ms": timing.get("ref_ci_ms")}
    timing["ref_ci_ms"] = [lo, hi]
    return dataclasses.replace(
        verdict, flags=(*verdict.flags, flag), ref_eager_ms=median, ref_p10_ms=lo, ref_p90_ms=hi,
        speedup_eager=median / verdict.time_ms,
        speedup_lo=lo / new_hi if new_hi else None, speedup_hi=hi / new_lo if new_lo else None,
        timing=timing)


def is_disturbed(flags: Any) -> bool:
    """Whether a verdict's flags say its reference time was disturbed."""
    return any(str(f).startswith(FLAG) for f in flags or ())
