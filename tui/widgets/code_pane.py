"""The code pane: the selected node's idea in a line above, its source (highlighted) or its diff
against the nearest ancestor with code below."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable

from rich.text import Text
from textual.widgets import RichLog

from engine.domain import Node
from tui.model import ScreenModel
from tui.widgets.banner import sizes_note
from tui.widgets.code import diff_text, highlight_source
from tui.widgets.resize import SteadyScrollBars

CACHE_SIZE = 128  # highlighted sources kept (highlighting a kernel takes a few ms)


def fitted(lead: str, text: str, width: int | None, lines: int | None) -> str:
    """`text` after `lead` cut to fit `lines` lines of `width` (None: whole): at the last whole
    sentence that fits, else at a word, with "…" (the header ended mid-sentence at 120 columns)."""
    if not width or not lines or len(textwrap.wrap(lead + text, width)) <= lines:
        return text

    def fits(cut: str) -> bool:
        return len(textwrap.wrap(lead + cut, width)) <= lines

    sentences = re.split(r"(?<=[.!?;:])\s+", text)
    whole = [" ".join(sentences[:i]) for i in range(len(sentences) - 1, 0, -1)]
    best = next((cut + " …" for cut in whole if fits(cut + " …")), None)
    if best is not None:
        return best
    words = text.split()
    return next((" ".join(words[:i]) + "…" for i in range(len(words) - 1, 0, -1)
                 if fits(" ".join(words[:i]) + "…")), "…")


def idea_text(node: Node, model: ScreenModel, width: int | None = None, lines: int | None = None) -> Text:
    """The line above the code: the idea a variant implements (or the variant it fixes), fitted to
    `lines` lines of `width` where given. An idea's own text is the pane below it: its title here."""
    parent = model.nodes.get(node.parent_id) if node.kind == "variant" and node.parent_id else None
    head = Text()
    if node.kind == "idea":
        head.append(f"idea: {node.title}", style="bold")
    elif parent is not None and parent.kind == "idea":
        title = fitted("idea: ", parent.title, width, lines)  # at 80x24 one line: said to be cut
        head.append(f"idea: {title}", style="bold")
        lead = f"idea: {parent.title} — "
        if parent.text and title == parent.title:
            head.append(f" — {fitted(lead, parent.text, width, lines)}")
    elif parent is not None:
        head.append(f"fix of #{parent.id}: {node.title}", style="bold")
    elif node.kind == "root":
        head.append(f"reference: {node.title or model.info.get('problem', '')}", style="bold")
        note = sizes_note(model)
        if note:
            head.append(f" — {note}", style="yellow")
    return head


def code_text(node: Node, model: ScreenModel, diff: bool = False, dark: bool = True) -> Text:
    """What the code pane shows for `node`: its source, or (`diff`) what it changed against its
    nearest ancestor with code, or a dim line saying why there is no code."""
    if not node.source:
        return Text(node.text or f"({node.kind}: {node.status}, no source)", style="dim")
    if diff:
        parent = model.parent_source(node.id)
        if parent is None:
            return Text("(no parent source to diff against)", style="dim")
        return diff_text(parent[1], node.source, f"#{parent[0]}", f"#{node.id}")
    return highlight_source(node.source, dark=dark)


class CodePane(SteadyScrollBars, RichLog):
    """The source or diff of one node; highlighted sources are cached per (node, dark theme)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, wrap=False, auto_scroll=False, min_width=20)  # wrapped text: the pane's width
        self.text = Text()  # what it shows now
        self._cache: dict[tuple[int, bool], Text] = {}

    def show(self, node: Node, model: ScreenModel, diff: bool, dark: bool) -> None:
        if node.source and not diff:
            text = self._cache.get((node.id, dark))
            if text is None:
                text = code_text(node, model, diff, dark)
                if len(self._cache) > CACHE_SIZE:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[(node.id, dark)] = text
        else:
            text = code_text(node, model, diff, dark)
        self.text = text
        self.wrap = not node.source  # an idea's description wraps; code and diffs keep their lines
        self.clear()
        self.write(text, scroll_end=False)
        self.scroll_home(animate=False)

    def forget(self, node_ids: Iterable[int]) -> None:
        """Those nodes' sources changed: highlight them afresh next time."""
        for node_id in node_ids:
            self._cache.pop((node_id, True), None)
            self._cache.pop((node_id, False), None)
