"""The node rows the search inserts (`store.nodes.add_many`), built in one place so the reference,
an idea call, an idea and a variant look the same whoever adds them: a round, an LLM reply, a
fix, or a human command. A row's parent may be {"new": i}: the i-th row of the same batch."""

from __future__ import annotations

from typing import Any

Parent = int | dict[str, int]


def root_row(title: str, source: str) -> dict[str, Any]:
    return {"parent_id": None, "kind": "root", "round": 0, "status": "reference", "title": title,
            "source": source}


def asking_row(parent: int, round: int, ideas: int) -> dict[str, Any]:
    """An idea node whose ideas are still to be asked for (the reply fills it in)."""
    return {"parent_id": parent, "kind": "idea", "round": round, "status": "generating",
            "title": f"asking for {ideas} idea{'s' if ideas > 1 else ''}", "want": ideas}


def idea_row(parent: int, round: int, title: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"parent_id": parent, "kind": "idea", "round": round, "status": "ok", "title": title,
            "text": text, **extra}


def variant_row(parent: Parent, title: str, round: int, **extra: Any) -> dict[str, Any]:
    """A variant to generate (or, with `source` and status "queued", to evaluate)."""
    return {"parent_id": parent, "kind": "variant", "round": round, "status": "generating",
            "title": title, **extra}
