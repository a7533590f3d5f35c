"""The user's config file: `$KTREE_CONFIG` or `$XDG_CONFIG_HOME/ktree/config.toml`.

    [keys]                       # API keys (the environment's OPENAI_API_KEY etc. win)
    openai = "sk-..."
    gemini = "..."

    [models]
    default = ["openai:o3", "gemini:gemini-2.5-pro"]   # used when no --model is given

    [openai-compatible]
    base_url = "http://127.0.0.1:8000/v1"

    [prices."my-model"]          # USD per million tokens, overriding the built-in table
    input = 1.0
    output = 4.0

    [bindings]                   # TUI keys by binding id (see the README's TUI section)
    prune = "delete"
    pin = ["p", "ctrl+t"]
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import settings


class ConfigError(Exception):
    """An unreadable or malformed config file (one line)."""


@dataclass(frozen=True)
class Config:
    path: Path | None = None
    keys: dict[str, str] = field(default_factory=dict)
    default_models: list[str] = field(default_factory=list)
    base_url: str | None = None
    prices: dict[str, dict[str, float]] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)


def config_path() -> Path:
    if settings.get("KTREE_CONFIG"):
        return Path(settings.get("KTREE_CONFIG"))
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "ktree" / "config.toml"


def load_config(path: Path | None = None) -> Config:
    path = path or config_path()
    if not path.exists():
        return Config()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {path} is not valid TOML: {exc}") from None
    try:
        keys = {str(k): str(v) for k, v in (data.get("keys") or {}).items()}
        models = data.get("models") or {}
        default = models.get("default") or []
        if isinstance(default, str):
            default = [default]
        prices = {str(m): {k: float(v) for k, v in p.items()}
                  for m, p in (data.get("prices") or {}).items()}
        base_url = (data.get("openai-compatible") or {}).get("base_url")
    except (AttributeError, TypeError, ValueError) as exc:
        raise ConfigError(f"config {path} has a malformed entry: {exc}") from None
    return Config(path=path, keys=keys, default_models=[str(m) for m in default],
                  base_url=base_url, prices=prices, raw=data)
