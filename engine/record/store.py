"""The SQLite store (aiosqlite, WAL): opens the database and composes one repository per aggregate
(`store.sessions`, `store.suites`, `store.nodes`, `store.evaluations`, `store.profiles`,
`store.calls`, `store.reference_times`, `store.commands`; engine.record.repositories).

Every state change is committed before the engine publishes its event, so a reader (the TUI,
a second `ktree`) never shows what the DB does not hold.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import aiosqlite

from engine import settings
from engine.record.repositories import (
    HEARTBEAT_STALE_S,
    Calls,
    Commands,
    Database,
    Evaluations,
    Nodes,
    Profiles,
    ReferenceTimes,
    Sessions,
    StoreError,
    Suites,
    session_state,
)
from engine.record.schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION

__all__ = ["HEARTBEAT_STALE_S", "SCHEMA", "SCHEMA_VERSION", "Store", "StoreError", "default_db_path",
           "session_state"]


def default_db_path() -> Path:
    return Path(settings.get("KTREE_DB") or "store.db")


def _unwritable(path: Path) -> str:
    """Why the database at `path` cannot be written ("" where it can): the file, or its folder."""
    if path.exists() and not os.access(path, os.W_OK):
        return "the file cannot be written"
    if not os.access(path.parent, os.W_OK):
        return "its folder cannot be written"
    return ""


class Store:
    """The database, opened: its connection and the repositories that read and write it."""

    def __init__(self, conn: aiosqlite.Connection, path: Path, read_only: bool = False):
        db = Database(conn, path, read_only)
        self.conn, self.path, self.read_only = conn, path, read_only
        self.sessions = Sessions(db)
        self.suites = Suites(db, self.sessions)
        self.nodes = Nodes(db)
        self.evaluations = Evaluations(db)
        self.profiles = Profiles(db)
        self.calls = Calls(db)
        self.reference_times = ReferenceTimes(db)
        self.commands = Commands(db)

    @classmethod
    async def open(cls, path: str | Path, read_only: bool = False) -> Store:
        """The database at `path`; `read_only` (a listing, a report, an export): SQLite's read-only
        open, immutable where its folder cannot be written (no WAL index can be made there)."""
        path = Path(path)
        if path.exists() and path.is_dir():
            raise StoreError(f"{path} is a directory, not a database file")
        unwritable = _unwritable(path)
        if unwritable and not read_only:
            raise StoreError(f"{path} is read-only ({unwritable}): this command writes to the database;"
                             " sessions, show and export read it as it is")
        where = f"{path.resolve().as_uri()}?mode=ro{'&immutable=1' * bool(unwritable)}" if read_only else path
        try:  # opened here first: one that fails then leaves no aiosqlite thread answering into a closed loop
            sqlite3.connect(where, timeout=30, uri=read_only).close()  # (`Event loop is closed`, 25 lines)
            conn = await aiosqlite.connect(where, timeout=30, uri=read_only)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open database {path}: {exc}") from exc
        conn.row_factory = aiosqlite.Row
        store = cls(conn, path, read_only)
        try:
            await (store._check() if read_only else store._init())
        except sqlite3.DatabaseError as exc:
            await conn.close()
            raise StoreError(f"{path} is not a usable ktree database ({exc})") from exc
        except StoreError:
            await conn.close()
            raise
        return store

    async def _check(self) -> None:
        """A read-only open: the schema is this ktree's (nothing is created or migrated)."""
        tables = {r[0] for r in await self.conn.execute_fetchall(
            "SELECT name FROM sqlite_master WHERE type='table'")}
        if "meta" not in tables:
            raise StoreError(f"{self.path} is an SQLite database, but not a ktree one")
        row = await self.conn.execute_fetchall("SELECT value FROM meta WHERE key='schema_version'")
        version = int(row[0][0]) if row else 0
        if version != SCHEMA_VERSION:  # (newer: upgrade ktree; older: open it once where it is writable)
            raise StoreError(f"{self.path} has schema {version}, this ktree {SCHEMA_VERSION}: cannot read it")

    async def _init(self) -> None:
        await self.conn.execute("PRAGMA journal_mode=WAL")
        await self.conn.execute("PRAGMA foreign_keys=ON")
        await self.conn.execute("PRAGMA synchronous=NORMAL")
        tables = {r[0] for r in await self.conn.execute_fetchall(
            "SELECT name FROM sqlite_master WHERE type='table'")}
        if "meta" in tables:
            row = await self.conn.execute_fetchall(
                "SELECT value FROM meta WHERE key='schema_version'")
            version = int(row[0][0]) if row else 0
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} was written by a newer ktree (schema {version},"
                    f" this one knows {SCHEMA_VERSION}); upgrade ktree to open it"
                )
        elif tables:
            raise StoreError(f"{self.path} is an SQLite database, but not a ktree one")
        else:
            version = SCHEMA_VERSION
        if version < SCHEMA_VERSION:
            await self._migrate(version)
        await self.conn.executescript(SCHEMA)
        await self.conn.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?)",
            (str(SCHEMA_VERSION),),
        )
        await self.conn.commit()

    async def _migrate(self, version: int) -> None:
        """Bring an older ktree DB to SCHEMA_VERSION, all steps or none."""
        statements = [stmt.strip() for v in range(version + 1, SCHEMA_VERSION + 1)
                      for stmt in MIGRATIONS[v].split(";") if stmt.strip()]
        try:
            await self.conn.execute("BEGIN IMMEDIATE")
            for stmt in statements:
                await self.conn.execute(stmt)
            await self.conn.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
            await self.conn.commit()
        except sqlite3.Error as exc:
            await self.conn.rollback()
            raise StoreError(f"cannot migrate {self.path} from schema {version}: {exc}") from exc

    async def close(self) -> None:
        await self.conn.close()
