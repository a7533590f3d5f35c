"""Text fields whose own editing keys act in the order they were typed.

Textual runs a text field's printable keys as the key reaches the field, but its bound keys
(backspace, delete, arrows, home/end, ctrl+k, ...) only once the key has bubbled up to the app.
In a burst (a paste, tmux send-keys, typing while the app is busy) a character typed after a bound
key could land before it: in the new-search form `End BSpace 4` left "rounds" empty (the 4 replaced
the selected value, then End and BSpace ran). Here the field runs its own bindings at once, in turn
with the characters; keys it does not bind bubble up as before, and priority bindings (checked by
the app before the field sees the key) are unchanged.
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.widgets import Input, TextArea


async def run_own_binding(widget: Any, event: events.Key) -> bool:
    """Run `widget`'s own (non-priority) binding for this key, if it has one that is enabled now;
    True when one ran (the key is then stopped here)."""
    for key in event.aliases:
        for binding in widget._bindings.key_to_bindings.get(key, ()):
            if not binding.priority and await widget.app.run_action(binding.action, widget):
                event.stop()
                event.prevent_default()
                return True
    return False


class OrderedInput(Input):
    """An Input whose editing keys keep their place among the characters typed."""

    async def _on_key(self, event: events.Key) -> None:
        if not await run_own_binding(self, event):
            await super()._on_key(event)


class OrderedTextArea(TextArea):
    """A TextArea whose editing keys keep their place among the characters typed."""

    async def _on_key(self, event: events.Key) -> None:
        if not await run_own_binding(self, event):
            await super()._on_key(event)
