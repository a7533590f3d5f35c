"""Source rendering for the code pane: Python highlighted as Python (a Triton file entirely), and
the C++/CUDA source strings inside it (what `load_inline` compiles) highlighted as C++; a unified
diff against the parent."""

from __future__ import annotations

import difflib
import functools
import re
from typing import Any

from rich.style import Style
from rich.syntax import Syntax
from rich.text import Span, Text

from engine.domain import python_only

THEME = "monokai"  # on dark Textual themes
LIGHT_THEME = "friendly"  # on light ones
_TRIPLE = re.compile(r'(?P<q>"""|\'\'\')(?P<body>.*?)(?P=q)', re.S)
_CXX = re.compile(r"#include|__global__|__device__|torch::|\bvoid\s+\w+\s*\(|\bfor\s*\(\s*(int|auto|size_t)")


def _highlight(code: str, lexer: str, theme: str = THEME) -> Text:
    text = Syntax(code, lexer, theme=theme).highlight(code)
    if text.plain != code and text.plain.endswith("\n"):
        text.right_crop(len(text.plain) - len(code))
    # Foreground colours only: the theme's own background would paint boxes over Textual's.
    text.spans = [Span(s.start, s.end, _fg(s.style)) for s in text.spans]
    text.style = ""
    return text


def _fg(style: str | Style) -> Style:
    style = Style.parse(style) if isinstance(style, str) else style
    return Style(color=style.color, bold=style.bold, italic=style.italic, underline=style.underline)


def embedded_cxx(source: str) -> list[tuple[int, int]]:
    """(start, end) of each triple-quoted string in `source` that holds C++ or CUDA code. A file in
    a Python-only kernel language (engine.evaluate.languages: Triton's kernels are @triton.jit
    functions) is Python through and through: none."""
    if python_only(source):
        return []
    return [m.span("body") for m in _TRIPLE.finditer(source) if _CXX.search(m.group("body"))]


def highlight_source(source: str, line_numbers: bool = True, dark: bool = True) -> Text:
    """The variant's Python file, its embedded C++/CUDA strings highlighted as C++ (kept: the
    compare screen shows the same best kernels again, the code pane a node again)."""
    return _highlighted(source, line_numbers, dark).copy()


@functools.lru_cache(maxsize=16)
def highlighted_lines(source: str, dark: bool = True, style: str = "") -> tuple[Text, ...]:
    """`highlight_source` (numbered) line by line, on `style`, kept: the compare screen's views
    take lines, and draw the same ones faster the next time (tui.widgets.code_view). The lines are
    shared: copy one before changing it."""
    lines = tuple(_highlighted(source, True, dark).split("\n", allow_blank=True))
    for line in lines if style else ():
        line.style = style
    return lines


@functools.lru_cache(maxsize=32)
def _highlighted(source: str, line_numbers: bool, dark: bool) -> Text:
    theme = THEME if dark else LIGHT_THEME
    out = Text()
    pos = 0
    for start, end in embedded_cxx(source):
        out.append_text(_highlight(source[pos:start], "python", theme))
        out.append_text(_highlight(source[start:end], "cpp", theme))
        pos = end
    out.append_text(_highlight(source[pos:], "python", theme))
    out.no_wrap = True
    if not line_numbers:
        return out
    lines = out.split("\n", allow_blank=True)
    width = len(str(len(lines)))
    numbered = Text()
    for i, line in enumerate(lines, 1):
        numbered.append(f"{i:>{width}} ", style="dim")
        numbered.append_text(line)
        if i < len(lines):
            numbered.append("\n")
    numbered.no_wrap = True
    return numbered


def diff_text(old: str, new: str, old_name: str, new_name: str) -> Text:
    """A unified diff, coloured: what this variant changed against its parent."""
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), old_name, new_name,
                                      lineterm="", n=3))
    if not lines:
        return Text("(identical to its parent)", style="dim")
    out = Text()
    styles = {"+": "green", "-": "red", "@": "cyan"}
    for line in lines:
        style = "bold" if line.startswith(("+++", "---")) else styles.get(line[:1], "")
        out.append(line + "\n", style=style)
    out.right_crop(1)
    out.no_wrap = True
    return out


def fmt_num(value: Any, spec: str = ".4g", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"
