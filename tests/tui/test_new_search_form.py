"""The new-search form (`n` on the sessions screen): the estimate shown and each field checked,
where the focus is, Enter to start (refused with the reason said)."""

from __future__ import annotations

from pathlib import Path

from textual.color import Color
from textual.widgets import Input, Label, Select, Static
from textual.widgets._select import SelectCurrent

from tests.tui_helpers import app_on, fake_db, wait_until
from tui.screens.new_search import NewSearchScreen


def _distance(a: Color, b: Color) -> int:
    return abs(a.r - b.r) + abs(a.g - b.g) + abs(a.b - b.b)


async def test_the_form_shows_where_the_focus_is_and_enter_starts(tmp_path: Path):
    db, _ = await fake_db(tmp_path / "k.db", 20)
    async with app_on(db, size=(120, 50)) as (app, pilot):
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
        # The estimate's assumptions end in a whole sentence (once the problem is loaded, in a thread).
        await wait_until(pilot, lambda: "assumptions" in str(form.query_one("#estimate", Static).content))
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
        assert "rounds: 0 must be at least 1" in str(form.query_one("#form-error", Static).content)
        rounds.value = "1"
        form.query_one("#path", Input).value = str(tmp_path / "missing.py")
        form.query_one("#path", Input).focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: "missing.py" in str(form.query_one("#form-error", Static).content), 30)
        assert isinstance(app.screen, NewSearchScreen)
        await pilot.press("escape")


async def test_new_search_form_shows_the_estimate_and_checks_fields(tmp_path: Path):
    db, _ = await fake_db(tmp_path / "k.db", 20)
    async with app_on(db, size=(120, 50)) as (app, pilot):
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
        assert "rounds: 0 must be at least 1" in str(form.query_one("#estimate", Static).content)
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert "rounds: 0 must be at least 1" in str(form.query_one("#form-error", Static).content)
        assert isinstance(app.screen, NewSearchScreen)
        form.query_one("#rounds").value = "1"
        form.query_one("#path").value = str(tmp_path / "missing.py")
        await pilot.press("ctrl+r")
        await pilot.pause(0.5)
        assert "missing.py" in str(form.query_one("#form-error", Static).content)
        await pilot.press("q")


async def _burst(app, pilot, keys: list[str]) -> None:
    """Keys handed to the app at once, as a terminal driver does with a paste or tmux send-keys."""
    from textual import events

    for key in keys:
        app.post_message(events.Key(key, key if len(key) == 1 else None))
    for _ in range(10):
        await pilot.pause(0.02)


async def test_keys_sent_in_one_burst_apply_in_order(tmp_path: Path):
    """Issue 46, item 5: `End BSpace 4` in one burst left "rounds" empty (the 4 ran before End and
    BSpace, which Textual runs only once they have bubbled up to the app)."""
    from textual.app import App

    from tui.widgets.inline_keys import OrderedTextArea

    db, _ = await fake_db(tmp_path / "k.db", 20)
    async with app_on(db, size=(120, 50)) as (app, pilot):
        await pilot.press("n")
        await pilot.pause()
        rounds = app.screen.query_one("#rounds", Input)
        rounds.focus()
        await pilot.pause()
        await _burst(app, pilot, ["end", "backspace", "4"])
        assert rounds.value == "4"
        await _burst(app, pilot, ["backspace", "5", "left", "1", "end", "6"])
        assert rounds.value == "156"

    class Editor(App):
        def compose(self):
            yield OrderedTextArea("ab")

    editor = Editor()
    async with editor.run_test() as pilot:
        area = editor.query_one(OrderedTextArea)
        area.focus()
        await pilot.pause()
        await _burst(editor, pilot, ["end", "c", "backspace", "d", "home", "x"])
        assert area.text == "xabd"


async def test_the_language_list_says_what_cuda_is_on_the_backend_chosen(tmp_path: Path):
    """Issue 46, item 18: the form offered language `cuda` for a cpu run; it is C++ there."""
    db, _ = await fake_db(tmp_path / "k.db", 20)
    async with app_on(db, size=(120, 50)) as (app, pilot):
        await pilot.press("n")
        await pilot.pause()
        form = app.screen
        languages, backend = form.query_one("#languages", Select), form.query_one("#backend", Select)

        def shown() -> list[str]:
            return [str(prompt) for prompt, _ in languages._options]

        backend.value = "cpu"
        await wait_until(pilot, lambda: "cuda: C++ (cpu)" in shown())
        assert "cuda,triton: C++ (cpu) + Triton" in shown()
        languages.value = "triton"
        backend.value = "cuda"
        await wait_until(pilot, lambda: "cuda: CUDA" in shown() or "cuda" in shown())
        assert "cuda: C++ (cpu)" not in shown() and languages.value == "triton"  # the choice stays
