"""Tamper detection: what a candidate changed in torch that the reference relies on.

The reference runs in the candidate's process (its interleaved timing, the recheck), so a candidate
could slow it down or change what it computes without touching its own kernels: rebind
`torch.softmax` to a wrapper that works twice, call `torch.set_num_threads(1)` at import, turn
cuDNN or TF32 off, leave a TorchFunctionMode active. `capture()` runs before the candidate is
imported and records

- the identity of every callable torch's namespaces expose to a reference: `torch.*`,
  `torch.nn.functional.*`, `torch.special` / `linalg` / `fft`, `torch._C._nn`, the methods and
  operators of `torch.Tensor` (and its C base), of `torch.nn.Module` and of every layer class in
  `torch.nn` (their `forward`s);
- the global settings that change how fast or how exactly torch computes: intra-op and inter-op
  threads, cuDNN's flags, TF32 and reduced-precision matmul flags, the float32 matmul precision,
  deterministic algorithms, MKLDNN, the scaled-dot-product backends, the default dtype and
  device, and the torch function / dispatch modes left active.

`check()` names what differs (`tamper: the candidate rebinds torch.softmax`, `tamper: the candidate
changed torch.get_num_threads() 2 -> 1`): the verdict is `flagged`. `restore()` puts the recorded
functions and settings back, so the timing that follows measures the reference as torch ships it.

About 12 ms to capture on a 2-core host (~4000 names), a few ms to check. Imports only torch and
the standard library.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Class attributes that are not behaviour (or that Python itself rewrites), and construction and
# pickling (the reference is built before the candidate is imported; torch.compile's dynamo wraps
# nn.Module.__init__ and __setstate__ to tag modules).
_SKIP = frozenset({"__dict__", "__doc__", "__weakref__", "__module__", "__annotations__", "__slots__",
                   "__parameters__", "__orig_bases__", "__abstractmethods__", "_abc_impl",
                   "__init__", "__new__", "__init_subclass__", "__setstate__", "__getstate__", "__reduce__",
                   "__reduce_ex__"})


def _owners() -> list[tuple[str, Any]]:
    """(the name a reader knows it by, the object) of every namespace watched."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    owners: list[tuple[str, Any]] = [
        ("torch", torch), ("torch.nn.functional", F), ("torch.Tensor", torch.Tensor),
        ("torch.Tensor", torch._C.TensorBase), ("torch.nn.Module", nn.Module)]
    for name in ("special", "linalg", "fft"):
        module = getattr(torch, name, None)
        if module is not None:
            owners.append((f"torch.{name}", module))
    nn_c = getattr(torch._C, "_nn", None)
    if nn_c is not None:
        owners.append(("torch._C._nn", nn_c))
    for name, value in sorted(vars(nn).items()):
        if isinstance(value, type) and issubclass(value, nn.Module) and value is not nn.Module:
            owners.append((f"torch.nn.{name}", value))
    return owners


def _watched(owner: Any) -> dict[str, Any]:
    """The callables (and descriptors) an owner defines itself, by name."""
    out = {}
    for name, value in list(vars(owner).items()):
        if name in _SKIP:
            continue
        if isinstance(owner, type):
            if callable(value) or isinstance(value, (staticmethod, classmethod, property)):
                out[name] = value
        elif not name.startswith("_") and callable(value):
            out[name] = value
    return out


def _modes() -> tuple[int, int]:
    """How many torch function modes and dispatch modes are active."""
    function_modes = dispatch_modes = 0
    with contextlib.suppress(Exception):
        from torch.overrides import _get_current_function_mode_stack

        function_modes = len(_get_current_function_mode_stack())
    with contextlib.suppress(Exception):
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        dispatch_modes = len(_get_current_dispatch_mode_stack())
    return function_modes, dispatch_modes


def _settings() -> list[tuple[str, Callable[[], Any], Callable[[Any], None] | None]]:
    """(label as the flag names it, getter, setter or None) of every global setting watched."""
    import torch

    b = torch.backends

    def attr(obj: Any, name: str) -> tuple[Callable[[], Any], Callable[[Any], None]]:
        return (lambda: getattr(obj, name)), (lambda v: setattr(obj, name, v))

    items: list[tuple[str, Callable[[], Any], Callable[[Any], None] | None]] = [
        ("torch.get_num_threads()", torch.get_num_threads, torch.set_num_threads),
        ("torch.get_num_interop_threads()", torch.get_num_interop_threads, None),  # settable once only
        ("torch.get_float32_matmul_precision()", torch.get_float32_matmul_precision,
         torch.set_float32_matmul_precision),
        ("torch.are_deterministic_algorithms_enabled()", torch.are_deterministic_algorithms_enabled,
         lambda v: torch.use_deterministic_algorithms(v)),
        ("torch.get_default_dtype()", torch.get_default_dtype, torch.set_default_dtype),
    ]
    if hasattr(torch, "get_default_device"):
        items.append(("torch.get_default_device()", lambda: str(torch.get_default_device()),
                      lambda v: torch.set_default_device(v)))
    for label, obj, name in (
        ("torch.backends.cudnn.enabled", b.cudnn, "enabled"),
        ("torch.backends.cudnn.benchmark", b.cudnn, "benchmark"),
        ("torch.backends.cudnn.deterministic", b.cudnn, "deterministic"),
        ("torch.backends.cudnn.allow_tf32", b.cudnn, "allow_tf32"),
        ("torch.backends.cuda.matmul.allow_tf32", b.cuda.matmul, "allow_tf32"),
        ("torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction", b.cuda.matmul,
         "allow_fp16_reduced_precision_reduction"),
        ("torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction", b.cuda.matmul,
         "allow_bf16_reduced_precision_reduction"),
        ("torch.backends.mkldnn.enabled", b.mkldnn, "enabled"),
    ):
        with contextlib.suppress(Exception):
            getattr(obj, name)
            get, put = attr(obj, name)
            items.append((label, get, put))
    for kind in ("flash", "mem_efficient", "math", "cudnn"):
        get = getattr(b.cuda, f"{kind}_sdp_enabled", None)
        put = getattr(b.cuda, f"enable_{kind}_sdp", None)
        if get is not None:
            items.append((f"torch.backends.cuda.{kind}_sdp_enabled()", get, put))
    items.append(("the active torch function / dispatch modes", _modes, None))
    return items


@dataclass
class Snapshot:
    """What capture() recorded: per watched owner its callables, and the settings' values."""

    functions: list[tuple[str, Any, dict[str, Any], frozenset[str]]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)


def _read(get: Callable[[], Any]) -> Any:
    try:
        return get()
    except Exception as exc:  # (a getter that fails here fails the same way later: no change)
        return f"<{type(exc).__name__}>"


def capture() -> Snapshot:
    """Record torch's callables and settings (before the candidate is imported)."""
    snap = Snapshot()
    for label, owner in _owners():
        snap.functions.append((label, owner, _watched(owner), frozenset(vars(owner))))
    snap.settings = {label: _read(get) for label, get, _ in _settings()}
    return snap


def _inherited(owner: Any, name: str) -> bool:
    """Whether a name newly set on a class shadows one of its bases' attributes."""
    return isinstance(owner, type) and any(name in vars(base) for base in owner.__mro__[1:])


# What torch itself rebinds as it imports more of itself: `import torch._dynamo` (torch.compile, a
# Triton candidate) wraps torch.manual_seed. Accepted where the new function wraps the original.
_TORCH_REWRAPS = frozenset({("torch", "manual_seed")})


def _torch_rewrap(label: str, name: str, original: Any, now: Any) -> bool:
    if (label, name) not in _TORCH_REWRAPS:
        return False
    seen = 0
    while now is not None and seen < 4:
        if now is original:
            return True
        now, seen = getattr(now, "__wrapped__", None), seen + 1
    return False


def changes(snap: Snapshot) -> tuple[list[tuple[str, Any, str, Any]], list[tuple[str, Any, Any]]]:
    """(functions changed: (label, owner, name, original or None where added), settings changed:
    (label, before, after))."""
    functions = []
    for label, owner, before, names in snap.functions:
        now = vars(owner)
        for name, original in before.items():
            value = now.get(name, None)
            if value is not original and not _torch_rewrap(label, name, original, value):
                functions.append((label, owner, name, original))
        if isinstance(owner, type):
            for name in now.keys() - names:
                if name not in _SKIP and _inherited(owner, name):
                    functions.append((label, owner, name, None))
    settings = []
    for label, get, _ in _settings():
        if label in snap.settings:
            value = _read(get)
            if value != snap.settings[label]:
                settings.append((label, snap.settings[label], value))
    return functions, settings


def _show(value: Any) -> str:
    if isinstance(value, tuple) and len(value) == 2:
        return f"{value[0]} function / {value[1]} dispatch"
    return str(value)


def check(snap: Snapshot) -> list[str]:
    """The flags for everything rebound or changed since `snap` was captured (empty: nothing)."""
    functions, settings = changes(snap)
    flags = []
    for label, _owner, name, original in functions:
        what = "rebinds" if original is not None else "overrides"
        flags.append(f"tamper: the candidate {what} {label}.{name}")
    for label, before, after in settings:
        flags.append(f"tamper: the candidate changed {label} {_show(before)} -> {_show(after)}")
    if len(flags) > 8:  # one wrapper loop can rebind hundreds of names: the first few say it
        flags = flags[:8] + [f"tamper: ... and {len(flags) - 8} more changes to torch"]
    return flags


def restore(snap: Snapshot) -> None:
    """Put back what the candidate changed (where it can be put back), so that the reference is
    timed as torch ships it. The candidate is flagged all the same (check() first)."""
    functions, settings = changes(snap)
    for _label, owner, name, original in functions:
        with contextlib.suppress(Exception):
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
    setters = {label: put for label, _, put in _settings()}
    for label, before, _after in settings:
        put = setters.get(label)
        if put is not None and not (isinstance(before, str) and before.startswith("<")):
            with contextlib.suppress(Exception):
                put(before)


def check_and_restore(snap: Snapshot) -> list[str]:
    """check(), then restore(): the flags for what the candidate changed so far."""
    flags = check(snap)
    if flags:
        restore(snap)
    return flags
