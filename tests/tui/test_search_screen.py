"""The search screen on a session read from the DB: following another process' writes, the LLM
pane, the compact layout at 80x24, colours and glyphs, the header's isolation level, why a node
waits, the banner and the line above the code at any width, a first cold build said on screen, the
timings' interval column. Fake sessions throughout: nothing compiles."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static, Tree

from engine.evaluate.verdict import Verdict
from engine.record.store import Store
from tests.conftest import run_ktree
from tests.fake_session import T0
from tests.tui_helpers import Forever, app_on, fake_db, label_of, shown_text, wait_until
from tui.model import PCH_DONE, PCH_NOTE
from tui.screens.search import SearchScreen
from tui.widgets.code_pane import CodePane
from tui.widgets.llm import LLMPane
from tui.widgets.timings import COLUMNS
from tui.widgets.tree import SearchTree


async def test_follow_shows_what_another_process_writes(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 20, status="running")
    async with app_on(db, session_id=sid, follow=True, size=(160, 50)) as (app, pilot):
        screen = app.screen
        assert isinstance(screen, SearchScreen) and screen.model.follow
        assert "following" in str(screen.query_one("#banner", Static).content)
        idea = next(n for n in screen.model.nodes.values() if n.kind == "idea")
        # The engine, elsewhere, adds a variant, then evaluates it, then ends the session.
        other = await Store.open(db)
        node = await other.nodes.add(session_id=sid, parent_id=idea.id, kind="variant", round=idea.round,
                                    status="compiling", title=idea.title, source="class ModelNew: pass\n")
        tree = screen.query_one("#tree", SearchTree)
        await wait_until(pilot, lambda: node.id in tree.items)
        assert f"#{node.id}" in label_of(tree, node.id) and "compiling" in label_of(tree, node.id)
        verdict = Verdict(status="correct", max_abs_err=1e-6, time_ms=0.1, ref_eager_ms=2.0,
                          speedup_eager=20.0)
        await other.evaluations.add(node_id=node.id, session_id=sid, verdict=verdict)
        await other.nodes.update(node.id, status="correct", speedup=20.0, time_ms=0.1)
        await other.sessions.update(sid, status="finished", finished_at=T0 + 10)
        await other.close()
        await wait_until(pilot, lambda: screen.model.status == "finished" and screen.model.best_id == node.id)
        label = label_of(tree, node.id)
        assert "20.00x" in label and "correct" in label and "★ best" in label
        assert screen.query_one("#timings", DataTable).get_cell(str(node.id), "speedup") == "20x"
        assert str(screen.query_one("#status-line", Static).content) == f"session {sid} · finished"
        await pilot.press("q")


async def test_llm_pane_shows_the_calls_of_the_node(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 20)
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
        screen = app.screen
        vid = next(n.id for n in screen.model.nodes.values() if n.kind == "variant")
        screen.select_node(vid)
        screen.query_one("#details").active = "tab-llm"
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        llm = screen.query_one("#llm", LLMPane)
        text = llm.content.plain  # what it shows; it draws the lines in view
        assert llm.render_line(0).text.startswith(f"#{vid}: the call(s) that wrote this code")
        assert "implement · scripted:synthetic · ok" in text
        assert "tokens in 1200 · out 800" in text and "$0.0021" in text and "1.50 s" in text
        assert "── prompt ──" in text and "Implement idea" in text and "class ModelNew" in text
        await pilot.press("q")


async def test_compact_at_80x24(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 40)
    async with app_on(db, session_id=sid, size=(80, 24)) as (app, pilot):
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
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
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
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
        screen = app.screen
        screen.select_node(vid)
        await pilot.pause()
        assert label_of(screen.query_one("#tree", Tree), vid).startswith(f"{NEUTRAL} #{vid} ")
        assert "from-a-newer-ktree" in str(screen.query_one("#verdict", Static).content)
        await pilot.press("q")


async def test_the_header_says_the_isolation_level(tmp_path: Path):
    from textual.widgets._header import HeaderTitle

    from engine.evaluate.host.sandbox import Sandbox

    for level, shown in (("basic", "isolation: basic (no filesystem or network isolation)"),
                         ("strict", "isolation: strict")):
        search = Forever()
        search.evaluator.sandbox = Sandbox(level)
        if level == "strict":  # as where bubblewrap runs (the level is resolved when asked)
            search.evaluator.sandbox = type("Strict", (), {"level": "strict"})()
        async with app_on(tmp_path / f"{level}.db", size=(160, 40),
                          search_factory=lambda store, bus, s=search: s) as (app, pilot):
            assert shown in app.screen.sub_title
            assert shown in str(app.screen.query_one(HeaderTitle).render())
            await pilot.press("q", "y")


async def test_why_it_waits_follows_the_queues(tmp_path: Path):
    import sqlite3
    from dataclasses import replace

    from engine.record.events import NodeUpdated

    db, sid = await fake_db(tmp_path / "k.db", 20, status="running")
    with sqlite3.connect(db) as conn:
        vid = conn.execute("SELECT MAX(id) FROM nodes WHERE kind = 'variant'").fetchone()[0]
        conn.execute("DELETE FROM evaluations WHERE node_id = ?", (vid,))
        conn.execute("UPDATE nodes SET status = 'waiting', speedup = NULL WHERE id = ?", (vid,))
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
        screen = app.screen
        screen.select_node(vid)
        await pilot.pause()
        verdict = screen.query_one("#verdict")
        assert "builds queued or running: 0" in str(verdict.content)
        others = [n for n in screen.model.nodes.values() if n.kind == "variant" and n.id != vid][:5]
        for queued in (5, 2):  # other variants' builds queue, then end
            for i, n in enumerate(others):
                screen.receive(NodeUpdated(replace(n, status="queued" if i < queued else n.status)))
            await pilot.pause()
            assert f"builds queued or running: {queued}" in str(verdict.content)
        await pilot.press("q")


async def test_a_past_session_says_the_isolation_it_ran_under(tmp_path: Path):
    import json
    import sqlite3

    from textual.widgets._header import HeaderTitle

    db, sid = await fake_db(tmp_path / "k.db", 20)
    with sqlite3.connect(db) as conn:  # as `ktree run` records it (its placement)
        [(config,)] = conn.execute("SELECT config FROM sessions WHERE id = ?", (sid,)).fetchall()
        conn.execute("UPDATE sessions SET config = ? WHERE id = ?",
                     (json.dumps({**json.loads(config), "placement": {"isolation": "basic"}}), sid))
    async with app_on(db, session_id=sid, size=(160, 40)) as (app, pilot):
        shown = "ran with isolation: basic (no filesystem or network isolation)"  # not this view's
        assert shown in app.screen.sub_title
        assert shown in str(app.screen.query_one(HeaderTitle).render())
    with sqlite3.connect(db) as conn:  # a record from before the placement: the config's own key
        conn.execute("UPDATE sessions SET config = ? WHERE id = ?",
                     (json.dumps({**json.loads(config), "isolation": "strict"}), sid))
    async with app_on(db, session_id=sid, size=(160, 40)) as (app, pilot):
        assert "ran with isolation: strict" in app.screen.sub_title


async def test_the_line_above_the_code_holds_a_long_reference_header(tmp_path: Path):
    import sqlite3

    from textual.widgets import Static

    db, sid = await fake_db(tmp_path / "k.db", 20)
    title = ("Conv2d (NCHW, fp32): a 3x3 convolution, stride 1, padding 1, of a batch of images with"
             " many input channels into many output channels; " * 2 + "the last words END")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE nodes SET title = ? WHERE kind = 'root'", (title,))
    async with app_on(db, session_id=sid, size=(160, 48)) as (app, pilot):
        screen = app.screen
        screen.select_node(next(n.id for n in screen.model.nodes.values() if n.kind == "root"))
        await pilot.pause()
        idea = screen.query_one("#idea", Static)
        lines = [strip.text for strip in idea.render_lines(idea.region.reset_offset)]
        assert len(title) > 2 * idea.region.width  # more than two lines' worth
        assert "END" in "".join(lines), lines  # wrapped onto more lines, not cut after two
        assert " ".join(" ".join(lines).split()).endswith("(the file's own are for the GPU)"), lines  # whole
        assert idea.region.height <= 6


CONV2D_SIZES = {"batch_size": 2, "in_channels": 3, "out_channels": 96, "kernel_size": 11, "stride": 4,
                "padding": 2, "height": 128, "width": 160}


async def test_a_long_banner_keeps_the_marks_problem_and_mode_in_sight(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 20)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sessions SET problem = 'conv2d', problem_path = 'problems/level1/conv2d.py',"
                     " sizes = ? WHERE id = ?", (json.dumps(CONV2D_SIZES), sid))
    for size in ((80, 24), (160, 48)):
        async with app_on(db, session_id=sid, size=size) as (app, pilot):
            await wait_until(pilot, lambda app=app: app.screen.query("#banner") and "conv2d" in str(
                app.screen.query_one("#banner", Static).content))
            await pilot.pause()
            banner = app.screen.query_one("#banner", Static)
            line = shown_text(app, banner)
            assert line.startswith("SCRIPTED CPU conv2d · scripted · read-only"), line
            assert line.endswith("cpu sizes: batch_size=2 in_channels=3 out_channels=96 kernel_size=11"
                                 " stride=4 padding=2 height=128 width=160"), line  # (80: wrapped)
            assert banner.region.height == (1 if size[0] >= 160 else 3)
            assert "canned answers" in str(banner.content)  # the whole line, for whoever reads it
            await pilot.press("q")


async def test_following_a_first_cold_build_shows_it_in_the_tree_and_the_status_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KTREE_CACHE_DIR", str(tmp_path / "empty-cache"))  # no precompiled header yet
    db, sid = await fake_db(tmp_path / "k.db", 12, status="running")
    with sqlite3.connect(db) as conn:  # nothing built yet: the engine, elsewhere, is about to start
        conn.execute("DELETE FROM evaluations WHERE session_id = ?", (sid,))
        conn.execute("UPDATE nodes SET status = 'queued', speedup = NULL WHERE kind = 'variant'")
        [vid] = conn.execute("SELECT MIN(id) FROM nodes WHERE kind = 'variant'").fetchone()
    async with app_on(db, session_id=sid, follow=True, size=(160, 50)) as (app, pilot):
        screen = app.screen
        assert isinstance(screen, SearchScreen) and screen.model.follow
        tree = screen.query_one("#tree", SearchTree)
        other = await Store.open(db)
        await other.nodes.update(vid, status="compiling")
        await wait_until(pilot, lambda: "compiling" in label_of(tree, vid))
        assert "building the precompiled header (first build, ~1 min)" in label_of(tree, vid)
        status = screen.query_one("#status-line", Static)
        assert PCH_NOTE in str(status.content)
        await other.nodes.update(vid, status="waiting")
        await other.close()
        await wait_until(pilot, lambda: "waiting" in label_of(tree, vid))
        assert "precompiled" not in label_of(tree, vid)
        assert PCH_DONE in str(status.content)
        await pilot.press("q")


def test_the_llm_pane_shows_a_prompt_from_its_start_and_says_where_it_is_cut():
    from tui.widgets.llm import PROMPT_CHARS, llm_text

    prompt = "You are an expert CUDA engineer. " + "x" * (PROMPT_CHARS + 500) + " memory-bound\"],"
    call = {"purpose": "idea", "provider": "scripted", "model": "m", "status": "ok", "input_tokens": 1,
            "output_tokens": 1, "reasoning_tokens": 0, "cost_usd": 0.0, "latency_s": 0.1, "attempts": 1,
            "prompt": prompt, "reply": "short reply"}
    text = llm_text(3, "why", [call]).plain
    body = text.split("── prompt ──\n", 1)[1]
    assert body.startswith("You are an expert CUDA engineer.")
    assert f"… {len(prompt) - PROMPT_CHARS:,} more characters of {len(prompt):,} not shown" in body
    assert "short reply\n" in text and text.count("not shown") == 1  # a reply that fits is whole


def test_the_interval_column_holds_a_noisy_interval_of_small_speedups():
    from engine.evaluate.verdict import Verdict
    from tui.widgets.timings import interval_text

    verdict = Verdict(status="correct", speedup_lo=0.0317, speedup_hi=0.0345, flags=["noisy"])
    width = next(w for key, _, w in COLUMNS if key == "interval")
    cell = interval_text(verdict)
    assert str(cell) == "0.0317-0.0345~" and len(str(cell)) <= width
