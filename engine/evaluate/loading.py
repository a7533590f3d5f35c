"""Loading problem and solution files as modules (used by the engine and by the eval child)."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import re
import sys
import types
from pathlib import Path

_INT_OPS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.FloorDiv: int.__floordiv__,
            ast.Mod: int.__mod__, ast.Pow: int.__pow__, ast.LShift: int.__lshift__}


def _int_value(node: ast.expr, known: dict[str, int]) -> int | None:
    """An integer written with constants, earlier size names and + - * // % ** <<
    (`N = 2048 * 2`, `dim = 1 << 12`, `M = N * 2`); None for anything else."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _int_value(node.operand, known)
        return None if value is None else -value
    if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
        left, right = _int_value(node.left, known), _int_value(node.right, known)
        if left is None or right is None or (isinstance(node.op, ast.Pow) and not 0 <= right <= 64):
            return None
        if isinstance(node.op, ast.LShift) and not 0 <= right <= 64:
            return None
        try:
            return _INT_OPS[type(node.op)](left, right)
        except (ZeroDivisionError, ValueError):
            return None
    return None


def size_constants(source: str) -> dict[str, int]:
    """Module-level `name = <int>` assignments, the value written as a number or as integer
    arithmetic on numbers and earlier sizes: the problem's size knobs, in file order."""
    sizes: dict[str, int] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _int_value(node.value, sizes)
            if value is not None:
                sizes[node.targets[0].id] = value
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


LANGUAGES = ("cuda", "triton")  # a solution's kernel language: a load_inline extension, or Triton

_TRITON = re.compile(r"^[ \t]*(?:import triton\b|from triton\b|@triton\.(?:jit|autotune)\b)", re.MULTILINE)


def kernel_language(source: str) -> str:
    """The language a solution is written in, told from its source: "triton" for a file that
    imports triton or decorates kernels with @triton.jit / @triton.autotune, else "cuda" (a
    `load_inline` extension: CUDA C++ on the cuda backend, C++ on the cpu backend)."""
    return "triton" if _TRITON.search(source) else "cuda"


def load_module_from_file(path: str | Path, name: str) -> types.ModuleType:
    """Import a solution written to a real file: Triton's JIT reads its kernels' source lines
    back through `inspect`, which needs a file ("@jit functions should be defined in a Python
    file")."""
    spec = importlib.util.spec_from_file_location(name, str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
