"""What a completion costs: a table of list prices (prices.toml, USD per 1M tokens) that a user's
config can extend or override.

Reasoning tokens are billed at the output price (OpenAI and Gemini both do so). An unknown model
costs 0.0: a self-hosted model is free, and a missing price is not an error.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from engine.llm.base import Usage

TABLE = Path(__file__).with_name("prices.toml")

# Characters that may follow a table key in a longer model name ("o3-2025-04-16", "gpt-4o:latest"),
# so that "gpt-4.1" does not price "gpt-4.10" nor "o1" price "o1x".
_SUFFIX_STARTS = "-_:@"


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float


def _price(model: str, entry: object) -> Price:
    """A Price from a table or config entry: {"input": 1.0, "output": 2.0} (or the field names)."""
    if not isinstance(entry, Mapping):
        raise ValueError(f"price for {model!r} must be a table like {{input = 1.0, output = 2.0}}: {entry!r}")
    values = []
    for short, long in (("input", "input_per_mtok"), ("output", "output_per_mtok")):
        value = entry.get(short, entry.get(long))
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"price for {model!r} needs a non-negative number {short!r} (USD per 1M tokens)")
        values.append(float(value))
    return Price(*values)


def _normalize(model: str) -> str:
    model = model.strip().lower()
    return model.removeprefix("models/")


class Prices:
    """A price table. Build it with Prices.load()."""

    def __init__(self, table: Mapping[str, Price]):
        self._table = {_normalize(k): v for k, v in table.items()}

    @classmethod
    def load(cls, overrides: Mapping[str, Mapping] | None = None) -> Prices:
        """The built-in table (prices.toml), updated with `overrides` from a user config:
        {"my-model": {"input": 1.0, "output": 2.0}} in USD per 1M tokens."""
        raw = tomllib.loads(TABLE.read_text())["models"]
        table = {model: _price(model, entry) for model, entry in raw.items()}
        for model, entry in (overrides or {}).items():
            table[model] = _price(model, entry)
        return cls(table)

    def get(self, model: str) -> Price | None:
        """The price of `model`: its own entry, else the longest key it starts with, followed by a
        suffix ("o3-2025-04-16" -> "o3"); a leading "models/" is ignored. None if unknown."""
        name = _normalize(model)
        if name in self._table:
            return self._table[name]
        matches = [key for key in self._table if name.startswith(key) and name[len(key)] in _SUFFIX_STARTS]
        return self._table[max(matches, key=len)] if matches else None

    def known(self, model: str) -> bool:
        return self.get(model) is not None

    def cost_usd(self, model: str, usage: Usage) -> float:
        """USD for one call: input at the input price, output and reasoning at the output price;
        0.0 for an unknown model."""
        price = self.get(model)
        if price is None:
            return 0.0
        return (usage.input * price.input_per_mtok
                + (usage.output + usage.reasoning) * price.output_per_mtok) / 1_000_000
