"""What a new user hit on the screens (issue 30, items 5, 6, 10, 14 and part of 17): an empty idea
list said as such, a finished session's bar full, the new-search form (focus, Enter, the estimate's
last sentence), the first cold build said on screen, and dialogs and the banner that fit their text."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.app import App
from textual.color import Color
from textual.widgets import Input, Label, Select, Static
from textual.widgets._select import SelectCurrent

from engine.evaluate.evaluator import LocalEvaluator
from engine.events import EventBus
from engine.llm.base import Completion, Message, Usage
from engine.llm.scripted import ScriptedProvider
from engine.problems import load_problem
from engine.prompts import NoIdeas, ReplyError, parse_ideas
from engine.search import Search, SearchConfig
from engine.store import Store
from tests.conftest import run_ktree
from tests.tui_helpers import fake_db, wait_until
from tui.app import KtreeApp
from tui.model import ScreenModel, read_rows
from tui.screens.new_search import NewSearchScreen
from tui.widgets.progress import round_bar
from tui.widgets.tree import node_label


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
        assert summary["status"] == "finished"
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
    from engine.domain import Node

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
