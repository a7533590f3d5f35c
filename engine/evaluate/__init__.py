"""Evaluation of candidate kernels in subprocesses, behind one face: the rest of ktree imports from
here only (tests/test_architecture.py holds it to that), never from the folders.

Self-contained: imports only torch, the standard library, its own modules (NVML through ctypes
where present) and the settings at the bottom of the house (engine.settings), never the rest of
`engine`, so it runs on a bare GPU box and on a Ray node with nothing else of ktree there
(tests/evaluate/test_self_contained.py holds it to that). What it needs to know about a problem
beyond its file (its work, its tolerance) comes with each job.

Its top holds what both sides share, and imports none of its folders (host/, harness/, child/,
languages/, profile/, placement/): the names below that live in a folder are imported when first
asked for, so a process beside the candidate that imports the top loads nothing of the host's side.
"""

from __future__ import annotations

import importlib
from typing import Any

from engine.evaluate.base import Evaluator, Gate, PhaseCallback
from engine.evaluate.build_errors import REUSED_BUILD_ERROR
from engine.evaluate.jobs import EvalJob
from engine.evaluate.loading import load_module_from_path, size_constants
from engine.evaluate.verdict import (
    REFERENCE_FAILED,
    STATUSES,
    TIMING_FLAGS,
    Verdict,
    device_label,
    is_timing_flag,
)

# The names that live in a folder: name -> (module, its name there).
_FOLDERS: dict[str, tuple[str, str]] = {
    # where evaluations run, and the one way an evaluator is made
    **{name: ("engine.evaluate.placement.factory", name) for name in (
        "EXECUTORS", "make_evaluator", "local_evaluator", "resolve_isolation", "isolation_detail",
        "checked_gpus", "visible_gpu_indices", "check_cpu_timer", "check_local_flags")},
    **{name: ("engine.evaluate.placement.backends", name) for name in ("PlacementError", "resolve_backend")},
    "LocalEvaluator": ("engine.evaluate.host.evaluator", "LocalEvaluator"),
    "EvaluatorConfig": ("engine.evaluate.host.evaluator", "EvaluatorConfig"),
    # the job built on the host's side, and a process of its own for it (the benches of the build)
    "make_job": ("engine.evaluate.host.make_job", "make_job"),
    "run_child": ("engine.evaluate.host.runner", "run_child"),
    "scrubbed_env": ("engine.evaluate.host.sandbox", "scrubbed_env"),
    "default_cache_dir": ("engine.evaluate.host.runner", "default_cache_dir"),
    "is_disturbed": ("engine.evaluate.host.reference_history", "is_disturbed"),
    # the language registry
    "languages": ("engine.evaluate.languages", ""),
    # profiles, and how they are said
    "PROFILE_MODES": ("engine.evaluate.profile.profiler", "PROFILE_MODES"),
    **{name: ("engine.evaluate.profile.diagnosis", name)
       for name in ("BOUND_LABELS", "TOP_KERNELS", "summary_lines")},
    # what a problem's own checks share with the evaluation's
    "device_name": ("engine.evaluate.harness.timing", "device_name"),
    "WARMUP_CALLS": ("engine.evaluate.harness.noise", "WARMUP"),
    "fp64_copy": ("engine.evaluate.harness.fp64_model", "fp64_copy"),
    "NOISE_SHARE": ("engine.evaluate.child.check", "NOISE_SHARE"),
}

__all__ = [
    "REFERENCE_FAILED", "REUSED_BUILD_ERROR", "STATUSES", "TIMING_FLAGS", "EvalJob", "Evaluator", "Gate",
    "PhaseCallback", "Verdict", "device_label", "is_timing_flag", "load_module_from_path", "size_constants",
    *_FOLDERS,
]


def __getattr__(name: str) -> Any:
    if name not in _FOLDERS:
        raise AttributeError(f"module 'engine.evaluate' has no attribute {name!r}")
    module, attr = _FOLDERS[name]
    value = importlib.import_module(module)
    value = getattr(value, attr) if attr else value
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
