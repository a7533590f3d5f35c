"""What several commands share (a helper, not a command): the database, a store opened for a
command, requests built from `run`'s flags, the problems named on the command line."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from engine import options
from engine.commands._output import note
from engine.launch import RunRequest, UsageError, checked_problem, resolve_isolation

USAGE_ERROR = 2


def db_path(args: argparse.Namespace) -> Path:
    from engine.record.store import default_db_path

    chosen = getattr(args, "db", None)
    path = Path(chosen) if chosen else default_db_path()
    if not path.parent.is_dir():  # never made on the fly: a typo would scatter databases
        raise UsageError(f"database {path}: {path.parent}: no such directory")
    return path


def no_database(path: Path) -> str:
    """What a command says of a database that is not there: where it looked, and how to name another."""
    return f"no database at {path} (a search started here makes one; another: --db PATH or KTREE_DB=PATH)"


async def open_store(path: Path, read_only: bool = False) -> Any:
    """The store at `path` (read_only: a command that only reads: works on a read-only database)."""
    from engine.record.store import Store, StoreError

    try:
        return await Store.open(path, read_only=read_only)
    except StoreError as exc:
        raise UsageError(str(exc)) from None


def isolation_note(requested: str) -> str:
    """The isolation level, with a fallback from strict said once on stderr (the CLI's; the TUI
    never prints, it would garble the screen)."""
    level, why = resolve_isolation(requested)
    if why:
        note(why)
    return level


def run_request(args: argparse.Namespace) -> RunRequest:
    """`ktree run PROBLEM ...`'s flags as a request (`ktree suite` has the same flags): each part
    of the configuration built from its own flags (engine.options)."""
    parts = {name: options.from_args(part, args) for name, part in options.PARTS.items()}
    return RunRequest(args.problem, **parts)


def reasoning_history(db: Path) -> dict[str, list[int]] | None:
    """Reasoning tokens per call by model from the DB's sessions, if there is a DB."""
    if not db.exists():
        return None

    async def go() -> dict[str, list[int]]:
        store = await open_store(db)
        try:
            return await store.calls.reasoning_by_model()
        finally:
            await store.close()

    return asyncio.run(go())


def problem_specs(names: list[str]) -> list[Any]:
    """The problems named (default: every built-in one)."""
    from engine.problems import builtin_problems

    return [checked_problem(n) for n in (names or [str(p) for p in builtin_problems().values()])]


def source_hash(problem: Any) -> str:
    import hashlib

    return hashlib.sha256(problem.source.encode()).hexdigest()[:16]
