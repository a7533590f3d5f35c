"""What `ktree eval` is doing, one stderr line per change per file: a cold evaluation takes a
minute or two, and evaluations from several processes queue for a GPU's host lock, so silence
reads as a hang.

    sol.py: building
    sol.py: built in 41.2 s (with the precompiled torch header, once per build cache)
    sol.py: waiting for gpu0 (held by pid 123, session 4)
    sol.py: timing the reference on gpu0, eager and under torch.compile (once per problem and GPU)
    sol.py: checking
    sol.py: timing
    sol.py: done in 97.5 s: correct

Phases come from the evaluator's `on_phase`; the rest (a holder of the host lock, the reference's
own timing) from its `on_note`, which it calls in the job's task: a context variable says whose.
"""

from __future__ import annotations

import contextvars
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

from engine.evaluate import PhaseCallback

# The phases' words on the line ("compiling" and "waiting" are said by `built`, below).
PHASE_WORDS = {"checking": "checking", "timing": "timing", "evaluating": "evaluating",
               "profiling": "profiling"}

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("ktree_eval_file", default=None)


def labels(paths: list[Path]) -> list[str]:
    """Each file by its name, or by its path as given where two share a name."""
    names = [p.name for p in paths]
    return [n if names.count(n) == 1 else str(p) for n, p in zip(names, paths, strict=True)]


def _pch_headers(cache_dir: str) -> int:
    return sum(1 for _ in Path(cache_dir).glob("pch/*/torch/extension.h.gch"))


class EvalProgress:
    """Prints the progress lines of evaluations sharing one evaluator (quiet: none)."""

    def __init__(self, evaluator: Any, files: int, quiet: bool = False, out: TextIO | None = None):
        self.evaluator = evaluator
        self.quiet = quiet
        self.out = out
        # More files than devices: a built one may wait for another file's turn, and says so.
        self.queued = files > len(getattr(evaluator, "devices", [None]))
        self._started: dict[str, float] = {}
        self._building: dict[str, float] = {}  # when each file got its build slot
        self._built: set[str] = set()
        self._waiting_for: dict[str, str] = {}
        self._pch = _pch_headers(evaluator.cache_dir) if not quiet else 0
        if not quiet:
            evaluator.on_note = self._on_note

    def say(self, label: str, text: str) -> None:
        if not self.quiet:
            print(f"{label}: {text}", file=self.out or sys.stderr, flush=True)

    async def run(self, label: str, evaluate: Callable[[PhaseCallback], Awaitable[Any]]) -> Any:
        """`evaluate(on_phase)` for the file `label`, its lines printed on the way; its verdict."""
        _current.set(label)  # this task's own context: the evaluator's notes in it are this file's
        self._started[label] = time.monotonic()

        async def on_phase(name: str) -> None:
            self._on_phase(label, name)

        verdict = await evaluate(on_phase)
        self.say(label, f"done in {self._elapsed(label)}: {verdict.status}")
        return verdict

    def _elapsed(self, label: str) -> str:
        return f"{time.monotonic() - self._started[label]:.1f} s"

    def _on_phase(self, label: str, name: str) -> None:
        if name == "compiling":
            self._building[label] = time.monotonic()
            self.say(label, "building")
        elif name == "waiting":
            self._end_build(label, ", waiting for a device" if self.queued else "")
        else:
            self._end_build(label)
            self.say(label, PHASE_WORDS.get(name, name))

    def _end_build(self, label: str, then: str = "") -> None:
        """The first sign that the file's build is over: say how long it took."""
        if label in self._built:
            if then:
                self.say(label, then.removeprefix(", "))
            return
        self._built.add(label)
        pch = _pch_headers(self.evaluator.cache_dir)
        made = " (with the precompiled torch header, once per build cache)" if pch > self._pch else ""
        self._pch = pch
        took = time.monotonic() - self._building.get(label, self._started[label])
        self.say(label, f"built in {took:.1f} s{made}{then}")

    def _on_note(self, text: str) -> None:
        label = _current.get()
        if label is None:
            return
        if text.startswith("waiting for "):
            # A holder between two others reads as unknown for a moment: said only if nothing was.
            if "held by another process" in text and label in self._waiting_for:
                return
            self._waiting_for[label] = text
        if label not in self._built:  # the reference's turn comes after the file's build
            self._end_build(label)
        self.say(label, text)
