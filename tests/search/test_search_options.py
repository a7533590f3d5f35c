"""Strategies, budgets, the estimate, `ktree show`, `ktree export` and `ktree bench pipeline`."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from engine.llm.prices import Prices
from tests.conftest import query, run_ktree

SCRIPTED = ["--provider", "scripted", "--backend", "cpu", "--headless", "--json"]


def assert_usage_error(proc, needle: str) -> None:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


@pytest.mark.slow
def test_best_of_n_samples_independently_from_the_reference(tmp_path: Path):
    db = tmp_path / "k.db"
    proc = run_ktree("run", "softmax", *SCRIPTED, "--strategy", "best-of-n", "--rounds", "3",
                     "--ideas", "1", "--variants", "2", "--db", str(db))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["rounds"] == 1  # one round, whatever --rounds says
    [(root,)] = query(db, "SELECT id FROM nodes WHERE kind = 'root'")
    # N = ideas x variants = 2 separate idea calls from the reference, one variant each.
    ideas = query(db, "SELECT id, parent_id FROM nodes WHERE kind = 'idea'")
    assert len(ideas) == 2 and {p for _, p in ideas} == {root}
    prompts = query(db, "SELECT prompt FROM llm_calls WHERE purpose = 'idea'")
    assert len(prompts) == 2 and all("Propose exactly 1" in p for (p,) in prompts)
    for idea, _ in ideas:
        assert query(db, "SELECT COUNT(*) FROM nodes WHERE parent_id = ? AND origin = 'llm'", idea) == [(1,)]
    assert query(db, "SELECT strategy FROM sessions") == [("best-of-n",)]


@pytest.mark.slow
def test_sequential_revises_the_best_so_far_with_the_last_verdict(tmp_path: Path):
    db = tmp_path / "k.db"
    proc = run_ktree("run", "softmax", *SCRIPTED, "--strategy", "sequential", "--rounds", "2",
                     "--db", str(db))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # One chain: one idea and one variant a step; step 2 grows from step 1's variant.
    assert query(db, "SELECT round, COUNT(*) FROM nodes WHERE kind = 'idea' GROUP BY round") == [(1, 1), (2, 1)]
    [(parent_kind, parent_status, parent_round)] = query(
        db, "SELECT p.kind, p.status, p.round FROM nodes i JOIN nodes p ON i.parent_id = p.id"
            " WHERE i.kind = 'idea' AND i.round = 2")
    assert (parent_kind, parent_status, parent_round) == ("variant", "correct", 1)
    [(prompt,)] = query(db, "SELECT c.prompt FROM llm_calls c JOIN nodes n ON c.node_id = n.id"
                            " WHERE c.purpose = 'idea' AND n.round = 2")
    # Its feedback: the verdict of the last attempt (here the parent itself, which was correct).
    [(speedup,)] = query(db, "SELECT speedup FROM nodes WHERE kind = 'variant' AND round = 1")
    assert f"- speedup vs eager: {speedup:.3g}x" in prompt and "Propose exactly 1" in prompt


@pytest.mark.slow
def test_budgets_stop_cleanly(tmp_path: Path):
    db = tmp_path / "k.db"
    proc = run_ktree("run", "softmax", *SCRIPTED, "--rounds", "1", "--ideas", "1", "--variants", "2",
                     "--max-variants", "1", "--db", str(db))
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["status"] == "stopped" and summary["stop_reason"] == "max variants reached: 1"
    assert query(db, "SELECT COUNT(*) FROM llm_calls WHERE purpose = 'implement'") == [(1,)]
    assert query(db, "SELECT COUNT(*) FROM evaluations") == [(1,)]
    # A hard cap: the second variant the idea asked for is never made (issue 30.3).
    assert query(db, "SELECT COUNT(*) FROM nodes WHERE kind = 'variant'") == [(1,)]
    assert "max variants reached: 1: no new work starts" in proc.stderr

    db2 = tmp_path / "k2.db"  # the idea call alone spends the token budget: nothing else starts
    proc = run_ktree("run", "softmax", *SCRIPTED, "--budget-tokens", "10", "--db", str(db2))
    summary = json.loads(proc.stdout)
    assert summary["status"] == "stopped" and "of 10 tokens" in summary["stop_reason"]
    assert query(db2, "SELECT purpose FROM llm_calls") == [("idea",)]
    assert query(db2, "SELECT COUNT(*) FROM evaluations") == [(0,)]
    assert query(db2, "SELECT status, stop_reason FROM sessions")[0][0] == "stopped"

    proc = run_ktree("run", "softmax", *SCRIPTED, "--time-limit", "0.001", "--db", str(tmp_path / "k3.db"))
    assert json.loads(proc.stdout)["stop_reason"] == "time limit reached: 0.001 s"


@pytest.mark.slow
def test_estimate_counts_calls_and_prices_them(tmp_path: Path):
    proc = run_ktree("run", "softmax", "--estimate", "--json", "--model", "openai:o3", "--rounds", "3",
                     "--ideas", "4", "--variants", "4", "--top", "2",
                     env={"OPENAI_API_KEY": "", "KTREE_CONFIG": str(tmp_path / "none.toml")})
    assert proc.returncode == 0, proc.stderr
    e = json.loads(proc.stdout)
    # Round 1: one idea call, 16 implementations; rounds 2-3: two parents each.
    assert e["calls"] == {"idea": 5, "implement": 80, "fix_at_most": 80}
    price = Prices.load().get("o3")
    row = e["expected"]
    assert row["calls"] == 85 and row["input_tokens"] > 80 * 500
    assert row["cost_usd"] == pytest.approx(
        (row["input_tokens"] * price.input_per_mtok + row["output_tokens"] * price.output_per_mtok) / 1e6,
        abs=1e-4)
    assert e["at_most"]["cost_usd"] > row["cost_usd"] > 0
    text = run_ktree("run", "softmax", "--estimate", "--strategy", "best-of-n", "--provider", "scripted").stdout
    assert "6 idea + 6 implement" in text


@pytest.mark.slow
def test_resume_and_run_usage_errors(recorded_search: dict, tmp_path: Path):
    db = str(recorded_search["db"])
    assert_usage_error(run_ktree("--db", db, "run", "--resume", "1", "--headless"), "has finished")
    assert_usage_error(run_ktree("--db", db, "run", "--resume", "99", "--headless"), "no session 99")
    assert_usage_error(run_ktree("--db", db, "run", "softmax", "--resume", "1"), "give no PROBLEM")
    assert_usage_error(run_ktree("run", "--headless"), "needs a PROBLEM")
    assert_usage_error(run_ktree("run", "softmax", "--time-limit", "0"), "more than 0 seconds")


@pytest.mark.slow
def test_show_prints_the_tree(recorded_search: dict):
    db = recorded_search["db"]
    proc = run_ktree("--db", str(db), "show", "1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Session 1: softmax on ") and "finished" in lines[0]
    assert "reference" in lines[1]
    for node, status, speedup in query(db, "SELECT id, status, speedup FROM nodes WHERE kind = 'variant'"):
        [line] = [ln for ln in lines if f"#{node} variant" in ln]
        assert status in line and (speedup is None or f"{speedup:.2f}x" in line)
    for node, title in query(db, "SELECT id, title FROM nodes WHERE kind = 'idea'"):
        assert any(f"#{node} idea" in ln and title in ln for ln in lines)


@pytest.mark.slow
def test_export_writes_a_solution_that_evaluates(recorded_search: dict, tmp_path: Path):
    db = recorded_search["db"]
    out = tmp_path / "best.py"
    proc = run_ktree("--db", str(db), "export", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    [(best, source, speedup)] = query(
        db, "SELECT id, source, speedup FROM nodes WHERE status = 'correct' ORDER BY speedup DESC LIMIT 1")
    text = out.read_text()
    header = text[: len(text) - len(source.rstrip()) - 1]
    assert text.endswith(source.rstrip() + "\n")
    assert f"session 1, node {best}" in header and "softmax" in header and f"{speedup:.2f}x" in header
    assert all(line.startswith("#") for line in header.strip().splitlines())
    # Comments only above the evaluated code: still a module defining ModelNew. (Not evaluated
    # again here: the header's numbers change each run, so it would always be a fresh build.)
    module = ast.parse(text)
    assert "ModelNew" in {n.name for n in module.body if isinstance(n, ast.ClassDef)}

    [(idea,)] = query(db, "SELECT id FROM nodes WHERE kind = 'idea' LIMIT 1")
    assert_usage_error(run_ktree("--db", str(db), "export", "1", "--node", str(idea)), "an idea")
    assert_usage_error(run_ktree("--db", str(db), "export", "7"), "no session 7")


@pytest.mark.slow
def test_bench_pipeline_at_ci_size():
    proc = run_ktree("bench", "pipeline", "--backend", "cpu", "--ideas", "1", "--variants", "2", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout)
    assert r["status"] == "finished" and r["evaluations"] == r["variants"] == 2
    assert r["distinct_sources"] == 2 and not r["repeat_sources"]  # both built, neither a cache hit
    assert r["compile_s"] > 0 and r["device_s"] > 0 and r["wall_s"] >= r["device_s"]
    assert r["ideal_s"] == pytest.approx(r["compile_s"] / r["compile_workers"] + r["device_s"], abs=2e-3)
    assert 0 <= r["idle_while_waiting_s"] <= r["waiting_s"] <= r["wall_s"]
