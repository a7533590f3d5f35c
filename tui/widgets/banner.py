"""The search screen's top and bottom lines: what is being searched, and what just happened."""

from __future__ import annotations

from rich.text import Text

from tui.model import ScreenModel


def banner_text(model: ScreenModel) -> Text:
    """Problem, sizes, provider and mode — and loud marks when the answers are canned (scripted)
    or the kernels are C++ timed on the CPU, so no one mistakes either for a real GPU search."""
    info = model.info
    sizes = ", ".join(f"{k}={v}" for k, v in (info.get("sizes") or {}).items())
    banner = Text()
    if info.get("scripted"):
        banner.append(" SCRIPTED ", style="bold black on yellow")
        banner.append(" canned answers, no LLM  ")
    if info.get("backend") == "cpu":
        banner.append(" CPU ", style="bold black on cyan")
        banner.append(" C++ vs the CPU reference  ")
    where = "cpu sizes" if info.get("backend") == "cpu" else "sizes"
    banner.append(f"{info.get('problem', '')} [{where}: {sizes}] · {info.get('provider', '')}")
    if model.status == "running" or not (model.live or model.follow):  # "live" only while it is
        banner.append(f" · {model.mode}")
    return banner


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
