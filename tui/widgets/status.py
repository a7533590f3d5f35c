"""How a node's status looks, everywhere on the search screen: a glyph and a colour."""

from __future__ import annotations

GLYPHS = {
    "reference": "◆", "ok": "◇", "generating": "…", "queued": "·", "compiling": "⚙", "waiting": "◌",
    "checking": "≟", "timing": "⏱", "evaluating": "⏱", "correct": "✔", "incorrect": "✘", "flagged": "⚑",
    "compile_error": "⚠", "runtime_error": "!", "timeout": "⌛", "crashed": "☠", "failed": "✗",
    "cancelled": "⊘",
}
NEUTRAL = "•"  # a status this build does not know (a DB written by a newer ktree)
STYLES = {
    "correct": "green", "incorrect": "red", "compile_error": "yellow", "runtime_error": "red",
    "timeout": "magenta", "crashed": "red", "failed": "red", "flagged": "magenta",
    "reference": "cyan", "ok": "blue", "generating": "dim", "queued": "dim", "cancelled": "dim",
}


def glyph(status: str) -> str:
    return GLYPHS.get(status, NEUTRAL)


def style(status: str) -> str:
    return STYLES.get(status, "")
