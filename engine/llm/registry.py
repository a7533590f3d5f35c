"""From `--provider` / `--model` / config to the (provider, model) pairs a search uses.

A model spec is `provider:model` (`openai:o3`, `gemini:gemini-2.5-pro`,
`openai-compatible:qwen2.5-coder`) or a bare model name for the `--provider` given. Several
specs mix models in one search, used round-robin across calls. What each provider is (its key,
default model, factory) is its record in engine.llm.providers.
"""

from __future__ import annotations

import os
from typing import Any

from engine.config import Config
from engine.llm import providers
from engine.llm.base import LLM_TIMEOUT_S, Provider
from engine.llm.providers import PROVIDERS, ProviderSetupError, ProviderSpec, Setup

__all__ = ["ProviderSetupError", "auto_provider", "build_models", "parse_spec"]


def auto_provider(config: Config) -> str:
    """What `--provider auto` means: a key in the environment or config picks a real LLM (the
    first provider marked `auto` with one); with none, the offline scripted provider."""
    for spec in PROVIDERS.values():
        if spec.auto and _key(spec, config):
            return spec.name
    return providers.OFFLINE


def parse_spec(spec: str, default_provider: str) -> tuple[str, str]:
    """`provider:model` when the prefix names a provider; otherwise the whole spec is a model of
    the default provider. An unknown prefix is an error (`opnai:gpt-4o`), except for a provider
    whose model names are a server's own (an openai-compatible server: Ollama-style tags like
    `qwen2.5-coder:7b` pass through) or that start with a prefix of its own (OpenAI's
    fine-tuned models, `ft:gpt-4o-mini:org::id`)."""
    provider, sep, model = spec.partition(":")
    if sep and provider in PROVIDERS:
        return provider, model
    default = PROVIDERS.get(default_provider)
    own_names = default is not None and (default.server_names or provider in default.model_prefixes)
    if sep and not own_names:
        known = ", ".join(PROVIDERS)
        raise ProviderSetupError(f"--model {spec}: unknown provider {provider!r} (known: {known}); a model"
                                 " of an OpenAI-compatible server goes with --provider openai-compatible")
    return default_provider, spec


def _key(spec: ProviderSpec, config: Config) -> str | None:
    for var in spec.key_env:
        if os.environ.get(var):
            return os.environ[var]
    return config.keys.get(spec.name)


def build_models(
    specs: list[str], provider: str, config: Config, *, problem: str, backend: str,
    seed: int = 0, base_url: str | None = None, timeout_s: float = LLM_TIMEOUT_S,
) -> list[tuple[Provider, str]]:
    """One provider instance per provider name (so its concurrency limit is shared)."""
    if provider == providers.AUTO:
        specs = specs or config.default_models
        provider = auto_provider(config)
    providers.get(provider)  # an unknown one: said here
    pairs = [parse_spec(s, provider) for s in specs] if specs else [(provider, "")]
    instances: dict[str, Any] = {}
    out: list[tuple[Provider, str]] = []
    for name, model in pairs:
        spec = providers.get(name)
        if not model:
            if spec.default_model is None:
                raise ProviderSetupError(f"provider {name} needs --model (the server's model name)")
            model = spec.default_model
        if name not in instances:
            instances[name] = _make(spec, config, problem=problem, backend=backend, seed=seed,
                                    base_url=base_url, timeout_s=timeout_s)
        out.append((instances[name], model))
    return out


def _make(spec: ProviderSpec, config: Config, *, problem: str, backend: str, seed: int,
          base_url: str | None, timeout_s: float) -> Provider:
    prices = None
    if spec.priced:
        from engine.llm.prices import Prices

        prices = Prices.load(config.prices)
    key = _key(spec, config)
    if spec.key_required and not key:
        envs = " or ".join(spec.key_env)
        raise ProviderSetupError(f"provider {spec.name} needs an API key: set {envs}, or [keys] {spec.name}"
                                 " in the config file")
    return spec.make(Setup(name=spec.name, key=key, base_url=base_url, timeout_s=timeout_s, prices=prices,
                           config=config, problem=problem, backend=backend, seed=seed))
