"""`ktree suite`: a scripted cpu suite over three built-in problems (two with scripted answers,
one without: recorded with its reason) is killed outright mid-run, resumed once without paying
for any call twice, and its report's fast_p and geomean match a recomputation from the DB."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.search.suite import FAST_P_THRESHOLDS, ProblemResult, fast_p, geomean_speedup
from tests.conftest import REPO, query, run_ktree

SHAPE = ["--provider", "scripted", "--backend", "cpu", "--rounds", "1", "--ideas", "1", "--variants", "1"]


def _calls(db: Path) -> list[tuple]:
    try:
        return query(db, "SELECT id, session_id, node_id, purpose, status FROM llm_calls ORDER BY id")
    except sqlite3.OperationalError:  # the file made, its tables not yet (the engine is starting)
        return []


@pytest.mark.slow
def test_suite_killed_resumed_and_scored(tmp_path: Path, build_cache: Path) -> None:
    db = tmp_path / "suite.db"
    # A second per call: time to kill the engine with replies recorded and others not yet asked.
    env = {**os.environ, "KTREE_SCRIPTED_LATENCY": "1.5"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "suite", "softmax", "layernorm", "gelu", *SHAPE, "--headless",
         "--db", str(db)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            time.sleep(0.2)
            if db.exists() and len(_calls(db)) >= 2:  # both idea calls answered, code not yet
                break
        else:
            pytest.fail("no LLM call recorded in time")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = _calls(db)
    assert query(db, "SELECT status FROM suites") == [("running",)]  # as the dead engine left it
    # The problem with no scripted answers was recorded with its reason before any call.
    [(status, reason)] = query(db, "SELECT status, stop_reason FROM sessions WHERE problem = 'gelu'")
    assert status == "failed" and "no cpu answers for 'gelu'" in reason

    resumed = run_ktree("suite", "--resume", "1", "--headless", "--db", str(db),
                        env={"KTREE_SCRIPTED_LATENCY": "0"})
    assert resumed.returncode == 0, resumed.stderr[-3000:] + resumed.stdout[-3000:]
    after = _calls(db)
    assert after[:len(before)] == before  # nothing recorded was lost or changed
    asked = [(node, purpose) for _, _, node, purpose, status in after if status == "ok"]
    assert len(asked) == len(set(asked)), "a call was paid for twice"
    assert len(after) > len(before)  # the resume did the rest
    assert query(db, "SELECT status FROM suites") == [("finished",)]
    sessions = query(db, "SELECT id, problem, status FROM sessions WHERE suite_id = 1 ORDER BY id")
    assert sorted(p for _, p, _ in sessions) == ["gelu", "layernorm", "softmax"]
    assert {p: s for _, p, s in sessions} == {"gelu": "failed", "layernorm": "finished", "softmax": "finished"}

    shown = run_ktree("show", "--suite", "1", "--json", "--markdown", str(tmp_path / "r.md"), "--db", str(db))
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert "fast_0.5" in (tmp_path / "r.md").read_text()

    # By hand from the DB: per problem, the best speedup of a correct verdict; fast_p over all three.
    best: dict[str, tuple[float | None, float | None]] = {}
    for sid, problem, _ in sessions:
        rows = query(db, "SELECT verdict FROM evaluations WHERE session_id = ? AND status = 'correct'", sid)
        verdicts = [json.loads(v) for (v,) in rows]
        eager = [v["speedup_eager"] for v in verdicts if v["speedup_eager"] is not None]
        comp = [v["speedup_compile"] for v in verdicts if v["speedup_compile"] is not None]
        best[problem] = (max(eager, default=None), max(comp, default=None)) if verdicts else (None, None)
    correct = {p for p, (e, _) in best.items() if e is not None}
    assert correct == {"softmax", "layernorm"}  # the scripted kernels are correct on cpu
    sc = report["scores"]
    assert sc["problems"] == 3 and sc["correct"] == 2 and sc["correctness_rate"] == pytest.approx(2 / 3)
    for p in FAST_P_THRESHOLDS:
        by_hand = sum(1 for e, _ in best.values() if e is not None and e > p) / 3
        assert sc["fast_p_eager"][f"{p:g}"] == pytest.approx(by_hand)
        by_hand_c = sum(1 for _, c in best.values() if c is not None and c > p) / 3
        assert sc["fast_p_compile"][f"{p:g}"] == pytest.approx(by_hand_c)
    speeds = [best[p][0] for p in correct]
    assert sc["geomean_speedup_eager"] == pytest.approx(math.prod(speeds) ** (1 / len(speeds)))
    tokens = query(db, "SELECT SUM(input_tokens + output_tokens + reasoning_tokens) FROM llm_calls")[0][0]
    assert sc["tokens"] == tokens
    rows = {p["problem"]: p for p in report["problems"]}
    assert rows["gelu"]["reason"].startswith("not searched:")
    assert rows["softmax"]["speedup_eager"] == pytest.approx(best["softmax"][0])


def _result(correct: bool, eager: float | None, comp: float | None = None) -> ProblemResult:
    return ProblemResult(1, "p", "finished", None, correct, eager, comp, 1, 0.0, 0)


def test_fast_p_counts_every_problem_and_geomean_only_correct() -> None:
    results = [_result(True, 2.0, 0.5), _result(True, 0.9), _result(False, None), _result(False, None)]
    assert fast_p(results, 0.0) == 0.5  # fast_0: the correctness rate
    assert fast_p(results, 1.0) == 0.25  # 2.0 > 1; 0.9 is not; the two failures count in n
    assert fast_p(results, 2.0) == 0.0  # strictly more than p
    assert fast_p(results, 0.0, "compile") == 0.25  # a correct kernel with no compile time is not fast
    assert geomean_speedup(results) == pytest.approx(math.sqrt(2.0 * 0.9))
    assert geomean_speedup([_result(False, None)]) is None
    assert fast_p([], 1.0) == 0.0


def test_suite_bad_input_is_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for args, words in ((["suite"], "needs problems"), (["suite", str(empty)], "no problem files"),
                        (["suite", "no_such_problem"], "unknown problem"),
                        (["suite", "--resume", "3"], "no suite 3"),
                        (["show", "--suite", "4"], "no suite 4")):
        proc = run_ktree(*args, "--db", str(tmp_path / "k.db"))
        assert proc.returncode == 2, proc.stderr
        assert words in proc.stderr and "Traceback" not in proc.stderr


def test_llm_latency_specs() -> None:
    from engine.bench.pipeline import parse_latency

    draw, words = parse_latency("40")
    assert draw() == 40.0 and "40 s" in words
    draw, words = parse_latency("lognormal:median=40,sigma=0.5", seed=1)
    samples = sorted(draw() for _ in range(2001))
    assert 36 < samples[1000] < 44 and samples[0] < 20 < 80 < samples[-1]  # median 40, spread e^0.5
    for bad in ("-1", "gamma:k=2", "lognormal:mean=3", "lognormal:median=0"):
        with pytest.raises(ValueError):
            parse_latency(bad)


def test_estimate_counts_reasoning_from_history_else_family_default() -> None:
    from engine.launch.estimate import estimate, reasoning_rate
    from engine.problems import load_problem
    from engine.search import SearchConfig

    (lo, mid, hi), source = reasoning_rate("o3", {"o3": [100, 200, 300, 400, 1000]}, 1000)
    assert (lo, mid, hi) == (100, 400, 400) and "5 calls" in source
    (lo, mid, hi), source = reasoning_rate("o3", None, 1000)
    assert (lo, mid, hi) == (1000, 3000, 6000) and "default" in source
    assert reasoning_rate("gpt-4o", None, 1000)[0] == (0.0, 0.0, 0.0)
    problem, config = load_problem("softmax"), SearchConfig()
    plain = estimate(problem, config, [("openai", "gpt-4o")], "cpu")
    assert plain["reasoning"]["tokens"] == [0, 0, 0]
    e = estimate(problem, config, [("openai", "o3")], "cpu", reasoning_history={"o3": [500] * 10})
    calls = e["expected"]["calls"]
    assert e["reasoning"]["tokens"] == [500 * calls] * 3
    assert e["with_reasoning_usd"][1] > e["expected"]["cost_usd"]  # billed at the output price


@pytest.mark.slow
def test_suite_estimate_sums_the_problems(tmp_path: Path) -> None:
    one = run_ktree("run", "softmax", "--estimate", "--json", "--provider", "openai", "--model", "o3",
                    "--backend", "cpu", "--db", str(tmp_path / "none.db"))
    both = run_ktree("suite", "softmax", "softmax", "layernorm", "--estimate", "--json", "--provider", "openai",
                     "--model", "o3", "--backend", "cpu", "--db", str(tmp_path / "none.db"))
    assert one.returncode == 0 and both.returncode == 0, one.stderr + both.stderr
    a, b = json.loads(one.stdout), json.loads(both.stdout)
    assert b["problems"] == 2 and b["expected"]["calls"] == 2 * a["expected"]["calls"]
    assert b["reasoning"]["tokens"][2] > a["reasoning"]["tokens"][2] > 0


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_precision_casts_inputs_and_weights(tmp_path: Path, precision: str) -> None:
    """--precision: the reference runs at the cast dtype, so a candidate that answers in float32
    is wrong about its dtype, and one that computes at the precision passes the check."""
    from engine.evaluate.child.evaluation import run_evaluate
    from engine.evaluate.host.make_job import make_job
    from engine.problems import load_problem

    problem = load_problem("softmax")
    sizes = problem.sizes_for("cpu")

    def verdict(body: str) -> object:
        source = ("import torch\nclass ModelNew(torch.nn.Module):\n    def __init__(self, *a):\n"
                  "        super().__init__()\n    def forward(self, x):\n        " + body + "\n")
        job = make_job(problem.path, source, sizes, backend="cpu", cache_dir=str(tmp_path), flops=None,
                       bytes=None, precision=precision, trials=1, time_budget_s=0.05, max_reps=3)
        return run_evaluate(job)

    same = verdict("return torch.softmax(x, dim=-1)")
    assert same.status != "incorrect", same.log
    wide = verdict("return torch.softmax(x.float(), dim=-1)")
    assert wide.status == "incorrect" and "dtype" in wide.log


def test_precision_sets_the_tolerance_and_is_recorded() -> None:
    from engine.launch import RunRequest, UsageError
    from engine.launch.run import _search_config
    from engine.problems import load_problem

    problem = load_problem("softmax")
    config = _search_config(RunRequest.of("softmax", precision="bf16"), problem)
    assert (config.checks.precision, config.checks.atol, config.checks.rtol) == ("bf16", 1e-2, 1e-2)
    assert _search_config(RunRequest.of("softmax", precision="fp16", atol=0.5), problem).checks.atol == 0.5
    with pytest.raises(UsageError):
        _search_config(RunRequest.of("softmax", precision="fp8"), problem)


async def test_sessions_screen_groups_a_suite_pauses_it_and_prunes_a_problem(tmp_path: Path) -> None:
    """The sessions screen: a suite's row with its fast_p line, its problems under it; p pauses
    every running problem (commands the engine applies), x prunes one; Enter opens a problem."""
    from textual.widgets import DataTable

    from engine.record.store import Store
    from tests.tui_helpers import app_on
    from tui.screens.search import SearchScreen
    from tui.screens.sessions import SessionsScreen

    db = tmp_path / "k.db"
    store = await Store.open(db)
    alone = await store.sessions.create(problem="gelu", problem_path="/g.py", backend="cpu", strategy="tree",
                                       provider="scripted", models=[], config={}, sizes={})
    await store.sessions.update(alone, status="finished")
    suite = await store.suites.create(name="level1", problems=["/a.py", "/b.py", "/c.py"], config={})
    made = []
    for name in ("a", "b"):
        sid = await store.sessions.create(problem=name, problem_path=f"/{name}.py", backend="cpu",
                                         strategy="tree", provider="scripted", models=[], config={},
                                         sizes={}, suite_id=suite)
        await store.sessions.update(sid, pid=os.getpid(), heartbeat_at=time.time() + 3600)
        made.append(sid)
    await store.sessions.create(problem="c", problem_path="/c.py", backend="cpu", strategy="-", provider="-",
                               models=[], config={}, sizes={}, suite_id=suite, status="failed",
                               stop_reason="not searched: no answers")
    await store.close()

    async with app_on(db, size=(160, 30)) as (app, pilot):
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        table = screen.query_one("#sessions", DataTable)
        keys = [table.coordinate_to_cell_key((i, 0)).row_key.value for i in range(table.row_count)]
        assert keys[0] == f"suite-{suite}" and keys[1:4] == [str(made[0]), str(made[1]), str(made[1] + 1)]
        assert str(alone) in keys
        head = " ".join(map(str, table.get_row(f"suite-{suite}")))
        assert "suite level1" in head and "0/3 correct" in head and "fast_1 0.00" in head
        table.move_cursor(row=0)
        await pilot.press("p")  # pause the suite: a pause for each running problem
        await pilot.pause()
        table.move_cursor(row=2)
        await pilot.press("x")  # prune problem b
        await pilot.pause()
        rows = query(db, "SELECT session_id, kind FROM commands ORDER BY id")
        assert sorted(rows[:2]) == [(made[0], "pause"), (made[1], "pause")] and rows[2] == (made[1], "stop")
        table.move_cursor(row=1)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, SearchScreen)


@pytest.mark.slow
def test_a_problem_with_no_scripted_answers_is_recorded_failed_and_the_suite_goes_on(
        tmp_path: Path, build_cache: Path) -> None:
    """Issue 30.1: with no key (`--provider auto`, the scripted provider) the suite used to stop at
    the first problem the library has no answers for (rc 2). Now that problem is a failed session
    with the reason, the suite goes on, and the reason's list is the one `ktree problems` gives."""
    from engine.llm.scripted import scripted_backends, scripted_problems
    from engine.scripted_library import available

    db = tmp_path / "suite.db"
    no_key = {"OPENAI_API_KEY": "", "GEMINI_API_KEY": "", "GOOGLE_API_KEY": "",
              "KTREE_CONFIG": str(tmp_path / "none.toml")}
    proc = run_ktree("suite", "softmax", "argmax", "--backend", "cpu", "--rounds", "1", "--ideas", "1",
                     "--variants", "1", "--headless", "--db", str(db), env=no_key)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = query(db, "SELECT problem, status, stop_reason FROM sessions ORDER BY problem DESC")
    assert [(p, s) for p, s, _ in rows] == [("softmax", "finished"), ("argmax", "failed")], rows
    assert query(db, "SELECT status FROM suites") == [("finished",)]
    reason = rows[1][2]
    assert "no cpu answers for 'argmax'" in reason
    answered = available("cpu", "cuda")
    assert reason.endswith(f"(it has: {', '.join(answered)})")
    # The lists agree: the reason's, `ktree problems`' (its scripted column), the estimate's.
    assert answered == [p for p in scripted_problems() if "cpu" in scripted_backends(p)]
    assert "matmul_fp16" not in answered and scripted_backends("matmul_fp16") == ["triton"]
    with pytest.raises(Exception, match=f"it has: {', '.join(answered)}"):
        from engine.launch import check_scripted

        check_scripted("argmax", "cpu")


def test_an_estimate_says_each_reason_for_leaving_problems_out_once():
    from engine.commands.suite import skipped_lines

    why = "the scripted provider has no cpu answers for {!r} (it has: softmax); set a key"
    skipped = {f"/k/{n}.py": why.format(n) for n in ("argmax", "gelu", "relu", "tanh", "swish", "mish")}
    skipped["/k/bad.py"] = "bad.py: syntax error on line 1"
    lines = skipped_lines(skipped)
    assert lines == [
        "  not estimated (6: argmax, gelu, relu, tanh and 2 more): the scripted provider has no cpu answers"
        " for each (it has: softmax); set a key",
        "  not estimated (1: bad): bad.py: syntax error on line 1"]
    assert not any("<" in line for line in lines)  # no placeholder left for the user to read
