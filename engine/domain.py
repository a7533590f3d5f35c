"""The records and words every room shares: a tree node, the statuses it can show, the search
strategies by name, and the one rule for "the best variant". (The LLM providers' names are
engine.llm.providers' own: its table is read there, not here.)

Everything else imports these from here; nothing here imports the search, the store, the CLI or
the TUI.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.evaluate import STATUSES as VERDICT_STATUSES
from engine.evaluate import languages

DEFAULT_LANGUAGE = languages.DEFAULT


@dataclass(frozen=True)
class Node:
    """One node of a session's tree: the reference (root), an idea, or a variant (code)."""

    id: int
    session_id: int
    parent_id: int | None
    kind: str  # NODE_KINDS
    round: int
    title: str
    text: str
    source: str
    status: str  # NODE_STATUSES
    origin: str  # ORIGINS
    speedup: float | None
    time_ms: float | None
    pinned: bool = False
    pruned: bool = False
    want: int = 0
    language: str = ""  # a variant's kernel language (engine.evaluate.languages); "" for root and ideas
    # A correct variant's `library` mark (docs/verdicts.md): the reference's main ops it leaves to a
    # library, joined ("aten.convolution"); "" for one whose own kernels do the main work.
    library: str = ""
    # Its verdict's reference time disagreed with the reference's history (`reference-disturbed`,
    # engine.evaluate.host.reference_history): its speedup is not trusted to rank it ahead of undisturbed ones.
    disturbed: bool = False


NODE_KINDS = ("root", "idea", "variant")
ORIGINS = ("llm", "human", "fix", "edit")

# The statuses a node can show. A variant moves generating -> queued -> compiling -> (waiting) ->
# checking / timing / evaluating -> one verdict status, or failed (no code came back) or cancelled
# (its work was cut short or never started: a prune, a stop, a spent budget; the text says which).
WORK_STATUSES = ("generating", "queued", "compiling", "waiting", "checking", "timing", "evaluating")
VARIANT_STATUSES = (*WORK_STATUSES, *VERDICT_STATUSES, "failed", "cancelled")
IDEA_STATUSES = ("generating", "ok", "failed", "cancelled")
ROOT_STATUSES = ("reference",)
NODE_STATUSES = tuple(dict.fromkeys(VARIANT_STATUSES + IDEA_STATUSES + ROOT_STATUSES))
# Statuses after which a node's work is over (a verdict, or no code to evaluate).
DONE_STATUSES = frozenset({*VERDICT_STATUSES, "failed", "cancelled", "ok", "reference"})
# Work statuses of a variant whose evaluation has begun (a build, a device): a Stop lets these finish.
EVALUATING_STATUSES = frozenset(WORK_STATUSES) - {"generating", "queued"}
# Phases in which a variant holds an evaluation device.
DEVICE_PHASES = frozenset({"checking", "timing", "evaluating"})

# How a session ended (or that it has not).
SESSION_STATUSES = ("running", "finished", "stopped", "interrupted", "failed")

STRATEGIES = ("tree", "sequential", "best-of-n")
BACKEND_CHOICES = ("auto", "cuda", "cpu")
ISOLATION_CHOICES = ("auto", "basic", "strict")
# `--library-ops`: whether a variant with a `library` mark (the reference's main op left to torch,
# cuDNN, cuBLAS; still correct) may be a parent and the best (allow), or is kept out of both (exclude).
LIBRARY_OPS = ("allow", "exclude")
LIBRARY_EXCLUDED = "excluded: library op"  # how a screen says so under exclude (never a hack)


def excluded(node: Node, nodes: Mapping[int, Node]) -> bool:
    """Pruned, or under a pruned node: never a parent, never the best."""
    cur: Node | None = node
    while cur is not None:
        if cur.pruned:
            return True
        cur = nodes.get(cur.parent_id) if cur.parent_id is not None else None
    return False


def ranked(node: Node, nodes: Mapping[int, Node], library_ops: str = "allow") -> bool:
    """A correct variant that may be a parent and the best: not pruned nor under a pruned node,
    and, when the search excludes library ops, without a `library` mark."""
    return (node.kind == "variant" and node.status == "correct" and not excluded(node, nodes)
            and not library_excluded(node, library_ops))


def excludes_library(library_ops: str) -> bool:
    """Whether a search's `library_ops` (its config's, `session_library_ops` for a recorded one)
    keeps library-marked variants out of the parents and the best."""
    return library_ops == "exclude"


def library_excluded(variant: Node | Any, library_ops: str) -> bool:
    """A library-marked variant (its node, or its verdict: anything with a `library` mark) of a
    search that excludes library ops: correct, never a hack, but neither a parent nor the best.
    Every reader of `library_ops` asks this (or `excludes_library`), the engine and the screens alike."""
    return excludes_library(library_ops) and bool(variant.library)


def best_variant(nodes: Mapping[int, Node] | Iterable[Node], library_ops: str = "allow") -> Node | None:
    """The session's best variant: the fastest correct one (speedup vs eager) that is not pruned
    nor under a pruned node (nor library-marked, when the search excludes library ops:
    `library_ops`, the session's config); the earlier one on a tie. The engine records it, the TUI
    stars it, `show` and `export` name it — all by this rule. One whose reference time was disturbed
    (`Node.disturbed`) is the best only when no undisturbed one is."""
    by_id = nodes if isinstance(nodes, Mapping) else {n.id: n for n in nodes}
    candidates = [n for n in by_id.values() if n.speedup is not None and ranked(n, by_id, library_ops)]
    return max(candidates, key=lambda n: (not n.disturbed, n.speedup, -n.id), default=None)


def rank_key(node: Node) -> tuple[bool, float]:
    """How correct variants are ranked as parents: the undisturbed first (a verdict whose reference
    time disagreed with its history is not trusted over one whose did not), then by speedup."""
    return (not node.disturbed, node.speedup or 0.0)


def session_library_ops(config: Mapping[str, Any] | None) -> str:
    """A recorded session config's `library_ops` (one recorded before the option: allow)."""
    value = (config or {}).get("library_ops")
    return value if value in LIBRARY_OPS else "allow"


def library_ops_text(library: Mapping[str, Any] | None) -> str:
    """A verdict's `library` mark as the ops it names, joined ("aten.convolution"); "" for none."""
    if not library:
        return ""
    return ", ".join(str(op) for op in library.get("ops") or ()) or "library"


def shown_notes(notes: Iterable[str] | None, library: Mapping[str, Any] | None) -> tuple[str, ...]:
    """A verdict's notes as shown beside its `library` line: the evaluator's `library:` note says
    what that line says, so it is not repeated (the dataset keeps every note)."""
    return tuple(n for n in notes or () if not (library and str(n).startswith("library:")))


def library_line(library: Mapping[str, Any] | None) -> str:
    """A verdict's `library` mark in words: "aten.convolution (87 % of the reference's time)";
    "" for none."""
    ops = library_ops_text(library)
    if not ops:
        return ""
    share = (library or {}).get("share")
    return f"{ops} ({100 * share:.0f} % of the reference's time)" if isinstance(share, (int, float)) else ops


# The reference's eager time is timed beside every variant (interleaved, on the same worker), so it
# differs a little from one verdict to the next; each figure shown says which it is (docs/timing.md).
EAGER_BESIDE = "timed beside it"  # a verdict's own: its speedup is against this one
EAGER_LATEST = "as timed beside the latest correct variant"  # the session's (`show`, `problems`)


def counted(n: int, one: str, many: str = "") -> str:
    """`n` things, in number: "1 round", "2 rounds", "1 fix", "0 fixes"."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def where_label(backend: str, device: str | None) -> str:
    """Where a session ran, the same words everywhere: the backend, then the device's name where
    it says more ("cpu (x86_64)", "cuda (NVIDIA H100 80GB HBM3)")."""
    return f"{backend} ({device})" if device and device != backend else backend


def language_label(language: str | None, backend: str) -> str:
    """A variant's kernel language as a reader would name it: the cuda contract's C++ extension
    on the cpu backend is C++, not CUDA (engine.evaluate.languages: each language's own label; a
    language this install does not know is named as recorded)."""
    from engine.evaluate import languages

    try:
        return languages.get(language or languages.DEFAULT).label(backend)
    except ValueError:
        return str(language)


def language_mark(language: str | None) -> str:
    """What the tree shows before a variant's title for its kernel language ("" for the default)."""
    from engine.evaluate import languages

    return languages.mark_for(language)


def builds_header(language: str | None) -> bool:
    """Whether a variant's build makes ktree's precompiled torch header on a cold cache (its
    language's `precompiled_header`; a language this install does not know: no)."""
    from engine.evaluate import languages

    known = languages.registry().get(language or DEFAULT_LANGUAGE)
    return known is not None and known.precompiled_header


def python_only(source: str) -> bool:
    """Whether a variant's file is Python through and through (a Python-only kernel language, such
    as Triton): no embedded C++ or CUDA to highlight."""
    from engine.evaluate import languages

    return languages.for_source(source).python_only
