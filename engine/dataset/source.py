"""The store, read-only: the selection of sessions, and each session's rows as cursors.

Export never writes to the DB, so it does not go through engine.record.store.Store (whose open creates,
migrates and stamps the file): it opens the file with SQLite's read-only mode, checks the schema
version, and reads with plain queries. A session is read one at a time: memory follows the largest
session, not the whole DB.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.record.store import SCHEMA_VERSION


class DatasetError(Exception):
    """Bad input for an export: one line, said as is (the CLI exits 2)."""


@dataclass(frozen=True)
class Session:
    id: int
    problem: str
    problem_path: str
    backend: str
    provider: str
    models: list[str]
    config: dict[str, Any]
    sizes: dict[str, Any]
    status: str
    suite_id: int | None
    created_at: float

    @property
    def scripted(self) -> bool:
        """Its answers are canned (the offline scripted provider), not a model's."""
        return "scripted" in self.provider.split(",")

    def describe(self) -> dict[str, Any]:
        return {"id": self.id, "problem": self.problem, "backend": self.backend, "provider": self.provider,
                "models": self.models, "status": self.status, "suite_id": self.suite_id,
                "scripted": self.scripted}


@dataclass(frozen=True)
class Selection:
    """What to export: some sessions, a suite's, or all; scripted ones only when asked."""

    sessions: tuple[int, ...] = ()
    suite: int | None = None
    include_scripted: bool = False


def open_readonly(path: Path) -> sqlite3.Connection:
    """The DB opened read-only (a ktree DB of this schema version), or DatasetError."""
    if not path.exists():
        raise DatasetError(f"no database at {path}")
    if path.is_dir():
        raise DatasetError(f"{path} is a directory, not a database file")
    conn, tables = None, set()
    # mode=ro; a WAL database in a folder this user cannot write (no -shm to make) opens only as
    # immutable, which is safe while no engine writes to it.
    for flags in ("mode=ro", "mode=ro&immutable=1"):
        try:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?{flags}", uri=True, timeout=30)
            conn.row_factory = sqlite3.Row
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            break
        except sqlite3.OperationalError as exc:
            error = exc
        except sqlite3.Error as exc:
            raise DatasetError(f"{path} is not a usable ktree database ({exc})") from None
    else:
        raise DatasetError(f"cannot read {path} ({error})")
    assert conn is not None
    if "meta" not in tables or "sessions" not in tables:
        conn.close()
        raise DatasetError(f"{path} is not a ktree database")
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    version = int(row[0]) if row else 0
    if version != SCHEMA_VERSION:
        conn.close()
        newer = version > SCHEMA_VERSION
        raise DatasetError(
            f"{path} has schema {version}, this ktree reads {SCHEMA_VERSION}: "
            + ("upgrade ktree" if newer else f"open it once with this ktree (`ktree sessions --db {path}`)"
                                             " to migrate it; export never writes to the DB"))
    return conn


def _session(row: sqlite3.Row) -> Session:
    return Session(id=row["id"], problem=row["problem"], problem_path=row["problem_path"],
                   backend=row["backend"], provider=row["provider"], models=json.loads(row["models"]),
                   config=json.loads(row["config"]), sizes=json.loads(row["sizes"]), status=row["status"],
                   suite_id=row["suite_id"], created_at=row["created_at"])


def select_sessions(conn: sqlite3.Connection, selection: Selection) -> tuple[list[Session], list[Session]]:
    """(the sessions to export, the scripted ones left out); DatasetError for an unknown session
    or suite, or when nothing is left."""
    rows = [_session(r) for r in conn.execute("SELECT * FROM sessions ORDER BY id")]
    by_id = {s.id: s for s in rows}
    if selection.sessions:
        unknown = [i for i in selection.sessions if i not in by_id]
        if unknown:
            raise DatasetError(f"no session {', '.join(map(str, unknown))} in the database")
        chosen = [by_id[i] for i in dict.fromkeys(selection.sessions)]
        what = f"session{'s' if len(chosen) > 1 else ''} {', '.join(str(s.id) for s in chosen)}"
    elif selection.suite is not None:
        if conn.execute("SELECT 1 FROM suites WHERE id = ?", (selection.suite,)).fetchone() is None:
            raise DatasetError(f"no suite {selection.suite} in the database")
        chosen = [s for s in rows if s.suite_id == selection.suite]
        what = f"suite {selection.suite}"
    else:
        chosen, what = rows, "the database"
    if not chosen:
        raise DatasetError(f"empty selection: {what} has no sessions")
    scripted = [] if selection.include_scripted else [s for s in chosen if s.scripted]
    kept = [s for s in chosen if s not in scripted]
    if not kept:
        raise DatasetError(f"empty selection: every session of {what} is scripted (canned answers, not a"
                           " model's); add --include-scripted to export them, marked as such")
    return kept, scripted


def count_variants(conn: sqlite3.Connection, sessions: list[Session], correct_only: bool,
                   min_speedup: float | None) -> int:
    """How many variants the sessions hold that pass the status and speedup filters."""
    sql = (f"SELECT COUNT(*) FROM nodes WHERE kind = 'variant' AND session_id IN"
           f" ({','.join('?' * len(sessions))})")
    params: list[Any] = [s.id for s in sessions]
    if correct_only or min_speedup is not None:
        sql += " AND status = 'correct'"
    if min_speedup is not None:
        sql += " AND speedup >= ?"
        params.append(min_speedup)
    return int(conn.execute(sql, params).fetchone()[0])


def nodes(conn: sqlite3.Connection, session_id: int) -> dict[int, dict[str, Any]]:
    """The session's nodes without their code (ids, tree, titles, statuses): the tree a variant's
    row walks up."""
    return {r["id"]: dict(r) for r in conn.execute(
        "SELECT id, parent_id, kind, round, title, text, status, origin, pinned, pruned, language,"
        " speedup FROM nodes WHERE session_id = ? ORDER BY id", (session_id,))}


def node_source(conn: sqlite3.Connection, node_id: int) -> str:
    row = conn.execute("SELECT source FROM nodes WHERE id = ?", (node_id,)).fetchone()
    return row[0] if row else ""


def variants(conn: sqlite3.Connection, session_id: int) -> Iterator[sqlite3.Row]:
    """The session's variants in order, each with its latest evaluation and its code call, as a
    cursor (one row in memory at a time)."""
    return conn.execute(
        "WITH le AS (SELECT node_id, MAX(id) AS id FROM evaluations WHERE session_id = :s GROUP BY node_id),"
        " lc AS (SELECT node_id, MAX(id) AS id FROM llm_calls WHERE session_id = :s"
        "        AND purpose IN ('implement', 'fix') GROUP BY node_id)"
        " SELECT n.id, n.source, e.verdict, e.status AS eval_status, c.prompt, c.reply, c.model,"
        " c.provider, c.input_tokens, c.output_tokens, c.reasoning_tokens, c.cost_usd"
        " FROM nodes n LEFT JOIN le ON le.node_id = n.id LEFT JOIN evaluations e ON e.id = le.id"
        " LEFT JOIN lc ON lc.node_id = n.id LEFT JOIN llm_calls c ON c.id = lc.id"
        " WHERE n.session_id = :s AND n.kind = 'variant' ORDER BY n.id", {"s": session_id})


def idea_calls(conn: sqlite3.Connection, session_id: int) -> dict[int, dict[str, Any]]:
    """The session's idea calls by the node they were made for (the first idea of the call)."""
    return {r["node_id"]: dict(r) for r in conn.execute(
        "SELECT id, node_id, prompt, reply, model, input_tokens, output_tokens, reasoning_tokens,"
        " cost_usd FROM llm_calls WHERE session_id = ? AND purpose = 'idea' ORDER BY id", (session_id,))}


def human_actions(conn: sqlite3.Connection, session_id: int) -> dict[int, list[str]]:
    """The steering commands a person gave, by the node each names, in order."""
    out: dict[int, list[str]] = {}
    for r in conn.execute("SELECT kind, args FROM commands WHERE session_id = ? ORDER BY id", (session_id,)):
        try:
            args = json.loads(r["args"])
        except ValueError:
            continue
        node = args.get("node_id", args.get("parent_id")) if isinstance(args, dict) else None
        if isinstance(node, int):
            out.setdefault(node, []).append(r["kind"])
    return out


def root_source(conn: sqlite3.Connection, session_id: int) -> str:
    row = conn.execute("SELECT source FROM nodes WHERE session_id = ? AND kind = 'root' ORDER BY id LIMIT 1",
                       (session_id,)).fetchone()
    return row[0] if row else ""
