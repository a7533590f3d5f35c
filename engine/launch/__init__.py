"""Launching: the one way a search (`run`) and a suite (`suite`) are built, for the command line
and the TUI alike, and what a search of a shape will ask of the LLMs before it runs (`estimate`).

A request holds what the user asked for as plain values; `prepare_*` checks all of it that can be
wrong and hands back a typed `Prepared` / `PreparedSuite`, or raises `UsageError` (one line naming
the flag). The rest of ktree imports from here only (tests/test_architecture.py).
"""

from engine.launch.run import (
    PRECISION_TOLERANCES,
    Prepared,
    ResumeRequest,
    RunRequest,
    check_cpu_timer,
    check_languages,
    check_local_flags,
    check_scripted,
    checked_gpus,
    checked_problem,
    estimate_run,
    isolation_level,
    job_cost,
    local_evaluator,
    make_evaluator,
    parse_languages,
    prepare_resume,
    prepare_run,
    profile_evaluator,
    profile_note,
    recorded_gpus,
    resolve_backend,
    resolve_isolation,
    resolved_placement,
    tolerances,
)
from engine.launch.suite import (
    LEVELS,
    PreparedSuite,
    SuiteRequest,
    SuiteResumeRequest,
    estimate_suite,
    prepare_suite,
    prepare_suite_resume,
    suite_files,
)
from engine.options import UsageError

__all__ = [
    "LEVELS", "PRECISION_TOLERANCES", "Prepared", "PreparedSuite", "ResumeRequest", "RunRequest",
    "SuiteRequest", "SuiteResumeRequest", "UsageError", "check_cpu_timer", "check_languages",
    "check_local_flags", "check_scripted", "checked_gpus", "checked_problem", "estimate_run",
    "estimate_suite", "isolation_level", "job_cost", "local_evaluator", "make_evaluator",
    "parse_languages", "prepare_resume", "prepare_run", "prepare_suite", "prepare_suite_resume",
    "profile_evaluator", "profile_note", "recorded_gpus", "resolve_backend", "resolve_isolation",
    "resolved_placement", "suite_files", "tolerances",
]
