"""Human steering commands for a running search.

A command is recorded in the DB (`commands` table) before anything acts on it, so it survives a
crash and is honoured on resume. The engine applies pending commands between scheduling steps and
marks each applied. The TUI (in this process or another `ktree` on the same DB) only records.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar


@dataclass(frozen=True)
class Prune:
    """Cancel the node's queued work and exclude it (and its branch) from selection. pruned=False
    takes the prune back: the node may be selected again (work already cancelled stays so)."""

    kind: ClassVar[str] = "prune"
    node_id: int
    pruned: bool = True


@dataclass(frozen=True)
class Expand:
    """More ideas from a variant (`ideas`), or more variants of an idea (`variants`), now."""

    kind: ClassVar[str] = "expand"
    node_id: int
    ideas: int = 0
    variants: int = 0


@dataclass(frozen=True)
class Pin:
    """Always keep the node as a parent (pinned=False takes the pin off)."""

    kind: ClassVar[str] = "pin"
    node_id: int
    pinned: bool = True


@dataclass(frozen=True)
class InjectIdea:
    """A human idea under `parent_id`, implemented like any other and marked human."""

    kind: ClassVar[str] = "inject_idea"
    parent_id: int
    text: str


@dataclass(frozen=True)
class EditVariant:
    """A new child of the variant with the edited source, evaluated."""

    kind: ClassVar[str] = "edit_variant"
    node_id: int
    source: str


@dataclass(frozen=True)
class Profile:
    """Profile the correct variant now (a search profiles by itself only its parents and its
    best). Marked applied once the profile is recorded, so a kill leaves it to the resume."""

    kind: ClassVar[str] = "profile"
    node_id: int


@dataclass(frozen=True)
class Pause:
    """No new LLM calls or evaluations start; in-flight ones finish."""

    kind: ClassVar[str] = "pause"


@dataclass(frozen=True)
class Resume:
    kind: ClassVar[str] = "resume"


@dataclass(frozen=True)
class Stop:
    """End the search: no new LLM call or evaluation starts, queued work is cancelled; a variant
    already being built, checked or timed finishes with its real verdict."""

    kind: ClassVar[str] = "stop"


Command = Prune | Expand | Pin | InjectIdea | EditVariant | Profile | Pause | Resume | Stop
COMMANDS: dict[str, type] = {c.kind: c for c in (Prune, Expand, Pin, InjectIdea, EditVariant, Profile,
                                                 Pause, Resume, Stop)}


def encode(command: Command) -> tuple[str, str]:
    """(kind, JSON args) as stored in the commands table."""
    return command.kind, json.dumps(asdict(command))


def decode(kind: str, args: str | dict[str, Any]) -> Command:
    cls = COMMANDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown command {kind!r}")
    data = json.loads(args) if isinstance(args, str) else args
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})
