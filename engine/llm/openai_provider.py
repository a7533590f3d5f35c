"""The OpenAI provider (Chat Completions through the official SDK), also used as "openai-compatible"
with a base_url: vLLM, Ollama, llama.cpp's server, OpenRouter.

Retries are ours, not the SDK's (it is built with max_retries=0): tenacity retries HTTP 408/409/429/5xx,
timeouts and connection errors with random exponential backoff, and Completion.attempts says how many
requests a completion took. Every failure comes out of complete() as a one-line LLMError (LLMAuthError
for a rejected key) that names the provider and never contains the API key.

The helpers (clean_message, network_reason, retrying) live in engine.llm.common.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import openai
import pydantic

from engine.llm.base import Completion, LLMAuthError, LLMError, Message, Usage
from engine.llm.common import RETRY_STATUSES, clean_message, count, network_reason, plural, retrying, short
from engine.llm.prices import Prices

# -- the provider ----------------------------------------------------------------------------------


class OpenAIProvider:
    """Chat Completions through openai.AsyncOpenAI.

    Usage: OpenAI's completion_tokens INCLUDE the reasoning tokens, so a Completion's usage is split
    as Usage(input=prompt_tokens, output=completion_tokens - reasoning_tokens,
    reasoning=reasoning_tokens): input + output + reasoning is what was billed, and cost_usd prices
    output and reasoning at the output price.

    At most `max_concurrency` calls are in flight at once; a call holds its slot through its retries.
    latency_s covers the whole call (all attempts and the waits between them), not the wait for a slot.
    """

    scripted = False

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        name: str = "openai",
        timeout_s: float = 600.0,
        max_attempts: int = 5,
        backoff_s: float = 1.0,
        max_concurrency: int = 8,
        prices: Prices | None = None,
    ):
        self.name = name
        self.timeout_s = timeout_s
        self.max_attempts = max(1, max_attempts)
        self.backoff_s = backoff_s
        self.prices = prices if prices is not None else Prices.load()
        self._api_key = api_key
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0,
        )
        self.base_url = str(self._client.base_url).rstrip("/")
        self._slots = asyncio.Semaphore(max(1, max_concurrency))

    async def aclose(self) -> None:
        """Closes the HTTP connections (optional: they are closed at exit anyway)."""
        await self._client.close()

    async def complete(
        self,
        messages: list[Message],
        model: str,
        max_output_tokens: int,
        reasoning: str | None = None,
    ) -> Completion:
        request: dict[str, Any] = {
            "model": model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "max_completion_tokens": max_output_tokens,
        }
        if reasoning is not None:
            request["reasoning_effort"] = reasoning
        attempts = 0
        async with self._slots:
            started = time.perf_counter()
            try:
                async for attempt in retrying(self.max_attempts, self.backoff_s, self._transient):
                    with attempt:
                        attempts += 1
                        response = await self._client.chat.completions.create(**request)
            except Exception as exc:  # noqa: BLE001 - every failure becomes an LLMError
                raise self._error(exc, attempts) from exc
            latency_s = time.perf_counter() - started
        text, usage = self._parse(response)
        return Completion(text, usage, self.prices.cost_usd(model, usage), latency_s, model, attempts)

    # -- internals ---------------------------------------------------------------------------------

    @staticmethod
    def _transient(exc: BaseException) -> bool:
        if isinstance(exc, openai.APIStatusError):
            return exc.status_code in RETRY_STATUSES or exc.status_code >= 500
        return isinstance(exc, openai.APIConnectionError)  # includes APITimeoutError

    def _fail(self, message: str, cls: type[LLMError] = LLMError) -> LLMError:
        return cls(clean_message(f"{self.name}: {message}", self._api_key))

    def _auth_hint(self) -> str:
        return "check OPENAI_API_KEY" if self.name == "openai" else "check the server's key / --base-url"

    def _error(self, exc: Exception, attempts: int) -> LLMError:
        if isinstance(exc, LLMError):
            return exc
        if isinstance(exc, openai.APIStatusError):
            code = exc.status_code
            body = exc.body
            detail = body.get("message") if isinstance(body, dict) else body
            detail = short(detail if detail else exc.message)
            if code in (401, 403):
                extra = f" ({detail})" if code == 403 and detail else ""
                hint = self._auth_hint()
                return self._fail(f"authentication failed (HTTP {code}): {hint}{extra}", LLMAuthError)
            if self._transient(exc):
                return self._fail(f"HTTP {code} after {plural(attempts)}: {detail}")
            return self._fail(f"HTTP {code}: {detail}")
        if isinstance(exc, openai.APITimeoutError):
            return self._fail(f"timed out after {self.timeout_s:g} s ({plural(attempts)})")
        if isinstance(exc, openai.APIConnectionError):
            return self._fail(f"cannot reach {self.base_url} ({network_reason(exc)}; {plural(attempts)})")
        if isinstance(exc, json.JSONDecodeError | openai.APIResponseValidationError | pydantic.ValidationError):
            return self._fail(f"malformed reply: not the expected JSON ({short(exc, 100)})")
        return self._fail(f"unexpected error: {type(exc).__name__}: {short(exc)}")

    def _parse(self, response: Any) -> tuple[str, Usage]:
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list):
            raise self._malformed(f"no choices in a {type(response).__name__} reply")
        if not choices:
            raise self._malformed("an empty list of choices")
        choice = choices[0]
        message = getattr(choice, "message", None)
        text = getattr(message, "content", None)
        if not isinstance(text, str) or not text.strip():
            finish = getattr(choice, "finish_reason", None)
            refusal = getattr(message, "refusal", None)
            why = f"finish_reason={finish}" + (f", refusal: {short(refusal, 80)}" if refusal else "")
            if finish == "length":
                why += "; the output budget may have been spent on reasoning"
            raise self._malformed(f"no text ({why})")
        usage = getattr(response, "usage", None)
        prompt = count(getattr(usage, "prompt_tokens", None))
        completion = count(getattr(usage, "completion_tokens", None))
        details = getattr(usage, "completion_tokens_details", None)
        reasoning = min(count(getattr(details, "reasoning_tokens", None)), completion)
        return text, Usage(input=prompt, output=completion - reasoning, reasoning=reasoning)

    def _malformed(self, what: str) -> LLMError:
        return self._fail(f"malformed reply: {what}")
