"""The one-way import rule, checked on the code as it stands: cli and tui -> launch -> search ->
(store, llm, prompts, domain, events) and executors -> evaluate. Nothing points back up.

Every import counts, module-level or inside a function (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "tui", "problems")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module name `path` imports (absolute; relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _module_name(path).split(".")
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


def _graph() -> dict[str, set[str]]:
    graph = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if "scripted/data" in path.as_posix() or "templates/examples" in path.as_posix():
                continue  # kernels written as data, not modules of the app
            graph[_module_name(path)] = _imports(path)
    return graph


GRAPH = _graph()


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _offenders(importers: str, imported: str, allow: tuple[str, ...] = ()) -> list[str]:
    return sorted(f"{mod} imports {dep}" for mod, deps in GRAPH.items()
                  if _within(mod, importers) and mod not in allow
                  for dep in deps if _within(dep, imported))


def test_the_graph_was_read() -> None:
    assert "engine.cli" in GRAPH and "tui.app" in GRAPH and "engine.evaluate.evaluator" in GRAPH
    assert "engine.launch" in GRAPH["engine.cli"]  # the walk sees real edges


def test_nothing_under_the_tui_imports_the_cli() -> None:
    assert _offenders("tui", "engine.cli") == []


def test_the_engine_does_not_import_the_tui() -> None:
    """Only the entry point (engine.cli, at the top) opens the TUI."""
    assert _offenders("engine", "tui", allow=("engine.cli",)) == []


def test_evaluate_imports_nothing_outside_itself() -> None:
    """It runs on a bare GPU box and on a Ray node: torch and the standard library only."""
    outside = sorted(f"{mod} imports {dep}" for mod, deps in GRAPH.items() if _within(mod, "engine.evaluate")
                     for dep in deps if _within(dep, "engine") and not _within(dep, "engine.evaluate")
                     and dep != "engine")
    assert outside == []


@pytest.mark.parametrize("lower, higher", [
    ("engine.launch", "engine.cli"),
    ("engine.search", "engine.launch"),
    ("engine.search", "engine.cli"),
    ("engine.store", "engine.search"),
    ("engine.domain", "engine.store"),
    ("engine.domain", "engine.search"),
    ("engine.events", "engine.search"),
    ("engine.llm", "engine.search"),
    ("engine.executors", "engine.search"),
    ("engine.evaluate", "engine.executors"),
])
def test_no_import_points_back_up(lower: str, higher: str) -> None:
    assert _offenders(lower, higher) == []


def _screen_modules() -> set[str]:
    """The modules under tui/screens that define a screen the app navigates to (a class built on
    `Screen`); the modal dialogs and the steering mixin are parts that screens share."""
    out = set()
    for path in sorted((REPO / "tui" / "screens").glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                    (base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")) == "Screen"
                    for base in node.bases):
                out.add(_module_name(path))
    return out


def test_no_screen_imports_another_screen() -> None:
    """Screens navigate through the app (by name: `app.open_session`, `app.open_sessions`, …),
    so no two of them import each other and no circle runs through the TUI."""
    screens = _screen_modules()
    assert {"tui.screens.search", "tui.screens.sessions", "tui.screens.compare"} <= screens
    offenders = sorted(f"{mod} imports {dep}" for mod, deps in GRAPH.items() if _within(mod, "tui.screens")
                       for dep in deps if dep in screens and dep != mod)
    assert offenders == []


def test_no_circle_in_the_tui() -> None:
    """Follow every import between the TUI's modules: none leads back to where it started."""
    tui = {mod: {d for d in deps if d in GRAPH and _within(d, "tui")} for mod, deps in GRAPH.items()
           if _within(mod, "tui")}
    done: set[str] = set()

    def visit(mod: str, path: list[str]) -> list[str] | None:
        if mod in path:
            return [*path[path.index(mod):], mod]
        if mod in done:
            return None
        for dep in sorted(tui.get(mod, ())):
            found = visit(dep, [*path, mod])
            if found:
                return found
        done.add(mod)
        return None

    circles = [c for mod in sorted(tui) if (c := visit(mod, []))]
    assert circles == []
