"""`ktree sessions`: the database's sessions, one line each."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from engine.commands._common import db_path, no_database, open_store
from engine.commands._flags import Commands
from engine.commands._output import emit


def sessions(args: argparse.Namespace) -> int:
    from engine.record.report import format_session_row

    db = db_path(args)

    async def go() -> list[dict[str, Any]]:
        store = await open_store(db, read_only=True)
        try:
            return await store.sessions.all()
        finally:
            await store.close()

    if not db.exists():
        emit(no_database(db))
        return 0
    rows = asyncio.run(go())
    if not rows:
        emit(f"no sessions in {db} (`ktree run PROBLEM` starts one)")
    for row in rows:
        emit(format_session_row(row))
    return 0


def register(commands: Commands) -> None:
    commands.add("sessions", sessions, help="list past sessions in the database")
