"""From `--provider` / `--model` / config to the (provider, model) pairs a search uses.

A model spec is `provider:model` (`openai:o3`, `gemini:gemini-2.5-pro`,
`openai-compatible:qwen2.5-coder`) or a bare model name for the `--provider` given. Several
specs mix models in one search, used round-robin across calls.
"""

from __future__ import annotations

import os
from typing import Any

from engine.config import Config
from engine.domain import PROVIDERS
from engine.evaluate import settings
from engine.llm.base import Provider

DEFAULT_MODELS = {"openai": "o3", "gemini": "gemini-2.5-pro", "scripted": "scripted"}
KEY_ENV = {"openai": ("OPENAI_API_KEY",), "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
           "openai-compatible": ("OPENAI_COMPATIBLE_API_KEY",)}


class ProviderSetupError(Exception):
    """A provider that cannot be set up (unknown, no key, no base URL): one line, exit 2."""


def auto_provider(config: Config) -> str:
    """What `--provider auto` means: a key in the environment or config picks a real LLM;
    with none, the offline scripted provider."""
    for name in ("openai", "gemini"):
        if _key(name, config):
            return name
    return "scripted"


def parse_spec(spec: str, default_provider: str) -> tuple[str, str]:
    """`provider:model` when the prefix names a provider; otherwise the whole spec is a model of
    the default provider. An unknown prefix is an error (`opnai:gpt-4o`), except for an
    openai-compatible server, whose model names are its own (Ollama-style tags like
    `qwen2.5-coder:7b` pass through), and OpenAI's fine-tuned models (`ft:gpt-4o-mini:org::id`)."""
    provider, sep, model = spec.partition(":")
    if sep and provider in PROVIDERS:
        return provider, model
    own_names = default_provider == "openai-compatible" or (default_provider == "openai" and provider == "ft")
    if sep and not own_names:
        known = ", ".join(PROVIDERS)
        raise ProviderSetupError(f"--model {spec}: unknown provider {provider!r} (known: {known}); a model"
                                 " of an OpenAI-compatible server goes with --provider openai-compatible")
    return default_provider, spec


def _key(name: str, config: Config) -> str | None:
    for var in KEY_ENV.get(name, ()):
        if os.environ.get(var):
            return os.environ[var]
    return config.keys.get(name)


def build_models(
    specs: list[str], provider: str, config: Config, *, problem: str, backend: str,
    seed: int = 0, base_url: str | None = None, timeout_s: float = 600.0,
) -> list[tuple[Provider, str]]:
    """One provider instance per provider name (so its concurrency limit is shared)."""
    if provider == "auto":
        specs = specs or config.default_models
        provider = auto_provider(config)
    if provider not in PROVIDERS:
        raise ProviderSetupError(f"unknown provider {provider!r} (known: {', '.join(PROVIDERS)})")
    pairs = [parse_spec(s, provider) for s in specs] if specs else [(provider, "")]
    instances: dict[str, Any] = {}
    out: list[tuple[Provider, str]] = []
    for name, model in pairs:
        if not model:
            if name not in DEFAULT_MODELS:
                raise ProviderSetupError(f"provider {name} needs --model (the server's model name)")
            model = DEFAULT_MODELS[name]
        if name not in instances:
            instances[name] = _make(name, config, problem=problem, backend=backend, seed=seed,
                                    base_url=base_url, timeout_s=timeout_s)
        out.append((instances[name], model))
    return out


def _make(name: str, config: Config, *, problem: str, backend: str, seed: int,
          base_url: str | None, timeout_s: float) -> Provider:
    if name == "scripted":
        from engine.llm.base import LLMError
        from engine.llm.scripted import ScriptedProvider

        try:
            return ScriptedProvider(problem, backend, seed=seed,
                                    latency_s=float(settings.get("KTREE_SCRIPTED_LATENCY", "0")))
        except LLMError as exc:
            raise ProviderSetupError(str(exc)) from None

    from engine.llm.prices import Prices

    prices = Prices.load(config.prices)
    key = _key(name, config)
    if name == "openai-compatible":
        url = base_url or config.base_url
        if not url:
            raise ProviderSetupError(
                "provider openai-compatible needs --base-url (or [openai-compatible] base_url"
                " in the config file)")
        from engine.llm.openai_provider import OpenAIProvider

        # Local servers (vLLM, Ollama, llama.cpp) take any key; the SDK wants a non-empty one.
        return OpenAIProvider(api_key=key or "none", base_url=url, name=name,
                              timeout_s=timeout_s, prices=prices)
    if not key:
        envs = " or ".join(KEY_ENV[name])
        raise ProviderSetupError(f"provider {name} needs an API key: set {envs}, or [keys] {name}"
                                 " in the config file")
    if name == "openai":
        from engine.llm.openai_provider import OpenAIProvider

        return OpenAIProvider(api_key=key, base_url=base_url, timeout_s=timeout_s, prices=prices)
    from engine.llm.gemini_provider import GeminiProvider

    return GeminiProvider(api_key=key, base_url=base_url, timeout_s=timeout_s, prices=prices)
