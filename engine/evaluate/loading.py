"""Loading problem and solution files as modules (used by the engine and by the eval child)."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
import types
from pathlib import Path


def size_constants(source: str) -> dict[str, int]:
    """Module-level `name = <int>` assignments: the problem's size knobs, in file order."""
    sizes: dict[str, int] = {}
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and type(node.value.value) is int
        ):
            sizes[node.targets[0].id] = node.value.value
    return sizes


def load_module_from_path(path: str | Path, sizes: dict[str, int] | None = None) -> types.ModuleType:
    """Execute a problem file as a fresh module, then override its size constants."""
    path = Path(path)
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"ktree_problem_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    for key, value in (sizes or {}).items():
        setattr(module, key, value)
    return module


def load_module_from_source(source: str, name: str) -> types.ModuleType:
    """Execute a solution's source text as a module named `name`."""
    module = types.ModuleType(name)
    module.__file__ = f"<{name}>"
    sys.modules[name] = module
    code = compile(source, f"<{name}>", "exec")
    exec(code, module.__dict__)
    return module
