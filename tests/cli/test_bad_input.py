"""Every kind of bad input the issue lists, walked as one table: each is a one-line error (exit 2)
before anything starts, or a failed node in a search that still finishes — never a traceback.
(A damaged DB file: tests/search/test_durability.py; crashing generated code:
tests/evaluate/test_sandbox.py.)"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.conftest import query, run_ktree
from tests.llm_server import LLMServer

IDEA_JSON = '[{"title": "One thread per row", "description": "Keep it simple."}]'
SEARCH = ["--headless", "--json", "--backend", "cpu", "--rounds", "1", "--ideas", "1", "--variants", "1",
          "--fixes", "0"]


def _reply(content: bytes) -> bytes:
    """A Chat Completions body around `content`, which goes in as raw bytes (valid JSON or not)."""
    return (b'{"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [{"index": 0,'
            b' "finish_reason": "stop", "message": {"role": "assistant", "content": "' + content +
            b'"}}], "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}')


def _file(tmp_path: Path, name: str, data: bytes | str) -> str:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return str(path)


def _no_triton(tmp_path: Path) -> str:
    """A directory whose `triton` fails to import, as on a machine without it (put first on
    PYTHONPATH)."""
    (tmp_path / "shim" / "triton").mkdir(parents=True)
    (tmp_path / "shim" / "triton" / "__init__.py").write_text("raise ImportError('no triton here')\n")
    return str(tmp_path / "shim")


def _dir(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    path.mkdir()
    return str(path)


# name: (ktree arguments (a function of tmp_path), environment, the one line's needle)
ONE_LINE = {
    "unknown problem": (lambda t: ["run", "no_such_problem"], {}, "unknown problem 'no_such_problem'"),
    "malformed problem file": (lambda t: ["run", _file(t, "bad.py", "class Model(:\n")], {},
                               "bad.py: syntax error on line 1"),
    "problem file without Model": (
        lambda t: ["run", _file(t, "nomodel.py", "def get_inputs(): return []\n")], {}, "missing `Model`"),
    "solution without ModelNew": (lambda t: ["eval", "softmax", _file(t, "sol.py", "x = 1\n")], {},
                                  "defines no ModelNew"),
    "solution with a syntax error and no ModelNew": (  # issue 56, item 7: not "defines no ModelNew"
        lambda t: ["eval", "softmax", _file(t, "sol.py", "import torch\ndef forward(x:\n")], {},
        "sol.py: is not Python: "),
    "solution that is not Python": (
        lambda t: ["eval", "softmax", _file(t, "kernel.cu", "__global__ void k(float* x) { x[0] = 1; }\n")], {},
        "kernel.cu: is not Python: invalid syntax (line 1)"),
    "solution not UTF-8": (lambda t: ["eval", "softmax", _file(t, "sol.py", b"class ModelNew: '\xff\xfe'\n")],
                           {}, "cannot read"),
    "directory as the problem": (lambda t: ["eval", str(t), "x"], {}, "is a directory, not a problem file"),
    "directory without solutions": (lambda t: ["eval", "softmax", _dir(t, "sols")], {},
                                    "is a directory with no solution files"),
    "missing solution among several": (
        lambda t: ["eval", "softmax", _file(t, "a.py", "class ModelNew: pass\n"), str(t / "gone.py")], {},
        "gone.py: cannot read"),
    "config not TOML": (lambda t: ["run", "softmax", "--headless", "--backend", "cpu"],
                        {"KTREE_CONFIG": "{tmp}/config.toml"}, "is not valid TOML"),
    "config unreadable": (lambda t: ["run", "softmax", "--headless", "--backend", "cpu"],
                          {"KTREE_CONFIG": "{tmp}"}, "cannot read config"),
    "unknown provider": (lambda t: ["run", "softmax", "--provider", "anthropic"], {}, "invalid choice"),
    "unknown provider prefix in a model": (
        lambda t: ["run", "softmax", "--headless", "--backend", "cpu", "--model", "opnai:gpt-4o"], {},
        "--model opnai:gpt-4o: unknown provider 'opnai' (known: openai, gemini, openai-compatible, scripted)"),
    "timer agreement without a GPU": (
        lambda t: ["bench", "timing", "--agreement", "softmax", "--backend", "cpu"], {},
        "--agreement compares the timer with triton's do_bench, which needs a GPU"),
    "a compile structure the backend lacks": (
        lambda t: ["bench", "compile", "--structure", "ctypes", "--backend", "cpu"], {},
        "--structure ctypes: the cpu backend builds only the stock structure"),
    "negative fixes": (lambda t: ["run", "softmax", "--headless", "--backend", "cpu", "--fixes", "-1"], {},
                       "argument --fixes: -1 must be 0 or more"),
    "negative dollar budget": (lambda t: ["run", "softmax", "--headless", "--backend", "cpu", "--budget-usd",
                                          "-1"], {}, "argument --budget-usd: -1 must be more than 0"),
    "negative token budget": (lambda t: ["run", "softmax", "--headless", "--backend", "cpu", "--budget-tokens",
                                         "-5"], {}, "argument --budget-tokens: -5 must be at least 1"),
    "database in a missing directory": (lambda t: ["--db", str(t / "gone" / "x.db"), "sessions"], {},
                                        "gone: no such directory"),
    "triton language without triton": (
        lambda t: ["run", "softmax", "--headless", "--backend", "cpu", "--provider", "scripted",
                   "--language", "triton"], {"PYTHONPATH": "{tmp}/shim"}, "Triton is not installed"),
    "mixed languages without triton": (
        lambda t: ["run", "softmax", "--headless", "--backend", "cpu", "--provider", "scripted",
                   "--language", "cuda,triton"], {"PYTHONPATH": "{tmp}/shim"}, "Triton is not installed"),
    "missing key": (lambda t: ["run", "softmax", "--headless", "--backend", "cpu", "--provider", "openai"],
                    {"OPENAI_API_KEY": "", "KTREE_CONFIG": "{tmp}/none.toml"}, "needs an API key"),
}


@pytest.mark.parametrize("case", list(ONE_LINE))
def test_bad_input_is_one_line(tmp_path: Path, case: str):
    args, env, needle = ONE_LINE[case]
    (tmp_path / "config.toml").write_text("[keys\nopenai = ")
    _no_triton(tmp_path)
    env = {k: v.replace("{tmp}", str(tmp_path)) for k, v in env.items()}
    proc = run_ktree("--db", str(tmp_path / "k.db"), *args(tmp_path), env=env)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("ktree: note:")]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not (tmp_path / "k.db").exists()  # nothing started


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# name: (what the server answers for the idea call, then the implementation call; the failed
# node's kind; its text's needle). None for the idea: the default one idea.
FAILED_NODE = {
    "unknown model": ([{"status": 404, "message": "The model `nope` does not exist", "times": 5}],
                      "idea", "the LLM call failed"),
    "unreachable base URL": (None, "idea", "the LLM call failed"),
    "reply with no code": ([{"text": IDEA_JSON}, {"text": "Sorry, only words today."}], "variant",
                           "no fenced code block"),
    "reply of megabytes": ([{"text": IDEA_JSON}, {"text": "I think " * 500_000}], "variant",
                           "no fenced code block"),
    "non-UTF-8 bytes in a reply": ([{"text": IDEA_JSON}, {"raw": _reply(b"bad \xff\xfe bytes")}], "variant",
                                   "the LLM call failed"),
    "unpaired surrogate in a reply": ([{"text": IDEA_JSON}, {"raw": _reply(b"lone \\ud800 half")}],
                                      "variant", "no fenced code block"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(FAILED_NODE))
def test_bad_llm_behaviour_is_a_failed_node(tmp_path: Path, case: str):
    pushes, kind, needle = FAILED_NODE[case]
    db = tmp_path / "k.db"
    with LLMServer() as server:
        for push in pushes or []:
            server.push(**push)
        url = f"http://127.0.0.1:{_free_port()}/v1" if pushes is None else server.url
        proc = run_ktree("run", "softmax", "--provider", "openai-compatible", "--base-url", url,
                         "--model", "m", *SEARCH, "--db", str(db))
    assert "Traceback" not in proc.stderr
    summary = json.loads(proc.stdout)
    if case in ("unknown model", "unreachable base URL"):  # its only call failed: nothing judged, a failed run
        assert proc.returncode != 0 and summary["status"] == "failed", proc.stderr[-2000:]
        assert summary["stop_reason"].startswith("every LLM call failed (1 of 1)"), summary
    else:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert summary["status"] == "finished"
    failed = query(db, "SELECT kind, text FROM nodes WHERE status = 'failed'")
    assert [k for k, _ in failed] == [kind] and needle in failed[0][1], failed
    calls = query(db, "SELECT status, length(reply) FROM llm_calls ORDER BY id")
    if case == "reply of megabytes":
        assert calls[-1] == ("ok", 4_000_000)  # recorded whole


def test_an_unknown_cpu_timer_is_one_line(tmp_path: Path):
    proc = run_ktree("eval", "softmax", str(tmp_path / "none.py"), "--backend", "cpu",
                     env={"KTREE_CPU_TIMER": "bogus"})
    assert proc.returncode == 2
    assert proc.stderr == "ktree: error: KTREE_CPU_TIMER='bogus': choose from pause, pin\n"


@pytest.mark.slow
def test_a_failed_call_says_why_and_what_it_cost(tmp_path: Path):
    """An unreachable server: the provider retries, then the call is recorded with its attempts,
    the seconds they took and the reason; the reason reaches the failed node and the run's log."""
    db = tmp_path / "k.db"
    url = f"http://127.0.0.1:{_free_port()}/v1"
    proc = run_ktree("run", "softmax", "--provider", "openai-compatible", "--base-url", url,
                     "--model", "m", *SEARCH, "--db", str(db))
    assert proc.returncode != 0 and "every LLM call failed" in proc.stderr, proc.stderr[-2000:]
    [(attempts, latency, error)] = query(db, "SELECT attempts, latency_s, error FROM llm_calls")
    assert attempts == 5 and latency > 0.5, (attempts, latency)  # five tries with backoff between
    assert "cannot reach" in error and "connection refused" in error
    [(text,)] = query(db, "SELECT text FROM nodes WHERE status = 'failed'")
    assert text == f"the LLM call failed: {error}"
    assert f"error after {latency:.1f} s, 5 attempts: {error}" in proc.stderr


def test_a_bad_cpu_timer_matters_only_where_something_is_timed(tmp_path: Path):
    db = tmp_path / "k.db"
    proc = run_ktree("--db", str(db), "sessions", env={"KTREE_CPU_TIMER": "bogus"})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
