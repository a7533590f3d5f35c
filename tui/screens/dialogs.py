"""Small modal dialogs: ask a number, ask a text, confirm, edit a source."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static, TextArea

from tui.screens.ahead import LaidOutOnce
from tui.widgets.inline_keys import OrderedInput, OrderedTextArea

# A question wraps inside its dialog, however long (a Label sizes to its text and was cut at the
# dialog's edge: "More variants of “…”: how ma").
WRAP_PROMPT = """
.dialog > Label {
    width: 100%;
}
"""


class AskNumber(LaidOutOnce, ModalScreen[int | None]):
    """How many (ideas or variants); Enter accepts, Escape cancels."""

    DEFAULT_CSS = WRAP_PROMPT

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="dialog.cancel")]

    def __init__(self, prompt: str, default: int = 2, maximum: int = 20):
        super().__init__()
        self.prompt, self.default, self.maximum = prompt, default, maximum

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.prompt)
            yield OrderedInput(str(self.default), type="integer", id="number")
            yield Static("", id="error", classes="error")

    @on(Input.Submitted)
    def _submit(self, event: Input.Submitted) -> None:
        try:
            value = int(event.value)
        except ValueError:
            value = 0
        if not 1 <= value <= self.maximum:
            self.query_one("#error", Static).update(f"a whole number from 1 to {self.maximum}")
            return
        self.dismiss(value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class AskText(LaidOutOnce, ModalScreen[str | None]):
    DEFAULT_CSS = WRAP_PROMPT
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="dialog.cancel")]

    def __init__(self, prompt: str, placeholder: str = ""):
        super().__init__()
        self.prompt, self.placeholder = prompt, placeholder

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.prompt)
            yield OrderedInput(placeholder=self.placeholder, id="text")
            yield Static("", id="error", classes="error")

    @on(Input.Submitted)
    def _submit(self, event: Input.Submitted) -> None:
        if not event.value.strip():
            self.query_one("#error", Static).update("empty: type the idea, or Escape to cancel")
            return
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)


class Confirm(LaidOutOnce, ModalScreen[bool]):
    DEFAULT_CSS = WRAP_PROMPT
    BINDINGS = [Binding("escape", "no", "No", id="dialog.no"), Binding("y", "yes", "Yes", id="dialog.yes"),
                Binding("n", "no", "No", show=False)]

    def __init__(self, question: str):
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question)
            with Horizontal(classes="buttons"):
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n)", id="no", variant="primary")

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_yes(self) -> None:
        self.dismiss(True)

    def action_no(self) -> None:
        self.dismiss(False)


class EditSource(LaidOutOnce, ModalScreen[str | None]):
    """The variant's source in an editor pane; Ctrl+S re-queues it as a new variant. With $EDITOR
    set, Ctrl+O opens it there (the app suspends until the editor exits)."""

    BINDINGS = [
        Binding("ctrl+s", "save", "Save and re-queue", id="edit.save"),
        Binding("ctrl+o", "external", "Open in $EDITOR", id="edit.external"),
        Binding("escape", "cancel", "Cancel", id="edit.cancel", priority=True),  # the editor eats Esc
    ]

    def __init__(self, title: str, source: str):
        super().__init__()
        self.title_text, self.source = title, source

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog editor"):
            yield Label(self.title_text)
            yield OrderedTextArea.code_editor(self.source, language="python", id="editor")
            yield Static("Ctrl+S: save and re-queue as a new variant · Ctrl+O: $EDITOR · Esc: cancel",
                         classes="hint")

    def action_save(self) -> None:
        text = self.query_one("#editor", TextArea).text
        self.dismiss(None if text.strip() == self.source.strip() else text)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_external(self) -> None:
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
        if not editor:
            self.notify("set $EDITOR to edit outside ktree", severity="warning")
            return
        area = self.query_one("#editor", TextArea)
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(area.text)
        try:
            with self.app.suspend():
                subprocess.run([*shlex.split(editor), f.name], check=False)
            with open(f.name) as fh:
                area.load_text(fh.read())
        except Exception as exc:  # a missing editor binary, a terminal that cannot suspend
            self.notify(f"$EDITOR failed: {exc}", severity="error")
        finally:
            os.unlink(f.name)
