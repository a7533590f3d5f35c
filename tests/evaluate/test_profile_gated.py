"""Profiles in seconds (engine.evaluate.profile.ncu, engine.evaluate.host.evaluator._tool_queued): ncu
collects only the metrics the diagnosis reads, skips the warm-up launches (nothing before
cudaProfilerStart) and profiles one forward's kernels; its process starts before the device's lock
and holds the device only from its gate's opening; a profile lets waiting evaluations go first."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.evaluate.host import evaluator as evaluator_module
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.profile.ncu import (
    NCU_METRICS,
    STALL_METRIC,
    STALLS,
    ncu_command,
    ncu_metrics,
    parse_ncu_csv,
)

DATA = Path(__file__).parents[1] / "data"


def test_the_ncu_command_profiles_one_forward_with_the_diagnosis_metrics_only(monkeypatch):
    monkeypatch.delenv("KTREE_NCU_LAUNCH_COUNT", raising=False)
    argv = ncu_command("ncu", "/tmp/x.log")
    at = {a: i for i, a in enumerate(argv)}
    assert argv[at["--profile-from-start"] + 1] == "off"  # the warm-ups before cudaProfilerStart: skipped
    assert argv[at["--launch-skip"] + 1] == "0" and argv[at["--launch-count"] + 1] == "32"
    metrics = argv[at["--metrics"] + 1].split(",")
    assert metrics == ncu_metrics() == [*NCU_METRICS, *(STALL_METRIC.format(s) for s in STALLS)]
    assert len(STALLS) <= 8 and "--set" not in argv and "--section" not in argv
    monkeypatch.setenv("KTREE_NCU_LAUNCH_COUNT", "5")
    argv = ncu_command("ncu", "/tmp/x.log")
    assert argv[argv.index("--launch-count") + 1] == "5"


def test_every_metric_asked_for_is_one_the_parser_reads():
    reads = set(NCU_METRICS)
    for metric in ncu_metrics():
        assert metric in reads or (metric.startswith("smsp__average_warps_issue_stalled_")
                                   and metric.endswith("_per_issue_active.ratio")), metric
    canned = list((DATA / "profile").glob("ncu*.csv"))
    assert canned
    for csv in canned:  # the canned outputs still parse
        assert parse_ncu_csv(csv.read_text())


def test_a_gated_profile_starts_before_the_lock_and_holds_it_only_after_its_gate(tmp_path, monkeypatch):
    seen: dict = {}
    e = LocalEvaluator("cpu", cache_dir=tmp_path)
    device = e.devices[0]

    async def fake_run_tool(prefix, job, action, env, timeout_s, sandbox):
        where = Path(env["KTREE_GATE"])
        seen["held_at_ready"] = device.lock is not None and device.lock.held
        seen["busy_at_ready"] = device.busy
        (where / "ready").write_text("x")
        while not (where / "go").exists():
            await asyncio.sleep(0.01)
        seen["held_at_go"] = device.lock is not None and device.lock.held
        return {"ok": True}, "", "log"

    monkeypatch.setattr(evaluator_module, "run_tool", fake_run_tool)
    result = asyncio.run(e._tool_queued(["ncu"], e.job("", "", {}, flops=None, bytes=None), "ncu", {}, 5.0))
    assert result == ({"ok": True}, "", "log")
    assert seen == {"held_at_ready": False, "busy_at_ready": False, "held_at_go": True}
    assert not device.lock.held and not list((tmp_path / "peaks" / "gates").iterdir())


def test_an_ungated_tool_runs_holding_the_device(tmp_path, monkeypatch):
    seen = {}
    e = LocalEvaluator("cpu", cache_dir=tmp_path)

    async def fake_run_tool(prefix, job, action, env, timeout_s, sandbox):
        seen["held"] = e.devices[0].lock.held
        seen["gate"] = "KTREE_GATE" in env
        return {}, "", ""

    monkeypatch.setattr(evaluator_module, "run_tool", fake_run_tool)
    asyncio.run(e._tool_queued([], e.job("", "", {}, flops=None, bytes=None), "torch", {}, 5.0))
    assert seen == {"held": True, "gate": False}


def test_a_profile_lets_waiting_evaluations_go_first(tmp_path, monkeypatch):
    order: list[str] = []
    e = LocalEvaluator("cpu", cache_dir=tmp_path)

    async def fake_run_tool(prefix, job, action, env, timeout_s, sandbox):
        order.append("profile")
        return {}, "", ""

    monkeypatch.setattr(evaluator_module, "run_tool", fake_run_tool)

    async def go() -> None:
        e.waiting["device"] += 1  # an evaluation waits for the device
        job = e.job("", "", {}, flops=None, bytes=None)
        task = asyncio.ensure_future(e._tool_queued([], job, "torch", {}, 5.0))
        await asyncio.sleep(0.3)
        order.append("evaluation")
        e.waiting["device"] -= 1
        await task

    asyncio.run(go())
    assert order == ["evaluation", "profile"]
