"""`/` on a list (the tree, the timings, the sessions): a one-line bar that filters it or jumps to a
number. What a query matches is the same everywhere: every word of it starts a word of the row
("correct" keeps correct rows, not incorrect ones; "tile" finds "Tile rows"); "#12" or "12" is a
node (or session) number to jump to."""

from __future__ import annotations

import re
from collections.abc import Iterable

from textual.binding import Binding
from textual.message import Message

from tui.widgets.inline_keys import OrderedInput

WORD = re.compile(r"[a-z0-9_.]+")


def number(query: str) -> int | None:
    """The node or session number a query names ("#12", "12"), else None."""
    text = query.strip().removeprefix("#")
    return int(text) if text.isdigit() else None


def matches(query: str, fields: Iterable[object]) -> bool:
    """Every word of `query` starts a word of `fields` (case-insensitive); an empty query, all."""
    words = WORD.findall(" ".join(str(f) for f in fields).lower())
    return all(any(w.startswith(term) for w in words) for term in WORD.findall(query.lower()))


class FilterBar(OrderedInput):
    """The bar `/` opens: Enter applies (an empty query shows everything again), Esc closes it
    and drops the filter."""

    BINDINGS = [Binding("escape", "close", "Close", id="filter.close", show=False)]

    class Closed(Message):
        """The bar was closed with Esc: no filter."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(placeholder="filter: words (e.g. correct), or #N to jump; Esc: none",
                         id=id, compact=True)
        self.display = False

    def open(self) -> None:
        self.display = True
        self.focus()

    def action_close(self) -> None:
        self.value = ""
        self.display = False
        self.post_message(self.Closed())
