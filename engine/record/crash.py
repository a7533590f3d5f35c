"""Deterministic kill points for the resume tests: `KTREE_CRASH_AT=NAME[:N[:DELAY]]` makes the
engine SIGKILL itself at the N-th time (default 1st) it reaches point NAME, DELAY seconds later
(from a thread, so a busy loop cannot hold it off). Unset, every call is a dictionary lookup.

Points: "llm" (an LLM call has started, no reply recorded), "compile" (a variant's build has
started), "evaluate" (its correctness check or timing has started), "db" (inside a multi-row
write, or between an evaluation's row and its node's update).
"""

from __future__ import annotations

import os
import signal
import threading

from engine import settings

_seen: dict[str, int] = {}


def point(name: str) -> None:
    spec = settings.get("KTREE_CRASH_AT")
    if not spec:
        return
    want, _, rest = spec.partition(":")
    if want != name:
        return
    nth, _, delay = rest.partition(":")
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] != int(nth or 1):
        return
    if delay:
        threading.Timer(float(delay), _kill).start()
    else:
        _kill()


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
