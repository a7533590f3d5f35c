"""The footer of every screen: Textual's, rebuilt only when the keys it shows change."""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer


class SteadyFooter(Footer):
    """Textual's Footer recomposes (a widget a key, each restyled) whenever the screen's bindings
    may have changed: a focus move, a screen shown, `refresh_bindings`. A search screen opening
    did it ~13 times (0.3 s on this host) for the same keys. This one compares what it would show
    with what it shows, and recomposes only when they differ."""

    _shown: tuple[Any, ...] | None = None

    def _keys(self) -> tuple[Any, ...]:
        """What compose() would show: each key's binding, state and tooltip, in order."""
        return tuple((binding.key, binding.description, binding.action, binding.show, enabled, tooltip)
                     for _, binding, enabled, tooltip in self.screen.active_bindings.values())

    def bindings_changed(self, screen: Screen) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen:
            self.call_after_refresh(self._recompose_if_changed)

    async def _recompose_if_changed(self) -> None:
        if not self.is_attached:
            return
        keys = self._keys()
        if keys == self._shown:
            return
        self._shown = keys
        await self.recompose()
