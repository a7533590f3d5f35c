"""How every command speaks (a helper, not a command): results on stdout, JSON indented, notes,
progress and errors on stderr, an error as one line."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


def emit(text: str = "", end: str = "\n") -> None:
    """A result, on stdout."""
    print(text, end=end)


def emit_json(value: Any, default: Callable[[Any], Any] | None = None) -> None:
    """A result as JSON, on stdout."""
    print(json.dumps(value, indent=2, default=default))


def say(text: str) -> None:
    """Progress or a side remark, on stderr (flushed: it goes with the work it describes)."""
    print(text, file=sys.stderr, flush=True)


def note(text: str) -> None:
    say(f"ktree: note: {text}")


def error(text: str) -> None:
    say(f"ktree: error: {text}")
