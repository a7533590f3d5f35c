"""Problems in KernelBench format: `Model`, `get_inputs()`, `get_init_inputs()`, module-level
size constants, and optionally a `METADATA` dict (title, level, tags, cpu_sizes, flops, bytes).

Loaded from problems/ by name ("softmax", "level1/softmax") or from any path.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import problems as _builtin
from engine.evaluate.loading import load_module_from_path, size_constants

BUILTIN_DIR = Path(_builtin.__file__).parent
REQUIRED = ("Model", "get_inputs", "get_init_inputs")


class ProblemError(Exception):
    """A problem that cannot be used; the message is one line naming the file and the piece."""


@dataclass(frozen=True)
class Problem:
    name: str
    path: Path
    source: str
    sizes: dict[str, int]
    metadata: dict[str, Any] = field(default_factory=dict)

    def sizes_for(self, backend: str) -> dict[str, int]:
        """The size constants to run at: the CPU preset (if declared) on the cpu backend."""
        sizes = dict(self.sizes)
        if backend == "cpu":
            sizes.update(self.metadata.get("cpu_sizes") or {})
        return sizes

    @property
    def title(self) -> str:
        return str(self.metadata.get("title") or self.name)


def builtin_problems() -> dict[str, Path]:
    """name -> path of every problem shipped in problems/ (level*/name.py)."""
    found: dict[str, Path] = {}
    for path in sorted(BUILTIN_DIR.glob("level*/*.py")):
        if path.name != "__init__.py":
            found.setdefault(path.stem, path)
    return found


def resolve(spec: str) -> Path:
    path = Path(spec)
    if path.suffix == ".py" or path.exists():
        if not path.is_file():
            raise ProblemError(f"{spec}: no such problem file")
        return path.resolve()
    candidate = BUILTIN_DIR / f"{spec}.py"
    if "/" in spec and candidate.is_file():
        return candidate
    builtin = builtin_problems()
    if spec in builtin:
        return builtin[spec]
    raise ProblemError(
        f"unknown problem {spec!r} (built-in: {', '.join(builtin) or 'none'}; or give a path)"
    )


def load_problem(spec: str) -> Problem:
    """Resolve, parse and import a problem file; raise ProblemError with a one-line reason."""
    path = resolve(spec)
    try:
        source = path.read_text()
        ast.parse(source)
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(f"{path}: cannot read: {exc}") from exc
    except SyntaxError as exc:
        raise ProblemError(f"{path}: syntax error on line {exc.lineno}: {exc.msg}") from exc
    try:
        module = load_module_from_path(path)
    except BaseException as exc:  # a problem file may even call sys.exit
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise ProblemError(f"{path}: fails to import: {type(exc).__name__}: {exc}") from exc
    missing = [name for name in REQUIRED if not callable(getattr(module, name, None))]
    if missing:
        raise ProblemError(f"{path}: missing {', '.join(f'`{m}`' for m in missing)}")
    metadata = getattr(module, "METADATA", None)
    if metadata is not None and not isinstance(metadata, dict):
        raise ProblemError(f"{path}: METADATA must be a dict")
    return Problem(
        name=path.stem, path=path, source=source, sizes=size_constants(source),
        metadata=dict(metadata or {}),
    )
