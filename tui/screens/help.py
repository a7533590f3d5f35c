"""The help overlay (`?`): every binding of the screen below it — key, id, what it does."""

from __future__ import annotations

import textwrap

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from tui.screens.ahead import LaidOutOnce


def screen_bindings(screen: Screen) -> list[tuple[str, str, str]]:
    """(key, id, description) of every binding that works on `screen` now: the focused widget's
    own (those with an id, e.g. the tree's j/k), the screen's and the app's, keymap applied.
    A key bound twice is listed where it acts (the focused widget's before the screen's)."""
    seen: set[str] = set()
    rows: list[tuple[str, str, str]] = []
    for node, bindings in screen._binding_chain:  # focused widget first, then up to the app
        own = node is screen or node is screen.app
        for key, binding in bindings:
            if key in seen or not (own or binding.id):
                continue
            if not binding.description and not binding.id:
                continue
            seen.add(key)
            rows.append((screen.app.get_key_display(binding), binding.id or "-",
                         binding.tooltip or binding.description or binding.action))
    return rows


class KeyTable:
    """The help's table, laid out by hand: key and id columns as wide as their widest cell, the
    description wrapped in the rest. (A rich Table measures every cell of it each time it is drawn,
    and a Static draws it twice to show it once: ~40 ms of each `?` on this host.)"""

    HEADER = ("key", "id (rebind in [bindings])", "what it does")

    def __init__(self, title: str, rows: list[tuple[str, str, str]]) -> None:
        self.title, self.rows = title, rows

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        keys = max(cell_len(r[0]) for r in [self.HEADER, *self.rows])
        ids = max(cell_len(r[1]) for r in [self.HEADER, *self.rows])
        room = max(10, width - keys - ids - 4)
        key_style, id_style, bold = Style(bold=True, color="cyan"), Style(dim=True), Style(bold=True)
        yield Segment(self.title.center(width).rstrip(), Style(italic=True))
        yield Segment.line()
        rows = [(self.HEADER, (bold, bold, bold)), *((row, (key_style, id_style, None)) for row in self.rows)]
        for (key, binding_id, description), (ks, ids_style, ds) in rows:
            for n, part in enumerate(textwrap.wrap(description, room) or [""]):
                first = n == 0
                yield Segment(pad(key if first else "", keys), ks)
                yield Segment("  ")
                yield Segment(pad(binding_id if first else "", ids), ids_style)
                yield Segment("  ")
                yield Segment(part, ds)
                yield Segment.line()


def pad(text: str, width: int) -> str:
    return text + " " * (width - cell_len(text))


class HelpScreen(LaidOutOnce, ModalScreen[None]):
    """Closes on Escape or `?` again."""

    BINDINGS = [Binding("escape,question_mark", "close", "Close", id="help.close")]

    def __init__(self, below: Screen) -> None:
        super().__init__()
        self.rows = screen_bindings(below)
        self.title_text = f"Keys — {type(below).__name__.removesuffix('Screen').lower()} screen"

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog help"):
            yield Static(KeyTable(self.title_text, self.rows), id="help-table")
            yield Static("Esc or ? closes · every key can be rebound by its id in the config file",
                         classes="hint")

    def action_close(self) -> None:
        self.dismiss(None)
