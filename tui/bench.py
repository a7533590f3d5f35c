"""`ktree bench tui`: how fast the search screen answers on a large synthetic session.

Writes a synthetic session (tui.fake) of N nodes into a temporary DB, opens it in the app (headless,
160x50), then times key presses: from the key being handed to the app (as the terminal driver does)
until every handler has run, the messages they posted (and theirs) are processed, and the frame
is composed and written. Pilot's own press/pause are not used for timing: they sleep 20 ms+ on
purpose to let the app go idle.
"""

from __future__ import annotations

import asyncio
import random
import resource
import statistics
import tempfile
import time
from pathlib import Path

TARGET_MS = 50.0
TARGET_RSS_MB = 400.0


def _rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _run(nodes: int, moves: int) -> dict[str, object]:
    from textual import events
    from textual.widgets import DataTable

    from engine.store import Store
    from tui.app import KtreeApp
    from tui.fake import write_fake_session
    from tui.screens.search import SearchScreen

    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        t = time.perf_counter()
        store = await Store.open(db)
        sid = await write_fake_session(store, nodes, ideas=5, variants=4, top=10)
        out["nodes"] = len(await store.nodes(sid))
        await store.close()
        out["write_s"] = time.perf_counter() - t

        app = KtreeApp(db_path=db, session_id=sid)
        t = time.perf_counter()
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, SearchScreen)
            out["open_s"] = time.perf_counter() - t
            out["tree_items"] = len(screen.tree_nodes)

            async def timed(keys: list[str]) -> list[float]:
                samples = []
                for key in keys:
                    await pilot.pause()  # start from a quiet app
                    t0 = time.perf_counter()
                    event = events.Key(key, None)
                    event.set_sender(app)
                    app._driver.send_message(event)  # as the terminal driver delivers a key
                    for _ in range(3):  # the key, the messages its handlers post, and theirs
                        await pilot._wait_for_screen()
                    app.screen._on_timer_update()  # compose and write the frame now
                    samples.append((time.perf_counter() - t0) * 1000)
                return samples

            # Down through the tree, opening collapsed nodes on the way (right = expand).
            rng = random.Random(0)
            keys = [("right" if rng.random() < 0.2 else "down") for _ in range(moves)]
            out["tree_ms"] = await timed(keys)
            # Select nodes from the timings table: each row selects its node (ancestors opened).
            table = screen.query_one("#timings", DataTable)
            table.focus()
            await pilot.pause()
            out["table_ms"] = await timed(["down"] * (moves // 2) + ["pagedown"] * 10)
            out["selected"] = screen.selected
            out["tree_items_after"] = len(screen.tree_nodes)
            out["rss_mb"] = _rss_mb()
            out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            await pilot.press("q")
    return out


def bench_tui(nodes: int = 5000, moves: int = 200) -> int:
    r = asyncio.run(_run(nodes, moves))
    rows = []
    for name, key in (("tree cursor (down/right)", "tree_ms"), ("select via timings table", "table_ms")):
        s = sorted(r[key])  # type: ignore[arg-type]
        rows.append((name, len(s), statistics.median(s), s[int(len(s) * 0.9)], s[-1]))
    print(f"ktree bench tui: synthetic session of {r['nodes']} nodes (written in {r['write_s']:.2f} s),"
          f" opened in {r['open_s']:.2f} s ({r['tree_items']} tree items made at open,"
          f" {r['tree_items_after']} after the moves)")
    print()
    print("| action | presses | median ms | p90 ms | max ms |")
    print("| --- | --- | --- | --- | --- |")
    for name, n, med, p90, mx in rows:
        print(f"| {name} | {n} | {med:.1f} | {p90:.1f} | {mx:.1f} |")
    print()
    med = max(row[2] for row in rows)
    rss = max(float(r["rss_mb"]), float(r["peak_rss_mb"]))  # type: ignore[arg-type]
    verdict = "ok" if med < TARGET_MS else "MISSED"
    print(f"key-to-render median {med:.1f} ms (target < {TARGET_MS:g}): {verdict}")
    print(f"RSS {float(r['rss_mb']):.0f} MB, peak {float(r['peak_rss_mb']):.0f} MB"  # type: ignore[arg-type]
          f" (target < {TARGET_RSS_MB:g}): {'ok' if rss < TARGET_RSS_MB else 'MISSED'}")
    return 0
