"""Several evaluation devices in one evaluator: one worker each, one shared queue, every verdict
naming the device that measured it. On CI the devices are cpu slots (`LocalEvaluator("cpu",
devices=2)`); tests/evaluate/test_devices_gpu.py runs the same on two GPUs."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

from engine.evaluate.host.eval_limit import EvalLimit
from engine.evaluate.host.evaluator import EvaluatorConfig, LocalEvaluator
from engine.evaluate.verdict import Verdict
from engine.problems import load_problem
from tests.conftest import run_ktree
from tests.evaluate.helpers import RENDEZVOUS

LIMIT = EvalLimit(120.0, "flag", "--eval-timeout 120")  # what the evaluator hands its worker

SOFTMAX = load_problem("softmax")
WORK = {"flops": SOFTMAX.cost("cpu").flops, "bytes": SOFTMAX.cost("cpu").bytes}  # as the search passes them


def test_two_devices_evaluate_two_compiled_variants_at_the_same_time(tmp_path: Path):
    a, b = str(tmp_path / "a-started"), str(tmp_path / "b-started")
    sources = [RENDEZVOUS.format(mine=a, other=b), RENDEZVOUS.format(mine=b, other=a)]

    async def go() -> tuple[list[Verdict], list[dict], int]:
        evaluator = LocalEvaluator("cpu", devices=2, isolation="basic", eval_timeout=120)
        both_busy = 0
        done = asyncio.Event()

        async def watch() -> None:
            nonlocal both_busy
            while not done.is_set():
                both_busy = max(both_busy, sum(d["busy"] for d in evaluator.device_states()))
                await asyncio.sleep(0.005)

        watcher = asyncio.create_task(watch())
        try:
            verdicts = await asyncio.gather(*(evaluator.evaluate(
                evaluator.job(SOFTMAX.path, s, SOFTMAX.sizes_for("cpu"), **WORK)) for s in sources))
            return list(verdicts), evaluator.device_states(), both_busy
        finally:
            done.set()
            await watcher
            await evaluator.close()

    verdicts, states, both_busy = asyncio.run(go())
    assert [v.status for v in verdicts] == ["incorrect", "incorrect"], [v.log for v in verdicts]
    assert both_busy == 2  # seen from outside too: both devices held at once
    slots = sorted(v.gpu["slot"] for v in verdicts)
    assert slots == ["cpu0", "cpu1"]  # each verdict names the device that ran it
    assert sorted(v.gpu["index"] for v in verdicts) == [0, 1]
    assert all(v.gpu["torch"] and v.gpu["host"] for v in verdicts)
    assert [(s["name"], s["jobs"], s["busy"], s["queue"], s["alive"]) for s in states] == [
        ("cpu0", 1, False, 0, True), ("cpu1", 1, False, 0, True)]
    assert all(s["busy_s"] > 0 for s in states)


def _gone_or_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (FileNotFoundError, IndexError):
        return True


@pytest.mark.slow
def test_a_worker_killed_while_idle_is_restarted_and_its_next_job_not_lost():
    """Killed between jobs (not by a candidate): the job sent to the dead process is sent again to a
    fresh one, and gets its real verdict instead of 'crashed'."""
    source = "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"

    async def go() -> tuple[list[str], int, list[str]]:
        evaluator = LocalEvaluator("cpu", devices=2, eval_timeout=120)
        worker = evaluator.devices[1].worker
        assert worker is not None
        job = evaluator.job(SOFTMAX.path, source, SOFTMAX.sizes_for("cpu"), **WORK)
        try:
            first = await worker.run(job, LIMIT)
            assert worker.proc is not None, (first[0], first[1] and first[1].get("status"), worker.restarts,
                                             first[2][-2000:])
            pid = worker.proc.pid
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while not _gone_or_zombie(pid):  # no await: the engine has not noticed the death yet
                assert time.monotonic() < deadline
                time.sleep(0.01)
            second = await worker.run(job, LIMIT)
            return [first[1]["status"], second[1]["status"]], worker.starts, worker.restarts
        finally:
            await evaluator.close()

    statuses, starts, restarts = asyncio.run(go())
    assert statuses == ["incorrect", "incorrect"]
    assert starts == 2 and restarts == ["died"]


def test_a_device_whose_worker_cannot_start_is_set_aside_and_its_job_runs_on_another():
    source = "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"

    async def go() -> tuple[list[Verdict], list[dict], int]:
        evaluator = LocalEvaluator("cpu", devices=2, eval_timeout=120)
        broken = evaluator.devices[1].worker
        assert broken is not None
        broken.extra_env["PYTHONHOME"] = "/nonexistent"  # no interpreter starts there: a dead device
        try:
            verdicts = await asyncio.gather(*(evaluator.evaluate(
                evaluator.job(SOFTMAX.path, source, SOFTMAX.sizes_for("cpu"), **WORK)) for _ in range(2)))
            return list(verdicts), evaluator.device_states(), broken.starts
        finally:
            await evaluator.close()

    verdicts, states, tries = asyncio.run(go())
    assert [v.status for v in verdicts] == ["incorrect", "incorrect"], [v.log for v in verdicts]
    assert [v.gpu["slot"] for v in verdicts] == ["cpu0", "cpu0"]
    assert tries == 1  # tried once, then set aside
    assert [(s["name"], s["jobs"], s["alive"]) for s in states] == [("cpu0", 2, True), ("cpu1", 0, False)]


def test_gpus_are_for_the_cuda_backend_and_must_be_visible():
    with pytest.raises(ValueError, match="cuda backend only"):
        LocalEvaluator("cpu", gpus=[0])
    import torch

    if torch.cuda.device_count() == 0:
        with pytest.raises(ValueError, match="no CUDA GPU is visible"):
            LocalEvaluator("cuda", gpus=[0])
    else:
        with pytest.raises(ValueError, match="GPU 99 is not visible"):
            LocalEvaluator("cuda", gpus=[99])
        with pytest.raises(ValueError, match="chosen twice"):
            LocalEvaluator("cuda", gpus=[0, 0])


@pytest.mark.parametrize(("args", "message"), [
    (["--gpus", "a,b"], "--gpus"),
    (["--gpus", "0,0"], "twice"),
    (["--gpus", "-1"], "--gpus"),
    (["--gpus", ""], "--gpus"),
    (["--gpus", "0", "--backend", "cpu"], "cuda backend"),
    (["--gpus", "0", "--executor", "ray"], "--executor local"),
])
def test_bad_gpus_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path):
    proc = run_ktree("run", "softmax", "--provider", "scripted", "--headless", "--db",
                     str(tmp_path / "k.db"), *args, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr
    bench = run_ktree("bench", "pipeline", "--backend", "cpu", *args, timeout=120)
    assert bench.returncode == 2 and len(bench.stderr.strip().splitlines()) == 1, bench.stderr


@pytest.mark.slow
async def test_a_search_on_two_devices_shows_each_in_the_progress_pane(tmp_path: Path):
    """A live scripted search on two cpu devices in the TUI at 80x24: the Progress events carry
    the device states, the progress pane shows a line per device, each verdict (and the store's
    device column) names the device that measured it, and the counts agree."""
    import dataclasses
    from collections import Counter

    from textual.widgets import Static, Tree

    from tests.conftest import query
    from tests.tui_helpers import scripted_search
    from tui.app import KtreeApp
    from tui.screens.search import SearchScreen

    db = tmp_path / "k.db"
    prepared = scripted_search(db, "--rounds", "1", "--ideas", "2")
    await prepared.evaluator.close()
    prepared = dataclasses.replace(prepared, evaluator=LocalEvaluator("cpu", devices=2))
    app = KtreeApp(db_path=db, search_factory=prepared.search)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, SearchScreen)
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.search_summary is not None and app.search_summary["status"] == "finished"
            devices = screen.model.progress["devices"]
            assert [d["name"] for d in devices] == ["cpu0", "cpu1"]
            slots = Counter(v.gpu["slot"] for v in screen.model.verdicts.values())
            assert slots == {d["name"]: d["jobs"] for d in devices if d["jobs"]}
            assert sum(d["jobs"] for d in devices) == len(screen.model.verdicts) == 4
            screen.refresh_progress()
            lines = str(screen.query_one("#progress-text", Static).content).splitlines()
            for d in devices:
                line = next(ln for ln in lines if ln.startswith(d["name"]))
                assert f"{d['jobs']} jobs" in line and "idle" in line and "%" in line
            text_height = screen.query_one("#progress-text", Static).outer_size.height
            assert text_height >= 3 + 2  # a line per device more, none cut off
            assert screen.query_one("#progress").outer_size.height == text_height + 1 + 2  # + bar, border
            assert screen.query_one("#tree", Tree).size.height > 3  # still room for the tree
            node = next(iter(screen.model.verdicts))
            screen.select_node(node)
            await pilot.pause()
            shown = str(screen.query_one("#verdict", Static).content)
            assert f"{screen.model.verdicts[node].gpu['slot']}: " in shown
            await pilot.press("q")
    finally:
        await prepared.evaluator.close()
    stored = query(db, "SELECT device FROM evaluations")
    assert sorted(d.split(":")[0] for (d,) in stored) == sorted(slots.elements())


@pytest.mark.slow
def test_the_scaling_bench_runs_one_device_and_two_and_reports_each():
    """`bench pipeline --scaling` (issue 38) on two cpu slots: the same search on both and on the
    first alone, in one run; each device's evaluations, busy and idle fractions, and the ratio."""
    from engine.bench.scaling import format_scaling, scaling_bench

    # The library's files as they are: the per-device report does not depend on fresh builds (the
    # session's build cache has them; tests/search/test_search_options.py times fresh, stamped builds).
    r = asyncio.run(scaling_bench(SOFTMAX, "cpu", None, devices=2, modes=("repeated",), warm_up=False,
                                  rounds=1, ideas=2, variants=2))
    [run] = r["runs"]
    assert r["status"] == "finished" and run["mode"] == "repeated"
    one, two = run["one"], run["many"]
    assert one["evaluations"] == two["evaluations"] == 4
    assert [d["name"] for d in two["devices"]] == ["cpu0", "cpu1"]
    assert [d["name"] for d in one["devices"]] == ["cpu0"]
    for result in (one, two):
        assert sum(d["jobs"] for d in result["devices"]) == result["evaluations"]
        assert sum(d["busy_s"] for d in result["devices"]) == pytest.approx(result["device_s"], rel=0.05)
        for d in result["devices"]:
            assert 0 <= d["idle_fraction_of_wall"] <= 1 and 0 <= d["idle_fraction_while_waiting"] <= 1
        per_minute = result["evaluations"] / result["wall_s"] * 60
        assert result["variants_per_minute"] == pytest.approx(per_minute, rel=0.01)
    assert run["ratio"] == pytest.approx(two["variants_per_minute"] / one["variants_per_minute"], rel=0.01)
    assert run["worst_idle_while_waiting"] == max(d["idle_fraction_while_waiting"] for d in two["devices"])
    table = format_scaling(r)
    assert "| repeated | 1 device | cpu0 |" in table and "| repeated | 2 devices | cpu1 |" in table
    assert f"{run['ratio']:.2f}x" in table


@pytest.mark.parametrize(("args", "message"), [
    (["--scaling", "--cpu-devices", "1"], "--scaling needs two devices or more"),
    (["--scaling", "--sources", "fresh"], "--sources: give one or both of distinct, repeated"),
    (["--scaling", "--repeat-sources"], "--scaling runs both source modes itself"),
])
def test_bad_scaling_flags_are_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path):
    proc = run_ktree("--db", str(tmp_path / "k.db"), "bench", "pipeline", "softmax", "--backend", "cpu", *args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


class _Gate:
    """A pause the test opens by hand (the search's scheduler plays this part)."""

    def __init__(self) -> None:
        self._open = asyncio.Event()

    def is_open(self) -> bool:
        return self._open.is_set()

    async def wait(self) -> None:
        await self._open.wait()

    def open(self) -> None:
        self._open.set()


@pytest.mark.slow
def test_a_paused_search_checks_and_times_nothing_until_it_resumes():
    """Pause holds timing: a built variant waits at the gate and takes no device (no check, no
    timing) until the gate opens; then it is evaluated as usual."""
    source = "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"

    async def go() -> tuple[list[str], list[str], str]:
        evaluator = LocalEvaluator("cpu", eval_timeout=120)
        gate, phases = _Gate(), []

        async def on_phase(name: str) -> None:
            phases.append(name)

        try:
            job = evaluator.job(SOFTMAX.path, source, SOFTMAX.sizes_for("cpu"), **WORK)
            task = asyncio.create_task(evaluator.evaluate(job, on_phase, gate=gate))
            deadline = time.monotonic() + 120
            while "waiting" not in phases:  # built, now at the gate
                assert time.monotonic() < deadline and not task.done()
                await asyncio.sleep(0.05)
            await asyncio.sleep(2.0)  # paused: nothing may take the device meanwhile
            held = list(phases)
            assert not task.done() and evaluator.devices[0].jobs == 0
            gate.open()
            verdict = await asyncio.wait_for(task, 120)
            return held, phases, verdict.status
        finally:
            await evaluator.close()

    held, phases, status = asyncio.run(go())
    assert held == ["compiling", "waiting"]
    assert phases[:2] == ["compiling", "waiting"] and len(phases) > 2  # checked once resumed
    assert status == "incorrect"  # identity is not softmax: it was really evaluated


def test_an_evaluator_takes_one_config_and_fields_by_name_over_it(tmp_path: Path):
    """EvaluatorConfig declares how an evaluator evaluates; a field given by name takes its place,
    and a name it does not declare is refused."""
    config = EvaluatorConfig(cache_dir=tmp_path, devices=2, eval_timeout=30.0, worker=False)
    evaluator = LocalEvaluator("cpu", config, eval_timeout=60.0)
    assert evaluator.config == replace(config, eval_timeout=60.0) and config.eval_timeout == 30.0
    assert [d.name for d in evaluator.devices] == ["cpu0", "cpu1"] and evaluator.eval_timeout == 60.0
    with pytest.raises(TypeError):
        LocalEvaluator("cpu", timeout=5)
