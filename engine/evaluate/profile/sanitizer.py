"""compute-sanitizer: which crashes are worth a memcheck re-run (illegal or misaligned accesses),
the parser of its report (the first errors, each with kernel, thread, block and address), and
the subprocess side's action (one forward of the candidate, under the tool).
"""

from __future__ import annotations

import re
from typing import Any

from engine.evaluate.jobs import EvalJob

# Illegal accesses that compute-sanitizer's memcheck can locate.
# (cudaErrorInvalidAddressSpace: a store far out of bounds, seen on an H100 from the scripted
# layernorm sampleloop_1, lands outside the global window.)
SANITIZE_PATTERNS = ("illegal memory access", "misaligned address", "illegal address",
                     "cudaErrorIllegalAddress", "cudaErrorMisalignedAddress", "out of bounds",
                     "cudaErrorInvalidAddressSpace", "not supported on global/shared address space")


_SAN_HEADER = re.compile(r"^(Invalid __\w+__ (?:read|write|atomic)|Misaligned|Out-of-range|"
                         r"Malloc/Free error|Memory leak)", re.IGNORECASE)
_SAN_DETAIL = ("at ", "by thread", "address", "and is", "in ")


def parse_sanitizer(text: str, limit: int = 2) -> str:
    """The first `limit` errors of a compute-sanitizer memcheck run, each as its header (access
    and size) with the kernel (and source line where the build has line info), thread and block,
    and address; then the error summary. "" when the output holds no error."""
    reports: list[list[str]] = []
    current: list[str] | None = None
    summary = ""
    for raw in text.splitlines():
        if not raw.startswith("="):
            continue
        body = raw.lstrip("=").strip()
        if "ERROR SUMMARY" in body:
            summary = body
            continue
        if _SAN_HEADER.match(body):
            current = [body] if len(reports) < limit else None
            if current is not None:
                reports.append(current)
            continue
        if current is None:
            continue
        if not body or body.startswith(("Saved host backtrace", "Host Frame", "Device Frame")):
            current = None
        elif body.lower().startswith(_SAN_DETAIL) and len(current) < 6:
            current.append("  " + body)
    if not reports:
        return ""
    return "\n".join(["\n".join(r) for r in reports] + ([summary] if summary else []))


def wants_sanitizer(log: str) -> bool:
    low = (log or "").lower()
    return any(p.lower() in low for p in SANITIZE_PATTERNS)


def sanitize(job: EvalJob) -> dict[str, Any]:
    """One forward of the candidate (under compute-sanitizer: the subprocess side)."""
    import torch

    from engine.evaluate.child.load import model_and_inputs

    model, inputs, _ = model_and_inputs(job)
    with torch.no_grad():
        model(*inputs)
        torch.cuda.synchronize()
    return {"ok": True}

