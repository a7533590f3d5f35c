"""The new-search form: problem, provider and models, shape, backend, budget; a pre-run estimate."""

from __future__ import annotations

import asyncio
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Footer, Header, Input, Label, Select, Static

from engine.domain import PROVIDER_CHOICES, STRATEGIES

SHAPE = [("rounds", 2), ("ideas", 3), ("variants", 2), ("top", 2)]


class NewSearchScreen(Screen):
    BINDINGS = [Binding("escape", "back", "Back", id="new.back"),
                Binding("ctrl+r", "start", "Start", id="new.start")]

    def compose(self) -> ComposeResult:
        from engine.problems import builtin_problems

        yield Header()
        yield Static("New search — fill in, check the estimate, Start (Ctrl+R)", id="banner")
        with VerticalScroll(id="form"):
            with Horizontal():
                yield Label("problem")
                yield Select([(n, n) for n in builtin_problems()], value="softmax", id="problem",
                             allow_blank=False, compact=True)
            with Horizontal():
                yield Label("or a path")
                yield Input(placeholder="path/to/problem.py (overrides the list)", id="path", compact=True)
            with Horizontal():
                yield Label("provider")
                yield Select([(p, p) for p in PROVIDER_CHOICES], value="auto", id="provider", allow_blank=False,
                             compact=True)
            with Horizontal():
                yield Label("models")
                yield Input(placeholder="comma-separated [provider:]model, e.g. openai:o3", id="models",
                            compact=True)
            for name, default in SHAPE:
                with Horizontal():
                    yield Label(name)
                    yield Input(str(default), type="integer", id=name, compact=True)
            with Horizontal():
                yield Label("strategy")
                yield Select([(x, x) for x in STRATEGIES], value="tree", id="strategy",
                             allow_blank=False, compact=True)
            with Horizontal():
                yield Label("backend")
                yield Select([(b, b) for b in ("auto", "cuda", "cpu")], value="auto", id="backend",
                             allow_blank=False, compact=True)
            with Horizontal():
                yield Label("budget USD")
                yield Input(placeholder="none", type="number", id="budget_usd", compact=True)
            with Horizontal():
                yield Label("budget tokens")
                yield Input(placeholder="none", type="integer", id="budget_tokens", compact=True)
            yield Static("", id="estimate")
            yield Static("", id="form-error", classes="error")
            yield Button("Start", id="start", variant="success")
        yield Footer(compact=True)

    auto_backend = "cuda"  # what `auto` means here, once known (the estimate's prompts differ a little)

    async def on_mount(self) -> None:
        self._update_estimate()
        try:
            from engine.cli import resolve_backend

            self.auto_backend, _ = await asyncio.to_thread(resolve_backend, "auto")
        except Exception:
            return
        self._update_estimate()

    @on(Input.Changed)
    @on(Select.Changed)
    def _changed(self) -> None:
        self._update_estimate()

    def _values(self) -> dict[str, Any]:
        """The form as run arguments; ValueError (one line) on a bad field."""
        v: dict[str, Any] = {}
        path = self.query_one("#path", Input).value.strip()
        v["problem"] = path or str(self.query_one("#problem", Select).value)
        v["provider"] = str(self.query_one("#provider", Select).value)
        v["backend"] = str(self.query_one("#backend", Select).value)
        v["strategy"] = str(self.query_one("#strategy", Select).value)
        v["models"] = [m.strip() for m in self.query_one("#models", Input).value.split(",") if m.strip()]
        for name, _ in SHAPE:
            text = self.query_one(f"#{name}", Input).value.strip()
            if not text.isdigit() or int(text) < 1:
                raise ValueError(f"{name}: a whole number of at least 1")
            v[name] = int(text)
        for name, kind in (("budget_usd", float), ("budget_tokens", int)):
            text = self.query_one(f"#{name}", Input).value.strip()
            try:
                v[name] = kind(text) if text else None
            except ValueError:
                raise ValueError(f"{name.replace('_', ' ')}: not a number: {text!r}") from None
            if v[name] is not None and v[name] <= 0:
                raise ValueError(f"{name.replace('_', ' ')}: must be positive")
        return v

    def _update_estimate(self) -> None:
        """The engine's pre-run estimate (engine.estimate, as `ktree run --estimate` prints it)."""
        from engine.config import ConfigError, load_config
        from engine.estimate import estimate, format_estimate
        from engine.llm.registry import auto_provider, parse_spec
        from engine.problems import ProblemError, load_problem
        from engine.search import SearchConfig

        box = self.query_one("#estimate", Static)
        try:
            v = self._values()
            problem = load_problem(v["problem"])
            try:
                config = load_config()
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
            provider = auto_provider(config) if v["provider"] == "auto" else v["provider"]
            specs = v["models"] or (config.default_models if v["provider"] == "auto" else [])
            models = [parse_spec(m, provider) for m in specs] or [(provider, "")]
            shape = SearchConfig(rounds=v["rounds"], ideas=v["ideas"], variants=v["variants"], top=v["top"],
                                 strategy=v["strategy"])
            backend = v["backend"] if v["backend"] != "auto" else self.auto_backend
            result = estimate(problem, shape, models, backend, config.prices)
        except (ValueError, ProblemError) as exc:
            box.update(f"estimate: — ({exc})")
            return
        except Exception as exc:  # an unparseable model spec and the like: say it, in one line
            box.update(f"estimate: — ({type(exc).__name__}: {exc})")
            return
        note = "  (scripted: canned answers, no LLM: $0 in fact)" if provider == "scripted" else ""
        box.update(f"Pre-run estimate{note}\n{format_estimate(result)}")

    @on(Button.Pressed, "#start")
    async def _start_pressed(self) -> None:
        await self.action_start()

    async def action_start(self) -> None:
        from engine.cli import UsageError, build_parser, prepare_search

        error = self.query_one("#form-error", Static)
        try:
            v = self._values()
        except ValueError as exc:
            error.update(str(exc))
            return
        argv = ["run", v["problem"], "--provider", v["provider"], "--backend", v["backend"],
                "--strategy", v["strategy"]]
        for name, _ in SHAPE:
            argv += [f"--{name}", str(v[name])]
        for m in v["models"]:
            argv += ["--model", m]
        if v["budget_usd"]:
            argv += ["--budget-usd", str(v["budget_usd"])]
        if v["budget_tokens"]:
            argv += ["--budget-tokens", str(v["budget_tokens"])]
        try:
            args = build_parser().parse_args(argv)
            error.update("preparing…")
            prepared = await asyncio.to_thread(prepare_search, args)
        except UsageError as exc:
            error.update(str(exc))
            return
        except SystemExit:
            error.update("invalid arguments: " + " ".join(argv))
            return
        error.update("")
        self.app.pop_screen()
        await self.app.start_search(prepared.search)  # type: ignore[attr-defined]

    def action_back(self) -> None:
        self.app.pop_screen()
