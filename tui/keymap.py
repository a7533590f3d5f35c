"""What the footer shows: the keys that matter most where the focus is, as many as fit.

A compact footer that holds more keys than the terminal is wide runs them under the palette key
docked at its right end ("r Relo▏^p palette"). So each screen names its keys by binding id, most
important first; those that fit beside the palette key are shown, the rest hidden from the footer
only (every key still works, and `?` lists them all).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from textual.binding import ActiveBinding

PALETTE_COLUMNS = 12  # "▏^p palette" docked right, and a column of air before it


def key_width(app: Any, active: ActiveBinding) -> int:
    """Columns a key takes in a compact footer: "x Prune" and the margin after it."""
    return len(app.get_key_display(active.binding)) + 1 + len(active.binding.description) + 1


def fit_footer(app: Any, bindings: Mapping[str, ActiveBinding], wanted: Iterable[str],
               width: int) -> dict[str, ActiveBinding]:
    """`bindings` with only the keys named in `wanted` (binding ids, most important first) left
    shown, as many as fit in `width` columns beside the palette key."""
    by_id: dict[str, ActiveBinding] = {}
    for active in bindings.values():  # a binding on two keys ("delete,D") shows once
        if active.binding.id is not None and active.binding.show:
            by_id.setdefault(active.binding.id, active)
    room = width - PALETTE_COLUMNS
    shown: set[str] = set()
    for binding_id in wanted:
        active = by_id.get(binding_id)
        if active is None or binding_id in shown:
            continue
        cost = key_width(app, active)
        if cost <= room:
            room -= cost
            shown.add(binding_id)
    out: dict[str, ActiveBinding] = {}
    for key, active in bindings.items():
        binding = active.binding
        if binding.show and binding.id not in shown:
            binding = replace(binding, show=False)
        out[key] = ActiveBinding(active.node, binding, active.enabled, active.tooltip)
    return out
