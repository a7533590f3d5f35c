"""The store's repositories: one class per aggregate (sessions, suites, nodes, evaluations,
profiles, LLM calls, reference times, steering commands), each holding the one connection.

`engine.record.store.Store` opens the database and composes them (`store.nodes.add(...)`); every write
commits before it returns, one at a time on the connection.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from engine.domain import Node
from engine.evaluate import Verdict, device_label
from engine.record import crash

T = TypeVar("T")

HEARTBEAT_STALE_S = 15.0  # a running session silent this long has lost its engine


class StoreError(Exception):
    """The database cannot be used (not SQLite, corrupt, from a newer ktree)."""


def session_state(row: dict[str, Any], now: float | None = None) -> str:
    """A session's status as a reader should see it: one marked running whose engine stopped
    beating (killed outright, machine rebooted) is `interrupted`, and can be resumed."""
    if row["status"] != "running":
        return row["status"]
    beat = row.get("heartbeat_at")
    if beat is None or (now or time.time()) - beat > HEARTBEAT_STALE_S:
        return "interrupted"
    pid = row.get("pid")
    if pid:  # the engine runs on this machine (the DB is a local file)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return "interrupted"
        except PermissionError:
            pass
    return "running"


def _node(row: sqlite3.Row | aiosqlite.Row) -> Node:
    node = {k: row[k] for k in Node.__dataclass_fields__}
    return Node(**{**node, "pinned": bool(node["pinned"]), "pruned": bool(node["pruned"]),
                   "disturbed": bool(node["disturbed"])})


@dataclass
class Database:
    """The one connection every repository shares, and its one write lock."""

    conn: aiosqlite.Connection
    path: Path
    read_only: bool = False
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _writes(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """One write at a time on the connection: a multi-statement transaction (`Nodes.add_many`) is
    never committed half-done by another coroutine's commit."""

    @functools.wraps(method)
    async def locked(self: _Repository, *args: Any, **kwargs: Any) -> T:
        db = self.db
        if db.read_only:
            raise StoreError(f"{db.path} is open read-only: this command writes to the database")
        async with db.write_lock:
            return await method(self, *args, **kwargs)

    return locked


class _Repository:
    def __init__(self, db: Database):
        self.db = db

    @property
    def conn(self) -> aiosqlite.Connection:
        return self.db.conn


class Sessions(_Repository):
    """A search's row: what it searched, with what, how it ended, and how long its engine ran."""

    @_writes
    async def create(
        self, *, problem: str, problem_path: str, backend: str, strategy: str, provider: str,
        models: list[str], config: dict[str, Any], sizes: dict[str, int],
        suite_id: int | None = None, status: str = "running", stop_reason: str | None = None,
    ) -> int:
        """A new session (`status` other than running: one recorded as it ended, e.g. a suite's
        problem that could not load, with its reason)."""
        now = time.time()
        cur = await self.conn.execute(
            "INSERT INTO sessions(problem, problem_path, backend, strategy, provider, models,"
            " config, sizes, status, stop_reason, created_at, finished_at, suite_id)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (problem, problem_path, backend, strategy, provider, json.dumps(models),
             json.dumps(config), json.dumps(sizes), status, stop_reason, now,
             None if status == "running" else now, suite_id),
        )
        await self.conn.commit()
        assert cur.lastrowid is not None
        return cur.lastrowid

    @_writes
    async def update(self, session_id: int, **fields: Any) -> None:
        allowed = {"status", "stop_reason", "finished_at", "ref_ms", "best_node_id", "best_speedup",
                   "pid", "heartbeat_at"}
        if not fields or not set(fields) <= allowed:
            raise ValueError(f"cannot update session fields {sorted(set(fields) - allowed)}")
        assignments = ", ".join(f"{k} = ?" for k in fields)
        await self.conn.execute(
            f"UPDATE sessions SET {assignments} WHERE id = ?", (*fields.values(), session_id)
        )
        await self.conn.commit()

    async def all(self) -> list[dict[str, Any]]:
        rows = await self.conn.execute_fetchall(
            "SELECT s.*,"
            " (SELECT COUNT(*) FROM nodes n WHERE n.session_id = s.id AND n.kind = 'variant') AS variants,"
            " (SELECT COALESCE(SUM(cost_usd), 0) FROM llm_calls c WHERE c.session_id = s.id) AS cost_usd,"
            " (SELECT value FROM meta m WHERE m.key = 'session_run_s:' || s.id) AS run_s"  # (see run_s)
            " FROM sessions s ORDER BY s.id DESC"
        )
        now = time.time()
        out = [_session_dict(r) for r in rows]
        for d in out:  # what the engine recorded stays in "recorded_status"
            d["recorded_status"], d["status"] = d["status"], session_state(d, now)
            d["run_s"] = None if d["run_s"] is None else float(d["run_s"])
        return out

    async def get(self, session_id: int) -> dict[str, Any] | None:
        """The session's row, with "run_s": the seconds its engine has run (None: not recorded)."""
        rows = await self.conn.execute_fetchall("SELECT * FROM sessions WHERE id = ?", (session_id,))
        if not rows:
            return None
        return {**_session_dict(rows[0]), "run_s": await self.run_s(session_id)}

    # How long a session's engine has run, over all its runs (a resume continues the count; the
    # time between a stop and a resume is not in it). Kept in `meta`, so no schema change.

    async def run_s(self, session_id: int) -> float | None:
        rows = await self.conn.execute_fetchall(
            "SELECT value FROM meta WHERE key = ?", (f"session_run_s:{session_id}",))
        return float(rows[0][0]) if rows else None

    @_writes
    async def set_run_s(self, session_id: int, seconds: float) -> None:
        await self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                                (f"session_run_s:{session_id}", repr(float(seconds))))
        await self.conn.commit()

    @_writes
    async def delete(self, session_id: int) -> bool:
        """Delete a session and everything recorded under it; False if there was none."""
        await self.conn.execute("DELETE FROM llm_calls WHERE session_id = ?", (session_id,))
        cur = await self.conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        await self.conn.commit()
        return cur.rowcount > 0


class Suites(_Repository):
    """A suite's row, and the sessions it made (one a problem)."""

    def __init__(self, db: Database, sessions: Sessions):
        super().__init__(db)
        self._sessions = sessions

    @_writes
    async def create(self, *, name: str, problems: list[str], config: dict[str, Any]) -> int:
        cur = await self.conn.execute(
            "INSERT INTO suites(name, problems, config, status, created_at, pid, heartbeat_at)"
            " VALUES (?,?,?, 'running', ?,?,?)",
            (name, json.dumps(problems), json.dumps(config), time.time(), os.getpid(), time.time()))
        await self.conn.commit()
        assert cur.lastrowid is not None
        return cur.lastrowid

    @_writes
    async def update(self, suite_id: int, **fields: Any) -> None:
        allowed = {"status", "stop_reason", "finished_at", "pid", "heartbeat_at"}
        if not fields or not set(fields) <= allowed:
            raise ValueError(f"cannot update suite fields {sorted(set(fields) - allowed)}")
        assignments = ", ".join(f"{k} = ?" for k in fields)
        await self.conn.execute(f"UPDATE suites SET {assignments} WHERE id = ?", (*fields.values(), suite_id))
        await self.conn.commit()

    async def all(self) -> list[dict[str, Any]]:
        """Every suite, newest first; "status" as a reader sees it (a dead engine: interrupted)."""
        rows = await self.conn.execute_fetchall("SELECT * FROM suites ORDER BY id DESC")
        now = time.time()
        out = []
        for r in rows:
            d = _suite_dict(r)
            d["recorded_status"], d["status"] = d["status"], session_state(d, now)
            out.append(d)
        return out

    async def get(self, suite_id: int) -> dict[str, Any] | None:
        rows = await self.conn.execute_fetchall("SELECT * FROM suites WHERE id = ?", (suite_id,))
        if not rows:
            return None
        d = _suite_dict(rows[0])
        d["recorded_status"], d["status"] = d["status"], session_state(d)
        return d

    async def sessions(self, suite_id: int) -> list[dict[str, Any]]:
        """The suite's sessions (one a problem), in the order they were made, as `Sessions.all` rows."""
        return sorted((s for s in await self._sessions.all() if s.get("suite_id") == suite_id),
                      key=lambda s: s["id"])


class Nodes(_Repository):
    """The tree: ideas and variants, and each round's parents."""

    @_writes
    async def add(
        self, *, session_id: int, parent_id: int | None, kind: str, round: int, status: str,
        title: str = "", text: str = "", source: str = "", origin: str = "llm", language: str = "",
    ) -> Node:
        now = time.time()
        cur = await self.conn.execute(
            "INSERT INTO nodes(session_id, parent_id, kind, round, title, text, source, status,"
            " origin, language, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (session_id, parent_id, kind, round, title, text, source, status, origin, language, now, now),
        )
        await self.conn.commit()
        assert cur.lastrowid is not None
        return Node(cur.lastrowid, session_id, parent_id, kind, round, title, text, source,
                    status, origin, None, None, language=language)

    @_writes
    async def update(self, node_id: int, **fields: Any) -> None:
        allowed = {"status", "source", "text", "title", "speedup", "time_ms", "pinned", "pruned", "want",
                   "library", "disturbed", "language"}
        if not fields or not set(fields) <= allowed:
            raise ValueError(f"cannot update node fields {sorted(set(fields) - allowed)}")
        assignments = ", ".join(f"{k} = ?" for k in fields)
        await self.conn.execute(
            f"UPDATE nodes SET {assignments}, updated_at = ? WHERE id = ?",
            (*fields.values(), time.time(), node_id),
        )
        await self.conn.commit()

    @_writes
    async def add_many(
        self, session_id: int, rows: list[dict[str, Any]], *, update: tuple[int, dict[str, Any]] | None = None,
        round_parents: tuple[int, list[int]] | None = None, command_id: int | None = None,
    ) -> list[Node]:
        """Several writes as one transaction (all or none, so a kill never leaves half a step):
        insert `rows` (a row's "parent" may be {"new": i}, the i-th row of this batch), apply
        `update` (node id, fields) to an existing node, record a round's parents, and mark a
        steering command applied. Returns the inserted nodes."""
        now = time.time()
        made: list[Node] = []
        try:
            if update is not None:
                node_id, fields = update
                assignments = ", ".join(f"{k} = ?" for k in fields)
                await self.conn.execute(f"UPDATE nodes SET {assignments}, updated_at = ? WHERE id = ?",
                                        (*fields.values(), now, node_id))
            if round_parents is not None:
                await self.conn.execute(
                    "INSERT INTO rounds(session_id, round, parent_ids, created_at) VALUES (?,?,?,?)",
                    (session_id, round_parents[0], json.dumps(round_parents[1]), now))
            for row in rows:
                parent = row.get("parent_id")
                if isinstance(parent, dict):
                    parent = made[parent["new"]].id
                values = {"title": "", "text": "", "source": "", "origin": "llm", "want": 0,
                          "language": "", **row, "parent_id": parent}
                cur = await self.conn.execute(
                    "INSERT INTO nodes(session_id, parent_id, kind, round, title, text, source, status,"
                    " origin, want, language, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (session_id, parent, values["kind"], values["round"], values["title"],
                     values["text"], values["source"], values["status"], values["origin"],
                     values["want"], values["language"], now, now))
                assert cur.lastrowid is not None
                made.append(Node(cur.lastrowid, session_id, parent, values["kind"], values["round"],
                                 values["title"], values["text"], values["source"], values["status"],
                                 values["origin"], None, None, want=values["want"],
                                 language=values["language"]))
                crash.point("db")  # a test kills the engine here: mid-transaction
            if command_id is not None:
                await self.conn.execute("UPDATE commands SET applied_at = ? WHERE id = ?",
                                        (now, command_id))
            await self.conn.commit()
        except BaseException:
            await self.conn.rollback()
            raise
        return made

    async def of(self, session_id: int) -> list[Node]:
        rows = await self.conn.execute_fetchall(
            "SELECT * FROM nodes WHERE session_id = ? ORDER BY id", (session_id,))
        return [_node(r) for r in rows]

    async def since(self, session_id: int, since: float) -> list[tuple[Node, float]]:
        """Nodes added or changed at or after `since` (updated_at), with their updated_at: how a
        second process follows a running session."""
        rows = await self.conn.execute_fetchall(
            "SELECT * FROM nodes WHERE session_id = ? AND updated_at >= ? ORDER BY id",
            (session_id, since))
        return [(_node(r), r["updated_at"]) for r in rows]

    async def rounds(self, session_id: int) -> dict[int, list[int]]:
        """Each started round's parents (node ids), in round order."""
        rows = await self.conn.execute_fetchall(
            "SELECT round, parent_ids FROM rounds WHERE session_id = ? ORDER BY round", (session_id,))
        return {r["round"]: json.loads(r["parent_ids"]) for r in rows}


class Evaluations(_Repository):
    """Verdicts, one row per evaluation of a node."""

    @_writes
    async def add(self, *, node_id: int, session_id: int, verdict: Verdict) -> int:
        cur = await self.conn.execute(
            "INSERT INTO evaluations(node_id, session_id, status, max_abs_err, time_ms, ref_ms,"
            " speedup, backend, device, sizes, verdict, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (node_id, session_id, verdict.status, verdict.max_abs_err,
             verdict.time_ms, verdict.ref_eager_ms, verdict.speedup_eager,
             verdict.backend, device_label(verdict),
             json.dumps(verdict.sizes), json.dumps(verdict.to_dict()), time.time()),
        )
        await self.conn.commit()
        assert cur.lastrowid is not None
        return cur.lastrowid

    async def of(self, session_id: int, after_id: int = 0) -> list[dict[str, Any]]:
        """A session's evaluations in order; with `after_id`, only those recorded after it. Each
        row's "verdict" is the recorded Verdict."""
        rows = await self.conn.execute_fetchall(
            "SELECT * FROM evaluations WHERE session_id = ? AND id > ? ORDER BY id",
            (session_id, after_id))
        return [_evaluation_dict(r) for r in rows]

    async def profiled(self, session_id: int, since: float) -> list[dict[str, Any]]:
        """The latest evaluation row (as `evaluations` gives it) of each node profiled at or after
        `since`: how a follower sees a profile taken after the verdict it read."""
        rows = await self.conn.execute_fetchall(
            "SELECT * FROM evaluations WHERE id IN (SELECT MAX(e.id) FROM evaluations e"
            " JOIN profiles p ON p.node_id = e.node_id WHERE p.session_id = ? AND p.created_at >= ?"
            " GROUP BY e.node_id) ORDER BY id", (session_id, since))
        return [_evaluation_dict(r) for r in rows]


class Profiles(_Repository):
    """Profiles taken after a verdict: the evaluation row holds it, a profiles row says when and why."""

    @_writes
    async def add(self, session_id: int, node_id: int, verdict: Verdict, *, round: int,
                          reason: str) -> int:
        """A profile taken after the node's verdict (`verdict`: that verdict, its profile attached),
        in one transaction: the node's latest evaluation row holds it from now on, a profiles row
        says when and why it was taken, and the node counts as changed (a follower re-reads it)."""
        now = time.time()
        profile = verdict.profile or {}
        try:
            await self.conn.execute(
                "UPDATE evaluations SET verdict = ? WHERE id ="
                " (SELECT MAX(id) FROM evaluations WHERE node_id = ?)",
                (json.dumps(verdict.to_dict()), node_id))
            cur = await self.conn.execute(
                "INSERT INTO profiles(session_id, node_id, round, reason, tool, error, created_at)"
                " VALUES (?,?,?,?,?,?,?)",
                (session_id, node_id, round, reason, str(profile.get("tool") or ""),
                 profile.get("error"), now))
            await self.conn.execute("UPDATE nodes SET updated_at = ? WHERE id = ?", (now, node_id))
            await self.conn.commit()
        except BaseException:
            await self.conn.rollback()
            raise
        assert cur.lastrowid is not None
        return cur.lastrowid

    async def of(self, session_id: int) -> list[dict[str, Any]]:
        """The profiles a session took, in order: node_id, round, reason, tool, error, created_at."""
        rows = await self.conn.execute_fetchall(
            "SELECT * FROM profiles WHERE session_id = ? ORDER BY id", (session_id,))
        return [dict(r) for r in rows]

    async def per_round(self, session_id: int) -> dict[int, int]:
        """How many profiles the session took in each round (rounds with none left out)."""
        rows = await self.conn.execute_fetchall(
            "SELECT round, COUNT(*) AS n FROM profiles WHERE session_id = ? GROUP BY round ORDER BY round",
            (session_id,))
        return {r["round"]: r["n"] for r in rows}


class Calls(_Repository):
    """LLM calls, with their tokens and dollars."""

    @_writes
    async def add(
        self, *, session_id: int, node_id: int | None, provider: str, model: str, purpose: str,
        prompt: str, reply: str, input_tokens: int = 0, output_tokens: int = 0,
        reasoning_tokens: int = 0, cost_usd: float = 0.0, latency_s: float = 0.0,
        attempts: int = 1, status: str = "ok", error: str | None = None,
    ) -> int:
        cur = await self.conn.execute(
            "INSERT INTO llm_calls(session_id, node_id, provider, model, purpose, prompt, reply,"
            " input_tokens, output_tokens, reasoning_tokens, cost_usd, latency_s, attempts, status,"
            " error, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (session_id, node_id, provider, model, purpose, prompt, reply, input_tokens,
             output_tokens, reasoning_tokens, cost_usd, latency_s, attempts, status, error,
             time.time()),
        )
        await self.conn.commit()
        assert cur.lastrowid is not None
        return cur.lastrowid

    async def totals(
        self, session_id: int, node_id: int | None = None, subtree: bool = False
    ) -> dict[str, float]:
        """Tokens and dollars of the LLM calls of a session, of one node, or of a node's whole
        branch (the node and everything under it). `tokens`: input + output + reasoning, the one
        total every screen and budget uses."""
        totals = ("SELECT COUNT(*) AS calls, COALESCE(SUM(input_tokens), 0) AS input_tokens,"
                  " COALESCE(SUM(output_tokens), 0) AS output_tokens,"
                  " COALESCE(SUM(reasoning_tokens), 0) AS reasoning_tokens,"
                  " COALESCE(SUM(input_tokens + output_tokens + reasoning_tokens), 0) AS tokens,"
                  " COALESCE(SUM(cost_usd), 0) AS cost_usd FROM llm_calls")
        if node_id is None:
            rows = await self.conn.execute_fetchall(f"{totals} WHERE session_id = ?", (session_id,))
        elif not subtree:
            rows = await self.conn.execute_fetchall(
                f"{totals} WHERE session_id = ? AND node_id = ?", (session_id, node_id))
        else:
            rows = await self.conn.execute_fetchall(
                "WITH RECURSIVE branch(id) AS (SELECT ? UNION ALL SELECT n.id FROM nodes n"
                " JOIN branch b ON n.parent_id = b.id)"
                f" {totals} WHERE session_id = ? AND node_id IN (SELECT id FROM branch)",
                (node_id, session_id))
        return dict(rows[0])

    async def reasoning_by_model(self) -> dict[str, list[int]]:
        """Reasoning tokens of every answered call, by model: an estimate's history."""
        rows = await self.conn.execute_fetchall(
            "SELECT model, reasoning_tokens FROM llm_calls WHERE status = 'ok' AND provider != 'scripted'")
        out: dict[str, list[int]] = {}
        for r in rows:
            out.setdefault(r["model"], []).append(int(r["reasoning_tokens"]))
        return out

    async def of(self, session_id: int, node_id: int | None = None,
                        purpose: str | None = None) -> list[dict[str, Any]]:
        """A session's LLM calls in order; only one node's (and one purpose's) when given."""
        sql, params = "SELECT * FROM llm_calls WHERE session_id = ?", [session_id]
        if node_id is not None:
            sql, params = sql + " AND node_id = ?", [*params, node_id]
        if purpose is not None:
            sql, params = sql + " AND purpose = ?", [*params, purpose]
        rows = await self.conn.execute_fetchall(sql + " ORDER BY id", params)
        return [dict(r) for r in rows]


class ReferenceTimes(_Repository):
    """The reference's timings, kept per problem, source and device."""

    @_writes
    async def add(
        self, *, problem: str, source_hash: str, sizes: dict[str, int], backend: str, device: str,
        torch_version: str, eager_ms: float | None, compile_ms: float | None,
    ) -> None:
        await self.conn.execute(
            "INSERT INTO reference_times(problem, source_hash, sizes, backend, device, torch_version,"
            " eager_ms, compile_ms, created_at) VALUES (?,?,?,?,?,?,?,?,?)",
            (problem, source_hash, json.dumps(sizes), backend, device, torch_version, eager_ms,
             compile_ms, time.time()),
        )
        await self.conn.commit()

    async def latest(self, device: str) -> dict[tuple[str, str], dict[str, Any]]:
        """The latest reference timing per (problem, source hash) measured on `device`."""
        rows = await self.conn.execute_fetchall(
            "SELECT * FROM reference_times WHERE device = ? ORDER BY id", (device,))
        return {(r["problem"], r["source_hash"]): dict(r) for r in rows}


class Commands(_Repository):
    """Human steering commands (engine.record.control), queued for the engine to apply."""

    @_writes
    async def add(self, session_id: int, kind: str, args: str) -> int:
        """Record a steering command (see engine.record.control); the engine applies it later."""
        cur = await self.conn.execute(
            "INSERT INTO commands(session_id, kind, args, created_at) VALUES (?,?,?,?)",
            (session_id, kind, args, time.time()))
        await self.conn.commit()
        assert cur.lastrowid is not None
        return cur.lastrowid

    @_writes
    async def mark_applied(self, command_id: int) -> None:
        await self.conn.execute(
            "UPDATE commands SET applied_at = ? WHERE id = ?", (time.time(), command_id))
        await self.conn.commit()

    async def of(self, session_id: int, pending_only: bool = False) -> list[dict[str, Any]]:
        """Steering commands in the order given: id, kind, args (JSON text), created/applied."""
        where = " AND applied_at IS NULL" if pending_only else ""
        rows = await self.conn.execute_fetchall(
            f"SELECT * FROM commands WHERE session_id = ?{where} ORDER BY id", (session_id,))
        return [dict(r) for r in rows]


def _evaluation_dict(row: Any) -> dict[str, Any]:
    d = dict(row)
    # A row recorded by an older version may lack keys (from_dict defaults them); the status column
    # is there on every row.
    d["verdict"] = Verdict.from_dict({"status": d["status"], **json.loads(d["verdict"])})
    d["sizes"] = json.loads(d["sizes"])
    return d


def _suite_dict(row: Any) -> dict[str, Any]:
    d = dict(row)
    for key in ("problems", "config"):
        d[key] = json.loads(d[key])
    return d


def _session_dict(row: Any) -> dict[str, Any]:
    d = dict(row)
    for key in ("models", "config", "sizes"):
        d[key] = json.loads(d[key])
    return d
