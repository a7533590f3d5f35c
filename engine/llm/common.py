"""What the HTTP providers share: one-line error messages with the key masked, why a connection
failed, tenacity's retry loop, token counts read defensively."""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Iterator
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

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
