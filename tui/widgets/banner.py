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
    """The banner's one line, fitted to the width it is drawn at: in full where it fits; else the
    marks without what they mean and the sizes last; else that, cut at the end with an ellipsis,
    so the marks, the problem, the provider and the mode stay in sight (a conv2d's eight sizes
    pushed them off the edge). `str()` is the full line."""

    def __init__(self, full: Text, short: Text) -> None:
        self.full, self.short = full, short

    def __str__(self) -> str:
        return self.full.plain

    def fitted(self, width: int) -> Text:
        for text in (self.full, self.short):
            if text.cell_len <= width:
                return text
        cut = self.short.copy()
        cut.truncate(width, overflow="ellipsis")
        return cut

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        text = self.fitted(options.max_width).copy()
        text.no_wrap = True
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
    full, short = Text(), Text()  # "live" only while it is
    for word, look, meaning in marks:
        full.append(f" {word} ", style=look)
        full.append(f" {meaning}  ")
        short.append(f" {word} ", style=look)
        short.append(" ")
    full.append(f"{info.get('problem', '')} [{where}: {sizes}] · {info.get('provider', '')}{mode}")
    spaced = " ".join(f"{k}={v}" for k, v in (info.get("sizes") or {}).items())
    short.append(f"{info.get('problem', '')} · {info.get('provider', '')}{mode} · {where}: {spaced}")
    return Banner(full, short)


def sizes_note(model: ScreenModel) -> str:
    """Which sizes a run uses, where they differ from what the reference file says: the cpu
    backend runs at the problem's smaller cpu sizes."""
    info = model.info
    if info.get("backend") != "cpu" or not info.get("sizes"):
        return ""
    sizes = ", ".join(f"{k}={v}" for k, v in info["sizes"].items())
    return f"runs at the cpu sizes: {sizes}; the file's own are for the GPU"


def status_text(model: ScreenModel) -> str:
    sid = f"session {model.session_id}" if model.session_id is not None else "session"
    return f"{sid} · {model.status_line}" if model.status_line else sid
