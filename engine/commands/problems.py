"""`ktree problems [PATH...]`: the built-in problems (and any files given) as a table, with the
reference times this device has recorded."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from engine.commands._common import db_path, open_store, problem_specs, source_hash
from engine.commands._flags import Commands
from engine.commands._output import emit
from engine.launch import checked_problem, resolve_backend


def problems(args: argparse.Namespace) -> int:
    from engine.evaluate import device_name
    from engine.llm.scripted import scripted_backends
    from engine.record.report import problems_table

    db = db_path(args)
    backend, _ = resolve_backend("auto")
    device = device_name(backend)
    found = problem_specs([]) + [checked_problem(p) for p in args.paths]

    async def cached() -> tuple[dict, dict]:
        if not db.exists():
            return {}, {}
        store = await open_store(db, read_only=True)
        try:
            return await store.reference_times.latest(device), await searched(store, found, backend, device)
        finally:
            await store.close()

    times, measured = asyncio.run(cached())
    rows = []
    for p in found:
        t = times.get((p.name, source_hash(p)), {})
        eager = t.get("eager_ms") or measured.get(p.name)
        rows.append({"name": p.name, "level": p.metadata.get("level"), "sizes": p.sizes_for(backend),
                     "cost": p.cost(backend), "eager_ms": eager,
                     "compile_ms": t.get("compile_ms"), "scripted": scripted_backends(p.name),
                     "degenerate": p.degenerate})
    emit(problems_table(rows, backend, device))
    return 0


async def searched(store: Any, found: list[Any], backend: str, device: str) -> dict[str, float]:
    """The eager time of each problem's reference as the latest search of it measured it on this
    device, at the sizes the table shows, in the problem's own precision, from the same source."""
    wanted = {p.name: p for p in found}
    out: dict[str, float] = {}
    for s in await store.sessions.all():  # (the latest first)
        p = wanted.get(s["problem"])
        if (p is None or s["problem"] in out or s["backend"] != backend or not s.get("ref_ms")
                or (s.get("config") or {}).get("precision") or s["sizes"] != p.sizes_for(backend)):
            continue
        timed = [e for e in await store.evaluations.of(s["id"]) if e.get("ref_ms") == s["ref_ms"]]
        root = next((n for n in await store.nodes.of(s["id"]) if n.kind == "root"), None)
        if (timed and timed[-1]["device"].split(": ")[-1] == device and root is not None
                and root.source == p.source):
            out[s["problem"]] = s["ref_ms"]
    return out


def register(commands: Commands) -> None:
    parser = commands.add("problems", problems, help="the built-in problems (and any files given) as a table")
    parser.add_argument("paths", nargs="*", help="more problem files to list")
