"""`/` on a list (the tree, the timings, the sessions): a one-line bar that filters it or jumps to a
number. What a query matches is the same everywhere: every word of it starts a word of the row
("correct" keeps correct rows, not incorrect ones; "tile" finds "Tile rows"); "#12" or "12" is a
node (or session) number to jump to."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable

from textual import events
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
    and drops the filter.

    Typed ahead (a burst `/ #29 Enter x`, a paste, tmux send-keys) every key lands where it would
    have one at a time: the bar takes the focus as it opens (Textual's `focus()` waits its turn
    behind keys already read, which went to the tree: `2` switched tabs), Enter has the screen's
    `apply_filter` select and move the focus before the next key is read (not through a message
    that the next key overtook: `x` pruned the node selected before), and a key that reaches the
    closed bar is not typed into it but goes on to the screen's bindings."""

    BINDINGS = [Binding("escape", "close", "Close", id="filter.close", show=False)]

    class Closed(Message):
        """The bar was closed with Esc: no filter."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(placeholder="filter: words (e.g. correct), or #N to jump; Esc: none",
                         id=id, compact=True)
        self.display = False

    def open(self) -> None:
        self.display = True
        self.screen.set_focus(self)

    async def action_submit(self) -> None:
        self.display = False
        apply = getattr(self.screen, "apply_filter", None)
        if apply is None:  # a screen that takes it as a message
            await super().action_submit()
            return
        done = apply(self.value)
        if inspect.isawaitable(done):
            await done

    async def _on_key(self, event: events.Key) -> None:
        if self.display:
            await super()._on_key(event)
        else:  # closed: not typed in (Input's own handler is not run), it goes on up to the bindings
            event.prevent_default()

    def action_close(self) -> None:
        self.value = ""
        self.display = False
        self.post_message(self.Closed())
