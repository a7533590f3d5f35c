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
    banner.append(f"{info.get('problem', '')} [{sizes}] · {info.get('provider', '')} · {model.mode}")
    return banner


def status_text(model: ScreenModel) -> str:
    sid = f"session {model.session_id}" if model.session_id is not None else "session"
    return f"{sid} · {model.status_line}"
