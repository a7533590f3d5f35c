"""What a new user hit on the screens (issue 30, items 5, 6, 10, 14 and part of 17): an empty idea
list said as such, a finished session's bar full, the new-search form (focus, Enter, the estimate's
last sentence), the first cold build said on screen, and dialogs and the banner that fit their text."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest
from textual.app import App
from textual.color import Color
from textual.widget import Widget
from textual.widgets import Input, Label, Select, Static
from textual.widgets._select import SelectCurrent

from engine.domain import Node
from engine.evaluate.evaluator import LocalEvaluator
from engine.events import EventBus, NodeAdded, NodeUpdated, SessionStarted
from engine.llm.base import Completion, Message, Usage
from engine.llm.scripted import ScriptedProvider
from engine.problems import load_problem
from engine.prompts import NoIdeas, ReplyError, parse_ideas
from engine.search import Search, SearchConfig
from engine.store import Store
from tests.conftest import run_ktree
from tests.tui_helpers import fake_db, label_of, wait_until
from tui import app as tui_app
from tui.app import KtreeApp
from tui.model import PCH_DONE, PCH_NOTE, ScreenModel, pch_cold, read_rows
from tui.screens.dialogs import AskNumber, AskText, Confirm
from tui.screens.new_search import NewSearchScreen
from tui.screens.search import SearchScreen
from tui.widgets.progress import round_bar
from tui.widgets.tree import SearchTree, node_label


def screen_lines(app: App) -> list[str]:
    """The terminal's lines as drawn now."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


# -- 5 and 6: an empty idea list, and the bar of a session that ended with no variants -----------


class NoIdeasProvider(ScriptedProvider):
    """Every idea call is answered with an empty JSON list."""

    async def complete(self, messages: list[Message], model: str = "scripted", max_output_tokens: int = 0,
                       reasoning: str | None = None) -> Completion:
        return Completion("```json\n[]\n```", Usage(input=100, output=2), 0.0, 0.0, model)


def test_an_empty_json_list_is_no_ideas_not_unparseable():
    for reply in ("[]", "```json\n[]\n```", "Nothing to add: []"):
        try:
            parse_ideas(reply)
        except NoIdeas as exc:
            assert "empty list of ideas" in str(exc)
        else:
            raise AssertionError(f"{reply!r} parsed")
    try:
        parse_ideas("I cannot help with that.")
    except NoIdeas:
        raise AssertionError("prose is unparseable, not an empty list") from None
    except ReplyError:
        pass


async def test_no_ideas_returned_is_said_and_the_ended_sessions_bar_is_full(tmp_path: Path):
    store = await Store.open(tmp_path / "k.db")
    evaluator = LocalEvaluator("cpu")
    search = Search(store, EventBus(), [(NoIdeasProvider("softmax", "cpu", seed=0), "scripted")], evaluator,
                    load_problem("softmax"), SearchConfig(rounds=1, ideas=2, variants=2))
    try:
        summary = await asyncio.wait_for(search.run(), timeout=120)
        # the model answered, with nothing usable: the run failed, and says it was not the call
        assert summary["status"] == "failed", summary
        assert summary["stop_reason"].startswith("no LLM reply was usable"), summary
        model = ScreenModel(session_id=search.session_id)
        model.apply(await read_rows(store, search.session_id, model, first=True))  # type: ignore[arg-type]
    finally:
        await evaluator.close()
        await store.close()
    [idea] = [n for n in model.nodes.values() if n.kind == "idea"]
    label = node_label(idea, model).plain
    assert "no ideas returned" in label and "unparseable" not in label, label
    assert "empty list of ideas" in idea.text
    assert not any(n.kind == "variant" for n in model.nodes.values())
    total, done = round_bar(model)
    assert total == done > 0  # the last round made nothing, and is over


def test_the_bar_of_a_running_round_counts_what_is_in_flight():
    def node(id: int, kind: str, rnd: int, status: str) -> Node:
        return Node(id, 1, id - 1 or None, kind, rnd, "", "", "", status, "llm", None, None)

    model = ScreenModel(session_id=1)
    model.info.update(status="running", config={"variants": 2})
    nodes = [node(1, "root", 0, "reference"), node(2, "idea", 1, "ok"), node(3, "variant", 1, "correct"),
             node(4, "variant", 1, "compiling")]
    model.nodes = {n.id: n for n in nodes}
    assert round_bar(model) == (2, 1)
    model.info["status"] = "interrupted"  # resumes: the round is not over
    assert round_bar(model) == (2, 1)
    model.info["status"] = "stopped"
    assert round_bar(model) == (2, 2)


# -- 10: the new-search form ------------------------------------------------------------------------


def _distance(a: Color, b: Color) -> int:
    return abs(a.r - b.r) + abs(a.g - b.g) + abs(a.b - b.b)


async def test_the_form_shows_where_the_focus_is_and_enter_starts(tmp_path: Path):
    db, _ = await fake_db(tmp_path / "k.db", 20)
    app = KtreeApp(db_path=db)
    async with app.run_test(size=(120, 50)) as pilot:
        await pilot.pause()
        await pilot.press("n")
        await pilot.pause()
        form = app.screen
        assert isinstance(form, NewSearchScreen)
        problem = form.query_one("#problem", Select)
        assert app.focused is problem  # the first field has the focus on open
        # ...and it shows: the field's background and its label stand out from a resting field's.
        shown = problem.query_one(SelectCurrent).styles.background
        resting = form.query_one("#provider", Select).query_one(SelectCurrent).styles.background
        assert _distance(shown, resting) >= 60, (shown, resting)
        labels = {str(label.content): label for label in form.query(Label)}
        assert labels["problem"].rich_style.bold and not labels["provider"].rich_style.bold
        # The estimate's assumptions end in a whole sentence.
        estimate = str(form.query_one("#estimate", Static).content)
        assert estimate.rstrip().endswith("(billed as output) counted apart, as a range per model")
        rounds = form.query_one("#rounds", Input)
        rounds.focus()
        await pilot.pause()
        assert _distance(rounds.styles.background, form.query_one("#ideas", Input).styles.background) >= 60
        # Enter in a field starts the search: here refused, and the reason said.
        rounds.value = "0"
        await pilot.press("enter")
        await pilot.pause()
        assert "rounds: a whole number" in str(form.query_one("#form-error", Static).content)
        rounds.value = "1"
        form.query_one("#path", Input).value = str(tmp_path / "missing.py")
        form.query_one("#path", Input).focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: "missing.py" in str(form.query_one("#form-error", Static).content), 30)
        assert isinstance(app.screen, NewSearchScreen)
        await pilot.press("escape")


def test_the_estimates_last_sentence_is_whole_in_the_cli(tmp_path: Path):
    proc = run_ktree("run", "softmax", "--provider", "scripted", "--estimate", "--db", str(tmp_path / "k.db"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "beside" not in proc.stdout
    assert "counted apart, as a range per model" in proc.stdout.strip().splitlines()[-1]


# -- 17: dialogs and the banner fit their text ----------------------------------------------------


class Bare(App):
    CSS_PATH = str(Path(tui_app.__file__).with_name("app.tcss"))  # the app's one stylesheet


def shown_text(app: App, widget: Widget) -> str:
    """What the terminal shows of `widget`, its lines joined with single spaces."""
    region = widget.region
    lines = screen_lines(app)[region.y:region.bottom]
    return " ".join(" ".join(line[region.x:region.right].split()) for line in lines).strip()


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


CONV2D_SIZES = {"batch_size": 2, "in_channels": 3, "out_channels": 96, "kernel_size": 11, "stride": 4,
                "padding": 2, "height": 128, "width": 160}


async def test_a_long_banner_keeps_the_marks_problem_and_mode_in_sight(tmp_path: Path):
    db, sid = await fake_db(tmp_path / "k.db", 20)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sessions SET problem = 'conv2d', problem_path = 'problems/level1/conv2d.py',"
                     " sizes = ? WHERE id = ?", (json.dumps(CONV2D_SIZES), sid))
    for size in ((80, 24), (160, 48)):
        app = KtreeApp(db_path=db, session_id=sid)
        async with app.run_test(size=size) as pilot:
            await wait_until(pilot, lambda app=app: app.screen.query("#banner") and "conv2d" in str(
                app.screen.query_one("#banner", Static).content))
            await pilot.pause()
            banner = app.screen.query_one("#banner", Static)
            line = shown_text(app, banner)
            assert line.startswith("SCRIPTED CPU conv2d · scripted · read-only · cpu sizes: batch_size=2"), line
            if size[0] >= 160:  # room for every size
                assert line.endswith("height=128 width=160"), line
            else:  # cut, and said to be
                assert line.endswith("…"), line
            assert "canned answers" in str(banner.content)  # the whole line, for whoever reads it
            await pilot.press("q")


# -- 14: the first cold build says what it does --------------------------------------------------


def _variant(status: str, nid: int = 2) -> Node:
    return Node(nid, 1, 1, "variant", 1, "fuse", "", "class ModelNew: ...", status, "llm", None, None)


def _started() -> SessionStarted:
    return SessionStarted(session_id=1, problem="softmax", backend="cpu", provider="scripted", scripted=True,
                          sizes={"dim": 4}, config={"rounds": 1, "ideas": 1, "variants": 2})


def test_the_first_build_on_a_cold_cache_says_it_builds_the_precompiled_header():
    model = ScreenModel(live=True, cold_cache=lambda: True)
    model.apply(_started())
    model.apply(NodeAdded(Node(1, 1, None, "root", 0, "", "", "ref", "reference", "llm", None, None)))
    model.apply(NodeAdded(_variant("queued")))
    model.apply(NodeAdded(_variant("queued", 3)))
    changes = model.apply(NodeUpdated(_variant("compiling")))
    assert "status" in changes.panes and model.status_line == PCH_NOTE
    model.apply(NodeUpdated(_variant("compiling", 3)))
    for nid in (2, 3):
        label = node_label(model.nodes[nid], model).plain
        assert "building the precompiled header (first build, ~1 min)" in label
        assert "precompiled torch header" in (model.wait_reason(nid) or "")
    changes = model.apply(NodeUpdated(_variant("waiting")))  # the first build is over
    assert 3 in changes.relabel and "precompiled" not in node_label(model.nodes[3], model).plain
    assert model.wait_reason(3) is None and model.status_line == PCH_DONE


def test_a_warm_cache_or_a_past_session_says_nothing_of_it():
    warm = ScreenModel(live=True, cold_cache=lambda: False)
    past = ScreenModel(cold_cache=lambda: True)  # read from the DB, not running: no build runs
    for model in (warm, past):
        if model.live:
            model.apply(_started())
        model.apply(NodeAdded(_variant("queued")))
        model.apply(NodeUpdated(_variant("compiling")))
        assert "precompiled" not in node_label(model.nodes[2], model).plain
        assert "precompiled" not in model.status_line


def test_pch_cold_reads_the_build_cache(tmp_path: Path):
    assert pch_cold(tmp_path)
    gch = tmp_path / "pch" / "0123abcd" / "torch" / "extension.h.gch"
    gch.parent.mkdir(parents=True)
    assert pch_cold(tmp_path)  # the lock and the forward header come first: not built yet
    gch.write_bytes(b"x")
    assert not pch_cold(tmp_path)
    gch.unlink()
    (gch.parent.parent / "failed.txt").write_text("no PCH for this compiler")
    assert not pch_cold(tmp_path)  # builds go on without one


async def test_following_a_first_cold_build_shows_it_in_the_tree_and_the_status_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KTREE_CACHE_DIR", str(tmp_path / "empty-cache"))  # no precompiled header yet
    db, sid = await fake_db(tmp_path / "k.db", 12, status="running")
    with sqlite3.connect(db) as conn:  # nothing built yet: the engine, elsewhere, is about to start
        conn.execute("DELETE FROM evaluations WHERE session_id = ?", (sid,))
        conn.execute("UPDATE nodes SET status = 'queued', speedup = NULL WHERE kind = 'variant'")
        [vid] = conn.execute("SELECT MIN(id) FROM nodes WHERE kind = 'variant'").fetchone()
    app = KtreeApp(db_path=db, session_id=sid, follow=True)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SearchScreen) and screen.model.follow
        tree = screen.query_one("#tree", SearchTree)
        other = await Store.open(db)
        await other.update_node(vid, status="compiling")
        await wait_until(pilot, lambda: "compiling" in label_of(tree, vid))
        assert "building the precompiled header (first build, ~1 min)" in label_of(tree, vid)
        status = screen.query_one("#status-line", Static)
        assert PCH_NOTE in str(status.content)
        await other.update_node(vid, status="waiting")
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
    from tui.widgets.timings import COLUMNS, interval_text

    verdict = Verdict(status="correct", speedup_lo=0.0317, speedup_hi=0.0345, flags=["noisy"])
    width = next(w for key, _, w in COLUMNS if key == "interval")
    cell = interval_text(verdict)
    assert str(cell) == "0.0317-0.0345~" and len(str(cell)) <= width
