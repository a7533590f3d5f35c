"""`ktree bench timing`: each problem's reference timed, eager and torch.compile; `--load` times
them again with the host loaded (busy loops, or ktree's own compile pool kept building);
`--agreement`: the timer run to run, and against triton's do_bench. The tables they print."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

from engine import scripted_library
from engine.bench.summary import cell, markdown_table
from engine.evaluate import LocalEvaluator


async def time_reference(evaluator: LocalEvaluator, problem: Any) -> dict[str, Any]:
    """One problem's reference timed, eager and torch.compile (a progress line on stderr)."""
    backend = evaluator.backend
    print(f"timing {problem.name} on {backend} ...", file=sys.stderr, flush=True)
    r = await evaluator.time_reference(str(problem.path), problem.sizes_for(backend))
    return {"name": problem.name, "sizes": problem.sizes_for(backend), **r}


async def time_loaded(rows: list[dict[str, Any]], problems: list[Any], backend: str, arch: str | None,
                      load: str, cores: int | None = None,
                      cpu_timer: str | None = None) -> list[dict[str, Any]]:
    """Every reference timed again with the host loaded; each row gets its `loaded` times."""
    evaluator = LocalEvaluator(backend, cuda_arch=arch, cpu_timer=cpu_timer)
    try:  # (torch.compile's on-disk caches are warm from the idle pass)
        async with host_load(load, evaluator, cores) as described:
            print(f"loaded: {described}", file=sys.stderr, flush=True)
            again = [await time_reference(evaluator, p) for p in problems]
    finally:
        await evaluator.close()
    for row, under in zip(rows, again, strict=True):
        row["loaded"] = {"load": described, "eager_ms": under.get("eager_ms"),
                         "compile_ms": under.get("compile_ms"), "error": under.get("error")}
    return rows


async def agreement(problems: list[Any], backend: str, arch: str | None,
                    cost: Any) -> list[dict[str, Any]]:
    """Per problem, the timer twice and triton's do_bench (`cost(problem, sizes)`: its flops and
    bytes); one at a time, so timings never share the device."""
    evaluator = LocalEvaluator(backend, cuda_arch=arch, worker=False)
    rows = []
    for p in problems:
        print(f"timing {p.name} on {backend} ...", file=sys.stderr, flush=True)
        sizes = p.sizes_for(backend)
        flops, nbytes = cost(p, sizes)
        job = evaluator.job(p.path, "", sizes, mode="agreement", flops=flops, bytes=nbytes)
        outcome, result, log = await evaluator.run_alone(job)
        rows.append({"name": p.name, **(result or {"error": f"{outcome}: {log[-300:]}"})})
    return rows


def _ms(value: float | None) -> str:
    return cell(value, ".4g")


def reference_table(rows: list[dict[str, Any]]) -> str:
    """`ktree bench timing`: eager and torch.compile times of each reference."""
    out = []
    for r in rows:
        sizes = ", ".join(f"{k}={v}" for k, v in r["sizes"].items())
        ratio = (f"{r['compile_ms'] / r['eager_ms']:.2f}" if r.get("compile_ms") and r.get("eager_ms")
                 else "-")
        note = (r.get("error") or r.get("log") or "").strip().splitlines()
        out.append((r["name"], r.get("device", "-"), sizes, _ms(r.get("eager_ms")), _ms(r.get("compile_ms")),
                    ratio, note[-1][:80] if note else ""))
    return markdown_table(("problem", "device", "sizes", "eager ms", "torch.compile ms", "compile/eager",
                           "note"), out)


def load_table(rows: list[dict[str, Any]]) -> str:
    """`ktree bench timing --load`: each reference idle vs with the host loaded."""

    def change(idle: float | None, under: float | None) -> str:
        return f"{100 * (under / idle - 1):+.1f}%" if idle and under else "-"

    out = []
    for r in rows:
        u = r.get("loaded") or {}
        out.append((r["name"], u.get("load", "-"), _ms(r.get("eager_ms")), _ms(u.get("eager_ms")),
                    change(r.get("eager_ms"), u.get("eager_ms")), _ms(r.get("compile_ms")),
                    _ms(u.get("compile_ms")), change(r.get("compile_ms"), u.get("compile_ms"))))
    return markdown_table(("problem", "load", "eager ms idle", "eager ms loaded", "change", "compile ms idle",
                           "compile ms loaded", "change"), out)


def agreement_table(rows: list[dict[str, Any]]) -> str:
    """`ktree bench timing --agreement`: run-to-run spread of the timer, and its distance from
    triton's do_bench, per problem (medians, ms)."""
    out: list[tuple[Any, ...]] = []
    for r in rows:
        if "error" in r:
            out.append((r["name"], f"error: {r['error'][:60]}", "", "", "", ""))
            continue
        a, b = r["ours_ms"]
        spread = abs(a - b) / min(a, b) if min(a, b) > 0 else 0.0
        db = r.get("do_bench_ms")
        versus = f"{((a + b) / 2 - db) / db:+.1%}" if db else "-"
        out.append((r["name"], f"{a:.4g}", f"{b:.4g}", f"{spread:.1%}", f"{db:.4g}" if db else "-", versus))
    return markdown_table(("problem", "ours run 1", "ours run 2", "run to run", "do_bench", "ours vs do_bench"),
                          out)


_SCRIPTED = scripted_library.ROOT / "softmax"


@contextlib.asynccontextmanager
async def host_load(kind: str, evaluator: LocalEvaluator, cores: int | None = None) -> AsyncIterator[str]:
    """Load the host while the body runs; yields what the load is, in words. `cores`: that many
    busy-loop processes (default: one per core). `compile`: ktree's own compile pool kept full
    (every slot builds a distinct softmax solution of the backend, again and again)."""
    import os
    import signal
    import subprocess
    import sys

    if kind == "cores":
        n = cores or os.cpu_count() or 1
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
        try:
            yield f"{n} busy loops"
        finally:
            for p in procs:
                p.send_signal(signal.SIGKILL)
                p.wait()
        return
    from engine.problems import load_problem

    problem = load_problem("softmax")
    source = (_SCRIPTED / evaluator.backend / "naive_1.py").read_text()
    stop = asyncio.Event()
    built = [0]

    async def builder(slot: int) -> None:
        while not stop.is_set():
            unique = f"# load {uuid.uuid4().hex}\n{source}"  # a new build dir every time
            job = evaluator.job(problem.path, unique, problem.sizes_for(evaluator.backend), flops=None,
                                bytes=None, mode="compile")
            await evaluator.build(job)
            built[0] += 1

    tasks = [asyncio.create_task(builder(i)) for i in range(evaluator.compile_workers)]
    await asyncio.sleep(5.0)  # let the builds get going
    try:
        yield f"compile pool busy ({evaluator.compile_workers} builds at once)"
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
