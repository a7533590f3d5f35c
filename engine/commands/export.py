"""`ktree export SESSION`: the best correct variant (or `--node`) as a KernelBench solution file."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from engine import options
from engine.commands._common import db_path, no_database, open_store
from engine.commands._flags import Commands
from engine.commands._output import emit, say
from engine.launch import UsageError


def export(args: argparse.Namespace) -> int:
    from engine.record.solution_file import ExportError, best_variant, solution_text

    db = db_path(args)
    if not db.exists():
        raise UsageError(no_database(db))

    async def go() -> str:
        store = await open_store(db, read_only=True)
        try:
            node_id = args.node or await best_variant(store, args.session)
            return await solution_text(store, node_id, session_id=args.session)
        except ExportError as exc:
            raise UsageError(str(exc)) from None
        finally:
            await store.close()

    text = asyncio.run(go())
    if args.out:
        try:
            Path(args.out).write_text(text)
        except OSError as exc:
            raise UsageError(f"cannot write {args.out}: {exc}") from None
        say(f"wrote {args.out}")
    else:
        emit(text, end="")
    return 0


def register(commands: Commands) -> None:
    parser = commands.add("export", export, help="the best correct variant as a KernelBench solution file")
    parser.add_argument("session", type=options.positive, help="session id")
    parser.add_argument("--node", type=options.positive, help="this variant instead of the best")
    parser.add_argument("--out", help="write here instead of printing")
