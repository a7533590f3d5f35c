"""Small records for the TUI tests: a node, a verdict, a suite of two sessions."""

from __future__ import annotations

from pathlib import Path

from engine.domain import Node
from engine.evaluate.verdict import Verdict


def node(nid: int, parent: int | None, kind: str = "variant", status: str = "generating",
         speedup: float | None = None, rnd: int = 1, source: str = "") -> Node:
    return Node(nid, 7, parent, kind, 0 if kind == "root" else rnd, f"n{nid}", "", source, status, "llm",
                speedup, None)


def verdict(speedup: float | None, status: str = "correct") -> Verdict:
    return Verdict(status=status, speedup_eager=speedup, speedup_compile=speedup and speedup * 0.8,
                   time_ms=1.0)


async def suite_of_two(path: Path) -> tuple[Path, int, float]:
    """A finished suite of two problems with evaluations: (db, suite id, its geomean speedup)."""
    from engine.record.store import Store
    from engine.search.suite import scores, suite_results
    from tests.fake_session import T0, write_fake_session

    store = await Store.open(path)
    try:
        paths = ["problems/level1/softmax.py", "problems/level1/relu.py"]
        suite = await store.suites.create(name="level1-two", problems=paths, config={})
        for seed, spec in enumerate(paths):
            sid = await write_fake_session(store, 20, seed=seed, t0=T0 + 700 * seed)
            await store.conn.execute(
                "UPDATE sessions SET suite_id = ?, problem = ?, problem_path = ? WHERE id = ?",
                (suite, Path(spec).stem, spec, sid))
        await store.conn.execute("UPDATE suites SET created_at = ?, finished_at = ?, status = 'finished'"
                                 " WHERE id = ?", (T0, T0 + 3725, suite))
        await store.conn.commit()
        geo = scores(await suite_results(store, suite))["geomean_speedup_eager"]
    finally:
        await store.close()
    assert geo is not None
    return path, suite, geo
