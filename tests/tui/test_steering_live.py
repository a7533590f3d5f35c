"""The steering keys against a real scripted CPU search in this process: the engine applies each
action (CommandApplied / NodeUpdated) and the tree and DB agree. (The pending mark shown before
the engine acts is asserted in test_keys.py, where no engine races the assertion.)"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from textual.widgets import Tree

from tests.tui_helpers import app_on, label_of, scripted_search, table_row, wait_until
from tui.screens.search import SearchScreen


@pytest.mark.slow  # a whole live search with its builds: a long run
async def test_steering_a_live_scripted_search(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("KTREE_SCRIPTED_LATENCY", "0.4")  # slow enough to act on
    db = tmp_path / "k.db"
    search = scripted_search(db, "--rounds", "2", "--ideas", "2", "--variants", "1").search
    async with app_on(db, size=(160, 50), search_factory=search) as (app, pilot):
        screen = app.screen
        assert isinstance(screen, SearchScreen)
        tree = screen.query_one("#tree", Tree)
        await wait_until(pilot, lambda: any(n.kind == "root" for n in screen.model.nodes.values()))
        root = next(n.id for n in screen.model.nodes.values() if n.kind == "root")

        await pilot.press("P")  # pause: the engine confirms
        await wait_until(pilot, lambda: screen.model.paused and not screen.model.pending)

        screen.select_node(root)
        await pilot.press("i", *"tile by 64 rows", "enter")
        await wait_until(pilot, lambda: any(n.origin == "human" for n in screen.model.nodes.values()))
        human = next(n for n in screen.model.nodes.values() if n.origin == "human")
        assert human.kind == "idea" and human.text == "tile by 64 rows"
        assert "(yours)" in label_of(tree, human.id)
        await wait_until(pilot, lambda: root not in screen.model.node_pending)

        llm_idea = next(n.id for n in screen.model.nodes.values() if n.kind == "idea" and n.origin != "human")
        screen.select_node(llm_idea)
        await pilot.press("x")
        await wait_until(pilot, lambda: screen.model.nodes[llm_idea].pruned)
        await wait_until(pilot, lambda: llm_idea not in screen.model.node_pending)
        assert "✂pruned" in label_of(tree, llm_idea) and "⧗" not in label_of(tree, llm_idea)

        def under(idea_id: int) -> list[int]:
            return [n.id for n in screen.model.nodes.values() if n.parent_id == idea_id and n.kind == "variant"]

        before = len(under(human.id))
        screen.select_node(human.id)
        await pilot.press("e")
        app.screen.query_one("#number").value = "2"
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(under(human.id)) == before + 2)  # two more variants, made
        await wait_until(pilot, lambda: human.id not in screen.model.node_pending)

        queued = under(human.id)[0]  # paused: not judged yet, so no parent to pin
        screen.select_node(queued)
        await pilot.press("p")
        said = [n.message for n in app._notifications]
        assert said and "only a correct variant can be pinned" in said[-1]

        await pilot.press("P")  # resume
        await wait_until(pilot, lambda: not screen.model.paused)

        def correct() -> list[int]:
            return [n.id for n in screen.model.nodes.values() if n.kind == "variant" and n.status == "correct"]

        await wait_until(pilot, correct, timeout=300)
        variant = correct()[0]
        screen.select_node(variant)
        await pilot.press("p")
        await wait_until(pilot, lambda: screen.model.nodes[variant].pinned)
        assert "⚲pinned" in label_of(tree, variant)
        await pilot.press("S", "y")  # stop: in-flight work finishes, then the session ends
        await asyncio.wait_for(app.workers.wait_for_complete(), 300)
        await pilot.pause()
        assert app.search_summary is not None and app.search_summary["status"] == "stopped"
        assert screen.model.info["status"] == "stopped"
        await pilot.press("q")

    with sqlite3.connect(db) as conn:
        kinds = conn.execute("SELECT kind, applied_at IS NOT NULL FROM commands ORDER BY id").fetchall()
        pruned, pinned = conn.execute(
            "SELECT (SELECT pruned FROM nodes WHERE id = ?), (SELECT pinned FROM nodes WHERE id = ?)",
            (llm_idea, variant)).fetchone()
    assert kinds == [("pause", 1), ("inject_idea", 1), ("prune", 1), ("expand", 1), ("resume", 1), ("pin", 1),
                     ("stop", 1)]
    assert (pruned, pinned) == (1, 1)


@pytest.mark.slow
async def test_new_search_from_the_form_then_resume_it(tmp_path: Path, monkeypatch):
    """Sessions screen -> n -> the form starts a scripted CPU search; quitting mid-run leaves it
    interrupted; a second app resumes it (R) and shows the recorded tree plus the new work."""
    from textual.widgets import Select

    from tui.screens.new_search import NewSearchScreen
    from tui.screens.sessions import SessionsScreen

    monkeypatch.setenv("KTREE_SCRIPTED_LATENCY", "0.3")
    db = tmp_path / "k.db"
    async with app_on(db, size=(160, 50)) as (app, pilot):
        await pilot.press("n")
        await pilot.pause()
        form = app.screen
        assert isinstance(form, NewSearchScreen)
        form.query_one("#provider", Select).value = "scripted"
        form.query_one("#backend", Select).value = "cpu"
        for name, value in (("rounds", "2"), ("ideas", "1"), ("variants", "1"), ("top", "1")):
            form.query_one(f"#{name}").value = value
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: isinstance(app.screen, SearchScreen))
        screen = app.screen
        assert screen.model.live
        await wait_until(pilot, lambda: "SCRIPTED" in str(screen.query_one("#banner").content))  # once started
        await wait_until(pilot, lambda: screen.model.verdicts, timeout=240)  # a first variant evaluated
        seen = set(screen.model.nodes)
        await pilot.press("q", "y")  # quits mid-run (asked first): the session is recorded as interrupted
    sid = screen.model.session_id

    async with app_on(db, size=(160, 50)) as (app, pilot):
        sessions = app.screen
        assert isinstance(sessions, SessionsScreen)
        assert table_row(sessions.query_one("#sessions"), str(sid))["status"] == "interrupted"
        await pilot.press("R")
        await wait_until(pilot, lambda: isinstance(app.screen, SearchScreen))
        screen = app.screen  # at once, from the DB; the search goes on in it once prepared
        await wait_until(pilot, lambda: app.search_summary is not None, timeout=300)
        await asyncio.wait_for(app.workers.wait_for_complete(), 300)
        await pilot.pause()
        assert app.search_summary is not None and app.search_summary["status"] == "finished"
        assert screen.model.session_id == sid and seen <= set(screen.model.nodes)  # the recorded tree, and more
        assert max(n.round for n in screen.model.nodes.values()) == 2
        tree = screen.query_one("#tree", Tree)
        for node_id in seen:
            assert label_of(tree, node_id)
        await pilot.press("q")
