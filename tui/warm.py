"""What the first key presses would otherwise wait for, done ahead of them.

The new-search form's estimate needs its problem loaded (importing torch, making the reference's
inputs) and what `auto` means for the backend; a resume imports the search and the providers.
`warm()` does that once, in a thread, while a person reads the sessions screen, so that `n` and
`R` answer at once; the problems it loads are kept (while their files are unchanged) for the
form's estimates. Blocking functions here are for threads, never for the event loop.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from tui.widgets.code import highlight_source

if TYPE_CHECKING:
    from engine.problems import Problem

# Imported ahead: what the form, a resume and its search import on their first use (rich's emoji
# table: the first DataTable cell drawn from markup, ~0.3 s).
MODULES = ("torch", "rich._emoji_codes", "engine.launch.estimate", "engine.config", "engine.llm.registry",
           "engine.llm.scripted", "engine.search", "engine.search.suite", "engine.record.control",
           "engine.evaluate.host.sandbox")
DEFAULT_PROBLEM = "softmax"  # the form's first choice
LEXER_SAMPLE = 'import torch\nsrc = """\n#include <torch/extension.h>\n__global__ void k(float* x) {}\n"""\n'

_problems: dict[Path, tuple[float, Problem]] = {}
_auto_backend: list[str] = []  # what `auto` resolves to here, once known


def _file(spec: str) -> tuple[Path, float] | None:
    from engine.problems import ProblemError, resolve

    try:
        path = resolve(spec)
        return path, path.stat().st_mtime
    except (ProblemError, OSError):
        return None


def loaded_problem(spec: str) -> Problem | None:
    """The problem `spec` names if it was loaded here before and its file is unchanged; else None
    (cheap: no import of the problem, for the event loop)."""
    found = _file(spec)
    if found is None:
        return None
    hit = _problems.get(found[0])
    return hit[1] if hit is not None and hit[0] == found[1] else None


def load_problem(spec: str) -> Problem:
    """The problem `spec` names (engine.launch.checked_problem: a one-line UsageError if it cannot
    be used), kept for the next ask. Blocking: call it in a thread."""
    from engine.launch import checked_problem

    problem = loaded_problem(spec)
    if problem is None:
        problem = checked_problem(spec)
        found = _file(spec)
        if found is not None:
            _problems[found[0]] = (found[1], problem)
    return problem


def auto_backend() -> str | None:
    """What the backend `auto` means on this host, once `resolve_auto` has run; else None."""
    return _auto_backend[0] if _auto_backend else None


def resolve_auto() -> str:
    """The backend `auto` picks here (a GPU visible: cuda). Blocking: imports torch."""
    if not _auto_backend:
        from engine.launch import resolve_backend

        _auto_backend.append(resolve_backend("auto")[0])
    return _auto_backend[0]


def warm() -> None:
    """Everything above, ahead of the first key press. Blocking: call it in a thread."""
    for name in MODULES:
        importlib.import_module(name)
    resolve_auto()
    highlight_source(LEXER_SAMPLE)  # Pygments compiles a lexer's rules on its first use (~50 ms each)
    try:
        load_problem(DEFAULT_PROBLEM).degenerate  # noqa: B018 (runs the reference once, kept)
    except Exception:  # the form says why, when it is opened
        pass

