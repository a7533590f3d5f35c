"""Every steering key on the search screen: the tree marks the action at once (pending), the DB
holds the command, and the engine's confirmation clears the mark. A deterministic fake session
stands in for a running one (status running, this process as its engine), so no compile runs here;
test_steering_live.py drives the same keys against a real scripted CPU search. The dialogs the keys
open wrap their question at any size."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from textual import events
from textual.app import App
from textual.widgets import Input, Label, RichLog, Static, TabbedContent, TextArea, Tree

from engine.record import control
from engine.record.events import CommandApplied
from engine.record.store import Store
from tests.tui_helpers import app_on, fake_db, label_of, log_text, running_db, shown_text, wait_until
from tui import app as tui_app
from tui.app import KtreeApp, keymap_from_config
from tui.screens.dialogs import AskNumber, AskText, Confirm, EditSource
from tui.screens.search import SearchScreen


def commands(db: Path) -> list[tuple[str, dict]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT kind, args FROM commands ORDER BY id").fetchall()
    return [(k, json.loads(a)) for k, a in rows]


@pytest.fixture
async def running(tmp_path: Path) -> tuple[Path, int]:
    return await running_db(tmp_path / "k.db")


async def open_search(app: KtreeApp, pilot) -> SearchScreen:  # noqa: ANN001
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, SearchScreen) and screen.model.follow
    return screen


def a_variant(screen: SearchScreen, status: str = "correct") -> int:
    return next(n.id for n in screen.model.nodes.values() if n.kind == "variant" and n.status == status)


async def test_prune_pin_marked_pending_recorded_then_confirmed(running):
    db, sid = running
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
        screen = await open_search(app, pilot)
        tree = screen.query_one("#tree", Tree)
        vid = a_variant(screen)
        screen.select_node(vid)
        await pilot.press("x")
        assert "⧗prune…" in label_of(tree, vid)  # marked before the engine acts
        assert commands(db) == [("prune", {"node_id": vid, "pruned": True})]
        await pilot.press("p")
        assert commands(db)[-1] == ("pin", {"node_id": vid, "pinned": True})

        # The engine (another process) applies both: flags on the node, commands marked applied.
        store = await Store.open(db)
        await store.nodes.update(vid, pruned=1, pinned=1)
        for c in await store.commands.of(sid):
            await store.commands.mark_applied(c["id"])
        await store.close()
        await wait_until(pilot, lambda: not screen.model.pending)  # the next poll sees it
        label = label_of(tree, vid)
        assert "⧗" not in label and "✂pruned" in label and "⚲pinned" in label
        assert not screen.model.pending and not screen.model.node_pending
        await pilot.press("u")  # the last prune taken back
        assert commands(db)[-1] == ("prune", {"node_id": vid, "pruned": False})
        await pilot.press("q")


async def test_expand_asks_how_many(running):
    db, sid = running
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
        screen = await open_search(app, pilot)
        vid = a_variant(screen)
        screen.select_node(vid)
        await pilot.press("e")
        assert isinstance(app.screen, AskNumber)
        app.screen.query_one(Input).value = "0"
        await pilot.press("enter")
        assert isinstance(app.screen, AskNumber)  # 0 is refused, with a line saying why
        app.screen.query_one(Input).value = "4"
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is screen
        assert commands(db) == [("expand", {"node_id": vid, "ideas": 4, "variants": 0})]
        assert "⧗+4 ideas…" in label_of(screen.query_one("#tree", Tree), vid)

        idea = next(n for n in screen.model.nodes.values() if n.kind == "idea")
        screen.select_node(idea.id)
        await pilot.press("e")
        app.screen.query_one(Input).value = "3"
        await pilot.press("enter")
        await pilot.pause()
        assert commands(db)[-1] == ("expand", {"node_id": idea.id, "ideas": 0, "variants": 3})

        await pilot.press("e", "escape")  # cancelled: nothing recorded
        await pilot.pause()
        assert len(commands(db)) == 2
        await pilot.press("q")


async def test_inject_idea_and_edit_variant(running):
    db, sid = running
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
        screen = await open_search(app, pilot)
        vid = a_variant(screen)
        screen.select_node(vid)
        await pilot.press("i")
        assert isinstance(app.screen, AskText)
        await pilot.press(*"use AVX-512")
        await pilot.press("enter")
        await pilot.pause()
        assert commands(db) == [("inject_idea", {"parent_id": vid, "text": "use AVX-512"})]

        await pilot.press("E")
        assert isinstance(app.screen, EditSource)
        area = app.screen.query_one(TextArea)
        source = screen.model.nodes[vid].source
        assert area.text == source
        area.load_text(source.replace("kTile", "kBlock"))
        await pilot.press("ctrl+s")
        await pilot.pause()
        kind, args = commands(db)[-1]
        assert kind == "edit_variant" and args["node_id"] == vid and "kBlock" in args["source"]
        assert "⧗edit…" in label_of(screen.query_one("#tree", Tree), vid)
        await pilot.press("q")


async def test_pause_resume_stop(running):
    db, sid = running
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
        screen = await open_search(app, pilot)
        await pilot.press("P")
        assert commands(db) == [("pause", {})]
        screen.receive(CommandApplied(1, "pause"))
        await pilot.pause()
        assert screen.model.paused
        await pilot.pause(0.3)
        assert "paused" in str(screen.query_one("#progress-text").content)
        await pilot.press("P")
        assert commands(db)[-1] == ("resume", {})
        await pilot.press("S")
        assert isinstance(app.screen, Confirm)
        await pilot.press("n")
        await pilot.pause()
        assert commands(db)[-1][0] == "resume"  # not stopped
        await pilot.press("S", "y")
        await pilot.pause()
        assert commands(db)[-1] == ("stop", {})
        await pilot.press("q")


async def test_export_writes_a_solution_file(running, tmp_path, monkeypatch):
    db, sid = running
    monkeypatch.chdir(tmp_path)
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
        screen = await open_search(app, pilot)
        vid = a_variant(screen)
        screen.select_node(vid)
        await pilot.press("w")
        await pilot.pause()
        path = tmp_path / f"softmax_node{vid}.py"
        text = path.read_text()
        assert text.startswith("# ktree solution for softmax")
        assert screen.model.nodes[vid].source.strip() in text
        eager = screen.model.verdicts[vid].ref_eager_ms  # which eager time it is (issue 56, item 5)
        assert f" vs PyTorch eager {eager:.4g} ms (timed beside it) = " in text
        await pilot.press("w")
        await pilot.pause()
        assert (tmp_path / f"softmax_node{vid}_2.py").exists()  # never overwrites
        await pilot.press("q")


async def test_steering_a_finished_session_says_so(tmp_path):
    db, sid = await fake_db(tmp_path / "k.db", 20)
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
        screen = app.screen
        screen.select_node(a_variant(screen))
        await pilot.press("x", "p", "P")
        await pilot.pause()
        assert commands(db) == []
        assert any("finished: nothing to steer" in n.message for n in app._notifications)
        await pilot.press("q")


async def test_diff_sort_best_and_details_keys(tmp_path):
    db, sid = await fake_db(tmp_path / "k.db", 40)
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
        screen = app.screen
        # best: the fastest correct variant, selected and marked.
        await pilot.press("b")
        best = max((n for n in screen.model.nodes.values() if n.status == "correct"), key=lambda n: n.speedup)
        assert screen.selected == best.id == screen.model.best_id
        assert "★ best" in label_of(screen.query_one("#tree", Tree), best.id)
        # diff: against the nearest ancestor with code, as a unified diff.
        await pilot.press("d")
        shown = log_text(screen.query_one("#code", RichLog))
        parent = screen.model.parent_source(best.id)
        assert parent is not None and shown.splitlines()[:2] == [f"--- #{parent[0]}", f"+++ #{best.id}"]
        await pilot.press("d")
        assert "class ModelNew" in log_text(screen.query_one("#code", RichLog))
        # sort: speedup (descending), then round, then time.
        table = screen.query_one("#timings")
        await pilot.press("o")
        column = [str(c.key.value) for c in table.ordered_columns].index("speedup")
        speeds = [table.get_row_at(i)[column] for i in range(table.row_count)]
        numbers = [float(s.rstrip("x")) for s in speeds if s != "-"]
        fastest = max(v.speedup_eager for v in screen.model.verdicts.values() if v.speedup_eager)
        assert numbers == sorted(numbers, reverse=True) and speeds[0] == f"{fastest:.3g}x"
        await pilot.press("o")
        rounds = [int(table.get_row_at(i)[1]) for i in range(table.row_count)]
        assert rounds == sorted(rounds)
        # details: the tabs hide and show.
        details = screen.query_one("#details")
        assert details.display
        await pilot.press("t")
        assert not details.display
        await pilot.press("t")
        assert details.display
        await pilot.press("q")


async def test_bindings_rebound_from_config(running):
    db, sid = running
    keymap = keymap_from_config({"bindings": {"prune": "z", "pin": ["ctrl+t", "T"]}})
    assert keymap == {"prune": "z", "pin": "ctrl+t,T"}
    with pytest.raises(ValueError, match="bindings"):
        keymap_from_config({"bindings": {"prune": 3}})
    async with app_on(db, session_id=sid, keymap=keymap, size=(160, 50)) as (app, pilot):
        screen = await open_search(app, pilot)
        vid = a_variant(screen)
        screen.select_node(vid)
        await pilot.press("x")  # no longer prune
        assert commands(db) == []
        await pilot.press("z", "T")
        assert [k for k, _ in commands(db)] == ["prune", "pin"]
        await pilot.press("q")


async def test_command_palette_offers_steering(running):
    db, sid = running
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
        screen = await open_search(app, pilot)
        titles = [c.title for c in app.get_system_commands(screen)]
        for title in ("Prune node", "Expand node", "Pin / unpin node", "Inject idea", "Edit variant",
                      "Pause / resume search", "Stop search", "Export variant"):
            assert title in titles
        screen.select_node(a_variant(screen))
        await pilot.press("ctrl+p")
        await pilot.press(*"Prune node")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert [k for k, _ in commands(db)] == ["prune"]
        assert control.decode(*[(k, json.dumps(a)) for k, a in commands(db)][0]).kind == "prune"
        await pilot.press("q")


def test_bindings_come_from_the_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from engine.commands._tui import keymap
    from engine.launch import UsageError

    config = tmp_path / "config.toml"
    config.write_text('[bindings]\nprune = "delete"\npin = ["p", "ctrl+t"]\n')
    monkeypatch.setenv("KTREE_CONFIG", str(config))
    assert keymap() == {"prune": "delete", "pin": "p,ctrl+t"}
    config.write_text("[bindings]\nprune = 5\n")
    with pytest.raises(UsageError, match="prune"):
        keymap()


async def test_profile_key_asks_the_engine_and_the_profile_shows_once_taken(running):
    """`f` on a correct variant records a profile command (the engine takes it); on anything else
    it says why, recording nothing. Once the engine records the profile, the followed screen
    re-reads that verdict and the verdict pane shows it."""
    from dataclasses import replace


    db, sid = running
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
        screen = await open_search(app, pilot)
        screen.select_node(a_variant(screen, "incorrect"))
        await pilot.press("f")
        assert commands(db) == []
        vid = a_variant(screen)
        screen.select_node(vid)
        await pilot.press("f")
        assert commands(db) == [("profile", {"node_id": vid})]
        assert "⧗profile…" in label_of(screen.query_one("#tree", Tree), vid)

        # The engine (another process) takes it: the verdict holds the profile, the command is applied.
        store = await Store.open(db)
        verdict = screen.model.verdicts[vid]
        profile = {"tool": "cpu", "kernels": [], "diagnosis": {"bound": "memory", "numbers": {},
                                                               "evidence": "achieved bandwidth 71% of peak"}}
        await store.profiles.add(sid, vid, replace(verdict, profile=profile), round=1, reason="asked")
        for c in await store.commands.of(sid):
            await store.commands.mark_applied(c["id"])
        await store.close()
        await wait_until(pilot, lambda: not screen.model.pending and screen.model.verdicts[vid].profile)
        screen.select_node(vid)
        await pilot.pause()
        pane = str(screen.query_one("#verdict", Static).render())
        assert "profile (cpu): memory-bound" in pane and "achieved bandwidth 71% of peak" in pane
        await pilot.press("q")


class Bare(App):
    CSS_PATH = str(Path(tui_app.__file__).with_name("app.tcss"))  # the app's one stylesheet


LONG_IDEA = "Use warp-level shuffles to reduce the row max and the row sum without shared memory"


DIALOGS = [
    lambda: AskNumber(f"More variants of “{LONG_IDEA}”: how many?"),
    lambda: Confirm("Delete session 12 (level2_conv_relu_maxpool_with_a_long_name, 44 variants) and"
                    " everything recorded under it?"),
    lambda: AskText(f"Your idea for #12 (implemented like any other), under “{LONG_IDEA}”:"),
]


async def test_dialogs_wrap_their_question():
    for size in ((80, 24), (160, 48)):
        for make in DIALOGS:
            app = Bare()
            async with app.run_test(size=size) as pilot:
                dialog = make()
                await app.push_screen(dialog)
                await pilot.pause()
                label = dialog.query_one(Label)
                question = " ".join(str(label.content).split())
                assert shown_text(app, label) == question, (size, shown_text(app, label))
                assert dialog.query_one(".dialog").content_region.contains_region(label.region)


async def test_steering_a_variant_that_is_not_correct_refuses_with_why(running):
    """Pin, expand or an idea under a failed variant would make it a parent: LLM work (money, with a
    paid provider) spent under code that never worked. Each key says why and records nothing; a
    pinned one can still be unpinned."""
    db, sid = running
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
        screen = await open_search(app, pilot)
        broken = a_variant(screen, "compile_error")
        screen.select_node(broken)
        for key in ("p", "e", "i"):
            await pilot.press(key)
            await pilot.pause()
            assert app.screen is screen, key  # no dialog asks how many, or for the idea
        said = [n.message for n in app._notifications]
        why = f"#{broken} is compile_error: only a correct variant can be"
        assert said == [f"{why} pinned (E edits it into a new variant)",
                        f"{why} expanded (E edits it into a new variant)",
                        f"{why} given an idea (E edits it into a new variant)"]
        idea = screen.model.nodes[screen.model.nodes[broken].parent_id]
        await pilot.press("E")  # editing it is the way to a working one
        assert isinstance(app.screen, EditSource)
        await pilot.press("escape")
        await pilot.pause()
        assert commands(db) == []

        store = await Store.open(db)  # pinned before it failed (or by another process): unpinned
        await store.nodes.update(broken, pinned=1)
        await store.close()
        await wait_until(pilot, lambda: screen.model.nodes[broken].pinned)
        await pilot.press("p")
        assert commands(db) == [("pin", {"node_id": broken, "pinned": False})]
        screen.select_node(idea.id)  # more variants of its idea: asked as before
        await pilot.press("e")
        assert isinstance(app.screen, AskNumber)
        await pilot.press("escape")
        await pilot.press("q")


async def test_profile_key_on_a_finished_session_profiles_here(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch):
    """Issue 56, item 14: `f` on a finished session answered "run `ktree show 1 --profile 4`". With no
    engine to ask, the screen profiles the variant itself (as that command does: the session's
    evaluator, the profile recorded), and the verdict pane shows it. The profiler is a stand-in."""
    from dataclasses import replace

    from engine import launch

    profile = {"tool": "cpu", "kernels": [], "diagnosis": {"bound": "memory", "numbers": {},
                                                           "evidence": "achieved bandwidth 64% of peak"}}
    asked: list[tuple[str, str]] = []

    class Profiler:
        closed = False

        def job(self, problem_path: str, source: str, sizes: dict, **kw: object) -> tuple[str, str]:
            return (problem_path, source)

        async def profile(self, job: tuple[str, str], verdict, on_phase=None):  # noqa: ANN001, ANN201
            asked.append(job)
            return replace(verdict, profile=profile)

        async def close(self) -> None:
            Profiler.closed = True

    monkeypatch.setattr(launch, "profile_evaluator", lambda session: Profiler())
    db, sid = await fake_db(tmp_path / "k.db", 20)  # finished
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
        screen = app.screen
        assert isinstance(screen, SearchScreen) and screen.model.status == "finished"
        vid = a_variant(screen)
        screen.select_node(vid)
        await pilot.press("f")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert asked == [("problems/level1/softmax.py", screen.model.nodes[vid].source)] and Profiler.closed
        pane = str(screen.query_one("#verdict", Static).render())
        assert "profile (cpu): memory-bound" in pane and "achieved bandwidth 64% of peak" in pane
        said = [n.message for n in app._notifications]
        assert f"#{vid}: profile (cpu): memory-bound — achieved bandwidth 64% of peak" in said
        assert not any("--profile" in m for m in said) and commands(db) == []
        await pilot.press("q")
    store = await Store.open(db)  # recorded, as `ktree show --profile` records it
    [evaluation] = [e for e in await store.evaluations.of(sid) if e["node_id"] == vid and e["verdict"].profile]
    await store.close()
    assert evaluation["verdict"].profile["diagnosis"]["bound"] == "memory"


async def test_keys_typed_ahead_land_where_they_would_one_at_a_time(running):
    """Issue 56, item 11: `/`, `#29`, Enter, `x` as one burst: the filter had not opened (its focus
    waited behind the keys), `2` switched tabs, and `x` pruned the node selected before instead of
    #29. Each key of a burst now lands where it would have, typed one at a time."""
    db, sid = running
    async with app_on(db, session_id=sid, size=(160, 50)) as (app, pilot):
        screen = await open_search(app, pilot)
        target = max(n.id for n in screen.model.nodes.values() if n.kind == "variant")
        first = screen.selected
        assert first != target and target >= 10  # two digits: `1`, `2`... are tab keys outside the bar
        burst = [("slash", "/"), ("number_sign", "#"), *((d, d) for d in str(target)), ("enter", "\r"),
                 ("x", "x")]
        for key, character in burst:  # all read before any is handled (Pilot's press waits after each)
            app.post_message(events.Key(key, character))
        await pilot.pause()
        await pilot.pause()
        assert screen.selected == target
        assert screen.query_one("#details", TabbedContent).active == "tab-timings"  # no tab key ran
        assert commands(db) == [("prune", {"node_id": target, "pruned": True})]
        assert screen.query_one("#tree", Tree).has_focus and not screen.query_one("#filter", Input).value
        await pilot.press("q")
