"""The kernel languages: one module each (its `LANGUAGE`, an engine.evaluate.languages.base
.Language), asked by every part that differs between them. CUDA C++ (`cuda`, the default: any
source no other language claims) and Triton (`triton`) are built in; more come from
`KTREE_LANGUAGES` (module names or .py files, comma-separated), read by the engine and by each
evaluation process alike. Torch and the standard library only."""

from __future__ import annotations

import importlib
import os
from functools import cache
from typing import Any

from engine.evaluate.languages.base import Language
from engine.evaluate.loading import load_module_from_file
from engine.settings import get as setting

BUILT_IN = ("engine.evaluate.languages.cuda", "engine.evaluate.languages.triton")
DEFAULT = "cuda"


def _module(spec: str) -> object:
    if spec.endswith(".py"):
        return load_module_from_file(spec, f"ktree_language_{os.path.splitext(os.path.basename(spec))[0]}")
    return importlib.import_module(spec)


@cache
def _registry(extra: str) -> dict[str, Language]:
    specs = list(BUILT_IN) + [s.strip() for s in extra.split(",") if s.strip()]
    found: dict[str, Language] = {}
    for spec in specs:
        language = getattr(_module(spec), "LANGUAGE", None)
        if not isinstance(language, Language) or not language.name:
            raise ImportError(f"{spec}: a language module defines LANGUAGE, a named Language")
        found[language.name] = language
    return found


def registry() -> dict[str, Language]:
    """Every language, by name: the built-in ones, then KTREE_LANGUAGES' in its order."""
    return _registry(setting("KTREE_LANGUAGES") or "")


def names() -> tuple[str, ...]:
    return tuple(registry())


def choices() -> tuple[str, ...]:
    """What `--language` offers to pick from (the form's list, the flag's metavar): each language
    alone, then all of them together (comma-separated) where there are several."""
    known = names()
    return (*known, ",".join(known)) if len(known) > 1 else known


def get(name: str) -> Language:
    try:
        return registry()[name or DEFAULT]
    except KeyError:
        raise ValueError(f"unknown kernel language {name!r} (known: {', '.join(registry())})") from None


def for_source(source: str) -> Language:
    """The language a solution is written in: the first other than the default that claims it."""
    for language in registry().values():
        if language.name != DEFAULT and language.detects(source):
            return language
    return registry()[DEFAULT]


def for_job(job: Any) -> Language:
    """An evaluation job's (an EvalJob's) language: the one it carries (make_job decides it),
    else, for a job written before it carried one, the one its source is written in."""
    return get(job.language) if job.language else for_source(job.solution_source)


def kernel_language(source: str) -> str:
    return for_source(source).name


def mark_for(name: str | None) -> str:
    """What the tree shows before a variant's title for its language ("" for the default one; a
    language this install does not know, as recorded)."""
    if not name or name == DEFAULT:
        return ""
    language = registry().get(name)
    return language.mark if language is not None else f"[{name}]"
