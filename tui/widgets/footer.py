"""The footer of every screen: Textual's, rebuilt only when the keys it shows change."""

from __future__ import annotations

from typing import Any

from textual.binding import ActiveBinding
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

# a FooterKey's (key, display, description, action, disabled, tooltip, whether the palette's)
Label = tuple[str, str, str, str, bool, str, bool]


class SteadyFooter(Footer):
    """Textual's Footer recomposes (a widget a key, each restyled) whenever the screen's bindings
    may have changed: a focus move, a screen shown, `refresh_bindings`. A search screen opening
    did it ~13 times (0.3 s on this host) for the same keys. This one compares what it would show
    with what it shows, and only where they differ (the focus moved from pane to pane: `1`, `2`,
    Tab) changes them: it relabels the keys it has and removes or mounts the difference, instead
    of every key mounted anew."""

    _shown: tuple[Any, ...] | None = None

    @staticmethod
    def _keys(bindings: dict[str, ActiveBinding]) -> tuple[Any, ...]:
        """What compose() would show: each key's binding, state and tooltip, in order."""
        return tuple((binding.key, binding.description, binding.action, binding.show, enabled, tooltip)
                     for _, binding, enabled, tooltip in bindings.values())

    def bindings_changed(self, screen: Screen) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen:
            self.call_after_refresh(self._recompose_if_changed)

    async def _recompose_if_changed(self) -> None:
        if not self.is_attached:
            return
        bindings = self.screen.active_bindings  # (read once: a screen fits them to its width)
        keys = self._keys(bindings)
        if keys == self._shown:
            return
        self._shown = keys
        if not await self._relabel(bindings):
            await self.recompose()

    def _labels(self, bindings: dict[str, ActiveBinding]) -> list[Label] | None:
        """What compose() would yield, a FooterKey's (key, display, description, action, disabled,
        tooltip, whether it is the command palette's) each; None where it would yield anything
        else (a group of keys)."""
        first: dict[str, Label] = {}  # an action's first binding
        for _, binding, enabled, tooltip in bindings.values():
            if not binding.show:
                continue
            if binding.group is not None:
                return None
            first.setdefault(binding.action, (binding.key, self.app.get_key_display(binding),
                                              binding.description, binding.action, not enabled, tooltip, False))
        labels = list(first.values())
        palette = bindings.get(self.app.COMMAND_PALETTE_BINDING)
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE and palette is not None:
            _, binding, enabled, _ = palette
            labels.append((binding.key, self.app.get_key_display(binding), binding.description, binding.action,
                           not enabled, binding.tooltip or binding.description, True))
        return labels

    async def _relabel(self, bindings: dict[str, ActiveBinding]) -> bool:
        """Give the keys shown the labels compose() would give them, the keys it has relabelled
        in place, those too many removed, those missing mounted (before the command palette's);
        False where compose() would make anything else (a group), to recompose."""
        labels = self._labels(bindings)
        if labels is None or any(type(w) is not FooterKey for w in self.children):
            return False
        widgets = list(self.children)
        palette = [w for w in widgets if w.has_class("-command-palette")]
        if len(palette) != sum(label[-1] for label in labels) or (palette and widgets[-1] is not palette[0]):
            return False
        keys = [w for w in widgets if w not in palette]
        wanted = [label for label in labels if not label[-1]]
        for widget, label in zip(keys, wanted, strict=False):  # (as many as both have)
            self._label(widget, label)  # type: ignore[arg-type]
        for widget, label in zip(palette, [label for label in labels if label[-1]], strict=True):
            self._label(widget, label)  # type: ignore[arg-type]
        if len(keys) > len(wanted):
            await self.remove_children(keys[len(wanted):])
        elif len(keys) < len(wanted):
            new = [FooterKey(*label[:4], disabled=label[4], tooltip=label[5]).data_bind(compact=Footer.compact)
                   for label in wanted[len(keys):]]
            await self.mount_all(new, before=palette[0] if palette else None)
        self.styles.grid_size_columns = len(wanted)  # (as compose() sets it)
        return True

    @staticmethod
    def _label(widget: FooterKey, label: Label) -> None:
        key, display, description, action, disabled, tooltip, _ = label
        now = (widget.key, widget.key_display, widget.description, widget.action, widget._disabled)
        if now == (key, display, description, action, disabled) and widget.tooltip == (tooltip or None):
            return
        widget.key, widget.key_display, widget.description = key, display, description
        widget.action = action
        widget._disabled = disabled
        widget.set_class(disabled, "-disabled")
        widget.tooltip = tooltip or None
        widget.refresh(layout=True)  # (its width follows its words)
