"""What several commands share (a helper, not a command): the database, a store opened for a
command, requests built from `run`'s flags, the problems named on the command line."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from engine.commands._output import note
from engine.launch import RunRequest, UsageError, checked_problem, resolve_isolation

USAGE_ERROR = 2


def db_path(args: argparse.Namespace) -> Path:
    from engine.store import default_db_path

    chosen = getattr(args, "db", None)
    path = Path(chosen) if chosen else default_db_path()
    if not path.parent.is_dir():  # never made on the fly: a typo would scatter databases
        raise UsageError(f"database {path}: {path.parent}: no such directory")
    return path


async def open_store(path: Path) -> Any:
    from engine.store import Store, StoreError

    try:
        return await Store.open(path)
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
    """`ktree run PROBLEM ...`'s flags as a request (`ktree suite` has the same flags)."""
    return RunRequest(
        problem=args.problem, strategy=args.strategy, provider=args.provider, models=tuple(args.model),
        base_url=args.base_url, reasoning=args.reasoning, llm_timeout=args.llm_timeout,
        llm_concurrency=args.llm_concurrency, budget_usd=args.budget_usd, budget_tokens=args.budget_tokens,
        max_variants=args.max_variants, time_limit=args.time_limit, fixes=args.fixes, rounds=args.rounds,
        ideas=args.ideas, variants=args.variants, top=args.top, atol=args.atol, rtol=args.rtol,
        precision=args.precision,
        seed=args.seed, backend=args.backend, language=args.language, compile_workers=args.compile_workers,
        gpus=None if args.gpus is None else tuple(args.gpus), isolation=args.isolation,
        executor=args.executor, ray_address=args.ray_address, ray_workers=args.ray_workers,
        profile=args.profile, library_ops=args.library_ops, eval_timeout=args.eval_timeout,
    )


def reasoning_history(db: Path) -> dict[str, list[int]] | None:
    """Reasoning tokens per call by model from the DB's sessions, if there is a DB."""
    if not db.exists():
        return None

    async def go() -> dict[str, list[int]]:
        store = await open_store(db)
        try:
            return await store.reasoning_by_model()
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
