"""Screens built ahead of being shown (the new-search form): shown without restyling them."""

from __future__ import annotations

from typing import Any

from textual import events


class StyledAhead:
    """Mixed into a Screen that is composed and mounted before it is first shown, and kept.

    Textual restyles every node of a screen each time it is pushed (`ScreenResume`), ~60 ms for
    the form's ~250 widgets on this host. Its styles were applied when it was mounted and follow
    its own changes since; only a theme changed while it was hidden would leave them stale, so
    the restyle is skipped unless the theme is not the one it was styled under."""

    _styled_for: str | None = None

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        theme = self.app.theme  # type: ignore[attr-defined]
        if self._styled_for == theme:
            event.refresh_styles = False  # Screen's own handler, which runs next, leaves them
        self._styled_for = theme

    def _on_mount(self, event: Any) -> None:
        self._styled_for = self.app.theme  # type: ignore[attr-defined]
