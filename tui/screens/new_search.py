"""The new-search form: problem, provider and models, shape, backend, budget; a pre-run estimate."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Footer, Header, Input, Label, Select, Static

PROVIDERS = ["auto", "scripted", "openai", "gemini", "openai-compatible"]
SHAPE = [("rounds", 2), ("ideas", 3), ("variants", 2), ("top", 2)]


@dataclass(frozen=True)
class Estimate:
    calls: int
    fix_calls: int
    tokens: int
    cost_usd: float
    priced: bool  # False when no model in the run has a price (self-hosted, scripted)


def rough_estimate(problem_source: str, rounds: int, ideas: int, variants: int, top: int, fixes: int,
                   models: list[str], prices: Any) -> Estimate:
    """ktree's own rough pre-run estimate: every parent expanded, every variant answered; prompts
    sized from the problem file, replies at typical lengths (1k tokens of ideas, 3k of code)."""
    parents = 1 + top * (rounds - 1)
    idea_calls = parents
    impl_calls = parents * ideas * variants
    src_tokens = len(problem_source) // 4
    idea_tok = (src_tokens * 2 + 700) + 1000
    impl_tok = (src_tokens * 2 + 900) + 3000
    tokens = idea_calls * idea_tok + impl_calls * impl_tok
    names = [m.split(":", 1)[-1] for m in models] or [""]
    known = [prices.get(n) for n in names if n and prices.get(n) is not None]
    cost = 0.0
    if known:
        inp = sum(p.input_per_mtok for p in known) / len(known)
        out = sum(p.output_per_mtok for p in known) / len(known)
        in_tok = idea_calls * (src_tokens * 2 + 700) + impl_calls * (src_tokens * 2 + 900)
        cost = (in_tok * inp + (tokens - in_tok) * out) / 1e6
    return Estimate(idea_calls + impl_calls, impl_calls * fixes, tokens, cost, bool(known))


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
                yield Select([(p, p) for p in PROVIDERS], value="auto", id="provider", allow_blank=False,
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

    def on_mount(self) -> None:
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
        from engine.config import ConfigError, load_config
        from engine.llm.prices import Prices
        from engine.problems import ProblemError, load_problem

        box = self.query_one("#estimate", Static)
        try:
            v = self._values()
            problem = load_problem(v["problem"])
            try:
                config = load_config()
            except ConfigError:
                config = None
            from engine.llm.registry import DEFAULT_MODELS

            models = v["models"] or (config.default_models if config else [])
            if not models and v["provider"] in DEFAULT_MODELS:
                models = [DEFAULT_MODELS[v["provider"]]]
            prices = Prices.load(config.prices if config else None)
        except (ValueError, ProblemError) as exc:
            box.update(f"estimate: — ({exc})")
            return
        est = rough_estimate(problem.source, v["rounds"], v["ideas"], v["variants"], v["top"], 1, models,
                             prices)
        scripted = v["provider"] == "scripted"
        cost = ("$0 (scripted: canned answers, no LLM)" if scripted else
                f"≈ ${est.cost_usd:.2f}" if est.priced else "unknown (no price for these models)")
        budget = ""
        if v["budget_usd"] and est.priced and not scripted and est.cost_usd > v["budget_usd"]:
            budget = f" — over the ${v['budget_usd']:g} budget: the search stops when it is spent"
        box.update(f"Pre-run estimate (ktree's own rough count from the price table, an upper bound):\n"
                   f"{est.calls} LLM calls (+ up to {est.fix_calls} fix calls), ≈ {est.tokens:,} tokens,"
                   f" cost {cost}{budget}\nproblem {problem.name}: {problem.title}")

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
        argv = ["run", v["problem"], "--provider", v["provider"], "--backend", v["backend"]]
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
