"""An LLM provider is one record (engine.llm.providers) plus its module (issue 47): a toy one,
added here as a record whose factory is this file's `make`, is offered by `--provider` and the
new-search form, picked by `--provider auto` when its key is set, and made
by the registry with its default model, with no other edit."""

from __future__ import annotations

import argparse

import pytest

from engine import options
from engine.cli import build_parser
from engine.config import Config
from engine.llm import providers
from engine.llm.base import Completion, Message, Usage
from engine.llm.providers import ProviderSetupError, ProviderSpec, Setup
from engine.llm.registry import auto_provider, build_models


class ToyProvider:
    name = "toy"
    scripted = False

    def __init__(self, setup: Setup):
        self.setup = setup

    async def complete(self, messages: list[Message], model: str, max_output_tokens: int,
                       reasoning: str | None = None) -> Completion:
        return Completion("[]", Usage(), 0.0, 0.0, model)


def make(setup: Setup) -> ToyProvider:
    return ToyProvider(setup)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(providers.PROVIDERS, "toy", ProviderSpec(
        "toy", f"{__name__}:make", key_env=("TOY_API_KEY",), default_model="toy-1", auto=True, priced=False))
    for spec in providers.PROVIDERS.values():
        for var in spec.key_env:
            monkeypatch.delenv(var, raising=False)


def _choices(parser: argparse.ArgumentParser, command: str, dest: str) -> tuple[str, ...]:
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]  # type: ignore[union-attr]
    return tuple(next(a for a in sub._actions if a.dest == dest).choices)


def test_a_toy_provider_is_offered_everywhere(toy: None):
    assert providers.names() == ("openai", "gemini", "openai-compatible", "scripted", "toy")
    assert _choices(build_parser(), "run", "provider") == ("auto", *providers.names())
    form = {ff.name: ff for ff in options.form_fields()}
    assert form["provider"].choices == ("auto", "openai", "gemini", "openai-compatible", "scripted", "toy")
    args = build_parser().parse_args(["run", "softmax", "--provider", "toy"])
    assert options.from_args(options.LLMSettings, args).provider == "toy"
    options.check(options.LLMSettings(provider="toy"))  # a request built elsewhere passes the same check


def test_a_toy_provider_is_made_from_its_record(toy: None, monkeypatch: pytest.MonkeyPatch):
    config = Config()
    with pytest.raises(ProviderSetupError, match="provider toy needs an API key: set TOY_API_KEY"):
        build_models([], "toy", config, problem="softmax", backend="cpu")
    assert auto_provider(config) == "scripted"
    monkeypatch.setenv("TOY_API_KEY", "toy-key")
    assert auto_provider(config) == "toy"
    [(made, model)] = build_models([], "auto", config, problem="softmax", backend="cpu", timeout_s=5.0)
    assert isinstance(made, ToyProvider) and model == "toy-1"
    assert made.setup.key == "toy-key" and made.setup.timeout_s == 5.0 and made.setup.prices is None
    [(_, model)] = build_models(["toy:toy-2"], "openai", config, problem="softmax", backend="cpu")
    assert model == "toy-2"
    assert providers.default_model("toy") == "toy-1" and not providers.priced("toy")
