"""How every command speaks (a helper, not a command): results on stdout, JSON indented, notes,
progress and errors on stderr, an error as one line; and nothing after the last word (Triton's teardown
report kept off the terminal)."""

from __future__ import annotations

import atexit
import json
import os
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


def quiet_triton_teardown() -> None:
    """Keep Triton's teardown report off the terminal: where triton is installed, torch imports it
    (torch._dynamo does, for any problem that reaches it), and its extension's bindings (nanobind)
    then print ~30 lines of "nanobind: leaked 4 instances! ... triton._C.libtriton..." as the
    interpreter ends, after the TUI has closed or pytest has reported: objects of Triton's own
    still alive at exit, nothing of ktree's and nothing the ending process could lose. Triton offers
    no switch for nanobind's leak warnings (nanobind's is C++ only), and quiets its own compile
    workers' teardown the same way: stderr goes to /dev/null once everything else registered at
    exit has run (registered as ktree starts, this handler runs last), and only where triton was
    loaded. Registered once however often it is called (the tests call `main` many times)."""
    atexit.unregister(_quiet_stderr_if_triton)
    atexit.register(_quiet_stderr_if_triton)


def _quiet_stderr_if_triton() -> None:
    if "triton._C.libtriton" not in sys.modules:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed (a broken pipe)
            pass
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
    except OSError:
        pass
