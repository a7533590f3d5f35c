"""The candidate's side of the judge's fresh-input calls (docs/judge.md), after its verdict, in its own
process (engine.evaluate.child.worker_process serves them until the judge says `end`).

Each call brings a seed the candidate's process has never seen: the inputs are drawn from it here, the
candidate's model is called once, and its outputs are copied out as bytes (harness.handover) before
the answer goes back. The judge's own clock times the whole call from its side of the pipe; the
judge's clean process, which never imported the candidate, compares the bytes with its answers for
the same seed (engine.evaluate.host.judge). So the work behind an output is done inside the judge's
window (a lazy result, an answer kept from earlier inputs, a forged sample: none helps), and nothing
this process says about itself is needed.
"""

from __future__ import annotations

from typing import Any


def call(request: dict[str, Any]) -> dict[str, Any]:
    """`{"seed", "out", "max_bytes", "window"}` -> `{"audited": out}`, or `{"audit_error": why}`."""
    import torch

    from engine.evaluate.child.check import caller, flatten
    from engine.evaluate.child.evaluation import AUDIT
    from engine.evaluate.harness import handover
    from engine.evaluate.languages.common import make_inputs

    if not AUDIT:
        return {"audit_error": "no model to call (the evaluation ended before it was made)"}
    try:
        with torch.no_grad():
            torch.manual_seed(int(request["seed"]))
            inputs = make_inputs(AUDIT["problem"], AUDIT["device"], AUDIT["cast"])
            out = flatten(caller(AUDIT["model"])(*inputs))
            handover.write(out, str(request["out"]), int(request["max_bytes"]), float(request["window"]))
            if AUDIT["device"] == "cuda":
                torch.cuda.synchronize()
    except Exception as exc:  # the candidate's own failure on fresh inputs
        return {"audit_error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return {"audited": request["out"]}
