"""`ktree suite`: every problem of a directory, a level or a list at once (one session a
problem), one line per event of note, then the report; `--resume SUITE` continues one."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

from engine import options
from engine.commands._common import db_path, isolation_note, open_store, reasoning_history, run_request
from engine.commands._flags import Commands, search_flags
from engine.commands._output import emit, emit_json, note
from engine.launch import UsageError


def suite(args: argparse.Namespace) -> int:
    from engine.launch import (
        SuiteRequest,
        SuiteResumeRequest,
        prepare_suite,
        prepare_suite_resume,
    )

    db = db_path(args)
    if args.json and not (args.headless or args.estimate):
        args.headless = True  # a suite always prints lines; --json asks for the report as JSON
    if args.resume is not None:
        if args.problems:
            raise UsageError("--resume continues a recorded suite: give no problems with it")
        if args.estimate:
            raise UsageError("--estimate is for a new suite, not with --resume")
        request = SuiteResumeRequest(
            suite=args.resume, gpus=None if args.gpus is None else tuple(args.gpus),
            compile_workers=args.compile_workers,
            executor=args.executor if args.executor != "local" else None, ray_address=args.ray_address,
            ray_workers=args.ray_workers, suite_budget_usd=args.suite_budget_usd)

        async def resume() -> Any:
            store = await open_store(db)
            try:
                return await prepare_suite_resume(request, store)
            finally:
                await store.close()

        prepared = asyncio.run(resume())
    else:
        if not args.problems:
            raise UsageError("ktree suite needs problems (a directory, level1, level2, files)"
                             " or --resume SUITE")
        args.problem = args.problems[0]
        run = run_request(args)
        if args.estimate:
            return _estimate(args, SuiteRequest(tuple(args.problems), run, args.suite_budget_usd), db)
        isolation_note(args.isolation)
        prepared = prepare_suite(SuiteRequest(tuple(args.problems), run, args.suite_budget_usd))
    for entry in prepared.entries:
        if entry.error:
            note(f"{entry.name}: {entry.error} (recorded; the suite goes on)")
    return asyncio.run(run_suite(args, prepared, db))


async def run_suite(args: argparse.Namespace, prepared: Any, db: Path) -> int:
    from engine.commands._headless import SuiteLinePrinter
    from engine.record.events import EventBus
    from engine.record.report import suite_markdown
    from engine.search.suite import suite_report

    store = await open_store(db)
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    out = sys.stderr if args.json else sys.stdout

    def bus_for(entry: Any) -> EventBus:
        bus = EventBus()
        bus.subscribe(SuiteLinePrinter(entry.name, out))
        return bus

    running = prepared.suite(store, bus_for)
    status = "interrupted"
    try:
        status = (await running.run())["status"]
    except asyncio.CancelledError:
        pass
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await prepared.evaluator.close()
        report = await suite_report(store, running.suite_id) if running.suite_id is not None else None
        await store.close()
    if report is not None:
        emit_json(report, default=str) if args.json else emit("\n" + suite_markdown(report))
    return 130 if status == "interrupted" else 0


def _estimate(args: argparse.Namespace, request: Any, db: Path) -> int:
    from engine.launch import estimate_suite
    from engine.launch.estimate import format_estimate

    result = estimate_suite(request, reasoning_history(db))
    if args.json:
        emit_json(result)
        return 0
    cap = f", suite cap ${result['suite_budget_usd']:g}" if result["suite_budget_usd"] else ""
    emit(f"Suite of {result['problems']} problems (sums){cap}:")
    emit(format_estimate(result))
    for line in skipped_lines(result["skipped"]):
        emit(line)
    return 0


def skipped_lines(skipped: dict[str, str], shown: int = 4) -> list[str]:
    """The problems an estimate left out, one line per reason (the problem's own name taken out of
    it, so that 19 problems the scripted provider has no answers for are one line)."""
    by_reason: dict[str, list[tuple[str, str]]] = {}
    for spec, why in skipped.items():
        name = Path(spec).stem
        by_reason.setdefault(why.replace(repr(name), "\0").replace(name, "\0"), []).append((name, why))
    lines = []
    for template, named in by_reason.items():
        names = [name for name, _ in named]
        more = f" and {len(names) - shown} more" if len(names) > shown else ""
        # one problem: its own reason; several: the reason said of them all (never a placeholder)
        why = named[0][1] if len(named) == 1 else template.replace("\0.py", "each").replace("\0", "each")
        lines.append(f"  not estimated ({len(names)}: {', '.join(names[:shown])}{more}): {why}")
    return lines


def register(commands: Commands) -> None:
    parser = commands.add("suite", suite, help="search every problem of a directory, a built-in level or a"
                                                " list of files at once (one session a problem)")
    parser.add_argument("problems", nargs="*", metavar="PATH|level1|level2|FILE",
                        help="a directory of KernelBench-format files (e.g. a KernelBench checkout's"
                             " level1/), a built-in level, problem files or built-in names")
    parser.add_argument("--resume", type=options.positive, metavar="SUITE",
                        help="continue an interrupted suite (no problems then)")
    parser.add_argument("--suite-budget-usd", type=options.dollars, default=None,
                        help="stop starting LLM work in every problem once the suite has spent this")
    search_flags(parser)  # every search flag of `run`, per problem
