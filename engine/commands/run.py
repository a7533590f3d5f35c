"""`ktree run`: one search, in the TUI or headless (`--headless`: one line per event, then the
summary), or only its estimate (`--estimate`); `--resume SESSION` continues a recorded one."""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from engine import options
from engine.commands._common import (
    USAGE_ERROR,
    db_path,
    isolation_note,
    no_database,
    open_store,
    reasoning_history,
    run_request,
)
from engine.commands._flags import Commands, search_flags
from engine.commands._output import emit, emit_json, error, note, say
from engine.launch import (
    Prepared,
    ResumeRequest,
    UsageError,
    estimate_run,
    prepare_resume,
    prepare_run,
    profile_note,
)


def check_run_args(args: argparse.Namespace) -> None:
    """What only a combination of `ktree run` flags can get wrong (a request cannot say it)."""
    if args.json and not (args.headless or args.estimate):
        raise UsageError("--json needs --headless")
    if args.resume is not None:
        if args.problem is not None:
            raise UsageError("--resume continues a recorded session: give no PROBLEM with it")
        if args.estimate:
            raise UsageError("--estimate is for a new search, not with --resume")
        if kept := options.kept_on_resume(args):
            raise UsageError(f"{', '.join(kept)}: a resumed session keeps its own (a resume may give budgets,"
                             " where to run, --base-url, --llm-timeout and --seed)")
    elif args.problem is None:
        raise UsageError("ktree run needs a PROBLEM (or --resume SESSION)")


def resume_request(args: argparse.Namespace) -> ResumeRequest:
    """`ktree run --resume SESSION ...`'s flags as a request (of each part, the fields declared
    `resume` count; the shape is the session's)."""
    return ResumeRequest(args.resume, **{name: options.from_args(options.PARTS[name], args)
                                         for name in ("budgets", "llm", "checks", "placement")})


def prepare_search(args: argparse.Namespace, db: Path | None = None) -> Prepared:
    """`ktree run`'s flags, checked once by the caller (check_run_args), as a prepared search (a
    resume reads the session from `db`)."""
    if args.resume is not None:
        return asyncio.run(_prepare_resume(resume_request(args), db or db_path(args)))
    return prepare_run(run_request(args))


async def _prepare_resume(request: ResumeRequest, db: Path) -> Prepared:
    if not db.exists():
        raise UsageError(no_database(db))
    store = await open_store(db)
    try:
        return await prepare_resume(request, store)
    finally:
        await store.close()


def run(args: argparse.Namespace) -> int:
    db = db_path(args)
    check_run_args(args)
    if args.estimate:
        from engine.launch.estimate import format_estimate

        result = estimate_run(run_request(args), reasoning_history=reasoning_history(db))
        emit_json(result) if args.json else emit(format_estimate(result))
        return 0
    prepared = prepare_search(args, db)  # bad input: one line and exit 2, before any screen opens
    if args.executor == "local":  # (on ray, each node resolves it for itself)
        isolation_note(args.isolation)
    if said := profile_note(prepared.evaluator.backend, getattr(args, "profile", "auto")):
        note(said)
    if args.headless:
        return asyncio.run(run_headless(args, prepared, db))
    from engine.commands._tui import open_app

    return open_app(db, search_factory=prepared.search)


async def run_headless(args: argparse.Namespace, prepared: Prepared, db: Path) -> int:
    from engine.commands._headless import HeadlessPrinter
    from engine.record.events import EventBus

    store = await open_store(db)
    # Ctrl-C or a plain `kill`: cancel the search, which records the session as interrupted and
    # kills its compile and evaluation processes, then print the summary as usual.
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    bus = EventBus()
    search = prepared.search(store, bus)
    printer = HeadlessPrinter(quiet=args.json)
    bus.subscribe(printer)
    try:
        summary = await search.run()
    except asyncio.CancelledError:
        summary = search.record.summary("interrupted")
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await prepared.evaluator.close()
        await store.close()
    if args.json:
        emit_json(summary)
    else:
        printer.print_summary(summary)
    if summary["status"] == "failed":
        error(summary["stop_reason"])
        return USAGE_ERROR
    if summary["status"] == "interrupted" and summary.get("session_id") is not None:
        say(resume_hint(summary["session_id"], db))  # (on stderr: --json's stdout stays one document)
    return 130 if summary["status"] == "interrupted" else 0


def resume_hint(session_id: int, db: Path) -> str:
    """What an interrupted headless run says last: how to continue it (with its database, where it
    is not the default one)."""
    from engine.record.store import default_db_path

    where = "" if db == default_db_path() else f" --db {db}"
    return f"ktree: session {session_id} is interrupted: `ktree{where} run --resume {session_id}` continues it"


def register(commands: Commands) -> None:
    parser = commands.add("run", run, help="search for a faster kernel for a problem")
    parser.add_argument("problem", nargs="?", help="built-in problem name (see `ktree problems`) or a .py path")
    parser.add_argument("--resume", type=options.positive, metavar="SESSION",
                        help="continue an unfinished session where it stopped (no PROBLEM then)")
    search_flags(parser)
