"""The help overlay (`?`): every binding of the screen below it — key, id, what it does."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static


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


class HelpScreen(ModalScreen[None]):
    """Closes on Escape or `?` again."""

    BINDINGS = [Binding("escape,question_mark", "close", "Close", id="help.close")]

    def __init__(self, below: Screen) -> None:
        super().__init__()
        self.rows = screen_bindings(below)
        self.title_text = f"Keys — {type(below).__name__.removesuffix('Screen').lower()} screen"

    def compose(self) -> ComposeResult:
        table = Table(title=self.title_text, expand=True, box=None, header_style="bold")
        table.add_column("key", style="bold cyan", no_wrap=True)
        table.add_column(escape("id (rebind in [bindings])"), style="dim", no_wrap=True)
        table.add_column("what it does")
        for key, binding_id, description in self.rows:
            table.add_row(key, binding_id, description)
        with VerticalScroll(classes="dialog help"):
            yield Static(table, id="help-table")
            yield Static("Esc or ? closes · every key can be rebound by its id in the config file",
                         classes="hint")

    def action_close(self) -> None:
        self.dismiss(None)
