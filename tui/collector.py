"""Python's full garbage collections, moved out of key presses into idle time.

With torch loaded the heap holds 500k objects or more; a full (generation 2) pass walks all of
them, 0.1-0.9 s on a loaded 2-core host, and CPython starts one whenever enough has been
allocated, which is mostly inside a key's handling (a screen built, a session read). Textual does
the same for smooth scrolling (`App.PAUSE_GC_ON_SCROLL`). Here the young generations are collected
as usual; full passes run on a timer, only once no key or mouse input came for `IDLE_S`; what is
alive after the warm-up (imports, the form built ahead) is frozen out of them (`gc.freeze`).
"""

from __future__ import annotations

import gc
import time

IDLE_S = 1.0  # no input for this long: a full pass may run
EVERY_S = 5.0  # and at most this often
HELD = 1_000_000  # generation 2's threshold while held: never reached (~10 young passes a second)


class IdleCollector:
    """Holds the automatic full passes (`hold`) and runs them when idle (`tick`, on a timer)."""

    def __init__(self) -> None:
        self.input_at = time.monotonic()
        self.collected_at = time.monotonic()
        self.passes = 0  # full passes run here
        self._threshold: tuple[int, int, int] | None = None

    def hold(self) -> None:
        if self._threshold is None:
            self._threshold = gc.get_threshold()
            gen0, gen1, _ = self._threshold
            gc.set_threshold(gen0, gen1, HELD)

    def release(self) -> None:
        """The interpreter's own thresholds back (the app is closing)."""
        if self._threshold is not None:
            gc.set_threshold(*self._threshold)
            self._threshold = None

    def input(self) -> None:
        self.input_at = time.monotonic()

    def tick(self) -> None:
        """A full pass where none ran for EVERY_S, no input came for IDLE_S and generation 1 was
        collected since the last (something was allocated that may have outlived it)."""
        now = time.monotonic()
        if self._threshold is None or now - self.input_at < IDLE_S or now - self.collected_at < EVERY_S:
            return
        if gc.get_count()[2] == 0:
            return
        gc.collect()
        self.collected_at = time.monotonic()
        self.passes += 1

    @staticmethod
    def freeze() -> None:
        """What lives now (the imports, the screens kept) out of every later full pass."""
        gc.freeze()
