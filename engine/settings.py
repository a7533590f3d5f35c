"""Every `KTREE_*` environment variable, declared once, and the one place they are read.

Each is a `Setting`: its name, what it does, and what it can change:

- `time`: a measured time (the timer's cores and threads, the L2 rotation, the torch.compile
  baseline);
- `verdict`: whether a variant builds or how it is judged (the build levers);
- `place`: where or how work runs, not its result (isolation binary, worker reuse, memory budgets,
  paths);
- `debug`: kept logs, injected crashes;
- `internal`: set by the engine for its own child processes (a user never sets these).

`recorded()` gives those that can change a time or a verdict, as set in this process: a search
records them with the session (`config["environment"]`), so a verdict can be read with the
conditions it was measured under. tests/cli/test_settings.py holds every file of engine/ and tui/ to
reading `KTREE_*` through `get` / `is_set` here, and docs/commands.md's table to this list.

The bottom of the house: the whole engine reads its settings here, engine/evaluate/ too, so it
imports nothing of ktree and only the standard library (the GPU worker runs on a bare box).
Nothing writes a variable here to configure another part: a value is passed to what needs it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

AFFECTS = ("time", "verdict", "place", "debug", "internal")


@dataclass(frozen=True)
class Setting:
    name: str
    affects: str
    what: str


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("KTREE_CPU_TIMER", "time", "cpu backend: `pause` (builds wait while a variant is timed) or"
            " `pin` (the timer gets half the cores, the builds the rest)"),
    Setting("KTREE_CPU_CORES", "time", "cpu backend: the cores a timing runs on (set per device by the"
            " evaluator; a user may set it for a single `ktree eval`)"),
    Setting("KTREE_THREADS", "time", "cpu backend: torch's intra-op threads while timing (default: the"
            " timer's cores)"),
    Setting("KTREE_TIMING_ROTATION_MB", "time", "the inputs' rotation budget between timed calls, so"
            " each call reads its inputs from memory rather than a warm L2"),
    Setting("KTREE_COMPILE_BASELINE", "time", "0: no torch.compile baseline is timed (no speedup against"
            " it is reported)"),
    Setting("KTREE_BUILD_LEVERS", "verdict", "the compile levers (`pch,slim,mini`, `none`): a lighter"
            " header may make a build fail over to the source as written"),
    Setting("KTREE_LANGUAGES", "verdict", "more kernel languages: module names or .py files, comma-separated,"
            " each defining LANGUAGE (engine/evaluate/languages)"),
    Setting("KTREE_CHECK_ANSWERS", "verdict", "the check's expected answers: `auto` (fp64 where they fit the"
            " problem's memory bound, else the reference's precision), `fp64` or `native`"),
    Setting("KTREE_CHECK_CACHE_DEVICE_MB", "place", "the check sets' GPU memory budget, per GPU"),
    Setting("KTREE_CHECK_CACHE_HOST_MB", "place", "the check sets' host memory budget"),
    Setting("KTREE_HOST_BUILDS", "place", "builds at once on the host, every ktree process together"
            " (default: the compile pool's size)"),
    Setting("KTREE_ADMIT_MEMORY_MB", "place", "a build or a worker's start waits until the host has this"
            " much memory available (default 1024)"),
    Setting("KTREE_WORKER", "place", "0: one fresh process per evaluation instead of a kept worker"),
    Setting("KTREE_BWRAP", "place", "the bubblewrap binary for strict isolation (empty: none)"),
    Setting("KTREE_NCU", "place", "the Nsight Compute binary (`none`: no ncu profiles)"),
    Setting("KTREE_SANITIZER", "place", "the compute-sanitizer binary (`none`: no sanitizer run)"),
    Setting("KTREE_NCU_LAUNCH_COUNT", "place", "how many launches an ncu profile records"),
    Setting("KTREE_CACHE_DIR", "place", "the build cache (default ~/.cache/ktree/build)"),
    Setting("KTREE_RUNTIME_DIR", "place", "where the host locks live (default: the user's runtime dir)"),
    Setting("KTREE_DB", "place", "the database (default ./store.db)"),
    Setting("KTREE_CONFIG", "place", "the config file for model prices and providers"),
    Setting("KTREE_SCRIPTED_LATENCY", "place", "seconds each scripted LLM call waits"),
    Setting("KTREE_PROFILE_LOGS", "debug", "a dir where each profile tool's log is kept"),
    Setting("KTREE_CRASH_AT", "debug", "kill the engine at a named point (the resume tests)"),
    Setting("KTREE_GATE", "internal", "a profile process's gate file (engine.evaluate.gate)"),
    Setting("KTREE_GATE_WAIT_S", "internal", "how long a gated process waits for its gate"),
    Setting("KTREE_DEVICE_INDEX", "internal", "the physical GPU index of a worker"),
    Setting("KTREE_PCH_AHEAD", "internal", "a build goes on without a missing precompiled header, which"
            " the engine makes beside it (engine.evaluate.host.pch_ahead)"),
    Setting("KTREE_LEDGER_DIR", "internal", "the host-wide memory ledger's dir"),
    Setting("KTREE_MEMORY_LIMIT", "internal", "an evaluation process's resident-memory limit (bytes)"),
)}
assert all(s.affects in AFFECTS for s in SETTINGS.values())


def _known(name: str) -> str:
    if name not in SETTINGS:
        raise KeyError(f"{name} is not a declared ktree setting (engine.settings.SETTINGS)")
    return name


def get(name: str, default: str | None = None) -> str | None:
    """The variable's value (`os.environ.get`'s semantics: an empty value is returned as such)."""
    return os.environ.get(_known(name), default)


def is_set(name: str) -> bool:
    return _known(name) in os.environ


def recorded() -> dict[str, str]:
    """The settings that can change a time or a verdict, as set in this process (unset ones are
    left out: their defaults hold)."""
    return {name: os.environ[name] for name, s in SETTINGS.items()
            if s.affects in ("time", "verdict") and name in os.environ}


def doc_table() -> str:
    """The settings a user may set, as docs/commands.md shows them (tests/cli/test_settings.py holds the
    page to this)."""
    rows = ["| variable | can change | what |", "| --- | --- | --- |"]
    rows += [f"| `{s.name}` | {s.affects} | {s.what} |" for s in SETTINGS.values() if s.affects != "internal"]
    return "\n".join(rows)
