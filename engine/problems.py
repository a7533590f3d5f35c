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
from engine.evaluate import load_module_from_path, size_constants

BUILTIN_DIR = Path(_builtin.__file__).parent
DEFAULT_TOL = 1e-2
REQUIRED = ("Model", "get_inputs", "get_init_inputs")


@dataclass(frozen=True)
class Cost:
    flops: float | None
    bytes: float | None
    estimated: bool

    def describe(self) -> str:
        if self.flops is None and self.bytes is None:
            return "FLOPs/bytes unknown"
        label = " (estimated)" if self.estimated else ""
        flops = f"{_si(self.flops)}FLOP" if self.flops is not None else "FLOPs not counted"
        return f"{flops}, {_si(self.bytes)}B{label}"


def _si(value: float | None) -> str:
    if value is None:
        return "? "
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} "


_FORMULA_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load,
                  ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Pow, ast.USub, ast.UAdd)


def eval_formula(formula: str, sizes: dict[str, int]) -> float:
    """A METADATA formula (arithmetic over the size constants) at the given sizes."""
    try:
        tree = ast.parse(formula, mode="eval")
    except SyntaxError as exc:
        raise ProblemError(f"formula {formula!r}: {exc.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _FORMULA_NODES):
            raise ProblemError(f"formula {formula!r}: only arithmetic on size constants is allowed")
        if isinstance(node, ast.Name) and node.id not in sizes:
            raise ProblemError(f"formula {formula!r}: unknown size {node.id!r}")
    return float(eval(compile(tree, "<formula>", "eval"), {"__builtins__": {}}, dict(sizes)))


def estimate_cost(path: Path, sizes: dict[str, int]) -> Cost:
    """Count FLOPs with torch's FLOP counter on meta tensors (nothing is computed or allocated);
    bytes = inputs + parameters + outputs. None where the module cannot run on meta."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    try:
        module = load_module_from_path(path, sizes)
        with torch.device("meta"):
            init = module.get_init_inputs()
            model = module.Model(*init)
            inputs = module.get_inputs()
            with FlopCounterMode(display=False) as counter:
                out = model(*inputs)
        nbytes = sum(t.numel() * t.element_size() for t in _tensors(inputs) + _tensors(out))
        if isinstance(model, torch.nn.Module):
            nbytes += sum(p.numel() * p.element_size() for p in model.parameters())
        # The counter sees matmul/conv/attention only: zero means "not counted", not "none".
        flops = float(counter.get_total_flops()) or None
        return Cost(flops, float(nbytes), True)
    except Exception:
        return Cost(None, None, True)


def _check_inputs(module: Any, path: Path, small_sizes: dict[str, int]) -> None:
    """Call get_init_inputs() and get_inputs() once, on meta tensors (nothing is allocated);
    where meta cannot run them, for real at the small sizes. A raise is the problem's error."""
    import torch

    try:
        with torch.device("meta"):
            module.get_init_inputs()
            module.get_inputs()
        return
    except Exception:
        pass  # perhaps only unsupported on meta: try for real below
    for name in ("get_init_inputs", "get_inputs"):
        saved = {k: getattr(module, k) for k in small_sizes if hasattr(module, k)}
        try:
            for k, v in small_sizes.items():
                setattr(module, k, v)
            getattr(module, name)()
        except Exception as exc:
            raise ProblemError(f"{path}: {name}() raises {type(exc).__name__}: {exc}") from None
        finally:
            for k, v in saved.items():
                setattr(module, k, v)


def _tensors(obj: Any) -> list:
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    return []


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

    @property
    def tolerance(self) -> tuple[float, float]:
        """(atol, rtol): the problem's own, else 1e-2 as in the method's source."""
        return (float(self.metadata.get("atol", DEFAULT_TOL)),
                float(self.metadata.get("rtol", DEFAULT_TOL)))

    @property
    def degenerate(self) -> bool:
        """Whether the reference's output does not depend on its inputs (reference_varies: at the
        CPU sizes, two input draws, within the problem's tolerance). False where it cannot tell."""
        return reference_varies(self) is False

    def cost(self, backend: str) -> Cost:
        """FLOPs and minimum bytes at the sizes this backend runs (see cost_at)."""
        return self.cost_at(self.sizes_for(backend))

    def cost_at(self, sizes: dict[str, int]) -> Cost:
        """FLOPs and minimum bytes at these sizes: from the declared formulas, else estimated
        (torch's FLOP counter on meta tensors; bytes from tensor sizes)."""
        flops, nbytes = self.metadata.get("flops"), self.metadata.get("bytes")
        if flops is not None and nbytes is not None:
            return Cost(eval_formula(str(flops), sizes), eval_formula(str(nbytes), sizes), False)
        return estimate_cost(self.path, sizes)


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
        if path.is_dir():
            raise ProblemError(f"{spec}: is a directory, not a problem file")
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


def _never_bound(tree: ast.Module) -> list[str]:
    """The REQUIRED names a file never binds (a def, a class, an assignment, an import, wherever it
    is: a name bound only inside a function counts too, which can only let the import go on),
    read without running it; none where a star import may bind anything."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(alias.name == "*" for alias in node.names):
                return []
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return [name for name in REQUIRED if name not in bound]


def load_problem(spec: str) -> Problem:
    """Resolve, parse and import a problem file; raise ProblemError with a one-line reason."""
    path = resolve(spec)
    try:
        source = path.read_text()
        tree = ast.parse(source)
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(f"{path}: cannot read: {exc}") from exc
    except SyntaxError as exc:
        raise ProblemError(f"{path}: syntax error on line {exc.lineno}: {exc.msg}") from exc
    unbound = _never_bound(tree)
    if unbound:  # said before the file runs: not a KernelBench file, none of its code executed
        raise ProblemError(f"{path}: missing {', '.join(f'`{m}`' for m in unbound)}")
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
    sizes = size_constants(source)
    unknown = set((metadata or {}).get("cpu_sizes") or {}) - set(sizes)
    if unknown:
        raise ProblemError(f"{path}: cpu_sizes names unknown size constants: {', '.join(sorted(unknown))}")
    small = {**sizes, **((metadata or {}).get("cpu_sizes") or {})}
    if _remembered(source, "inputs") is None:
        _check_inputs(module, path, small)
        _remember(source, "inputs", True)
    return Problem(
        name=path.stem, path=path, source=source, sizes=sizes,
        metadata=dict(metadata or {}),
    )


DEGENERATE_LINE = ("degenerate: the reference output does not depend on its inputs; speedups on it mean"
                   " little")
_VARIES: dict[tuple[str, str], bool | None] = {}


def reference_varies(problem: Problem) -> bool | None:
    """Whether the reference's output changes with its inputs: the reference (its weights seeded
    once) on two input draws at the CPU sizes, on the CPU; False where the second output passes
    the correctness check against the first (allclose and relative L2 at the problem's
    tolerance): a constant would pass it, whatever the inputs. None where the reference cannot
    run here. Once per file's contents (kept between runs: `_remember`)."""
    key = (str(problem.path), problem.source)
    if key not in _VARIES:
        known = _remembered(problem.source, "varies")
        _VARIES[key] = known[0] if known is not None else _remember(problem.source, "varies", _varies(problem))
    return _VARIES[key]


# What the checks above found for a file's contents, kept between runs (`ktree problems` lists every
# problem: their inputs on the meta device and two reference calls each cost seconds per process):
# in the build cache, keyed by the source and torch's version.
_CHECKED = "problems-checked.json"


def _checked_file() -> Path:
    from engine.evaluate import default_cache_dir

    return default_cache_dir() / _CHECKED


def _source_key(source: str) -> str:
    import hashlib

    import torch

    return hashlib.sha256(f"{torch.__version__}\n{source}".encode()).hexdigest()


def _remembered(source: str, what: str) -> tuple[Any] | None:
    """(the value kept for this source's check `what`,), or None where none is kept."""
    import json

    try:
        kept = json.loads(_checked_file().read_text()).get(_source_key(source), {})
    except (OSError, ValueError, AttributeError):
        return None
    return (kept[what],) if isinstance(kept, dict) and what in kept else None


def _remember(source: str, what: str, value: Any) -> Any:
    import json
    import os

    path = _checked_file()
    try:
        kept = json.loads(path.read_text())
        kept = kept if isinstance(kept, dict) else {}
    except (OSError, ValueError):
        kept = {}
    kept.setdefault(_source_key(source), {})[what] = value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{_CHECKED}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(kept))
        os.replace(tmp, path)
    except OSError:
        pass  # (not kept: checked again next time)
    return value


def _varies(problem: Problem) -> bool | None:
    import torch

    from engine.evaluate import NOISE_SHARE, fp64_copy

    atol, rtol = problem.tolerance
    try:
        module = load_module_from_path(problem.path, problem.sizes_for("cpu"))
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs())
        outs = []
        with torch.no_grad():
            for seed in (1, 2):
                torch.manual_seed(seed)
                inputs = module.get_inputs()
                outs.append([t.detach().double() for t in _tensors(model(*inputs))])
                if seed == 1:  # an output of noise around zero (engine.evaluate.child.check.noise_outputs)
                    exact = _exact(fp64_copy(model), inputs)
    except Exception:
        return None
    first, second = outs
    if len(first) != len(second):
        return True
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        if a.shape != b.shape or not bool(torch.allclose(b, a, atol=atol, rtol=rtol)):
            return True
        noise = exact is not None and i < len(exact) and exact[i].shape == a.shape and \
            float((a - exact[i]).norm()) > NOISE_SHARE * rtol * float(exact[i].norm())
        if not noise and float((b - a).norm()) > rtol * float(a.norm()):
            return True
    return False


def _exact(model64: Any, inputs: list[Any]) -> list[Any] | None:
    """The fp64 reference's outputs on `inputs` (None where it fails in fp64)."""
    import torch

    try:
        return [t.detach() for t in _tensors(model64(*[t.double() if isinstance(t, torch.Tensor)
                                                       and t.is_floating_point() else t for t in inputs]))]
    except Exception:
        return None
