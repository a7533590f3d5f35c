"""The Gemini provider, through the official google-genai SDK (client.aio.models.generate_content).

The SDK's own retries are switched off (HttpRetryOptions(attempts=1): besides making its tenacity loop
try once, setting retry_options also stops the SDK's hidden retry of aiohttp connection errors), so
ours count: tenacity retries HTTP 408/429/5xx, timeouts and connection errors with random exponential
backoff, and Completion.attempts says how many requests a completion took. Every failure comes out of
complete() as a one-line LLMError (LLMAuthError for a rejected key) that names the provider and never
contains the API key.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pydantic
from google import genai
from google.genai import errors, types

from engine.llm.base import LLM_TIMEOUT_S, Completion, LLMError, Message, Usage
from engine.llm.common import Failure, HTTPProvider, clean_message, count, short
from engine.llm.prices import Prices
from engine.llm.providers import Setup

try:  # the SDK's async transport when installed (it falls back to httpx2)
    import aiohttp

    _AIOHTTP_NETWORK: tuple[type[BaseException], ...] = (
        aiohttp.ClientConnectionError, aiohttp.ClientPayloadError,
    )
except ImportError:  # pragma: no cover
    _AIOHTTP_NETWORK = ()
try:
    import httpx2

    _HTTPX_NETWORK: tuple[type[BaseException], ...] = (httpx2.TransportError,)
    _HTTPX_TIMEOUT: tuple[type[BaseException], ...] = (httpx2.TimeoutException,)
except ImportError:  # pragma: no cover
    _HTTPX_NETWORK = _HTTPX_TIMEOUT = ()

RETRY_STATUSES = frozenset({408, 429})  # and every 5xx
THINKING_BUDGETS = {"low": 1024, "medium": 8192, "high": 24576}
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/"


def thinking_budget(reasoning: str | None, name: str = "gemini") -> int | None:
    """The thinking budget for a `reasoning` setting: an integer string as is (Gemini reads 0 as
    "no thinking" and -1 as "dynamic"), low/medium/high as 1024/8192/24576 tokens, None unset."""
    if reasoning is None:
        return None
    value = reasoning.strip().lower()
    if value in THINKING_BUDGETS:
        return THINKING_BUDGETS[value]
    try:
        return int(value)
    except ValueError:
        raise LLMError(clean_message(
            f"{name}: unknown reasoning setting {reasoning!r}: use low, medium, high or a token budget"
        )) from None


def _is_timeout(exc: BaseException) -> bool:
    # aiohttp's timeouts are asyncio.TimeoutError, which is the builtin TimeoutError since 3.11.
    return isinstance(exc, TimeoutError | asyncio.TimeoutError) or isinstance(exc, _HTTPX_TIMEOUT)


def _is_network(exc: BaseException) -> bool:
    return isinstance(exc, _AIOHTTP_NETWORK + _HTTPX_NETWORK) or isinstance(exc, ConnectionError)


def _key_rejected(exc: errors.APIError) -> bool:
    """Gemini answers a bad key with HTTP 400 INVALID_ARGUMENT and reason API_KEY_INVALID."""
    return exc.code == 400 and (
        "API_KEY_INVALID" in str(exc.details) or "API key not valid" in str(exc.message)
    )


class GeminiProvider(HTTPProvider):
    """generateContent through google-genai's async client.

    Messages: a "system" message becomes the system_instruction, "user"/"assistant" messages the
    contents (roles user/model). `reasoning` sets the thinking budget (see thinking_budget).
    Usage(input=prompt_token_count, output=candidates_token_count, reasoning=thoughts_token_count):
    Gemini counts thoughts apart from the candidates, and bills them at the output price.

    At most `max_concurrency` calls are in flight at once; a call holds its slot through its retries.
    latency_s covers the whole call (all attempts and the waits between them), not the wait for a slot.
    """

    auth_hint = "check GEMINI_API_KEY / GOOGLE_API_KEY"

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        name: str = "gemini",
        timeout_s: float = LLM_TIMEOUT_S,
        max_attempts: int = 5,
        backoff_s: float = 1.0,
        max_concurrency: int = 8,
        prices: Prices | None = None,
    ):
        super().__init__(api_key=api_key, name=name, timeout_s=timeout_s, max_attempts=max_attempts,
                         backoff_s=backoff_s, max_concurrency=max_concurrency, prices=prices)
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self._client = genai.Client(
            api_key=api_key,
            vertexai=False,
            http_options=types.HttpOptions(
                base_url=base_url,
                timeout=max(1, round(timeout_s * 1000)),  # milliseconds
                retry_options=types.HttpRetryOptions(attempts=1),  # no SDK retries: ours count
            ),
        )

    async def aclose(self) -> None:
        """Closes the HTTP sessions (optional: they are closed at exit anyway)."""
        await self._client.aio.aclose()

    async def complete(
        self,
        messages: list[Message],
        model: str,
        max_output_tokens: int,
        reasoning: str | None = None,
    ) -> Completion:
        system, contents = self._contents(messages)
        config = types.GenerateContentConfig(
            system_instruction=system,
            max_output_tokens=max_output_tokens,
            thinking_config=(types.ThinkingConfig(thinking_budget=budget)
                             if (budget := thinking_budget(reasoning, self.name)) is not None else None),
        )
        return await self._request(
            lambda: self._client.aio.models.generate_content(model=model, contents=contents, config=config),
            model,
        )

    # -- internals ---------------------------------------------------------------------------------

    def _contents(self, messages: list[Message]) -> tuple[str | None, list[types.Content]]:
        system: list[str] = []
        contents: list[types.Content] = []
        for m in messages:
            if m.role == "system":
                system.append(m.content)
            elif m.role in ("user", "assistant"):
                role = "user" if m.role == "user" else "model"
                contents.append(types.Content(role=role, parts=[types.Part(text=m.content)]))
            else:
                raise self._fail(f"unknown message role {m.role!r}")
        return ("\n\n".join(system) if system else None), contents

    @staticmethod
    def _transient(exc: BaseException) -> bool:
        if isinstance(exc, errors.APIError):
            return isinstance(exc.code, int) and (exc.code in RETRY_STATUSES or exc.code >= 500)
        return _is_timeout(exc) or _is_network(exc)

    def _classify(self, exc: Exception) -> Failure:
        if isinstance(exc, errors.APIError):
            return Failure("status", exc.code, short(exc.message or exc.status or exc.details),
                           auth=exc.code in (401, 403) or _key_rejected(exc))
        if _is_timeout(exc):
            return Failure("timeout")
        if _is_network(exc):
            return Failure("network")
        if isinstance(exc, json.JSONDecodeError | errors.UnknownApiResponseError | pydantic.ValidationError):
            return Failure("malformed")
        return Failure("other")

    def _parse(self, response: Any) -> tuple[str, Usage]:
        candidates = getattr(response, "candidates", None)
        if not candidates:
            feedback = getattr(response, "prompt_feedback", None)
            blocked = getattr(feedback, "block_reason", None)
            why = f" (prompt blocked: {getattr(blocked, 'value', blocked)})" if blocked else ""
            raise self._fail(f"malformed reply: no candidates{why}")
        candidate = candidates[0]
        parts = getattr(getattr(candidate, "content", None), "parts", None) or []
        text = "".join(p.text for p in parts if isinstance(p.text, str) and not p.thought)
        if not text.strip():
            finish = getattr(candidate, "finish_reason", None)
            why = f"finish_reason={getattr(finish, 'value', finish)}"
            if why.endswith("MAX_TOKENS"):
                why += "; the output budget may have been spent on thinking"
            raise self._fail(f"malformed reply: no text ({why})")
        meta = getattr(response, "usage_metadata", None)
        usage = Usage(
            input=count(getattr(meta, "prompt_token_count", None)),
            output=count(getattr(meta, "candidates_token_count", None)),
            reasoning=count(getattr(meta, "thoughts_token_count", None)),
        )
        return text, usage


def make(setup: Setup) -> GeminiProvider:
    """The `gemini` provider (engine.llm.providers)."""
    return GeminiProvider(api_key=setup.key or "", base_url=setup.base_url, timeout_s=setup.timeout_s,
                          prices=setup.prices)
