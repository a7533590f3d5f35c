"""Outputs handed from one process to another as raw bytes: a file per output tensor and a JSON list
of what each holds. No pickle crosses (a candidate's bytes are data to the judge, never code):
`torch.from_file` maps the bytes, `meta` says dtype, shape and which elements.

Both sides of the judge's fresh-input calls write their outputs this way (the candidate's process in
engine.evaluate.child.audit, the judge's clean process in engine.evaluate.child.judge_process), so the
cost of writing is the same on both and the judge's clock can take it out. Outputs above `max_bytes`
are handed over as one window of `max_bytes` chosen by the judge with the call (`window`, in [0, 1)).
"""

from __future__ import annotations

import json
import os
from typing import Any

DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
          "complex64", "complex128")


def write(tensors: list[Any], path: str, max_bytes: int,
          window: float) -> tuple[list[dict[str, Any]], list[Any]]:
    """Each tensor's bytes (or a window of them) into `path`.N, and `path` the JSON list of them;
    returns the list and the written windows (mapped on the files: kept after the files are
    removed). The bytes are copied out in this call: the work behind them is done by now."""
    import torch

    meta, written = [], []
    for i, t in enumerate(tensors):
        flat = t.detach().reshape(-1)
        size = flat.element_size()
        count = flat.numel()
        keep = max(1, min(count, max_bytes // size)) if count else 0
        start = int(min(max(window, 0.0), 0.999999) * (count - keep)) if count > keep else 0
        part = flat[start:start + keep]
        name = f"{path}.{i}"
        buffer = torch.from_file(name, shared=True, size=keep, dtype=flat.dtype) if keep else None
        if buffer is not None:
            buffer.copy_(part)
        written.append(buffer if buffer is not None else torch.empty(0, dtype=flat.dtype))
        meta.append({"dtype": str(flat.dtype).removeprefix("torch."), "shape": list(t.shape), "start": start,
                     "count": keep, "numel": count, "file": os.path.basename(name)})
    with open(path + ".tmp", "w") as f:
        json.dump(meta, f)
    os.replace(path + ".tmp", path)
    return meta, written


def read(path: str, limit_bytes: int) -> tuple[list[Any], list[dict[str, Any]]] | str:
    """The tensors a process wrote at `path` (1-D, the window it wrote of each) and its list, or why
    they cannot be read (a missing file, a dtype not in DTYPES, a size that does not match)."""
    import torch

    try:
        with open(path) as f:
            meta = json.load(f)
    except (OSError, ValueError) as exc:
        return f"no outputs handed over ({type(exc).__name__})"
    if not isinstance(meta, list):
        return "the outputs' list is not a list"
    tensors = []
    folder = os.path.dirname(path)
    for i, m in enumerate(meta):
        if not isinstance(m, dict) or m.get("dtype") not in DTYPES:
            return f"output {i}: no known dtype"
        dtype = getattr(torch, m["dtype"])
        count = int(m.get("count", -1))
        name = os.path.join(folder, f"{os.path.basename(path)}.{i}")
        nbytes = count * torch.empty(0, dtype=dtype).element_size()
        if count < 0 or nbytes > limit_bytes:
            return f"output {i}: {count} elements, more than handed over"
        try:
            if count and os.path.getsize(name) != nbytes:
                return f"output {i}: {os.path.getsize(name)} bytes, not {nbytes}"
            tensors.append(torch.from_file(name, shared=False, size=count, dtype=dtype) if count
                           else torch.empty(0, dtype=dtype))
        except OSError as exc:
            return f"output {i}: {type(exc).__name__}"
    return tensors, meta


def remove(path: str) -> None:
    """The list and its files."""
    import contextlib
    import glob

    for name in [path, *glob.glob(glob.escape(path) + ".*")]:
        with contextlib.suppress(OSError):
            os.unlink(name)
