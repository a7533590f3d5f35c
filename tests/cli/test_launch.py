"""The launch API (engine/launch.py): requests in, a typed Prepared or a one-line UsageError out,
with no subprocess — the CLI and the TUI both build searches through it."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from engine.cli import build_parser
from engine.commands._common import run_request
from engine.commands.run import resume_request
from engine.evaluate.base import Evaluator
from engine.launch import (
    Prepared,
    ResumeRequest,
    RunRequest,
    UsageError,
    estimate_run,
    job_cost,
    prepare_resume,
    prepare_run,
)
from engine.problems import load_problem
from engine.record.events import EventBus
from engine.record.store import Store
from engine.search import Search
from tests.cli.helpers import FORM
from tests.fake_session import write_fake_session
from tui.screens.new_search import form_request

REPO = Path(__file__).resolve().parents[2]
SCRIPTED = {"problem": "softmax", "provider": "scripted", "backend": "cpu", "isolation": "basic"}


@pytest.fixture
def no_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No key anywhere: auto means scripted, and a real provider cannot be set up."""
    for var in ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KTREE_CONFIG", str(tmp_path / "none.toml"))


async def test_a_scripted_cpu_request_becomes_a_typed_prepared_search(tmp_path: Path, no_keys: None):
    prepared = prepare_run(RunRequest.of(**SCRIPTED, rounds=1, ideas=2, variants=1, top=1, budget_usd=0.5,
                                      seed=7, fixes=0, models=["scripted"]))
    try:
        assert isinstance(prepared, Prepared) and prepared.resume is None
        assert prepared.problem.name == "softmax"
        assert isinstance(prepared.evaluator, Evaluator) and prepared.evaluator.backend == "cpu"
        [(provider, model)] = prepared.models
        assert provider.scripted and model == "scripted"
        c = prepared.config
        assert (c.shape.rounds, c.shape.ideas, c.shape.variants, c.shape.top) == (1, 2, 1, 1)
        assert (c.checks.seed, c.budgets.budget_usd, c.shape.fixes) == (7, 0.5, 0)
        assert (c.checks.atol, c.checks.rtol) == prepared.problem.tolerance  # the problem's own by default
        # where it runs, as resolved, is its own record (for every screen to say)
        assert prepared.placement.isolation == prepared.evaluator.sandbox.level
        assert prepared.placement.backend == "cpu" and prepared.placement.gpus is None
        store = await Store.open(tmp_path / "k.db")
        try:
            search = prepared.search(store, EventBus())
            assert isinstance(search, Search) and search.config is c and not search.record.resuming
        finally:
            await store.close()
    finally:
        await prepared.evaluator.close()


def test_requests_are_frozen_and_hold_tuples():
    request = RunRequest.of("softmax", models=["a", "b"], gpus=[0, 1])
    assert request.llm.models == ("a", "b") and request.placement.gpus == (0, 1)
    with pytest.raises(AttributeError):
        request.shape.rounds = 5  # type: ignore[misc]
    assert ResumeRequest.of(3, gpus=[1]).placement.gpus == (1,)
    with pytest.raises(TypeError, match="no part of a search has a field 'roundz'"):
        RunRequest.of("softmax", roundz=3)


def _relu(tmp_path: Path) -> str:
    path = tmp_path / "relu.py"
    path.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):"
                    " return x.relu()\ndef get_inputs(): return [torch.randn(8)]\n"
                    "def get_init_inputs(): return []\n")
    return str(path)


@pytest.mark.parametrize(("change", "message"), [
    ({"problem": "no_such_problem"}, "unknown problem 'no_such_problem'"),
    ({"atol": -1.0}, "--atol: tolerance -1 must not be negative"),
    ({"rtol": -0.5}, "--rtol: tolerance -0.5 must not be negative"),
    ({"fixes": -3}, "--fixes: -3 must be 0 or more"),
    ({"budget_usd": 0.0}, "--budget-usd: 0 must be more than 0"),
    ({"languages": ("cuda", "rust")}, "--language: invalid choice: 'cuda,rust'"),
    ({"ray_address": "auto"}, "--ray-address needs --executor ray"),
    ({"ray_workers": 2}, "--ray-workers needs --executor ray"),
    ({"executor": "ray", "gpus": (0,)}, "--gpus is for --executor local (ray runs one worker per GPU"),
    ({"gpus": (0,)}, "--gpus needs the cuda backend (no GPU in use here)"),
    ({"strategy": "beam"}, "--strategy: invalid choice: 'beam'"),
    ({"backend": "tpu"}, "--backend: invalid choice: 'tpu'"),
    ({"rounds": 0}, "--rounds: 0 must be at least 1"),
    ({"provider": "openai-compatible", "models": ("m",)}, "needs --base-url"),
    ({"provider": "openai-compatible"}, "needs --model"),
    ({"provider": "openai"}, "provider openai needs an API key"),
])
def test_bad_requests_are_one_line_usage_errors(change: dict, message: str, no_keys: None):
    with pytest.raises(UsageError) as caught:
        prepare_run(RunRequest.of(**{**SCRIPTED, **change}))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_problem_with_no_scripted_answers(tmp_path: Path, no_keys: None):
    with pytest.raises(UsageError, match="scripted provider has no cpu answers for 'relu'"):
        prepare_run(RunRequest.of(**{**SCRIPTED, "problem": _relu(tmp_path)}))


def test_the_estimate_needs_no_key(no_keys: None):
    e = estimate_run(RunRequest.of("softmax", provider="openai", rounds=2, ideas=3, variants=2, top=2),
                     backend="cpu")
    assert e["models"] == ["openai:o3"] and e["calls"] == {"idea": 3, "implement": 18, "fix_at_most": 18}
    assert e["expected"]["cost_usd"] > 0
    # auto with no key is the scripted provider, priced at nothing
    e = estimate_run(RunRequest.of("softmax", strategy="best-of-n"), backend="cpu")
    assert e["models"] == ["scripted:scripted"] and e["strategy"] == "best-of-n"
    assert e["at_most"]["cost_usd"] == 0
    with pytest.raises(UsageError, match="must not be negative"):
        estimate_run(RunRequest.of("softmax", atol=-1), backend="cpu")


def test_the_estimate_refuses_a_scripted_search_it_could_not_start(no_keys: None):
    """Said up front (the estimate, and the new-search form through it), not when Start fails."""
    for request in (RunRequest.of("gemv", provider="scripted"), RunRequest.of("gemv")):  # auto: no key
        with pytest.raises(UsageError, match="scripted provider has no cpu answers for 'gemv'") as caught:
            estimate_run(request, backend="cpu")
        assert "softmax" in str(caught.value) and "\n" not in str(caught.value)
    assert estimate_run(RunRequest.of("gemv", provider="openai"), backend="cpu")["calls"]["idea"] == 3
    with pytest.raises(UsageError, match="scripted provider has no cpu answers for 'gemv'"):
        estimate_run(form_request({**FORM, "problem": "gemv", "provider": "scripted"}), backend="cpu")


def test_job_cost_is_the_problems_cost_at_those_sizes():
    problem = load_problem("softmax")
    sizes = problem.sizes_for("cpu")
    cost = problem.cost_at(sizes)
    assert job_cost(problem, sizes) == (cost.flops or None, cost.bytes or None)
    assert job_cost(problem, sizes)[1]  # softmax declares its bytes


async def _session(store: Store, status: str) -> int:
    sid = await write_fake_session(store, 20, status=status)
    softmax = str(load_problem("softmax").path)  # absolute: the test need not run from the repo
    await store.conn.execute("UPDATE sessions SET problem_path = ? WHERE id = ?", (softmax, sid))
    await store.conn.commit()
    return sid


async def test_resume_reads_the_session_from_the_callers_store(tmp_path: Path, no_keys: None):
    store = await Store.open(tmp_path / "k.db")
    try:
        sid = await _session(store, "interrupted")
        recorded = (await store.sessions.get(sid))["config"]
        request = ResumeRequest.of(sid, budget_usd=5.0, max_variants=9, isolation="basic")
        prepared = await prepare_resume(request, store)
        try:
            assert prepared.resume == sid and prepared.problem.name == "softmax"
            assert prepared.evaluator.backend == "cpu"  # the session's backend
            [(provider, model)] = prepared.models
            assert provider.scripted and model == "synthetic"  # the session's model
            c = prepared.config
            assert (c.shape.rounds, c.shape.ideas, c.shape.variants, c.shape.top) == (
                recorded["rounds"], recorded["ideas"], recorded["variants"], recorded["top"])
            # given: they replace the recorded ones
            assert (c.budgets.budget_usd, c.budgets.max_variants) == (5.0, 9)
            assert prepared.placement.isolation == "basic" and prepared.placement.backend == "cpu"
            assert prepared.search(store, EventBus()).record.resuming
        finally:
            await prepared.evaluator.close()
        assert await store.sessions.get(sid) is not None  # the caller's store is still open and usable
    finally:
        await store.close()


@pytest.mark.parametrize(("status", "message"), [
    ("running", "session {sid} is still running (pid {pid})"),
    ("finished", "session {sid} has finished; there is nothing to resume"),
])
async def test_what_cannot_be_resumed(tmp_path: Path, status: str, message: str, no_keys: None):
    store = await Store.open(tmp_path / "k.db")
    try:
        sid = await _session(store, status)
        with pytest.raises(UsageError) as caught:
            await prepare_resume(ResumeRequest.of(sid), store)
        assert str(caught.value) == message.format(sid=sid, pid=os.getpid())
        with pytest.raises(UsageError) as caught:
            await prepare_resume(ResumeRequest.of(sid + 1), store)
        assert str(caught.value) == f"no session {sid + 1} in {tmp_path / 'k.db'}"
    finally:
        await store.close()


def test_the_cli_flags_become_the_same_requests():
    args = build_parser().parse_args([
        "run", "softmax", "--provider", "scripted", "--model", "a", "--model", "openai:b", "--rounds", "3",
        "--ideas", "4", "--variants", "1", "--top", "1", "--budget-usd", "2.5", "--budget-tokens", "900",
        "--max-variants", "7", "--time-limit", "60", "--atol", "0.1", "--rtol", "0.2", "--seed", "5",
        "--fixes", "2", "--backend", "cpu", "--isolation", "basic", "--strategy", "sequential",
        "--reasoning", "high", "--llm-timeout", "30", "--llm-concurrency", "3", "--compile-workers", "2",
        "--gpus", "0,1", "--base-url", "http://x/v1"])
    assert run_request(args) == RunRequest.of(
        problem="softmax", provider="scripted", models=("a", "openai:b"), rounds=3, ideas=4, variants=1,
        top=1, budget_usd=2.5, budget_tokens=900, max_variants=7, time_limit=60.0, atol=0.1, rtol=0.2,
        seed=5, fixes=2, backend="cpu", isolation="basic", strategy="sequential", reasoning="high",
        llm_timeout=30.0, llm_concurrency=3, compile_workers=2, gpus=(0, 1), base_url="http://x/v1")
    assert run_request(build_parser().parse_args(["run", "softmax"])) == RunRequest.of("softmax")
    args = build_parser().parse_args(["run", "--resume", "4", "--budget-usd", "1", "--time-limit", "9",
                                      "--executor", "ray", "--ray-workers", "2"])
    assert resume_request(args) == ResumeRequest.of(4, budget_usd=1.0, time_limit=9.0, executor="ray",
                                                 ray_workers=2)


def test_the_new_search_form_becomes_a_run_request():
    assert form_request(FORM) == RunRequest.of("softmax")
    assert form_request({**FORM, "path": " /x/p.py ", "models": "openai:o3, gemini:g ,", "provider": "openai",
                         "strategy": "best-of-n", "backend": "cpu", "rounds": " 1", "ideas": "5",
                         "variants": "4", "top": "3", "budget_usd": "0.75", "budget_tokens": "1000"}) == \
        RunRequest.of("/x/p.py", provider="openai", models=("openai:o3", "gemini:g"), strategy="best-of-n",
                   backend="cpu", rounds=1, ideas=5, variants=4, top=3, budget_usd=0.75, budget_tokens=1000)


@pytest.mark.parametrize(("field", "text", "message"), [
    ("rounds", "0", "rounds: 0 must be at least 1"),
    ("ideas", "many", "ideas: 'many' is not a whole number"),
    ("top", "", "top: '' is not a whole number"),
    ("budget_usd", "lots", "budget USD: 'lots' is not a number of dollars"),
    ("budget_tokens", "1.5", "budget tokens: '1.5' is not a whole number"),
    ("budget_usd", "-1", "budget USD: -1 must be more than 0"),
    ("budget_tokens", "0", "budget tokens: 0 must be at least 1"),
])
def test_bad_form_fields_say_which(field: str, text: str, message: str):
    with pytest.raises(ValueError) as caught:
        form_request({**FORM, field: text})
    assert str(caught.value) == message


def test_nothing_under_tui_imports_the_cli():
    """One-way imports: the CLI is the entry point at the top; the TUI reaches the engine
    through engine.launch, never back up through engine.cli."""
    offenders = []
    for path in (REPO / "tui").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            offenders += [f"{path.relative_to(REPO)}: {n}" for n in names if n == "engine.cli"]
    assert offenders == []


def test_a_suite_estimate_says_its_tokens_come_from_each_problem():
    """Issue 56, item 15: `ktree suite level1 --estimate` said its input tokens came from "the
    prompts built for conv2d" (the first problem's words) for a 4-problem suite."""
    from engine.cli import build_parser
    from engine.commands._common import run_request
    from engine.launch.suite import SuiteRequest, estimate_suite

    args = build_parser().parse_args(["suite", "softmax", "layernorm", "--estimate", "--provider", "openai",
                                      "--model", "gpt-4o", "--backend", "cpu"])
    args.problem = args.problems[0]  # (as `ktree suite` builds its request)
    result = estimate_suite(SuiteRequest(tuple(args.problems), run_request(args), None))
    assert result["problems"] == 2
    said = result["assumptions"]
    assert said.startswith("input tokens from each of the 2 problems' own prompts") and "softmax" not in said
