"""Screens built ahead of being shown (the new-search form, a search and a compare screen): shown
without restyling them, laid out before."""

from __future__ import annotations

from typing import Any

from textual import events
from textual.geometry import Size
from textual.screen import Screen


class StyledAhead:
    """Mixed into a Screen that is composed and mounted before it is first shown, and kept.

    Textual restyles every node of a screen each time it is pushed (`ScreenResume`), ~60 ms for
    the form's ~250 widgets on this host. Its styles were applied when it was mounted and follow
    its own changes since; only a theme changed while it was hidden would leave them stale, so
    the restyle is skipped unless the theme is not the one it was styled under."""

    _styled_for: str | None = None
    _rows: tuple[Any, ...] = ()  # the rows restyled for the focus last time

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        theme = self.app.theme  # type: ignore[attr-defined]
        if self._styled_for == theme:
            event.refresh_styles = False  # Screen's own handler, which runs next, leaves them
            # ...but the focus it sets changes pseudo-classes (a row's :focus-within, its label
            # bold): restyle the row that has the focus now and the one that had it before.
            self.call_after_refresh(self._restyle_focus)  # type: ignore[attr-defined]
        self._styled_for = theme

    def _restyle_focus(self) -> None:
        focused = self.focused  # type: ignore[attr-defined]
        now = (focused.parent,) if focused is not None and focused.parent is not None else ()
        for row in dict.fromkeys((*self._rows, *now)):
            if row.is_attached:
                self.app.update_styles(row)  # type: ignore[attr-defined]
        self._rows = now

    def _on_mount(self, event: Any) -> None:
        self._styled_for = self.app.theme  # type: ignore[attr-defined]


class SteadyBelow:
    """Mixed into a Screen that dialogs and the help open over.

    A modal screen pushed over this one lays every screen below it out again on its first Resize
    (Textual's Screen._on_resize), though their size is what it was: the search screen's ~100
    widgets arranged once more, ~20 ms of each key that opens a dialog on this host. Skipped where
    the size is the one laid out already (a change of layout asked meanwhile is still made, on the
    screen's next update)."""

    def _screen_resized(self, size: Size) -> None:
        screen: Any = self
        if not screen.is_current and screen.is_attached and screen._compositor.size == size:
            return
        super()._screen_resized(size)  # type: ignore[misc]


class LaidOutOnce:
    """Mixed into a modal screen (a dialog, the help).

    Textual lays a screen out when it is pushed (`ScreenResume`), then again on the Resize it
    sends the screen right after, at the same size: a second full frame, the dimmed screen below
    drawn through the tint again (~30 ms of each key that opens a dialog on this host). The second
    is skipped where the screen is laid out at that size already."""

    def _screen_resized(self, size: Size) -> None:
        screen: Any = self
        if screen.is_attached and screen._compositor.size == size:  # (0x0 until first laid out)
            return
        super()._screen_resized(size)  # type: ignore[misc]


def lay_out_ahead(screen: Screen, size: Size) -> None:
    """Lay a screen built ahead out at the app's size, not shown: each widget gets its size (and
    its Resize) now, so that its first showing finds the arrangement made (a first frame's layout
    pass, ~half of a search screen's). Textual's own layout pass, which draws nothing for a screen
    that is not on top."""
    if screen.is_attached and not screen.is_current:
        screen._refresh_layout(size)


def draw_ahead(screen: Screen, size: Size) -> None:
    """A screen built ahead and given what it shows, laid out again and every visible widget drawn
    now, not shown: each widget keeps its lines (Textual's styles cache) until it changes, so the
    first frame after the key composes lines drawn already instead of drawing them (the compare
    screen's two kernels, table and chart: ~0.1 s on this host)."""
    if screen.is_attached and not screen.is_current:
        lay_out_ahead(screen, size)
        for _ in screen._compositor._get_renders():
            pass
