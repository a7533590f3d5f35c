"""`ktree problems [PATH...]`: the built-in problems (and any files given) as a table, with the
reference times this device has recorded."""

from __future__ import annotations

import argparse
import asyncio

from engine.commands._common import db_path, open_store, problem_specs, source_hash
from engine.commands._output import emit
from engine.launch import checked_problem, resolve_backend


def problems(args: argparse.Namespace) -> int:
    from engine.evaluate.timing import device_name
    from engine.llm.scripted import scripted_backends
    from engine.report import problems_table

    db = db_path(args)
    backend, _ = resolve_backend("auto")
    device = device_name(backend)
    found = problem_specs([]) + [checked_problem(p) for p in args.paths]

    async def cached() -> dict:
        if not db.exists():
            return {}
        store = await open_store(db)
        try:
            return await store.reference_times(device)
        finally:
            await store.close()

    times = asyncio.run(cached())
    rows = []
    for p in found:
        t = times.get((p.name, source_hash(p)), {})
        rows.append({"name": p.name, "level": p.metadata.get("level"), "sizes": p.sizes_for(backend),
                     "cost": p.cost(backend), "eager_ms": t.get("eager_ms"),
                     "compile_ms": t.get("compile_ms"), "scripted": scripted_backends(p.name),
                     "degenerate": p.degenerate})
    emit(problems_table(rows, backend, device))
    return 0
