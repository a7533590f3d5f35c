"""The real providers (the official openai and google-genai SDKs, not mocked) against the local
LLM server of tests/llm_server.py: replies, usage and cost, retries, errors, concurrency."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from engine.llm.base import Completion, LLMAuthError, LLMError, Message, Usage
from engine.llm.gemini_provider import GeminiProvider, thinking_budget
from engine.llm.openai_provider import OpenAIProvider
from engine.llm.prices import Price, Prices
from tests.conftest import REPO
from tests.llm_server import LLMServer, llm_server  # noqa: F401 - the fixture

# google-genai's own aiohttp session class warns on import; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")

KEY = "sk-test-SECRET-key-0123456789abcdef"
MODELS = {"openai": "o3", "gemini": "gemini-2.5-pro"}
KINDS = ["openai", "gemini"]

IDEAS = json.dumps([
    {"title": "Warp-level reductions", "description": "Reduce each row with warp shuffles."},
    {"title": "Vectorized loads", "description": "Load float4 to cut memory transactions."},
])
KERNEL = "Here is the kernel.\n\n```python\nimport torch\n\ndef softmax(x):\n    return x.softmax(-1)\n```\n"
MESSAGES = [
    Message("system", "You write fast CUDA kernels."),
    Message("user", "Propose exactly 2 ideas for softmax."),
]


def usd(kind: str, usage: Usage) -> float:
    """The cost at the list prices of o3 ($2 / $8 per 1M) and gemini-2.5-pro ($1.25 / $10 per 1M)."""
    price_in, price_out = {"openai": (2.00, 8.00), "gemini": (1.25, 10.00)}[kind]
    return (usage.input * price_in + (usage.output + usage.reasoning) * price_out) / 1e6


@pytest.fixture
async def make(llm_server: LLMServer):  # noqa: F811
    """make(kind, **options) -> a provider aimed at the test server (closed after the test)."""
    made: list[OpenAIProvider | GeminiProvider] = []

    def factory(kind: str, **options: object) -> OpenAIProvider | GeminiProvider:
        opts: dict = {"api_key": KEY, "timeout_s": 10.0, "max_attempts": 3, "backoff_s": 0.01, **options}
        if kind == "gemini":
            provider = GeminiProvider(base_url=opts.pop("base_url", llm_server.gemini_url), **opts)
        else:
            provider = OpenAIProvider(base_url=opts.pop("base_url", llm_server.url), **opts)
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        await provider.aclose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_one_line(exc: BaseException) -> str:
    message = str(exc)
    assert "\n" not in message and "\r" not in message
    assert len(message) <= 300
    assert KEY not in message
    return message


# -- replies, usage, cost --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_idea_reply(kind: str, make, llm_server: LLMServer) -> None:  # noqa: F811
    llm_server.push(text=IDEAS, usage=(1200, 340, 0))
    provider = make(kind)
    completion = await provider.complete(MESSAGES, MODELS[kind], max_output_tokens=4000)

    assert isinstance(completion, Completion)
    assert json.loads(completion.text)[1]["title"] == "Vectorized loads"
    assert completion.usage == Usage(input=1200, output=340, reasoning=0)
    assert completion.cost_usd == pytest.approx({"openai": 0.00512, "gemini": 0.0049}[kind], abs=1e-12)
    assert completion.model == MODELS[kind]
    assert completion.attempts == 1
    assert 0 < completion.latency_s < 5
    assert provider.name == kind and provider.scripted is False

    [(path, headers, body)] = llm_server.requests
    if kind == "openai":
        assert path == "/v1/chat/completions"
        assert headers["authorization"] == f"Bearer {KEY}"
        assert body["model"] == "o3"
        assert body["messages"] == [{"role": m.role, "content": m.content} for m in MESSAGES]
        assert body["max_completion_tokens"] == 4000
        assert "reasoning_effort" not in body
    else:
        assert path.endswith("/models/gemini-2.5-pro:generateContent")
        assert headers["x-goog-api-key"] == KEY
        assert body["systemInstruction"]["parts"] == [{"text": "You write fast CUDA kernels."}]
        assert body["contents"] == [{"role": "user", "parts": [{"text": MESSAGES[1].content}]}]
        assert body["generationConfig"]["maxOutputTokens"] == 4000
        assert "thinkingConfig" not in body["generationConfig"]


@pytest.mark.parametrize("kind", KINDS)
async def test_implementation_reply_with_reasoning(kind: str, make, llm_server: LLMServer) -> None:  # noqa: F811
    # On the wire, OpenAI's completion_tokens include the reasoning tokens; Gemini's candidates do not.
    wire = {"openai": (2000, 2300, 1500), "gemini": (2000, 800, 1500)}[kind]

    def responder(prompt: str, model: str) -> tuple[str, tuple[int, int, int]]:
        assert model.endswith(MODELS[kind])
        return (KERNEL if prompt.startswith("Implement") else "?"), wire

    llm_server.responder = responder
    messages = [*MESSAGES, Message("assistant", IDEAS), Message("user", "Implement: Warp-level reductions")]
    provider = make(kind)
    completion = await provider.complete(messages, MODELS[kind], 8000, reasoning="medium")

    assert completion.text == KERNEL
    # Both come out as output 800 + reasoning 1500 (input + output + reasoning = what was billed).
    assert completion.usage == Usage(input=2000, output=800, reasoning=1500)
    assert completion.cost_usd == pytest.approx({"openai": 0.0224, "gemini": 0.0255}[kind], abs=1e-12)
    assert completion.cost_usd == pytest.approx(usd(kind, completion.usage))

    [(_, _, body)] = llm_server.requests
    if kind == "openai":
        assert body["reasoning_effort"] == "medium"
        assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]
    else:
        thinking = body["generationConfig"]["thinkingConfig"]
        assert thinking.get("thinkingBudget", thinking.get("thinking_budget")) == 8192
        assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]


def test_thinking_budget() -> None:
    assert thinking_budget(None) is None
    assert (thinking_budget("low"), thinking_budget("medium"), thinking_budget("HIGH")) == (1024, 8192, 24576)
    assert thinking_budget("4096") == 4096
    assert thinking_budget("0") == 0
    with pytest.raises(LLMError, match="gemini: unknown reasoning setting 'lots'"):
        thinking_budget("lots")


async def test_gemini_unknown_role_is_an_llm_error(make, llm_server: LLMServer) -> None:  # noqa: F811
    with pytest.raises(LLMError, match="gemini: unknown message role 'tool'"):
        await make("gemini").complete([Message("tool", "x")], "gemini-2.5-pro", 100)
    assert llm_server.requests == []


async def test_openai_compatible_free_model(make, llm_server: LLMServer) -> None:  # noqa: F811
    llm_server.push(text="def kernel(): ...", usage=(500, 100, 0))
    provider = make("openai", name="openai-compatible", base_url=llm_server.url)
    completion = await provider.complete(MESSAGES, "qwen2.5-coder:32b", 1000)
    assert provider.name == "openai-compatible"
    assert completion.text == "def kernel(): ..."
    assert completion.usage == Usage(500, 100, 0)
    assert completion.cost_usd == 0.0
    assert llm_server.requests[0].body["model"] == "qwen2.5-coder:32b"

    llm_server.push(status=401)
    with pytest.raises(LLMAuthError) as info:
        await provider.complete(MESSAGES, "qwen2.5-coder:32b", 1000)
    assert str(info.value) == (
        "openai-compatible: authentication failed (HTTP 401): check the server's key / --base-url"
    )


# -- retries ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_rate_limit_then_success(kind: str, make, llm_server: LLMServer) -> None:  # noqa: F811
    llm_server.push(status=429)
    llm_server.push(text="ok", usage=(10, 5, 0))
    completion = await make(kind).complete(MESSAGES, MODELS[kind], 100)
    assert completion.text == "ok"
    assert completion.attempts == 2
    assert len(llm_server.requests) == 2


@pytest.mark.parametrize("kind", KINDS)
async def test_server_errors_until_give_up(kind: str, make, llm_server: LLMServer) -> None:  # noqa: F811
    llm_server.push(status=500, times=10, message="The server had an error.\nPlease retry.")
    with pytest.raises(LLMError) as info:
        await make(kind, max_attempts=4).complete(MESSAGES, MODELS[kind], 100)
    assert not isinstance(info.value, LLMAuthError)
    message = assert_one_line(info.value)
    assert message == f"{kind}: HTTP 500 after 4 attempts: The server had an error. Please retry."
    assert len(llm_server.requests) == 4
    assert llm_server.pending == 6


@pytest.mark.parametrize("kind", KINDS)
async def test_latency_covers_the_retries(kind: str, make, llm_server: LLMServer) -> None:  # noqa: F811
    llm_server.push(status=503, delay_s=0.2)
    llm_server.push(status=502, delay_s=0.2)
    completion = await make(kind).complete(MESSAGES, MODELS[kind], 100)
    assert completion.attempts == 3
    assert completion.latency_s >= 0.4


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("status", [401, 403])
async def test_auth_error_is_fatal_and_not_retried(kind: str, status: int, make,
                                                   llm_server: LLMServer) -> None:  # noqa: F811
    llm_server.push(status=status, times=5, message=f"Incorrect API key provided: {KEY}")
    with pytest.raises(LLMAuthError) as info:
        await make(kind).complete(MESSAGES, MODELS[kind], 100)
    message = assert_one_line(info.value)
    hint = {"openai": "check OPENAI_API_KEY", "gemini": "check GEMINI_API_KEY / GOOGLE_API_KEY"}[kind]
    assert message.startswith(f"{kind}: authentication failed (HTTP {status}): {hint}")
    if status == 401:
        assert message == f"{kind}: authentication failed (HTTP 401): {hint}"
    assert len(llm_server.requests) == 1


async def test_gemini_invalid_key_400_is_an_auth_error(make, llm_server: LLMServer) -> None:  # noqa: F811
    llm_server.push(status=400, message="API key not valid. Please pass a valid API key.")
    with pytest.raises(LLMAuthError, match=r"^gemini: authentication failed \(HTTP 400\)"):
        await make("gemini").complete(MESSAGES, "gemini-2.5-pro", 100)
    assert len(llm_server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("status", [400, 404])
async def test_client_errors_are_not_retried(kind: str, status: int, make,
                                             llm_server: LLMServer) -> None:  # noqa: F811
    llm_server.push(status=status, times=5, message="The model `o9` does not exist")
    with pytest.raises(LLMError) as info:
        await make(kind).complete(MESSAGES, MODELS[kind], 100)
    assert not isinstance(info.value, LLMAuthError)
    assert assert_one_line(info.value) == f"{kind}: HTTP {status}: The model `o9` does not exist"
    assert len(llm_server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_timeout(kind: str, make, llm_server: LLMServer) -> None:  # noqa: F811
    llm_server.push(delay_s=5, times=2)
    started = time.perf_counter()
    with pytest.raises(LLMError) as info:
        await make(kind, timeout_s=0.3, max_attempts=2).complete(MESSAGES, MODELS[kind], 100)
    assert time.perf_counter() - started < 3
    assert assert_one_line(info.value) == f"{kind}: timed out after 0.3 s (2 attempts)"
    assert len(llm_server.requests) == 2


@pytest.mark.parametrize("kind", KINDS)
async def test_timeout_then_success(kind: str, make, llm_server: LLMServer) -> None:  # noqa: F811
    llm_server.push(delay_s=5)
    llm_server.push(text="late but fine", usage=(1, 1, 0))
    completion = await make(kind, timeout_s=0.3).complete(MESSAGES, MODELS[kind], 100)
    assert (completion.text, completion.attempts) == ("late but fine", 2)


@pytest.mark.parametrize("kind", KINDS)
async def test_connection_refused(kind: str, make) -> None:
    port = free_port()  # nothing listens there any more
    base_url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(LLMError) as info:
        await make(kind, base_url=base_url, max_attempts=2).complete(MESSAGES, MODELS[kind], 100)
    message = assert_one_line(info.value)
    assert message.startswith(f"{kind}: cannot reach {base_url} (connection refused")
    assert message.endswith("2 attempts)")


# -- malformed replies -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("raw", [b"not json", b"<html><body>Bad Gateway</body></html>", b'{"unexpected": true}',
                                 b'{"choices": [], "candidates": []}', b"[1, 2, 3]"])
async def test_malformed_body_is_not_retried(kind: str, raw: bytes, make,
                                             llm_server: LLMServer) -> None:  # noqa: F811
    llm_server.push(raw=raw, times=3)
    with pytest.raises(LLMError) as info:
        await make(kind).complete(MESSAGES, MODELS[kind], 100)
    assert assert_one_line(info.value).startswith(f"{kind}: malformed reply: ")
    assert len(llm_server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_empty_reply(kind: str, make, llm_server: LLMServer) -> None:  # noqa: F811
    finish = {"openai": "length", "gemini": "MAX_TOKENS"}[kind]
    llm_server.push(text="", usage=(100, 4000 if kind == "openai" else 0, 4000), finish_reason=finish)
    with pytest.raises(LLMError) as info:
        await make(kind).complete(MESSAGES, MODELS[kind], 4000, reasoning="high")
    message = assert_one_line(info.value)
    assert message.startswith(f"{kind}: malformed reply: no text (finish_reason={finish}")
    assert len(llm_server.requests) == 1


# -- concurrency and secrets -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_concurrency_limit(kind: str, make, llm_server: LLMServer) -> None:  # noqa: F811
    llm_server.push(delay_s=0.2, times=6)
    provider = make(kind, max_concurrency=2)
    started = time.perf_counter()
    completions = await asyncio.gather(*(provider.complete(MESSAGES, MODELS[kind], 100) for _ in range(6)))
    assert len(completions) == 6 and all(c.attempts == 1 for c in completions)
    assert len(llm_server.requests) == 6
    assert llm_server.max_in_flight == 2
    assert time.perf_counter() - started >= 0.55  # three waves of two


@pytest.mark.parametrize("kind", KINDS)
async def test_api_key_never_in_errors(kind: str, make, llm_server: LLMServer) -> None:  # noqa: F811
    echo = f"key {KEY} rejected\nsee logs"
    cases = [dict(status=401, message=echo), dict(status=403, message=echo), dict(status=400, message=echo),
             dict(status=500, message=echo, times=2), dict(raw=f"not json {KEY}".encode())]
    messages = []
    for case in cases:
        llm_server.push(**case)
        with pytest.raises(LLMError) as info:
            await make(kind, max_attempts=2).complete(MESSAGES, MODELS[kind], 100)
        messages.append(assert_one_line(info.value))
    with pytest.raises(LLMError) as info:
        await make(kind, base_url=f"http://127.0.0.1:{free_port()}/v1", max_attempts=1).complete(
            MESSAGES, MODELS[kind], 100)
    messages.append(assert_one_line(info.value))
    assert all(m.startswith(f"{kind}: ") and KEY not in m for m in messages)
    assert any("***" in m for m in messages)  # an echoed key is masked


# -- prices ----------------------------------------------------------------------------------------


def test_prices() -> None:
    prices = Prices.load()
    assert prices.get("o3") == Price(2.00, 8.00)
    assert prices.get("o3-2025-04-16") == Price(2.00, 8.00)
    assert prices.get("o3-pro") == Price(20.00, 80.00)  # not o3's price
    assert prices.get("gpt-4.1-mini-2025-04-14") == prices.get("gpt-4.1-mini") != prices.get("gpt-4.1")
    assert prices.get("models/gemini-2.5-pro") == Price(1.25, 10.00)
    assert prices.get("gemini-2.5-flash-preview-05-20") == prices.get("gemini-2.5-flash")
    for model in ("o4-mini", "gpt-4.1", "gpt-5", "gpt-5-mini", "gemini-2.5-flash"):
        assert prices.known(model), model
    assert not prices.known("gpt-4.10") and not prices.known("llama3:70b")
    assert prices.cost_usd("llama3:70b", Usage(10**6, 10**6, 10**6)) == 0.0
    # reasoning tokens at the output price
    assert prices.cost_usd("o4-mini", Usage(1_000_000, 500_000, 500_000)) == pytest.approx(1.10 + 4.40)


def test_price_overrides() -> None:
    prices = Prices.load({"my-model": {"input": 1.0, "output": 2.0}, "o3": {"input": 10, "output": 40}})
    assert prices.cost_usd("my-model", Usage(1_000_000, 1_000_000, 0)) == pytest.approx(3.0)
    assert prices.cost_usd("my-model-v2", Usage(0, 0, 1_000_000)) == pytest.approx(2.0)
    assert prices.get("o3") == Price(10.0, 40.0)
    assert Prices.load().get("o3") == Price(2.0, 8.0)  # overrides do not leak into the table
    with pytest.raises(ValueError, match="my-model"):
        Prices.load({"my-model": {"input": 1.0}})


async def test_custom_prices_are_used(make, llm_server: LLMServer) -> None:  # noqa: F811
    llm_server.push(text="x", usage=(1_000_000, 1_000_000, 0))
    provider = make("openai", prices=Prices.load({"local-coder": {"input": 0.5, "output": 1.5}}))
    completion = await provider.complete(MESSAGES, "local-coder", 100)
    assert completion.cost_usd == pytest.approx(2.0)


# -- the server on its own -------------------------------------------------------------------------


def test_server_runs_standalone() -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.llm_server", "--port", str(port)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        assert f"127.0.0.1:{port}" in proc.stdout.readline()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions", method="POST",
            data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as reply:
            body = json.loads(reply.read())
        assert body["object"] == "chat.completion"
        assert body["choices"][0]["message"]["content"]
    finally:
        proc.terminate()
        proc.wait(timeout=5)
