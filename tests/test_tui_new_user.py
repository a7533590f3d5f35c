"""What a new user hit on the screens (issue 30, items 5, 6, 10, 14 and part of 17): an empty idea
list said as such, a finished session's bar full, the new-search form (focus, Enter, the estimate's
last sentence), the first cold build said on screen, and dialogs and the banner that fit their text."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.app import App

from engine.evaluate.evaluator import LocalEvaluator
from engine.events import EventBus
from engine.llm.base import Completion, Message, Usage
from engine.llm.scripted import ScriptedProvider
from engine.problems import load_problem
from engine.prompts import NoIdeas, ReplyError, parse_ideas
from engine.search import Search, SearchConfig
from engine.store import Store
from tui.model import ScreenModel, read_rows
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
