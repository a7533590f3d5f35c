"""The import graph of engine/, tui/ and problems/, read from the source (every import counts,
module-level or inside a function: a lazy import is still a dependency). tests/test_architecture.py
checks its rules on it; tests/test_docs.py checks docs/layout.md's picture of the floors against it."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "tui", "problems")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module name `path` imports (absolute; relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.add(name)
            out.update(f"{name}.{alias.name}" for alias in node.names)  # `from engine import cli`
    return out


def graph() -> dict[str, set[str]]:
    """Module name -> the names it imports, for every module of the app."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if (rel.startswith("engine/scripted_library/") and path.parent.name != "scripted_library"
                    or "templates/examples" in rel):
                continue  # kernels written as data, not modules of the app
            found[module_name(path)] = imports(path)
    return found


GRAPH = graph()
