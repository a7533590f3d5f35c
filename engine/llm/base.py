"""The one interface every provider implements, and the records it returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

LLM_TIMEOUT_S = 600.0  # the seconds one call may take, unless told (--llm-timeout)


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True)
class Usage:
    input: int = 0
    output: int = 0
    reasoning: int = 0


@dataclass(frozen=True)
class Completion:
    text: str
    usage: Usage
    cost_usd: float
    latency_s: float
    model: str
    attempts: int = 1  # HTTP requests made for this completion (1 = no retry)

    def __post_init__(self) -> None:
        # A JSON reply may hold lone surrogates ("\ud800"), which are not UTF-8 and would fail
        # the store's write; repaired once here, for every provider.
        try:
            self.text.encode("utf-8")
        except UnicodeEncodeError:
            object.__setattr__(self, "text", self.text.encode("utf-8", "replace").decode("utf-8"))


class LLMError(Exception):
    """A provider call that failed (auth, rate limit, server error, bad reply). `attempts` and
    `latency_s` say what the failure cost: HTTP requests made and seconds from the first to the
    give-up (the HTTP providers set them; 1 and 0.0 where nothing was sent)."""

    attempts: int = 1
    latency_s: float = 0.0


class LLMAuthError(LLMError):
    """The provider rejected the credentials (HTTP 401/403): fatal, the search stops."""


class Provider(Protocol):
    name: str
    scripted: bool

    async def complete(
        self,
        messages: list[Message],
        model: str,
        max_output_tokens: int,
        reasoning: str | None = None,
    ) -> Completion: ...
