"""Sessions screen (delete, compare, resume, new search), following a session from the DB,
the LLM pane, and the compact layout at 80x24 — on deterministic fake sessions (no compile)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from textual.widgets import DataTable, RichLog, Select, Static, Tree

from engine.domain import best_variant
from engine.evaluate.verdict import Verdict
from engine.store import Store
from tests.conftest import run_ktree
from tests.fake_session import T0, write_fake_session
from tests.tui_helpers import fake_db, label_of, log_text, table_row, wait_until
from tui.app import KtreeApp
from tui.screens.compare import CompareScreen, best_per_round
from tui.screens.dialogs import Confirm
from tui.screens.new_search import NewSearchScreen
from tui.screens.search import SearchScreen
from tui.screens.sessions import SessionsScreen
from tui.widgets.code_pane import CodePane
from tui.widgets.tree import SearchTree


async def two_sessions(path: Path) -> tuple[Path, int, int]:
    store = await Store.open(path)
    a = await write_fake_session(store, 40)
    b = await write_fake_session(store, 60, seed=3, t0=T0 + 3600)
    await store.close()
    return path, a, b


async def test_sessions_columns_delete_with_confirmation(tmp_path: Path):
    db, a, b = await two_sessions(tmp_path / "k.db")
    app = KtreeApp(db_path=db)
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        table = screen.query_one("#sessions", DataTable)
        assert table.get_row_at(0) == table.get_row(str(b))  # newest first
        row = table_row(table, str(b))
        assert {k: row[k] for k in ("problem", "strategy", "models", "variants", "status", "duration")} == {
            "problem": "softmax", "strategy": "tree", "models": "SCRIPTED synthetic", "variants": "44",
            "status": "finished", "duration": "11m00s"}
        assert row["best"].endswith("x") and row["cost"].startswith("$")
        await pilot.press("D")
        assert isinstance(app.screen, Confirm)
        await pilot.press("n")
        await pilot.pause()
        assert table.row_count == 2
        await pilot.press("D", "y")
        await pilot.pause()
        assert table.row_count == 1 and str(b) not in table.rows
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT COUNT(*) FROM nodes WHERE session_id = ?", (b,)).fetchone() == (0,)
            assert conn.execute("SELECT COUNT(*) FROM llm_calls WHERE session_id = ?", (b,)).fetchone() == (0,)
            assert conn.execute("SELECT COUNT(*) FROM nodes WHERE session_id = ?", (a,)).fetchone()[0] > 0
        await pilot.press("q")


async def test_compare_two_sessions(tmp_path: Path):
    db, a, b = await two_sessions(tmp_path / "k.db")
    with sqlite3.connect(db) as conn:  # b's fastest variant pruned: never its best (best_variant)
        conn.execute("UPDATE nodes SET pruned = 1 WHERE id = (SELECT id FROM nodes WHERE session_id = ?"
                     " AND status = 'correct' ORDER BY speedup DESC LIMIT 1)", (b,))
    app = KtreeApp(db_path=db)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        await pilot.press("c")  # nothing marked: refused
        assert isinstance(app.screen, SessionsScreen)
        await pilot.press("m", "down", "m", "c")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        store = app.store
        for sid in (a, b):
            nodes = await store.nodes(sid)
            rounds = best_per_round(nodes)
            assert list(rounds.values()) == sorted(rounds.values())  # best so far never drops
            fastest = max((n for n in nodes if n.status == "correct"), key=lambda n: n.speedup)
            assert rounds[max(rounds)] == fastest.speedup
            best = best_variant(nodes)
            assert best is not None and (best == fastest) == (sid == a)
            shown = str(screen.code_view(sid).content)
            assert f"node {best.id}, {best.speedup:.2f}x" in shown and "class ModelNew" in shown
        table = screen.query_one("#compare-table", DataTable)
        rows = {table.get_row_at(i)[0]: table.get_row_at(i)[1:] for i in range(table.row_count)}
        assert "cost" in rows and "best after round 1" in rows
        tokens = [int((await store.llm_totals(sid))["tokens"]) for sid in screen.ids]  # columns in marked order
        assert rows["tokens"] == [str(t) for t in tokens]  # input + output + reasoning, the one total
        await pilot.press("escape")
        assert isinstance(app.screen, SessionsScreen)
        await pilot.press("q")


async def test_resume_only_an_interrupted_session(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 20)
    app = KtreeApp(db_path=db)
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.pause()
        await pilot.press("R")
        await pilot.pause()
        assert isinstance(app.screen, SessionsScreen)
        assert any("only an interrupted one resumes" in n.message for n in app._notifications)
        await pilot.press("q")


async def test_new_search_form_shows_the_estimate_and_checks_fields(tmp_path: Path):
    db, _ = await fake_db(tmp_path / "k.db", 20)
    app = KtreeApp(db_path=db)
    async with app.run_test(size=(120, 50)) as pilot:
        await pilot.pause()
        await pilot.press("n")
        await pilot.pause()
        form = app.screen
        assert isinstance(form, NewSearchScreen)
        form.query_one("#provider", Select).value = "scripted"
        await pilot.pause()
        estimate = str(form.query_one("#estimate", Static).content)
        assert "Estimate for a tree search: 2 rounds x 3 ideas x 2 variants" in estimate
        assert "LLM calls: 3 idea + 18 implement" in estimate and "scripted" in estimate
        form.query_one("#rounds").value = "0"
        await pilot.pause()
        assert "rounds: a whole number of at least 1" in str(form.query_one("#estimate", Static).content)
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert "rounds: a whole number" in str(form.query_one("#form-error", Static).content)
        assert isinstance(app.screen, NewSearchScreen)
        form.query_one("#rounds").value = "1"
        form.query_one("#path").value = str(tmp_path / "missing.py")
        await pilot.press("ctrl+r")
        await pilot.pause(0.5)
        assert "missing.py" in str(form.query_one("#form-error", Static).content)
        await pilot.press("q")


async def test_follow_shows_what_another_process_writes(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 20, status="running")
    app = KtreeApp(db_path=db, session_id=sid, follow=True)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SearchScreen) and screen.model.follow
        assert "following" in str(screen.query_one("#banner", Static).content)
        idea = next(n for n in screen.model.nodes.values() if n.kind == "idea")
        # The engine, elsewhere, adds a variant, then evaluates it, then ends the session.
        other = await Store.open(db)
        node = await other.add_node(session_id=sid, parent_id=idea.id, kind="variant", round=idea.round,
                                    status="compiling", title=idea.title, source="class ModelNew: pass\n")
        tree = screen.query_one("#tree", SearchTree)
        await wait_until(pilot, lambda: node.id in tree.items)
        assert f"#{node.id}" in label_of(tree, node.id) and "compiling" in label_of(tree, node.id)
        verdict = Verdict(status="correct", max_abs_err=1e-6, time_ms=0.1, ref_eager_ms=2.0,
                          speedup_eager=20.0)
        await other.add_evaluation(node_id=node.id, session_id=sid, verdict=verdict)
        await other.update_node(node.id, status="correct", speedup=20.0, time_ms=0.1)
        await other.update_session(sid, status="finished", finished_at=T0 + 10)
        await other.close()
        await wait_until(pilot, lambda: screen.model.status == "finished" and screen.model.best_id == node.id)
        label = label_of(tree, node.id)
        assert "20.00x" in label and "correct" in label and "★ best" in label
        assert screen.query_one("#timings", DataTable).get_cell(str(node.id), "speedup") == "20x"
        assert str(screen.query_one("#status-line", Static).content) == f"session {sid} · finished"
        await pilot.press("q")


async def test_llm_pane_shows_the_calls_of_the_node(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 20)
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        vid = next(n.id for n in screen.model.nodes.values() if n.kind == "variant")
        screen.select_node(vid)
        screen.query_one("#details").active = "tab-llm"
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        text = log_text(screen.query_one("#llm", RichLog))
        assert "implement · scripted:synthetic · ok" in text
        assert "tokens in 1200 · out 800" in text and "$0.0021" in text and "1.50 s" in text
        assert "── prompt ──" in text and "Implement idea" in text and "class ModelNew" in text
        await pilot.press("q")


async def test_compact_at_80x24(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 40)
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert screen.has_class("compact")
        assert not screen.query_one("#details").display and not screen.query_one("#plot").display
        assert screen.query_one("#tree").region.height >= 8 and screen.query_one("#code").region.height >= 5
        await pilot.press("t")  # the details come back on demand
        assert screen.query_one("#details").display
        await pilot.resize_terminal(160, 50)
        await pilot.pause()
        assert not screen.has_class("compact")
        await pilot.press("q")


def test_show_follow_bad_session_is_one_line(tmp_path: Path):
    db = tmp_path / "k.db"
    sqlite3.connect(db).close()
    proc = run_ktree("--db", str(db), "show", "7", "--follow", timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "ktree: error:" in proc.stderr and "Traceback" not in proc.stderr


async def test_code_colours_follow_the_theme(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 20)
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        screen.select_node(next(n.id for n in screen.model.nodes.values() if n.kind == "variant"))
        code = screen.query_one("#code", CodePane)
        dark = {str(span.style) for span in code.text.spans}
        app.theme = "textual-light"
        await pilot.pause()
        light = {str(span.style) for span in code.text.spans}
        assert dark and light and dark != light
        await pilot.press("q")


async def test_every_status_has_a_glyph_and_an_unknown_one_is_neutral(tmp_path: Path):
    from engine.domain import NODE_STATUSES
    from tui.widgets.status import GLYPHS, NEUTRAL

    assert set(NODE_STATUSES) <= set(GLYPHS)
    db, sid = await fake_db(tmp_path / "k.db", 20)
    with sqlite3.connect(db) as conn:
        vid = conn.execute("SELECT MAX(id) FROM nodes WHERE kind = 'variant'").fetchone()[0]
        conn.execute("UPDATE nodes SET status = 'from-a-newer-ktree' WHERE id = ?", (vid,))
    app = KtreeApp(db_path=db, session_id=sid)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        screen.select_node(vid)
        await pilot.pause()
        assert label_of(screen.query_one("#tree", Tree), vid).startswith(f"{NEUTRAL} #{vid} ")
        assert "from-a-newer-ktree" in str(screen.query_one("#verdict", Static).content)
        await pilot.press("q")
