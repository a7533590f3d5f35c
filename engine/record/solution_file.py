"""A variant as a KernelBench solution file: its source under a header comment that says what
it solves, how fast it measured, where and when. `ktree export` and the TUI's export key."""

from __future__ import annotations

from datetime import UTC, datetime

from engine.domain import (
    EAGER_BESIDE,
    language_label,
    library_line,
    session_library_ops,
    shown_notes,
    where_label,
)
from engine.domain import best_variant as domain_best
from engine.evaluate import TIMING_FLAGS
from engine.record.store import Store


class ExportError(Exception):
    """Nothing to export (no such session or node, no correct variant)."""


async def best_variant(store: Store, session_id: int) -> int:
    """The session's best variant (engine.domain.best_variant), by id."""
    session = await store.sessions.get(session_id)
    if session is None:
        raise ExportError(f"no session {session_id}")
    best = domain_best(await store.nodes.of(session_id), session_library_ops(session["config"]))
    if best is None:
        raise ExportError(f"session {session_id} has no correct variant to export")
    return best.id


async def solution_text(store: Store, node_id: int, session_id: int | None = None) -> str:
    """The solution file for one variant: a header comment, then its source unchanged. The same
    for every export of a node (no export time), so its build is cached like the variant's."""
    rows = await store.conn.execute_fetchall("SELECT session_id FROM nodes WHERE id = ?", (node_id,))
    if not rows or (session_id is not None and rows[0][0] != session_id):
        where = f" in session {session_id}" if session_id is not None else ""
        raise ExportError(f"no node {node_id}{where}")
    sid = rows[0][0]
    session = await store.sessions.get(sid)
    assert session is not None
    node = next(n for n in await store.nodes.of(sid) if n.id == node_id)
    if node.kind != "variant" or not node.source:
        what = {"root": "the reference", "idea": "an idea"}.get(node.kind, "a variant with no code")
        raise ExportError(f"node {node_id} is {what}; only a variant's code can be exported")
    evaluations = await store.evaluations.of(sid)
    verdict = next((e["verdict"] for e in reversed(evaluations) if e["node_id"] == node_id), None)
    sizes = ", ".join(f"{k}={v}" for k, v in ((verdict and verdict.sizes) or session["sizes"]).items())

    def ms(key: str) -> str:
        value = getattr(verdict, key) if verdict is not None else None
        return "-" if value is None else f"{value:.4g} ms"

    def x(key: str) -> str:
        value = getattr(verdict, key) if verdict is not None else None
        return "-" if value is None else f"{value:.2f}x"

    span = verdict.speedup_interval if verdict is not None else None
    marks = [f for f in (verdict.flags if verdict is not None else ()) if f in TIMING_FLAGS]
    noise = (f" (95% interval {span[0]:.2f}-{span[1]:.2f}x)" if span else "") + (
        f" [{', '.join(marks)}: see the verdict's log]" if marks else "")
    versus = (f"vs torch.compile {ms('ref_compile_ms')} = {x('speedup_compile')}"
              if session["backend"] != "cpu" else "torch.compile: no baseline on the cpu backend")
    measured = datetime.fromtimestamp(session["created_at"], tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    err = verdict.max_abs_err if verdict is not None else None
    library = verdict.library if verdict is not None else {}
    lines = [
        f"# ktree solution for {session['problem']} ({session['problem_path']})",
        f"# session {sid}, node {node_id} ({node.origin}), round {node.round}: {node.title}",
        f"# verdict: {node.status}; max abs error {'-' if err is None else f'{err:.3g}'}",
        f"# time {ms('time_ms')} vs PyTorch eager {ms('ref_eager_ms')} ({EAGER_BESIDE}) = {x('speedup_eager')}"
        f"{noise}, {versus}",
        f"# measured on {where_label(session['backend'], verdict and verdict.device)} at {sizes},"
        f" search started {measured}",
        f"# found by ktree with {', '.join(session['models'])};"
        f" kernel language: {language_label(node.language, session['backend'])}",
        *([f"# library: {library_line(library)}"] if library else []),
        *(f"# note: {note}" for note in shown_notes(verdict.notes if verdict is not None else (), library)),
        "",
    ]
    return "\n".join(lines) + node.source.rstrip() + "\n"
