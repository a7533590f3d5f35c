"""The new-search form: problem, provider and models, shape, backend, budget; a pre-run estimate."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Header, Input, Label, Select, Static

from engine import options
from engine.launch import RunRequest
from tui import warm
from tui.screens.ahead import StyledAhead
from tui.widgets.footer import SteadyFooter
from tui.widgets.inline_keys import OrderedInput

if TYPE_CHECKING:
    from engine.problems import Problem


def form_request(fields: Mapping[str, str]) -> RunRequest:
    """The form's fields (by widget id, as typed) as a run request: each part of the configuration
    from the fields its declarations put on the form (engine.options); ValueError, one line naming
    the field, on one that cannot be read. Everything else is launch's to check."""
    parts = options.parts_from_form(fields)
    return RunRequest(fields["path"].strip() or fields["problem"], **parts)


class NewSearchScreen(StyledAhead, Screen):
    AUTO_FOCUS = "#problem"  # the first field, not the scrolling form around it (focused, it shows nothing)
    BINDINGS = [Binding("escape", "back", "Back", id="new.back"),
                Binding("ctrl+r", "start", "Start", id="new.start")]

    def compose(self) -> ComposeResult:
        from engine.problems import builtin_problems

        yield Header()
        yield Static("New search — fill in, check the estimate, then Enter in a field (or Ctrl+R) starts it",
                     id="banner")
        with VerticalScroll(id="form"):
            with Horizontal():
                yield Label("problem")
                yield Select([(n, n) for n in builtin_problems()], value="softmax", id="problem",
                             allow_blank=False, compact=True)
            with Horizontal():
                yield Label("or a path")
                yield OrderedInput(placeholder="path/to/problem.py (overrides the list)", id="path",
                                   compact=True)
            for ff in options.form_fields():  # declared by the configuration's parts
                with Horizontal():
                    yield Label(ff.label)
                    if ff.choices is not None:
                        yield Select([(c, c) for c in ff.choices], value=ff.default, id=ff.name,
                                     allow_blank=False, compact=True)  # (languages: relabelled on mount)
                    else:
                        yield OrderedInput(ff.default, placeholder=ff.hint, type=ff.kind, id=ff.name,  # type: ignore[arg-type]
                                           compact=True)
            yield Static("", id="estimate")
            yield Static("", id="form-error", classes="error")
            yield Button("Start", id="start", variant="success")
        yield SteadyFooter(compact=True)

    auto_backend = "cuda"  # what `auto` means here, once known (the estimate's prompts differ a little)
    _estimate_due = False

    async def on_mount(self) -> None:
        self.auto_backend = warm.auto_backend() or self.auto_backend
        self._relabel_languages()
        self._update_estimate()
        if warm.auto_backend() is None:
            try:
                self.auto_backend = await asyncio.to_thread(warm.resolve_auto)
            except Exception:
                return
            self._relabel_languages()
            self._update_estimate()

    def _label(self, choice: str) -> str:
        """A language choice as the form shows it: what it is on the backend the run will use ("cuda"
        is C++ on the cpu backend)."""
        from engine.evaluate import languages

        backend = self._backend()
        names = [n for n in choice.split(",") if n in languages.names()]
        shown = " + ".join(languages.get(n).label(backend) for n in names)
        return f"{choice}: {shown}" if shown and shown.lower() != choice else choice

    def _backend(self) -> str:
        """The backend the form's run would use (`auto` as resolved on this machine)."""
        chosen = str(self.query_one("#backend", Select).value)
        return chosen if chosen in ("cpu", "cuda") else self.auto_backend

    def _relabel_languages(self) -> None:
        """The language list in the words of the backend now chosen."""
        select = self.query_one("#languages", Select)
        value = select.value
        with select.prevent(Select.Changed):
            choices = next(ff.choices or () for ff in options.form_fields() if ff.name == "languages")
            select.set_options([(self._label(c), c) for c in choices])
            select.value = value

    @on(Select.Changed, "#backend")
    def _backend_changed(self) -> None:
        self._relabel_languages()

    @on(Input.Changed)
    @on(Select.Changed)
    def _changed(self) -> None:
        """Once for a burst of changes (every field says it changed as the form mounts)."""
        if not self._estimate_due:
            self._estimate_due = True
            self.call_later(self._update_estimate)

    def _request(self) -> RunRequest:
        """The form as a run request; ValueError (one line) on a bad field."""
        values = {"problem": str(self.query_one("#problem", Select).value),
                  "path": self.query_one("#path", Input).value}
        for ff in options.form_fields():
            widget = self.query_one(f"#{ff.name}")
            values[ff.name] = str(widget.value) if isinstance(widget, Select) else widget.value  # type: ignore[attr-defined]
        return form_request(values)

    def _update_estimate(self) -> None:
        """The engine's pre-run estimate (engine.launch.estimate_run, as `ktree run --estimate`
        prints it). The problem is loaded in a thread the first time (it imports torch and makes
        the reference's inputs); the estimate follows when it is."""
        from engine.launch import UsageError, estimate_run
        from engine.launch.estimate import format_estimate

        self._estimate_due = False
        box = self.query_one("#estimate", Static)
        try:
            request = self._request()
            problem = warm.loaded_problem(request.problem)
            if problem is None:
                box.update(f"estimate: loading {request.problem}…")
                self.run_worker(partial(self._load_problem, request.problem), group="problem", exclusive=True)
                return
            chosen = request.placement.backend
            backend = chosen if chosen != "auto" else self.auto_backend
            result = estimate_run(request, backend, problem=problem)
        except (ValueError, UsageError) as exc:
            box.update(f"estimate: — ({exc})")
            return
        except Exception as exc:  # anything else: say it, in one line
            box.update(f"estimate: — ({type(exc).__name__}: {exc})")
            return
        scripted = all(m.startswith("scripted:") for m in result["models"])
        note = "  (scripted: canned answers, no LLM: $0 in fact)" if scripted else ""
        text = f"Pre-run estimate{note}\n{format_estimate(result)}"
        box.update(text)
        # a callable, not a coroutine: a worker cancelled before it starts leaves nothing un-awaited
        self.run_worker(partial(self._say_degenerate, problem, text), group="degenerate", exclusive=True)

    async def _load_problem(self, spec: str) -> None:
        """Load the form's problem in a thread, then estimate (or say why it cannot be used)."""
        from engine.launch import UsageError

        try:
            await asyncio.to_thread(warm.load_problem, spec)
        except UsageError as exc:
            self.query_one("#estimate", Static).update(f"estimate: — ({exc})")
            return
        except Exception as exc:
            self.query_one("#estimate", Static).update(f"estimate: — ({type(exc).__name__}: {exc})")
            return
        self._update_estimate()

    async def _say_degenerate(self, problem: Problem, text: str) -> None:
        """A degenerate problem (its reference ignores its inputs: engine.problems) said above the
        estimate; checked in a thread (it runs the reference, once per file)."""
        from engine.problems import DEGENERATE_LINE

        try:
            degenerate = await asyncio.to_thread(lambda: problem.degenerate)
        except Exception:
            return
        if degenerate:
            self.query_one("#estimate", Static).update(f"problem {DEGENERATE_LINE}\n{text}")

    @on(Button.Pressed, "#start")
    @on(Input.Submitted)
    async def _start_pressed(self) -> None:
        """The Start button, or Enter in a text field (a list's Enter opens its choices)."""
        await self.action_start()

    async def action_start(self) -> None:
        from engine.launch import UsageError, prepare_run

        error = self.query_one("#form-error", Static)
        try:
            request = self._request()
        except ValueError as exc:
            error.update(str(exc))
            return
        error.update("preparing…")
        try:
            # In a thread: importing the problem, probing the sandbox and setting up providers block.
            prepared = await asyncio.to_thread(prepare_run, request)
        except UsageError as exc:
            error.update(str(exc))
            return
        error.update("")
        self.app.pop_screen()
        await self.app.start_search(prepared.search)  # type: ignore[attr-defined]

    def action_back(self) -> None:
        self.app.pop_screen()
