"""The ray executor on a real local Ray cluster (2 CPUs, so 2 evaluation actors), cpu backend:
a scripted search through the CLI's code path, a worker killed mid-evaluation, and no LLM key on
the cluster. One cluster for the module (starting one takes seconds)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from engine.cli import build_parser
from engine.commands.run import prepare_search, run_headless
from tests.conftest import REPO, query, run_ktree

pytestmark = pytest.mark.slow

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")
KEY = "OPENAI_API_KEY"
DEVICE_NAME = re.compile(r"^[\w.-]+/cpu[01]$")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """A local cluster started the way the CLI starts one, with an LLM key in this process's
    environment (which must not reach the cluster). Started from a directory without ktree in it:
    Ray puts the driver's working directory on its workers' sys.path, ahead of what connect()
    ships, so from the checkout they would run the checkout's engine, not the node package."""
    import ray

    from engine.evaluate.placement.ray_executor import connect

    saved = os.environ.get(KEY)
    os.environ[KEY] = "sk-ktree-test-secret"
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("driver-cwd"))
    try:
        assert connect(None, num_cpus=2)
        os.chdir(cwd)
        yield ray
    finally:
        os.chdir(cwd)
        ray.shutdown()
        if saved is None:
            os.environ.pop(KEY, None)
        else:
            os.environ[KEY] = saved


@needs_ray
async def test_no_llm_key_reaches_an_actor(cluster):
    from engine.evaluate.placement.ray_executor import RayEvaluator

    evaluator = RayEvaluator("cpu", workers=1)
    try:
        await evaluator.ready()
        [slot] = evaluator.slots
        assert slot.state == "alive" and os.environ[KEY] == "sk-ktree-test-secret"  # kept here
        assert slot.info["keys"] == []  # what the actor's os.environ holds
        environ = Path(f"/proc/{slot.pid}/environ").read_bytes().split(b"\0")  # as it was started
        assert not any(entry.startswith(KEY.encode()) for entry in environ)
        assert any(entry.startswith(b"PATH=") for entry in environ)
    finally:
        await evaluator.close()


@needs_ray
async def test_the_ray_evaluator_keeps_the_evaluator_contract_and_runs_the_shipped_package(cluster):
    """The same protocol and the same jobs as the local evaluator (but the build cache, which is
    the actor's); the actor's code is the package connect() shipped: the settings and evaluate alone."""
    from engine.evaluate.base import Evaluator
    from engine.evaluate.host.evaluator import LocalEvaluator
    from engine.evaluate.placement.ray_executor import NODE_PARTS, RayEvaluator
    from engine.problems import load_problem

    softmax = load_problem("softmax")
    cost = softmax.cost("cpu")
    evaluator = RayEvaluator("cpu", workers=1)
    local = LocalEvaluator("cpu")
    try:
        assert isinstance(evaluator, Evaluator) and evaluator.gpus is None
        jobs = [e.job(softmax.path, "src", softmax.sizes_for("cpu"), flops=cost.flops, bytes=cost.bytes,
                      trials=2) for e in (evaluator, local)]
        assert jobs[0] == jobs[1].replace(cache_dir="") and jobs[0].flops == cost.flops
        await evaluator.ready()
        [slot] = evaluator.slots
        shipped = Path(slot.info["engine_dir"])
        assert shipped != REPO / "engine"
        assert sorted(p.name for p in shipped.iterdir() if p.name != "__pycache__") == sorted(
            ["__init__.py", *NODE_PARTS])
    finally:
        await evaluator.close()
        await local.close()


@needs_ray
async def test_scripted_search_through_the_cli_on_two_ray_workers(cluster, tmp_path: Path, capsys):
    from engine.evaluate.placement.ray_executor import RayEvaluator

    db = tmp_path / "k.db"
    args = build_parser().parse_args([
        "run", "softmax", "--provider", "scripted", "--backend", "cpu", "--executor", "ray",
        "--rounds", "1", "--ideas", "1", "--variants", "2", "--headless", "--json", "--db", str(db)])
    prepared = prepare_search(args, db)
    evaluator = prepared.evaluator
    assert isinstance(evaluator, RayEvaluator) and len(evaluator.slots) == 2
    assert await run_headless(args, prepared, db) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["status"] == "finished" and summary["by_status"].get("correct", 0) >= 1

    variants = query(db, "SELECT id, status FROM nodes WHERE kind = 'variant'")
    evals = query(db, "SELECT node_id, status, verdict FROM evaluations")
    assert len(variants) >= 2
    assert sorted(e[0] for e in evals) == sorted(v[0] for v in variants)  # one verdict each
    assert {e[:2] for e in evals} == set(variants)
    placements = [json.loads(e[2])["placement"] for e in evals]
    assert all(p["executor"] == "ray" and DEVICE_NAME.match(p["device"]) and p["requeued"] == 0
               for p in placements)
    # `run` profiles by default (auto) what is read — in one round, the best: asked of the actors
    # (the one that measured it), whose profiler took it, and the diagnosis came back.
    best = summary["best"]["node_id"]
    profiles = {e[0]: json.loads(e[2]).get("profile") or {} for e in evals if e[1] == "correct"}
    assert profiles[best].get("tool") == "cpu" and profiles[best]["diagnosis"]["bound"], profiles
    assert [n for n, p in profiles.items() if p] == [best]
    assert query(db, "SELECT node_id, reason, tool FROM profiles") == [(best, "best", "cpu")]
    # The first two jobs went to different actors (fewest jobs in flight), each in its own process.
    names = {s.name: s.pid for s in evaluator.slots}
    assert {p["device"] for p in placements} == set(names)
    assert all(p["pid"] == names[p["device"]] for p in placements)
    assert sum(d["jobs"] for d in evaluator.device_states()) == len(evals)


@needs_ray
@pytest.mark.alone  # (its rerun's 100 check trials ran past the evaluation's limit beside another worker)
async def test_a_worker_killed_mid_evaluation_is_rerun_elsewhere(cluster, tmp_path: Path):
    from engine.evaluate.placement.ray_executor import RayEvaluator
    from engine.llm.scripted import ScriptedProvider
    from engine.problems import load_problem
    from engine.record.events import EventBus, NodeUpdated
    from engine.record.store import Store
    from engine.search import Search, SearchConfig

    evaluator = RayEvaluator("cpu")
    store = await Store.open(tmp_path / "k.db")
    bus = EventBus()
    killed: dict[str, object] = {}

    def kill_on_checking(event: object) -> None:
        """The first time a variant is reported checking, kill the actor checking it."""
        if killed or not isinstance(event, NodeUpdated) or event.node.status != "checking":
            return
        slot = next(s for s in evaluator.slots if "checking" in s.jobs.values())
        killed.update(name=slot.name, pid=slot.pid, node=event.node.id)
        os.kill(slot.pid, signal.SIGKILL)

    bus.subscribe(kill_on_checking)
    # Many trials: the check lasts seconds, so the kill lands while it runs.
    config = SearchConfig.of(rounds=1, ideas=1, variants=2, trials=100, fixes=0)
    provider = ScriptedProvider("softmax", "cpu", seed=0, latency_s=0.0)
    search = Search(store, bus, [(provider, "scripted")], evaluator, load_problem("softmax"), config)
    try:
        summary = await search.run()
        assert summary["status"] == "finished" and killed
        sid = search.session_id
        variants = [r[0] for r in await (await store.conn.execute(
            "SELECT id FROM nodes WHERE session_id = ? AND kind = 'variant'", (sid,))).fetchall()]
        evals = await store.evaluations.of(sid)
        assert sorted(e["node_id"] for e in evals) == sorted(variants)  # none lost, none twice
        rerun = [e["verdict"] for e in evals if e["verdict"].placement.get("requeued")]
        assert len(rerun) == 1 and evaluator.requeues == 1
        placement = rerun[0].placement
        assert placement["lost"] == [killed["name"]] and placement["device"] != killed["name"]
        assert rerun[0].status in ("correct", "incorrect")  # really evaluated the second time
        assert f"after losing {killed['name']}" in rerun[0].log
        # The lost actor is replaced (the cluster has room again), in the same slot.
        deadline = time.monotonic() + 120
        while not all(s.state == "alive" for s in evaluator.slots) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        [slot] = [s for s in evaluator.slots if s.lost]
        assert slot.state == "alive" and slot.pid != killed["pid"] and slot.name == killed["name"]
        assert all(d["alive"] for d in evaluator.device_states())
    finally:
        await evaluator.close()
        await store.close()


@needs_ray
def test_bench_pipeline_on_ray_workers(cluster, capsys):
    from engine.commands.bench import pipeline

    # --repeat-sources: the library's files as they are, which the session's build cache holds
    # (fresh, stamped builds are timed by tests/search/test_search_options.py; here the point is the actors).
    args = build_parser().parse_args(["bench", "pipeline", "--backend", "cpu", "--executor", "ray",
                                      "--ideas", "1", "--variants", "2", "--repeat-sources", "--json"])
    assert pipeline(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "finished" and result["evaluations"] == result["variants"] >= 2
    assert result["compile_workers"] == 2 and result["device_active_s"] > 0


@needs_ray
def test_a_suite_runs_on_ray_workers(cluster, tmp_path: Path, capsys):
    """`ktree suite --executor ray`: the suite's problems share the cluster's workers; every
    verdict was taken there, and the report scores both problems."""
    from engine.commands.suite import suite

    db = tmp_path / "k.db"
    args = build_parser().parse_args([
        "suite", "softmax", "layernorm", "--provider", "scripted", "--backend", "cpu", "--executor", "ray",
        "--rounds", "1", "--ideas", "1", "--variants", "1", "--json", "--db", str(db)])
    assert suite(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["scores"]["problems"] == 2
    sessions = query(db, "SELECT id, problem, status FROM sessions WHERE suite_id = 1")
    assert sorted((p, s) for _, p, s in sessions) == [("layernorm", "finished"), ("softmax", "finished")]
    evals = query(db, "SELECT session_id, verdict FROM evaluations")
    assert {sid for sid, _ in evals} == {sid for sid, _, _ in sessions}  # each problem got verdicts
    placements = [json.loads(v)["placement"] for _, v in evals]
    assert all(p["executor"] == "ray" and DEVICE_NAME.match(p["device"]) for p in placements), placements


def test_executor_usage_errors(tmp_path: Path):
    for argv, says in [
        (["run", "softmax", "--ray-address", "auto", "--headless"], "--ray-address needs --executor ray"),
        (["run", "softmax", "--ray-workers", "2", "--headless"], "--ray-workers needs --executor ray"),
        (["bench", "pipeline", "--executor", "ray", "--cold"], "it is for --executor local"),
    ]:
        proc = run_ktree(*argv, "--db", str(tmp_path / "k.db")) if argv[0] == "run" else run_ktree(*argv)
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_missing_ray_is_one_line():
    """With ray not importable, --executor ray says how to get it (exit 2, no traceback)."""
    import subprocess

    code = ("import sys; sys.modules['ray'] = None; from engine.cli import main;"
            " sys.exit(main(['run', 'softmax', '--executor', 'ray', '--provider', 'scripted',"
            " '--headless']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "ktree: error: ray is not installed: pip install 'ktree[ray]'"
