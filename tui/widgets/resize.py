"""Panes shown again at the size they had keep their drawn lines (after a zoom of another pane)."""

from __future__ import annotations

from textual import events
from textual.geometry import Size


class KeepsLinesAtSize:
    """Mixed in before a Textual DataTable: Textual sends a widget that is shown again a
    Resize even where its size did not change (every pane, when `z` ends), and those widgets drop
    every line they drew on a Resize (~20 ms each to draw again). One at the size it last had is
    left as it is."""

    _resized_to: Size | None = None

    def _on_resize(self, event: events.Resize) -> None:
        if event.size == self._resized_to:
            event.prevent_default()  # not the widget's own handler: its lines still hold
        self._resized_to = event.size
