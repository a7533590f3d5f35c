"""The search screen's top and bottom lines: what is being searched, and what just happened."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

from tui.model import ScreenModel

MARKS = {  # loud marks, and what each means (said where the line has room)
    "scripted": ("SCRIPTED", "bold black on yellow", "canned answers, no LLM"),
    "cpu": ("CPU", "bold black on cyan", "C++ vs the CPU reference"),
}


class Banner:
    """The banner, fitted to the width it is drawn at: in full on one line where it fits; else the
    marks without what they mean, the sizes last (labelled, else bare); else on two lines, the
    sizes on the second (wrapping on where they need more), so every word stays readable at 80
    columns (the sizes were cut with an ellipsis: `dim=40…`). `str()` is the full line."""

    def __init__(self, full: Text, head: Text, where: str, sizes: str) -> None:
        self.full, self.head = full, head  # head: the marks, the problem, the provider, the mode
        self.sizes = Text(f"{where}: {sizes}")
        self.short = Text(" · ").join((head, self.sizes))
        self.bare = Text(" · ").join((head, Text(sizes)))

    def __str__(self) -> str:
        return self.full.plain

    def fitted(self, width: int) -> Text:
        for text in (self.full, self.short, self.bare):
            if text.cell_len <= width:
                return text
        return Text("\n").join((self.head, self.sizes))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        text = self.fitted(options.max_width).copy()
        text.overflow = "fold"  # a size longer than the line (never seen) breaks, not cut
        yield text

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(min(self.short.cell_len, options.max_width), self.full.cell_len)


def banner_text(model: ScreenModel) -> Banner:
    """Problem, sizes, provider and mode — and loud marks when the answers are canned (scripted)
    or the kernels are C++ timed on the CPU, so no one mistakes either for a real GPU search."""
    info = model.info
    sizes = ", ".join(f"{k}={v}" for k, v in (info.get("sizes") or {}).items())
    marks = [MARKS[k] for k, on in (("scripted", info.get("scripted")), ("cpu", info.get("backend") == "cpu"))
             if on]
    where = "cpu sizes" if info.get("backend") == "cpu" else "sizes"
    mode = f" · {model.mode}" if model.status == "running" or not (model.live or model.follow) else ""
    full, head = Text(), Text()  # "live" only while it is
    for word, look, meaning in marks:
        full.append(f" {word} ", style=look)
        full.append(f" {meaning}  ")
        head.append(f" {word} ", style=look)
        head.append(" ")
    full.append(f"{info.get('problem', '')} [{where}: {sizes}] · {info.get('provider', '')}{mode}")
    head.append(f"{info.get('problem', '')} · {info.get('provider', '')}{mode}")
    return Banner(full, head, where, " ".join(f"{k}={v}" for k, v in (info.get("sizes") or {}).items()))


def sizes_note(model: ScreenModel) -> str:
    """Which sizes a run uses, where they differ from what the reference file says: the cpu
    backend runs at the problem's smaller cpu sizes."""
    info = model.info
    if info.get("backend") != "cpu" or not info.get("sizes"):
        return ""
    sizes = ", ".join(f"{k}={v}" for k, v in info["sizes"].items())
    return f"runs at the cpu sizes: {sizes} (the file's own are for the GPU)"


def status_text(model: ScreenModel) -> str:
    sid = f"session {model.session_id}" if model.session_id is not None else "session"
    return f"{sid} · {model.status_line}" if model.status_line else sid
