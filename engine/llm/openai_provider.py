"""The OpenAI provider (Chat Completions through the official SDK), also used as "openai-compatible"
with a base_url: vLLM, Ollama, llama.cpp's server, OpenRouter.

Retries are ours, not the SDK's (it is built with max_retries=0): tenacity retries HTTP 408/409/429/5xx,
timeouts and connection errors with random exponential backoff, and Completion.attempts says how many
requests a completion took. Every failure comes out of complete() as a one-line LLMError (LLMAuthError
for a rejected key) that names the provider and never contains the API key.

The helpers (clean_message, network_reason, retrying) live in engine.llm.common.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pydantic

from engine.llm.base import LLM_TIMEOUT_S, Completion, LLMError, Message, Usage
from engine.llm.common import RETRY_STATUSES, Failure, HTTPProvider, count, short
from engine.llm.prices import Prices
from engine.llm.providers import ProviderSetupError, Setup

# -- the provider ----------------------------------------------------------------------------------


class OpenAIProvider(HTTPProvider):
    """Chat Completions through openai.AsyncOpenAI.

    Usage: OpenAI's completion_tokens INCLUDE the reasoning tokens, so a Completion's usage is split
    as Usage(input=prompt_tokens, output=completion_tokens - reasoning_tokens,
    reasoning=reasoning_tokens): input + output + reasoning is what was billed, and cost_usd prices
    output and reasoning at the output price.

    At most `max_concurrency` calls are in flight at once; a call holds its slot through its retries.
    latency_s covers the whole call (all attempts and the waits between them), not the wait for a slot.
    """

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        name: str = "openai",
        timeout_s: float = LLM_TIMEOUT_S,
        max_attempts: int = 5,
        backoff_s: float = 1.0,
        max_concurrency: int = 8,
        prices: Prices | None = None,
    ):
        super().__init__(api_key=api_key, name=name, timeout_s=timeout_s, max_attempts=max_attempts,
                         backoff_s=backoff_s, max_concurrency=max_concurrency, prices=prices)
        self.auth_hint = ("check OPENAI_API_KEY" if name == "openai"
                          else "check the server's key / --base-url")
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0,
        )
        self.base_url = str(self._client.base_url).rstrip("/")

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
        return await self._request(lambda: self._client.chat.completions.create(**request), model)

    # -- internals ---------------------------------------------------------------------------------

    @staticmethod
    def _transient(exc: BaseException) -> bool:
        if isinstance(exc, openai.APIStatusError):
            return exc.status_code in RETRY_STATUSES or exc.status_code >= 500
        return isinstance(exc, openai.APIConnectionError)  # includes APITimeoutError

    def _classify(self, exc: Exception) -> Failure:
        if isinstance(exc, openai.APIStatusError):
            body = exc.body
            detail = body.get("message") if isinstance(body, dict) else body
            return Failure("status", exc.status_code, short(detail if detail else exc.message),
                           auth=exc.status_code in (401, 403))
        if isinstance(exc, openai.APITimeoutError):
            return Failure("timeout")
        if isinstance(exc, openai.APIConnectionError):
            return Failure("network")
        if isinstance(exc, json.JSONDecodeError | openai.APIResponseValidationError | pydantic.ValidationError):
            return Failure("malformed")
        return Failure("other")

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


def make(setup: Setup) -> OpenAIProvider:
    """The `openai` provider (engine.llm.providers)."""
    return OpenAIProvider(api_key=setup.key or "", base_url=setup.base_url, timeout_s=setup.timeout_s,
                          prices=setup.prices)


def make_compatible(setup: Setup) -> OpenAIProvider:
    """The `openai-compatible` provider: an OpenAI-style server at --base-url (vLLM, Ollama,
    llama.cpp), which takes any key (the SDK wants a non-empty one)."""
    url = setup.base_url or setup.config.base_url
    if not url:
        raise ProviderSetupError(
            "provider openai-compatible needs --base-url (or [openai-compatible] base_url"
            " in the config file)")
    return OpenAIProvider(api_key=setup.key or "none", base_url=url, name=setup.name,
                          timeout_s=setup.timeout_s, prices=setup.prices)
