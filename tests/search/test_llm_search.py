"""A full search through a real SDK and HTTP: `--provider openai-compatible` against the local
test server, whose answers come from the scripted library and whose usage numbers are its own."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from engine.llm.scripted import ScriptedProvider
from tests.conftest import query, run_ktree
from tests.llm_server import LLMServer


class ScriptedBrain:
    """Answers like the scripted provider and records the usage it reports for each reply."""

    def __init__(self) -> None:
        self.model = ScriptedProvider("softmax", "cpu", seed=0)
        self.sent: list[tuple[int, int, int]] = []
        self.lock = threading.Lock()

    def __call__(self, prompt: str, model: str) -> tuple[str, tuple[int, int, int]]:
        with self.lock:
            text = self.model.answer(prompt)
            usage = (len(prompt) // 3 + 17, len(text) // 3 + 5, 40 + len(self.sent))
            self.sent.append(usage)
        return text, usage


@pytest.fixture
def priced_config(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "config.toml"
    config.write_text('[prices."anything"]\ninput = 2.0\noutput = 8.0\n')
    return {"KTREE_CONFIG": str(config)}


@pytest.mark.slow
def test_two_round_search_through_openai_compatible(tmp_path: Path, priced_config: dict):
    brain = ScriptedBrain()
    db = tmp_path / "k.db"
    with LLMServer(responder=brain) as server:
        # Two rounds at the default 3 ideas x 2 variants, one parent kept (--top 1): round 1 alone
        # makes 8 calls (an idea call, 6 implementations, a fix) and more than 3 correct variants,
        # round 2 more calls; a second parent would only add evaluations of the same library files.
        proc = run_ktree("run", "softmax", "--provider", "openai-compatible", "--base-url",
                         server.url, "--model", "anything", "--headless", "--json", "--top", "1",
                         "--db", str(db), env=priced_config)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["status"] == "finished" and summary["rounds"] == 2
    assert not summary["scripted"] and summary["provider"] == "openai-compatible"

    [(calls, tin, tout, treason, cost)] = query(
        db, "SELECT COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(reasoning_tokens),"
            " SUM(cost_usd) FROM llm_calls")
    sent_in = sum(u[0] for u in brain.sent)
    sent_out = sum(u[1] for u in brain.sent)
    sent_reason = sum(u[2] for u in brain.sent)
    assert calls == len(brain.sent) >= 9
    # completion_tokens includes reasoning: ktree stores them apart, and they add up.
    assert (tin, tout + treason, treason) == (sent_in, sent_out, sent_reason)
    expected_cost = (sent_in * 2.0 + sent_out * 8.0) / 1e6
    assert cost == pytest.approx(expected_cost, rel=1e-9)
    assert summary["llm"]["cost_usd"] == pytest.approx(expected_cost, rel=1e-9)
    assert query(db, "SELECT DISTINCT provider, model FROM llm_calls") == [
        ("openai-compatible", "anything")]
    assert query(db, "SELECT COUNT(*) FROM evaluations WHERE status = 'correct'")[0][0] >= 3


def test_bad_key_stops_the_search_with_one_line(tmp_path: Path):
    db = tmp_path / "k.db"
    with LLMServer() as server:
        server.push(status=401, times=5)
        proc = run_ktree("run", "softmax", "--provider", "openai-compatible", "--base-url",
                         server.url, "--model", "anything", "--headless", "--db", str(db))
    assert proc.returncode == 2
    assert "authentication failed (HTTP 401)" in proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr
    [(status, reason)] = query(db, "SELECT status, stop_reason FROM sessions")
    assert status == "failed" and "HTTP 401" in reason
    assert query(db, "SELECT status FROM llm_calls") == [("error",)]  # recorded, then stopped
    assert query(db, "SELECT COUNT(*) FROM nodes WHERE kind = 'variant'") == [(0,)]


def test_token_budget_stops_cleanly(tmp_path: Path):
    brain = ScriptedBrain()
    db = tmp_path / "k.db"
    with LLMServer(responder=brain) as server:
        proc = run_ktree("run", "softmax", "--provider", "openai-compatible", "--base-url",
                         server.url, "--model", "anything", "--headless", "--json",
                         "--budget-tokens", "1", "--db", str(db))
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["status"] == "stopped" and "budget reached" in summary["stop_reason"]
    # The idea call spent the budget: no implementation was asked for, and the call is recorded.
    assert query(db, "SELECT purpose FROM llm_calls") == [("idea",)]
    assert query(db, "SELECT status, stop_reason FROM sessions")[0][0] == "stopped"


@pytest.mark.slow
def test_mixed_models_alternate_and_unparseable_replies_become_failed_nodes(tmp_path: Path):
    """Two providers in one search (round-robin), and an idea reply with no ideas in it."""
    brain = ScriptedBrain()
    db = tmp_path / "k.db"
    with LLMServer(responder=brain) as server:
        server.push(text="I would rather not propose anything today.")  # the first idea call
        proc = run_ktree("run", "softmax", "--backend", "cpu", "--headless", "--json",
                         "--provider", "openai-compatible", "--base-url", server.url,
                         "--model", "openai-compatible:anything", "--model", "scripted:scripted",
                         "--rounds", "2", "--ideas", "1", "--variants", "2", "--fixes", "0",
                         "--db", str(db))
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["models"] == ["openai-compatible:anything", "scripted:scripted"]
    providers = [p for (p,) in query(db, "SELECT provider FROM llm_calls ORDER BY id")]
    assert providers[:2] == ["openai-compatible", "scripted"]
    assert set(providers) == {"openai-compatible", "scripted"}
    # Round 1's reply held no ideas: a failed idea node with the reason, and no crash.
    [(title, text, rnd)] = query(db, "SELECT title, text, round FROM nodes WHERE status = 'failed'")
    assert rnd == 1 and "no ideas" in text
    # Round 2 asked the same parent again and went on.
    assert query(db, "SELECT COUNT(*) FROM nodes WHERE kind = 'variant' AND round = 2")[0][0] == 2


def test_dollar_budget_stops_cleanly(tmp_path: Path, priced_config: dict):
    brain = ScriptedBrain()
    db = tmp_path / "k.db"
    with LLMServer(responder=brain) as server:
        proc = run_ktree("run", "softmax", "--provider", "openai-compatible", "--base-url",
                         server.url, "--model", "anything", "--headless", "--json",
                         "--budget-usd", "0.0000001", "--db", str(db), env=priced_config)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["status"] == "stopped" and "budget reached: $" in summary["stop_reason"]
    assert summary["llm"]["calls"] == 1 and summary["llm"]["cost_usd"] > 0.0000001


@pytest.mark.slow
def test_any_kernelbench_file_runs_from_disk(tmp_path: Path):
    """A problem file outside the library, with no METADATA: searched like a built-in, its cost
    counted and labelled estimated."""
    from engine.problems import load_problem

    source = load_problem("softmax").source
    external = tmp_path / "my_softmax.py"
    external.write_text(source[: source.index("METADATA")].replace("batch_size = 4096", "batch_size = 64")
                        .replace("dim = 65536", "dim = 2048"))
    brain = ScriptedBrain()
    db = tmp_path / "k.db"
    with LLMServer(responder=brain) as server:
        proc = run_ktree("run", str(external), "--provider", "openai-compatible", "--base-url",
                         server.url, "--model", "anything", "--headless", "--backend", "cpu",
                         "--rounds", "1", "--ideas", "1", "--variants", "1", "--db", str(db))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The FLOP counter sees no matmul/conv here: bytes are estimated, FLOPs honestly not counted.
    assert "FLOPs not counted, 1.05 MB (estimated)" in proc.stdout
    [(problem, sizes)] = query(db, "SELECT problem, sizes FROM sessions")
    assert problem == "my_softmax" and json.loads(sizes) == {"batch_size": 64, "dim": 2048}
    assert query(db, "SELECT COUNT(*) FROM evaluations WHERE status = 'correct'")[0][0] >= 1


IDEA_JSON = '[{"title": "One thread per row, three plain passes", "description": "Keep it simple."}]'


def test_key_from_config_file_and_a_reply_without_code(tmp_path: Path):
    """The openai provider takes its key from the config file; an implementation reply with no
    code becomes a failed node with the reason, and the search finishes."""
    config = tmp_path / "config.toml"
    config.write_text('[keys]\nopenai = "sk-from-config-1234"\n')
    db = tmp_path / "k.db"
    with LLMServer() as server:
        server.push(text=IDEA_JSON)
        server.push(text="Sorry, I can only describe the kernel in words.")
        proc = run_ktree("run", "softmax", "--provider", "openai", "--base-url", server.url,
                         "--model", "o3", "--headless", "--json", "--backend", "cpu",
                         "--rounds", "1", "--ideas", "1", "--variants", "1", "--db", str(db),
                         env={"KTREE_CONFIG": str(config), "OPENAI_API_KEY": ""})
        auth = {r.headers.get("authorization") for r in server.requests}
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert auth == {"Bearer sk-from-config-1234"}
    assert json.loads(proc.stdout)["status"] == "finished"
    [(status, text)] = query(db, "SELECT status, text FROM nodes WHERE kind = 'variant'")
    assert status == "failed" and "no fenced code block" in text
    assert query(db, "SELECT provider, model, purpose FROM llm_calls ORDER BY id") == [
        ("openai", "o3", "idea"), ("openai", "o3", "implement")]
    assert query(db, "SELECT COUNT(*) FROM evaluations") == [(0,)]
