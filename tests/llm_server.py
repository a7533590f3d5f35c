"""A local LLM server for tests: speaks OpenAI's Chat Completions and Gemini's generateContent wire
formats on 127.0.0.1, so the real SDKs can be tested without a network.

    server = LLMServer().start()
    OpenAI:  AsyncOpenAI(base_url=server.url, ...)                      # POST /v1/chat/completions
    Gemini:  genai.Client(http_options=HttpOptions(base_url=server.gemini_url))
                                                        # POST /v1beta/models/{model}:generateContent

A test scripts what the next requests get with `push` (one behaviour a request, first in first out,
shared by both APIs); once the queue is empty a request is answered by `responder(prompt_text, model)
-> (text, (input_tokens, output_tokens, reasoning_tokens))`, where prompt_text is the last user message.

Usage numbers go on the wire as given, in each API's own terms: OpenAI's prompt_tokens,
completion_tokens (which INCLUDE the reasoning tokens) and completion_tokens_details.reasoning_tokens;
Gemini's promptTokenCount, candidatesTokenCount (which do NOT include the thoughts) and
thoughtsTokenCount. So (100, 50, 20) is 30 visible output tokens from OpenAI, 50 from Gemini.

    server.push(status=429)                  # an error with the API's error JSON
    server.push(status=500, times=10)
    server.push(delay_s=5)                   # the responder's answer, 5 s late
    server.push(raw=b"not json")             # a 200 with this body
    server.push(text="...", usage=(10, 20, 5))

`server.requests` lists what was received (path, headers, body); `server.max_in_flight` is the most
requests it was answering at once.

Tests use the `llm_server` fixture (import it, or list this module in pytest_plugins). For manual use:
`python -m tests.llm_server --port 8765` serves forever with the default responder.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

import pytest

Responder = Callable[[str, str], tuple[str, tuple[int, int, int]]]

DEFAULT_TEXT = "Hello from the test LLM server."


def default_responder(prompt_text: str, model: str) -> tuple[str, tuple[int, int, int]]:
    return DEFAULT_TEXT, (max(1, len(prompt_text) // 4), max(1, len(DEFAULT_TEXT) // 4), 0)


class Received(NamedTuple):
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any  # the parsed JSON body (None if it was not JSON)


@dataclass(frozen=True)
class Behaviour:
    status: int = 200
    delay_s: float = 0.0
    raw: bytes | None = None  # sent as is (with `status`), instead of a built body
    text: str | None = None  # None: ask the responder
    usage: tuple[int, int, int] | None = None  # (input, output, reasoning), as on the wire; None: responder's
    message: str | None = None  # an error's message (default: a stock one for the status)
    finish_reason: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "application/json"


_STATUS_NAMES = {
    400: ("invalid_request_error", "INVALID_ARGUMENT"),
    401: ("invalid_request_error", "UNAUTHENTICATED"),
    403: ("permission_denied", "PERMISSION_DENIED"),
    404: ("not_found_error", "NOT_FOUND"),
    408: ("timeout", "DEADLINE_EXCEEDED"),
    429: ("rate_limit_exceeded", "RESOURCE_EXHAUSTED"),
    500: ("server_error", "INTERNAL"),
    502: ("server_error", "UNAVAILABLE"),
    503: ("server_error", "UNAVAILABLE"),
    504: ("server_error", "DEADLINE_EXCEEDED"),
}

_STOCK_MESSAGES = {
    400: "Invalid request.",
    401: "Incorrect API key provided.",
    403: "Permission denied.",
    404: "The model does not exist.",
    429: "Rate limit reached. Please try again later.",
    500: "The server had an error while processing your request.",
    503: "The model is overloaded. Please try again later.",
}

_GEMINI_PATH = re.compile(r"^/v1(?:beta|alpha)?/models/([^/:]+):generateContent$")


class LLMServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, responder: Responder | None = None):
        self.responder: Responder = responder or default_responder
        self.requests: list[Received] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._queue: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd = ThreadingHTTPServer((host, port), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._counter = 0
        self._host = "127.0.0.1" if host in ("", "0.0.0.0") else host

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def url(self) -> str:
        """The base URL for the OpenAI SDK."""
        return f"{self.base}/v1"

    @property
    def gemini_url(self) -> str:
        """The base URL for the google-genai SDK (it appends /v1beta/models/...)."""
        return f"{self.base}/"

    def start(self) -> LLMServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="llm-server", daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()  # wakes delayed answers
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting ---------------------------------------------------------------------------------

    def push(
        self,
        status: int = 200,
        *,
        times: int = 1,
        delay_s: float = 0.0,
        raw: bytes | str | None = None,
        text: str | None = None,
        usage: tuple[int, int, int] | None = None,
        message: str | None = None,
        finish_reason: str | None = None,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        """Queue how the next `times` requests are answered."""
        behaviour = Behaviour(
            status=status, delay_s=delay_s, raw=raw.encode() if isinstance(raw, str) else raw, text=text,
            usage=usage, message=message, finish_reason=finish_reason,
            headers=tuple((headers or {}).items()), content_type=content_type,
        )
        with self._lock:
            self._queue.extend([behaviour] * times)

    def clear(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.max_in_flight = 0

    @property
    def pending(self) -> int:
        """Scripted behaviours not used yet."""
        with self._lock:
            return len(self._queue)

    # -- answering (called from handler threads) ---------------------------------------------------

    def _next(self, received: Received) -> Behaviour:
        with self._lock:
            self.requests.append(received)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._counter += 1
            return self._queue.popleft() if self._queue else Behaviour()

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _reply(self, b: Behaviour, prompt: str, model: str) -> tuple[str, tuple[int, int, int]]:
        if b.text is not None and b.usage is not None:
            return b.text, b.usage
        text, usage = self.responder(prompt, model)
        return (b.text if b.text is not None else text), (b.usage if b.usage is not None else usage)

    def openai_body(self, b: Behaviour, body: Any) -> tuple[int, dict]:
        model = str(body.get("model", "unknown")) if isinstance(body, dict) else "unknown"
        if b.status != 200:
            kind = _STATUS_NAMES.get(b.status, ("server_error", "UNKNOWN"))[0]
            message = b.message or _STOCK_MESSAGES.get(b.status, f"HTTP {b.status}")
            return b.status, {"error": {"message": message, "type": kind, "param": None, "code": None}}
        messages = body.get("messages", []) if isinstance(body, dict) else []
        prompt = next((str(m.get("content", "")) for m in reversed(messages) if m.get("role") == "user"), "")
        text, (n_in, n_out, n_reason) = self._reply(b, prompt, model)
        return 200, {
            "id": f"chatcmpl-test{self._counter}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": b.finish_reason or "stop",
            }],
            "usage": {
                "prompt_tokens": n_in,
                "completion_tokens": n_out,  # OpenAI's completion_tokens include the reasoning tokens
                "total_tokens": n_in + n_out,
                "completion_tokens_details": {"reasoning_tokens": n_reason},
            },
        }

    def gemini_body(self, b: Behaviour, body: Any, model: str) -> tuple[int, dict]:
        if b.status != 200:
            status = _STATUS_NAMES.get(b.status, ("", "UNKNOWN"))[1]
            message = b.message or _STOCK_MESSAGES.get(b.status, f"HTTP {b.status}")
            return b.status, {"error": {"code": b.status, "message": message, "status": status}}
        contents = body.get("contents", []) if isinstance(body, dict) else []
        users = [c for c in contents if c.get("role", "user") == "user"]
        prompt = "".join(str(p.get("text", "")) for p in users[-1].get("parts", [])) if users else ""
        text, (n_in, n_out, n_reason) = self._reply(b, prompt, model)
        return 200, {
            "candidates": [{
                "content": {"parts": [{"text": text}], "role": "model"},
                "finishReason": b.finish_reason or "STOP",
                "index": 0,
            }],
            "usageMetadata": {
                "promptTokenCount": n_in,
                "candidatesTokenCount": n_out,
                "thoughtsTokenCount": n_reason,
                "totalTokenCount": n_in + n_out + n_reason,
            },
            "modelVersion": model,
            "responseId": f"test{self._counter}",
        }


def _make_handler(server: LLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs expect
        disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms delayed-ACK stall)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

        def do_GET(self) -> None:  # noqa: N802
            self._send(404, {"error": {"message": f"no such path {self.path}", "code": 404}})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length) if length else b""
            try:
                body = json.loads(data) if data else None
            except ValueError:
                body = None
            path = self.path.split("?", 1)[0]
            gemini = _GEMINI_PATH.match(path)
            if path != "/v1/chat/completions" and gemini is None:
                self._send(404, {"error": {"message": f"no such path {path}", "code": 404}})
                return
            b = server._next(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            try:
                if b.delay_s and server._closing.wait(b.delay_s):
                    self.close_connection = True
                    return  # the server is shutting down
                if b.raw is not None:
                    self._send_bytes(b.status, b.raw, b.content_type, b.headers)
                elif gemini is not None:
                    self._send(*server.gemini_body(b, body, gemini.group(1)), b.headers)
                else:
                    self._send(*server.openai_body(b, body), b.headers)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout)
            finally:
                server._done()

        def _send(self, status: int, payload: dict, headers: tuple[tuple[str, str], ...] = ()) -> None:
            self._send_bytes(status, json.dumps(payload).encode(), "application/json", headers)

        def _send_bytes(self, status: int, data: bytes, content_type: str,
                        headers: tuple[tuple[str, str], ...] = ()) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

    return Handler


@pytest.fixture
def llm_server() -> Iterator[LLMServer]:
    """A started LLMServer on a free port, stopped after the test."""
    server = LLMServer().start()
    try:
        yield server
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="A local OpenAI/Gemini-compatible test LLM server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    server = LLMServer(args.host, args.port)
    print(f"serving on {server.base}: OpenAI base_url {server.url}, Gemini base_url {server.gemini_url}"
          " (Ctrl-C stops)", flush=True)
    try:
        server._httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd.server_close()


if __name__ == "__main__":
    main()
