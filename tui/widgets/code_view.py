"""A read-only text view that draws only the lines on screen (the compare screen's kernels).

A Static in a scrolling container renders every line of its text when it is first drawn (a
kernel of ~150 lines, two of them: ~0.2 s on this host) although a dozen show. This view wraps
the text as a Static would (Textual's own wrapping, line by line), so it looks the same, but
renders a source line only when one of its rows scrolls into view, and keeps it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from rich.cells import cell_len
from rich.text import Text
from textual.content import Content
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.visual import Visual


class CodeView(ScrollView):
    """Text (a highlighted kernel, a heading above it) wrapped to the view's width and scrolled
    vertically; `content` is what it shows, as a Static's is."""

    DEFAULT_CSS = """
    CodeView {
        overflow-x: hidden;
    }
    """

    def __init__(self, text: Text | str | Sequence[Text] = "", *, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.content = Content("")
        self._lines: list[Text] = []  # the text's lines
        self._plain: list[str] = []  # ... as plain text
        self._width = 0  # the width the lines were wrapped to (0: not yet)
        self._wrapped_for = Size(0, 0)  # the view's size (less its border) when they were
        self._starts: list[int] = []  # the first row of each line, at that width
        self._strips: dict[int, list[Strip]] = {}  # a line's rows, once drawn
        self.update(text)

    def update(self, text: Text | str | Sequence[Text]) -> None:
        """Show `text` (or these lines) from its top."""
        if isinstance(text, (str, Text)):
            text = Text(text) if isinstance(text, str) else text
            self._lines = list(text.split("\n", allow_blank=True))
        else:
            self._lines = list(text)
        self.content = Content("\n".join(line.plain for line in self._lines))  # what it says
        self._plain = [line.plain for line in self._lines]
        self._width = 0
        self._wrapped_for = Size(0, 0)
        self._strips.clear()
        if self.is_attached:
            self._wrap()
            self.scroll_home(animate=False)
            self.refresh()

    def on_resize(self) -> None:
        self._wrap()

    def _wrap(self) -> None:
        """Where each line's rows start at the view's width, less the vertical scrollbar where the
        rows will not fit (decided here, not after a first drawing at the whole width); the rows
        it needs are its virtual height."""
        whole = self.content_region
        if whole.width <= 0 or whole.size == self._wrapped_for:
            return
        self._wrapped_for = whole.size
        starts, rows = self._rows(whole.width)
        bar = self.styles.scrollbar_size_vertical
        if rows > whole.height and bar and self.styles.overflow_y in ("auto", "scroll"):
            starts, rows = self._rows(whole.width - bar)
            width = whole.width - bar
        else:
            width = whole.width
        self._width = width
        self._strips.clear()
        self._starts = starts
        self.virtual_size = Size(width, rows)

    def _rows(self, width: int) -> tuple[list[int], int]:
        starts, row = [], 0
        for line in self._plain:
            starts.append(row)
            fits = "\t" not in line and cell_len(line) <= width
            row += 1 if fits else max(1, Content(line).get_height(self.styles, width))
        return starts, row

    def render_line(self, y: int) -> Strip:
        self._wrap()  # where the view's size changed since
        row = self.scroll_offset.y + y
        style = self.visual_style
        width = self._width
        if not self._lines or row >= self.virtual_size.height:
            return Strip.blank(width, style.rich_style)
        index = bisect_right(self._starts, row) - 1
        strips = self._strips.get(index)
        if strips is None:
            strips = self._strips[index] = self._draw(self._lines[index], width, style)
        part = row - self._starts[index]
        return strips[part] if part < len(strips) else Strip.blank(width, style.rich_style)

    def _draw(self, line: Text, width: int, style: VisualStyle) -> list[Strip]:
        """A line's rows, as drawn before where the same line (the same object: the highlighted
        kernels are kept, tui.widgets.code) was drawn at this width and style."""
        key = (id(line), width, style)
        hit = _DRAWN.get(key)
        if hit is not None and hit[0] is line:
            return hit[1]
        strips = Visual.to_strips(self, Content.from_rich_text(line), width, None, style, apply_selection=False)
        if len(_DRAWN) >= DRAWN_LINES:
            del _DRAWN[next(iter(_DRAWN))]
        _DRAWN[key] = (line, strips)  # the line kept with its rows: its id stays its own
        return strips


DRAWN_LINES = 4000  # lines drawn, kept across views (a few kernels at a few widths)
_DRAWN: dict[tuple[int, int, VisualStyle], tuple[Text, list[Strip]]] = {}
