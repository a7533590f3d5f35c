"""What an evaluation process tells the judge before the candidate's code is imported.

The judge (the engine's process) believes nothing the candidate's process says once the candidate's
code has run there: any function, frame or module of that process is the candidate's to change. But
what the process sent *before* the import was sent by ktree's own code in a process that had never
run the candidate (a worker's child is forked from a clean server: engine.evaluate.child.worker_process).
So the facts that later evaluations rely on go out through here, before the import: the reference's
clean time (the cpu backend: measured before the candidate, `engine.evaluate.child.measure`) and the
device's measured peaks (the speed-of-light floor, `engine.evaluate.harness.timing`). `seal()` marks
the import; the judge takes `clean` messages only before it (engine.evaluate.host.worker).

Without a judge listening (the one-shot child, a test), `tell` says so and the caller keeps what it
measured to itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_send: Callable[[dict[str, Any]], None] | None = None
_sealed = False


def listen(send: Callable[[dict[str, Any]], None] | None) -> None:
    """Messages go to `send` (a worker's protocol) until the next seal; None: nobody listens."""
    global _send, _sealed
    _send, _sealed = send, False


def tell(kind: str, value: Any) -> bool:
    """Send one clean fact; False where nobody listens or the candidate was imported already."""
    if _send is None or _sealed:
        return False
    _send({"clean": {kind: value}})
    return True


def seal() -> None:
    """The candidate's code is about to be imported: nothing more is sent as clean."""
    global _sealed
    if _send is not None and not _sealed:
        _send({"importing": 1})
    _sealed = True
