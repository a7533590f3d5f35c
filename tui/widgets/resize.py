"""Panes shown again at the size they had keep their drawn lines (after a zoom of another pane),
and a pane's scrollbars take a new size without a second layout (when a zoom ends)."""

from __future__ import annotations

from textual import events
from textual.geometry import Size
from textual.reactive import Reactive
from textual.scrollbar import ScrollBar, ScrollBarCorner


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


class SteadyScrollBar(ScrollBar):
    """A scrollbar whose new size is only drawn. Textual gives a widget the size a layout gave it
    by setting its virtual size, a reactive that asks for a layout; a scrollbar's virtual size
    places nothing (its owner arranges it), so that second layout of the whole screen (20-25 ms
    here, each time a zoomed pane goes back to its place) had nothing to change."""

    virtual_size: Reactive[Size] = Reactive(Size(0, 0), layout=False)


class SteadyScrollBarCorner(ScrollBarCorner):
    """The corner between two scrollbars, its new size only drawn (as SteadyScrollBar)."""

    virtual_size: Reactive[Size] = Reactive(Size(0, 0), layout=False)


class SteadyScrollBars:
    """Mixed in before a Textual scrolling widget: its scrollbars and their corner are the steady
    kinds above (made when first wanted, the bars hidden until Textual shows them, as Textual makes
    its own)."""

    def _start_part(self, part: ScrollBar | ScrollBarCorner) -> None:
        self.app._start_widget(self, part)  # type: ignore[attr-defined]

    def _steady_scrollbar(self, vertical: bool) -> ScrollBar:
        thickness = (self.scrollbar_size_vertical if vertical  # type: ignore[attr-defined]
                     else self.scrollbar_size_horizontal)  # type: ignore[attr-defined]
        bar = SteadyScrollBar(vertical=vertical, name="vertical" if vertical else "horizontal",
                              thickness=thickness)
        bar.display = False
        self._start_part(bar)
        return bar

    @property
    def vertical_scrollbar(self) -> ScrollBar:
        if self._vertical_scrollbar is None:  # type: ignore[has-type]
            self._vertical_scrollbar = self._steady_scrollbar(vertical=True)
        return self._vertical_scrollbar

    @property
    def horizontal_scrollbar(self) -> ScrollBar:
        if self._horizontal_scrollbar is None:  # type: ignore[has-type]
            self._horizontal_scrollbar = self._steady_scrollbar(vertical=False)
        return self._horizontal_scrollbar

    @property
    def scrollbar_corner(self) -> ScrollBarCorner:
        if self._scrollbar_corner is None:  # type: ignore[has-type]
            self._scrollbar_corner = SteadyScrollBarCorner()
            self._start_part(self._scrollbar_corner)
        return self._scrollbar_corner
