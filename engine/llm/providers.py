"""The LLM providers ktree knows, one record each: its name, the environment variables holding its
API key, the model it uses when none is named, how a model name of its own may hold a colon,
whether `--provider auto` picks it, whether its calls are priced (engine.llm.prices), and its
factory (a module's function that makes it from a `Setup`, imported only when it is used).

The CLI's `--provider` choices, the new-search form (engine.options) and the registry
(engine.llm.registry) all read this table: a new provider is one record here plus its module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.config import Config
    from engine.llm.base import Provider
    from engine.llm.prices import Prices


class ProviderSetupError(Exception):
    """A provider that cannot be set up (unknown, no key, no base URL): one line, exit 2."""


@dataclass(frozen=True)
class Setup:
    """What a provider's factory makes it from."""

    name: str  # the record's
    key: str | None  # from the environment (its key_env) or the config file's [keys]
    base_url: str | None  # --base-url
    timeout_s: float  # per call (--llm-timeout)
    prices: Prices | None  # None for a provider whose calls are not priced
    config: Config  # the user's config file (its base_url, ...)
    problem: str  # what the search is about (the scripted provider answers per problem)
    backend: str
    seed: int


@dataclass(frozen=True)
class ProviderSpec:
    name: str
    factory: str  # "module:function" taking a Setup, returning an engine.llm.base.Provider
    key_env: tuple[str, ...] = ()  # environment variables holding its key, the first set wins
    key_required: bool = True  # a call needs a key (a local server takes any: not required)
    default_model: str | None = None  # used when no model is named; None: --model is needed
    auto: bool = False  # `--provider auto` picks it when its key is set (in the table's order)
    priced: bool = True  # its calls cost what engine.llm.prices says; False: free (no table read)
    server_names: bool = False  # its models are named by a server: `qwen2.5-coder:7b` is one name
    model_prefixes: tuple[str, ...] = ()  # `prefix:...` is a model name of its own (OpenAI's `ft:`)

    def make(self, setup: Setup) -> Provider:
        module, _, function = self.factory.partition(":")
        factory: Callable[[Setup], Provider] = getattr(importlib.import_module(module), function)
        return factory(setup)


# The table, in the order `--provider` lists them (and `auto` tries them).
PROVIDERS: dict[str, ProviderSpec] = {spec.name: spec for spec in (
    ProviderSpec("openai", "engine.llm.openai_provider:make", key_env=("OPENAI_API_KEY",),
                 default_model="o3", auto=True, model_prefixes=("ft",)),
    ProviderSpec("gemini", "engine.llm.gemini_provider:make", key_env=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
                 default_model="gemini-2.5-pro", auto=True),
    ProviderSpec("openai-compatible", "engine.llm.openai_provider:make_compatible",
                 key_env=("OPENAI_COMPATIBLE_API_KEY",), key_required=False, server_names=True),
    ProviderSpec("scripted", "engine.llm.scripted:make", key_required=False, default_model="scripted",
                 priced=False),
)}
AUTO = "auto"  # `--provider auto`: a real provider when a key is set, else scripted
OFFLINE = "scripted"  # what `auto` means with no key


def names() -> tuple[str, ...]:
    return tuple(PROVIDERS)


def choices() -> tuple[str, ...]:
    """`--provider`'s choices: auto, then every provider."""
    return (AUTO, *PROVIDERS)


def get(name: str) -> ProviderSpec:
    try:
        return PROVIDERS[name]
    except KeyError:
        raise ProviderSetupError(f"unknown provider {name!r} (known: {', '.join(PROVIDERS)})") from None


def default_model(name: str) -> str:
    """The model a provider uses when none is named ("" where it needs one, or is unknown)."""
    spec = PROVIDERS.get(name)
    return (spec.default_model or "") if spec is not None else ""


def priced(name: str) -> bool:
    """Whether a provider's calls cost money (an unknown one: assumed so)."""
    spec = PROVIDERS.get(name)
    return spec is None or spec.priced
