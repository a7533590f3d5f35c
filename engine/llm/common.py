"""What the HTTP providers share: the HTTPProvider base (concurrency limit, counted retries,
one-line errors with the key masked), why a connection failed, token counts read defensively."""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from engine.llm.base import Completion, LLMAuthError, LLMError, Usage
from engine.llm.prices import Prices

MAX_MESSAGE_CHARS = 300
MAX_BACKOFF_S = 60.0  # the longest single wait between two attempts
RETRY_STATUSES = frozenset({408, 409, 429})  # and every 5xx


def clean_message(text: str, secret: str | None = None, limit: int = MAX_MESSAGE_CHARS) -> str:
    """One line of at most `limit` characters, with `secret` (the API key) masked out."""
    if secret and len(secret) >= 8:  # not a placeholder like "none" (local servers)
        text = text.replace(secret, "***")
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


def short(text: object, limit: int = 160) -> str:
    """A server's message shortened for a one-line error (HTML bodies reduced to their text)."""
    text = re.sub(r"<[^>]*>", " ", str(text))
    return clean_message(text, limit=limit)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def network_reason(exc: BaseException) -> str:
    """Why a connection failed, in a few words, from the exception and what caused it."""
    for e in _chain(exc):
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, socket.gaierror):
            return "host not found"
        if isinstance(e, ssl.SSLError):
            return "TLS error"
        if isinstance(e, ConnectionResetError):
            return "connection reset"
    messages = [str(e) for e in _chain(exc) if str(e)]
    return short(messages[-1], 80) if messages else type(exc).__name__


def plural(n: int, word: str = "attempt") -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def retrying(max_attempts: int, backoff_s: float, transient: Any) -> AsyncRetrying:
    """tenacity's retry loop: up to max_attempts tries, random exponential backoff between them
    (at most MAX_BACKOFF_S), retrying only the exceptions `transient(exc)` accepts; the last
    exception is re-raised as is."""
    return AsyncRetrying(
        stop=stop_after_attempt(max(1, max_attempts)),
        wait=wait_random_exponential(multiplier=backoff_s, max=MAX_BACKOFF_S),
        retry=retry_if_exception(transient),
        reraise=True,
    )


def count(value: object) -> int:
    """A token count from a reply: a non-negative int, anything else (None, absent) is 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@dataclass(frozen=True)
class Failure:
    """What a provider makes of an SDK exception, for the one-line error."""

    kind: str  # "status" | "timeout" | "network" | "malformed" | "other"
    code: int | None = None
    detail: str = ""
    auth: bool = False  # the key was rejected: fatal, never retried


class HTTPProvider:
    """The shared half of the HTTP providers: a concurrency limit, tenacity retries that count
    attempts, latency over the whole call, cost from the price table, one-line errors with the
    key masked. Subclasses say what is transient (`_transient`), what an exception means
    (`_classify`) and how to read a reply (`_parse`)."""

    scripted = False
    auth_hint = ""

    def __init__(self, *, api_key: str, name: str, timeout_s: float, max_attempts: int,
                 backoff_s: float, max_concurrency: int, prices: Prices | None):
        self.name = name
        self.timeout_s = timeout_s
        self.max_attempts = max(1, max_attempts)
        self.backoff_s = backoff_s
        self.prices = prices if prices is not None else Prices.load()
        self.base_url = ""
        self._api_key = api_key
        self._slots = asyncio.Semaphore(max(1, max_concurrency))

    async def _request(self, send: Callable[[], Awaitable[Any]], model: str) -> Completion:
        attempts = 0
        async with self._slots:
            started = time.perf_counter()
            try:
                async for attempt in retrying(self.max_attempts, self.backoff_s, self._transient):
                    with attempt:
                        attempts += 1
                        response = await send()
            except Exception as exc:  # noqa: BLE001 - every failure becomes an LLMError
                error = self._error(exc, attempts)
                error.attempts, error.latency_s = max(1, attempts), time.perf_counter() - started
                raise error from exc
            latency_s = time.perf_counter() - started
        text, usage = self._parse(response)
        return Completion(text, usage, self.prices.cost_usd(model, usage), latency_s, model, attempts)

    def _fail(self, message: str, cls: type[LLMError] = LLMError) -> LLMError:
        return cls(clean_message(f"{self.name}: {message}", self._api_key))

    def _error(self, exc: Exception, attempts: int) -> LLMError:
        if isinstance(exc, LLMError):
            return exc
        f = self._classify(exc)
        if f.kind == "status":
            if f.auth:
                extra = f" ({f.detail})" if f.code != 401 and f.detail else ""
                return self._fail(f"authentication failed (HTTP {f.code}): {self.auth_hint}{extra}",
                                  LLMAuthError)
            if self._transient(exc):
                return self._fail(f"HTTP {f.code} after {plural(attempts)}: {f.detail}")
            return self._fail(f"HTTP {f.code}: {f.detail}")
        if f.kind == "timeout":
            return self._fail(f"timed out after {self.timeout_s:g} s ({plural(attempts)})")
        if f.kind == "network":
            return self._fail(f"cannot reach {self.base_url} ({network_reason(exc)}; {plural(attempts)})")
        if f.kind == "malformed":
            return self._fail(f"malformed reply: not the expected JSON ({short(exc, 100)})")
        return self._fail(f"unexpected error: {type(exc).__name__}: {short(exc)}")

    @staticmethod
    def _transient(exc: BaseException) -> bool:
        raise NotImplementedError

    def _classify(self, exc: Exception) -> Failure:
        raise NotImplementedError

    def _parse(self, response: Any) -> tuple[str, Usage]:
        raise NotImplementedError
