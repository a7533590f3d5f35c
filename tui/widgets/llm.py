"""The LLM pane: the calls behind the selected node — prompt, reply, tokens, dollars, latency."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text
from textual import work

from engine.domain import Node
from tui.widgets.code_view import CodeView
from tui.widgets.resize import SteadyScrollBars

PROMPT_CHARS = 6000  # the head of each prompt shown; a cut is said where it is
REPLY_CHARS = 8000


def shown(text: str, limit: int) -> tuple[str, str]:
    """(the first `limit` characters of `text`, a line saying what was left out, or "")."""
    if len(text) <= limit:
        return text, ""
    return text[:limit], f"… {len(text) - limit:,} more characters of {len(text):,} not shown"


def llm_request(node: Node, nodes: Mapping[int, Node]) -> tuple[set[int], str | None, str]:
    """Which calls explain `node`: (the node ids and purpose to read them by, a line saying why).
    The engine records an idea call on the first idea node of the batch it fills (an older record
    sits on the parent): an idea is explained by its batch's call, the reference or a variant by
    the idea calls made from it (the root: those; a variant: also its own implement and fix calls)."""
    if node.kind == "idea":
        ids = {n.id for n in nodes.values() if n.kind == "idea" and n.parent_id == node.parent_id} | {node.id}
        if node.parent_id is not None:  # (an older record: on the parent)
            ids.add(node.parent_id)
        return ids, "idea", f"the idea call(s) of #{node.parent_id} that proposed this idea"
    asked = {n.id for n in nodes.values() if n.kind == "idea" and n.parent_id == node.id}
    if node.kind == "variant":
        return {node.id, *asked}, None, "the call(s) that wrote this code, and idea calls from it"
    return {node.id, *asked}, "idea", "idea calls from it"


def llm_text(node_id: int, why: str, calls: list[dict[str, Any]]) -> Text:
    out = Text(f"#{node_id}: {why}\n", style="bold")
    if not calls:
        out.append("(no LLM call recorded for this node)", style="dim")
    for c in calls:
        tokens = c["input_tokens"] + c["output_tokens"] + c["reasoning_tokens"]
        out.append(f"\n{c['purpose']} · {c['provider']}:{c['model']} · {c['status']}", style="bold cyan")
        out.append(f"\ntokens in {c['input_tokens']} · out {c['output_tokens']}"
                   f" · reasoning {c['reasoning_tokens']} (total {tokens})"
                   f" · ${c['cost_usd']:.4f} · {c['latency_s']:.2f} s · attempts {c['attempts']}\n")
        if c.get("error"):
            out.append(f"error: {c['error']}\n", style="red")
        for label, key, limit in (("prompt", "prompt", PROMPT_CHARS), ("reply", "reply", REPLY_CHARS)):
            out.append(f"── {label} ──\n", style="bold")
            text, cut = shown(c[key], limit)
            out.append(text + "\n")
            if cut:
                out.append(cut + "\n", style="bold yellow")
    return out


class LLMPane(SteadyScrollBars, CodeView):
    """Reads the calls from the store only when shown (its tab is open), once per selection, and
    draws only the lines on screen (a node's calls run to hundreds of wrapped lines: a log that
    rendered them all when written took ~50 ms of the `2` key at 200x50)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.text = Text()
        self.shown_for: int | None = None  # the node whose calls it shows, while still current
        self._wanted: int | None = None

    def invalidate(self) -> None:
        """Another node is selected, or this one has a new call: read again when next shown."""
        self.shown_for = self._wanted = None

    @work(group="llm", exclusive=True)
    async def load(self, store: Any, session_id: int, node: Node, nodes: Mapping[int, Node]) -> None:
        self._wanted = node.id
        ids, purpose, why = llm_request(node, nodes)
        calls = []
        for nid in sorted(ids):
            calls += await store.calls.of(session_id, node_id=nid, purpose=purpose)
        calls.sort(key=lambda c: c["id"])
        if self._wanted != node.id:  # the selection moved on meanwhile
            return
        self.text = llm_text(node.id, why, calls)
        self.update(self.text)  # from its top
        self.shown_for = node.id
