"""`ktree show [SESSION]`: a session's tree with statuses and speedups (`--table`, `--json`),
a suite's report (`--suite`), one variant profiled now (`--profile NODE`), or the session followed
live in the TUI (`--follow`)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from engine import options
from engine.commands._common import db_path, no_database, open_store
from engine.commands._flags import Commands
from engine.commands._output import emit, emit_json, say
from engine.domain import best_variant, library_excluded, session_library_ops
from engine.launch import UsageError


def show(args: argparse.Namespace) -> int:
    from engine.record.report import session_table, tree_outline

    db = db_path(args)
    if not db.exists():
        raise UsageError(no_database(db))
    if args.suite is not None:
        return _suite(args, db)
    if args.markdown:
        raise UsageError("--markdown needs --suite")
    if args.follow:
        return _follow(args, db)
    if args.profile is not None:
        return _profile(args, db)

    async def go() -> list[dict[str, Any]]:
        store = await open_store(db, read_only=True)
        try:
            sessions = await store.sessions.all()
            if args.session is not None:
                sessions = [s for s in sessions if s["id"] == args.session]
                if not sessions:
                    raise UsageError(f"no session {args.session} in {db}")
            elif not sessions:  # (said, as `show --follow` does, not an empty page)
                raise UsageError(f"no sessions in {db}")
            elif not args.all:
                sessions = sessions[:1]
            return [await _session(store, s) for s in reversed(sessions)]
        finally:
            await store.close()

    tables = asyncio.run(go())
    if args.json:
        emit_json([{"session": t["session"], "variants": t["variants"],
                    "profiles_per_round": t["profiles_per_round"]} for t in tables])
    elif args.table:
        emit("\n\n".join(session_table(t["session"], t["variants"]) for t in tables))
    else:
        emit("\n\n".join(tree_outline(t["session"], t["nodes"], t["verdicts"]) for t in tables))
    return 0


async def _session(store: Any, s: dict[str, Any]) -> dict[str, Any]:
    """One session's variants as rows, with its nodes and verdicts for the outline."""
    evals = {e["node_id"]: e["verdict"] for e in await store.evaluations.of(s["id"])}
    nodes = await store.nodes.of(s["id"])
    library_ops = session_library_ops(s.get("config"))
    best = best_variant(nodes, library_ops)  # the one export writes
    rows = []
    for n in nodes:
        if n.kind != "variant":
            continue
        v = evals.get(n.id)
        rows.append({"node": n.id, "parent": n.parent_id, "round": n.round, "idea": n.title,
                     "origin": n.origin, "status": n.status, "pinned": n.pinned,
                     "pruned": n.pruned, "best": best is not None and n.id == best.id,
                     "time_ms": v and v.time_ms,
                     "ref_eager_ms": v and v.ref_eager_ms,
                     "speedup_eager": v and v.speedup_eager,
                     "max_abs_err": v and v.max_abs_err, "device": v and v.device,
                     "slot": (v.gpu or {}).get("slot") if v else None,
                     "bound": (v.bound or None) if v else None,
                     "profile": (v.profile or None) if v else None,
                     "sanitizer": (v.sanitizer or None) if v else None,
                     "library": (v.library or None) if v else None,
                     "library_excluded": v is not None and n.status == "correct"
                     and library_excluded(v, library_ops)})
    return {"session": s, "variants": rows, "nodes": nodes, "verdicts": evals,
            "profiles_per_round": await store.profiles.per_round(s["id"])}


def _suite(args: argparse.Namespace, db: Path) -> int:
    """`ktree show --suite SUITE`: per problem best speedups, then fast_p and geomean."""
    from engine.record.report import suite_markdown
    from engine.search.suite import suite_report

    async def go() -> Any:
        store = await open_store(db, read_only=True)
        try:
            return await suite_report(store, args.suite)
        finally:
            await store.close()

    report = asyncio.run(go())
    if report is None:
        raise UsageError(f"no suite {args.suite} in {db}")
    text = suite_markdown(report)
    if args.markdown:
        try:
            Path(args.markdown).write_text(text + "\n")
        except OSError as exc:
            raise UsageError(f"cannot write {args.markdown}: {exc}") from None
        say(f"wrote {args.markdown}")
    if args.json:
        emit_json(report, default=str)
    else:
        emit(text)
    return 0


def _profile(args: argparse.Namespace, db: Path) -> int:
    """`ktree show SESSION --profile NODE`: a running session's engine is asked (a steering
    command); a session no engine runs is profiled here, and the profile recorded."""
    from engine.launch import profile_evaluator
    from engine.record import control
    from engine.record.report import profile_line
    from engine.record.store import session_state
    from engine.search.profile_requests import ProfileRequestError, profile_recorded, profile_target

    if args.session is None:
        raise UsageError("--profile NODE needs the SESSION it belongs to: ktree show SESSION --profile NODE")
    if args.json or args.table or args.all:
        raise UsageError("--profile prints one line: not with --json, --table or --all")

    async def go() -> tuple[str, int]:
        store = await open_store(db)
        try:
            target = await profile_target(store, args.session, args.profile)
            node = args.profile
            if target.verdict.profile:
                return f"node {node}: profiled already: {profile_line(target.verdict.profile)}", 0
            if session_state(target.session) == "running":
                cid = await store.commands.add(args.session, *control.encode(control.Profile(node)))
                return (f"node {node}: profile asked of the engine running session {args.session}"
                        f" (command {cid}); `ktree show {args.session} --json` shows it once taken"), 0
            evaluator = await asyncio.to_thread(profile_evaluator, target.session)
            try:
                verdict = await profile_recorded(store, target, evaluator)
            finally:
                await evaluator.close()
            if not verdict.profile:
                return f"node {node}: no profile taken (profiling is off)", 1
            return f"node {node}: {profile_line(verdict.profile)}", 1 if verdict.profile.get("error") else 0
        except ProfileRequestError as exc:
            raise UsageError(str(exc)) from None
        finally:
            await store.close()

    line, code = asyncio.run(go())
    emit(line)
    return code


def _follow(args: argparse.Namespace, db: Path) -> int:
    """`ktree show SESSION --follow`: the search screen on that session, read live from the DB."""
    from engine.commands._tui import open_app

    async def latest() -> int:
        store = await open_store(db, read_only=True)
        try:
            sessions = await store.sessions.all()
        finally:
            await store.close()
        if args.session is not None:
            if not any(s["id"] == args.session for s in sessions):
                raise UsageError(f"no session {args.session} in {db}")
            return args.session
        if not sessions:
            raise UsageError(f"no sessions in {db}")
        return sessions[0]["id"]

    return open_app(db, session_id=asyncio.run(latest()), follow=True)


def register(commands: Commands) -> None:
    parser = commands.add("show", show, help="a session's tree with statuses and speedups")
    parser.add_argument("session", nargs="?", type=options.positive, help="session id (default: latest)")
    parser.add_argument("--all", action="store_true", help="every session in the database")
    parser.add_argument("--table", action="store_true", help="the variants as a markdown table")
    parser.add_argument("--json", action="store_true", help="the variants as JSON")
    parser.add_argument("--suite", type=options.positive, metavar="SUITE",
                        help="a suite's report: per problem best speedups, then fast_p and geomean")
    parser.add_argument("--markdown", metavar="FILE", help="with --suite: also write the report here")
    parser.add_argument("--profile", type=options.positive, metavar="NODE",
                        help="profile this correct variant of SESSION now (a search profiles only its"
                             " parents and its best): asked of the engine if the session runs, else"
                             " taken here; prints one line")
    parser.add_argument("--follow", action="store_true",
                        help="open the session in the TUI and follow it live (another process runs it)")
