"""The sessions screen: its columns at 160 and 80 columns (a suite with a long name), footers
that fit, delete with confirmation, compare two sessions, resume only an interrupted one, marks.
Fake sessions throughout: nothing compiles."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from textual.widgets import DataTable

from engine.domain import best_variant
from tests.tui_helpers import app_on, fake_db, footer_fits, suite_db, table_row, two_sessions, whole_columns
from tui.screens.compare import CompareScreen, best_per_round
from tui.screens.dialogs import Confirm
from tui.screens.sessions import SessionsScreen


async def test_sessions_with_a_suite_at_160_columns(tmp_path: Path):
    db, suite, members = await suite_db(tmp_path / "k.db")
    async with app_on(db, size=(160, 30)) as (app, pilot):
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        table = screen.query_one("#sessions", DataTable)
        assert table.columns["problem"].content_width <= 24
        assert whole_columns(table) == [str(c.key.value) for c in table.ordered_columns]  # none cut
        row = [str(c) for c in table.get_row(f"suite-{suite}")]
        assert row[1].startswith("suite level1") and row[1].endswith("…")
        started = row[6]
        assert len(started) == len("2026-01-01 12:00") and started[4] == "-"
        assert " correct · fast_1 " in row[-1]  # its score, in short
        assert "fast_1 " in str(screen.query_one("#banner").content)  # the whole line, on the suite
        footer_fits(screen)
        await pilot.press("q")


async def test_sessions_at_80x24_keep_status_and_best(tmp_path: Path):
    db, suite, members = await suite_db(tmp_path / "k.db")
    async with app_on(db, size=(80, 24)) as (app, pilot):
        screen = app.screen
        table = screen.query_one("#sessions", DataTable)
        assert whole_columns(table)[:4] == ["id", "problem", "status", "best"]
        assert str(table.get_cell(str(members[0]), "best")) == "1.50x"
        footer_fits(screen)
        shown = {b.binding.id for b in screen.active_bindings.values() if b.binding.show}
        assert {"sessions.new", "sessions.resume", "help", "quit"} <= shown
        await pilot.press("q")


async def test_sessions_columns_delete_with_confirmation(tmp_path: Path):
    db, a, b = await two_sessions(tmp_path / "k.db")
    async with app_on(db, size=(140, 30)) as (app, pilot):
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        table = screen.query_one("#sessions", DataTable)
        assert table.get_row_at(0) == table.get_row(str(b))  # newest first
        row = table_row(table, str(b))
        assert {k: row[k] for k in ("problem", "strategy", "models", "variants", "status", "duration")} == {
            "problem": "SCRIPTED softmax", "strategy": "tree", "models": "synthetic", "variants": "44",
            "status": "finished", "duration": "11m00s"}
        assert row["best"].endswith("x") and row["cost"].startswith("$")
        await pilot.press("D")
        assert isinstance(app.screen, Confirm)
        await pilot.press("n")
        await pilot.pause()
        assert table.row_count == 2
        await pilot.press("m", "D", "y")  # marked for compare, then deleted: no longer marked
        await pilot.pause()
        assert table.row_count == 1 and str(b) not in table.rows and b not in screen.marked
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT COUNT(*) FROM nodes WHERE session_id = ?", (b,)).fetchone() == (0,)
            assert conn.execute("SELECT COUNT(*) FROM llm_calls WHERE session_id = ?", (b,)).fetchone() == (0,)
            assert conn.execute("SELECT COUNT(*) FROM nodes WHERE session_id = ?", (a,)).fetchone()[0] > 0
        await pilot.press("q")


async def test_two_marked_sessions_are_drawn_ahead_and_c_shows_them_as_drawn(tmp_path: Path):
    """The second `m` has the compare screen built ahead read and draw the pair (while a person
    looks from `m` to `c`); `c` then shows that screen without reading them again. Marks changed
    since: the new pair is read when `c` comes."""
    db, a, b = await two_sessions(tmp_path / "k.db")
    async with app_on(db, size=(140, 40)) as (app, pilot):
        await pilot.press("m", "down", "m")
        for _ in range(200):  # the preparation: after a short delay, in a worker
            await pilot.pause(0.02)
            spare = app._spare_compare
            if spare is not None and spare.ids == tuple(app.screen.marked) and spare.data:
                break
        prepared = app._spare_compare
        assert prepared is not None and prepared.ids == tuple(app.screen.marked) and not prepared.live()
        takes: list[tuple[int, int]] = []
        original = prepared.take

        async def counted(x: int, y: int) -> None:
            takes.append((x, y))
            await original(x, y)

        prepared.take = counted  # type: ignore[method-assign]
        await pilot.press("c")
        await pilot.pause()
        assert app.screen is prepared and takes == []  # shown as drawn ahead
        assert all("class ModelNew" in str(prepared.code_view(s).content) for s in (a, b))
        await pilot.press("escape")
        await pilot.press("q")


async def test_compare_two_sessions(tmp_path: Path):
    db, a, b = await two_sessions(tmp_path / "k.db")
    with sqlite3.connect(db) as conn:  # b's fastest variant pruned: never its best (best_variant)
        conn.execute("UPDATE nodes SET pruned = 1 WHERE id = (SELECT id FROM nodes WHERE session_id = ?"
                     " AND status = 'correct' ORDER BY speedup DESC LIMIT 1)", (b,))
    async with app_on(db, size=(140, 40)) as (app, pilot):
        await pilot.press("c")  # nothing marked: refused
        assert isinstance(app.screen, SessionsScreen)
        await pilot.press("m", "down", "m", "c")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        store = app.store
        for sid in (a, b):
            nodes = await store.nodes.of(sid)
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
        # columns in marked order
        tokens = [int((await store.calls.totals(sid))["tokens"]) for sid in screen.ids]
        assert rows["tokens"] == [str(t) for t in tokens]  # input + output + reasoning, the one total
        await pilot.press("escape")
        assert isinstance(app.screen, SessionsScreen)
        await pilot.press("q")


async def test_resume_only_an_interrupted_session(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 20)
    async with app_on(db, size=(140, 30)) as (app, pilot):
        await pilot.press("R")
        await pilot.pause()
        assert isinstance(app.screen, SessionsScreen)
        assert any("only an interrupted one resumes" in n.message for n in app._notifications)
        await pilot.press("q")


async def test_an_interrupted_session_under_the_cursor_is_drawn_ahead_and_shown_as_drawn(tmp_path: Path):
    """The cursor resting on an interrupted session has the search screen built ahead read and
    draw it (for R, or Enter); the key then shows that screen, its recorded tree already in it."""
    db, sid = await fake_db(tmp_path / "k.db", 20, status="interrupted")
    async with app_on(db, size=(140, 40)) as (app, pilot):
        for _ in range(250):
            await pilot.pause(0.02)
            if app._prepared is not None and app._prepared.model.nodes:
                break
        prepared = app._prepared
        assert prepared is not None and prepared.model.session_id == sid and len(prepared.tree_nodes) >= 2
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is prepared and app._prepared is None
        assert prepared.selected is not None and prepared.code_text.plain.strip()
        await pilot.press("q")


async def test_a_marked_session_shows_its_id_too(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 12)
    async with app_on(db, size=(120, 24)) as (app, pilot):
        await pilot.press("m")
        await pilot.pause()
        table = app.screen.query_one("#sessions")
        assert str(table.get_cell(str(sid), "id")) == f"▶ {sid}"
        assert table.columns["id"].content_width >= len(f"▶ {sid}")  # not cut to the mark
        await pilot.press("q")


async def test_a_sessions_duration_is_the_engines_run_time_as_its_progress_pane_says(tmp_path: Path):
    """One session, one duration: the list reads the run time the engine recorded (over all its
    runs), as the search's progress pane does, not the wall from its creation to its end."""
    db, a, b = await two_sessions(tmp_path / "k.db")
    with sqlite3.connect(db) as conn:  # (as the engine records it: Store.sessions.set_run_s)
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (f"session_run_s:{b}", "108.0"))
    async with app_on(db, size=(140, 30)) as (app, pilot):
        table = app.screen.query_one("#sessions", DataTable)
        assert table_row(table, str(b))["duration"] == "1m48s"  # its wall: 11m00s
        assert table_row(table, str(a))["duration"] != "1m48s"
        await pilot.press("q")


async def test_every_scripted_session_is_marked_at_every_width(tmp_path: Path):
    """Issue 56, item 13: the SCRIPTED mark was in the models column, the first to go at 80 columns
    and (beside a suite's score) at 120: docs/scripted.md says every screen marks such a run."""
    from tests.tui_helpers import shown_text

    db, suite, members = await suite_db(tmp_path / "k.db")
    with sqlite3.connect(db) as conn:  # one session of a real provider: unmarked
        conn.execute("UPDATE sessions SET provider = 'openai', models = '[\"openai:gpt-5\"]' WHERE id = ?",
                     (members[2],))
        scripted = [r[0] for r in conn.execute("SELECT id FROM sessions WHERE provider = 'scripted'")]
    for size in ((80, 24), (120, 35), (160, 45)):
        async with app_on(db, size=size) as (app, pilot):
            table = app.screen.query_one("#sessions", DataTable)
            assert "problem" in whole_columns(table), size
            for sid in scripted:
                assert "SCRIPTED" in str(table.get_cell(str(sid), "problem")), (size, sid)
            assert "SCRIPTED" not in str(table.get_cell(str(members[2]), "problem"))
            assert shown_text(app, table).count("SCRIPTED") == len(scripted), size  # drawn, not only held
            await pilot.press("q")


async def test_deleting_a_suite_problem_says_so_and_comparing_two_problems_is_noted(tmp_path: Path):
    """Issue 56, item 14: the delete dialog of a suite's problem did not mention the suite (whose
    score the delete halves), and compare took two different problems without a note."""
    db, suite, members = await suite_db(tmp_path / "k.db")
    async with app_on(db, size=(160, 40)) as (app, pilot):
        screen = app.screen
        table = screen.query_one("#sessions", DataTable)
        table.move_cursor(row=table.get_row_index(str(members[0])))  # relu, finished, in the suite
        await pilot.press("D")
        assert isinstance(app.screen, Confirm)
        assert f"It is suite S{suite}'s relu: the suite then counts that problem as not started" \
               in app.screen.question
        await pilot.press("n")
        await pilot.pause()
        plain = next(k for k in table.rows if k.value.isdigit() and int(k.value) not in members).value
        await pilot.press("m")  # relu
        table.move_cursor(row=table.get_row_index(plain))  # softmax, not in the suite
        await pilot.press("D")
        assert "suite" not in app.screen.question  # type: ignore[attr-defined]
        await pilot.press("n", "m", "c")
        await pilot.pause()
        assert isinstance(app.screen, CompareScreen)  # still compared, with a note
        said = [n.message for n in app._notifications]
        assert "two different problems (relu and softmax): each speedup is against its own reference" in said
        await pilot.press("escape", "q")
